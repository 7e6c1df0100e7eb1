#!/usr/bin/env node
// Run every case folder under ROOT on ONNX Runtime (CPU, one thread) in one process:
// ROOT/<case>/model.onnx with ROOT/<case>/in/<input>.npy -> ROOT/<case>/ort/<output>.npy, or
// ROOT/<case>/ort_error.txt when ONNX Runtime refuses the model or the inputs. A case with
// string inputs (which .npy cannot carry) gives them in ROOT/<case>/in.json ({"X": {"dims",
// "data"}, ...}) and gets ROOT/<case>/ort.json (output name -> {dims, data}) instead.
// usage: node ort_batch.js ROOT
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', '..', 'bench', 'peer', 'node_modules', 'onnxruntime-node'));
const { readNpy, writeNpy } = require(path.join(__dirname, '..', '..', 'bench', 'peer', 'npy'));

async function runJsonCase(dir, sess, inputs) {
  const feeds = {};
  for (const [k, v] of Object.entries(inputs)) feeds[k] = new ort.Tensor('string', v.data, v.dims);
  const out = await sess.run(feeds);
  const res = {};
  for (const name of sess.outputNames) {
    const t = out[name];
    res[name] = { dims: t.dims, data: Array.from(t.data, (x) => (typeof x === 'bigint' ? Number(x) : x)) };
  }
  fs.writeFileSync(path.join(dir, 'ort.json'), JSON.stringify(res));
}

async function runCase(dir) {
  const sess = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'disabled', logSeverityLevel: 3 });
  const json = path.join(dir, 'in.json');
  if (fs.existsSync(json)) return runJsonCase(dir, sess, JSON.parse(fs.readFileSync(json, 'utf8')));
  const feeds = {};
  for (const name of sess.inputNames) {
    const a = readNpy(path.join(dir, 'in', name + '.npy'));
    feeds[name] = new ort.Tensor(a.type, a.data, a.shape);
  }
  const out = await sess.run(feeds);
  fs.mkdirSync(path.join(dir, 'ort'), { recursive: true });
  for (const name of sess.outputNames) {
    const t = out[name];
    writeNpy(path.join(dir, 'ort', name + '.npy'), t.type, t.dims, t.data);
  }
}

async function main() {
  const root = process.argv[2];
  for (const c of fs.readdirSync(root).sort()) {
    const dir = path.join(root, c);
    if (!fs.existsSync(path.join(dir, 'model.onnx'))) continue;
    try {
      await runCase(dir);
    } catch (e) {
      fs.writeFileSync(path.join(dir, 'ort_error.txt'), String(e.message || e));
    }
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
