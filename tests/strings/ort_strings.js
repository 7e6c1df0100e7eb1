#!/usr/bin/env node
// Run every ROOT/<case>/model.onnx on ONNX Runtime with the string input in ROOT/<case>/in.json
// ({"X": {"dims": [...], "data": [...]}, ...}); write ROOT/<case>/ort.json (output name ->
// {dims, data}) or ROOT/<case>/ort_error.txt. usage: node ort_strings.js ROOT
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', '..', 'bench', 'peer', 'node_modules', 'onnxruntime-node'));

async function runCase(dir) {
  const sess = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), { logSeverityLevel: 3 });
  const inputs = JSON.parse(fs.readFileSync(path.join(dir, 'in.json'), 'utf8'));
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
