#!/usr/bin/env node
// Run a model on ONNX Runtime (CPU) for side-by-side checks with kiln.
// usage: node ort_run.js MODEL INPUT_DIR OUTPUT_DIR [--threads N]
// INPUT_DIR holds <input name>.npy; OUTPUT_DIR receives <output name>.npy.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const { readNpy, writeNpy } = require('./npy');

async function main() {
  const [model, inDir, outDir] = process.argv.slice(2);
  const ti = process.argv.indexOf('--threads');
  const threads = ti > 0 ? Number(process.argv[ti + 1]) : 1;
  if (!model || !inDir || !outDir) {
    console.error('usage: node ort_run.js MODEL INPUT_DIR OUTPUT_DIR [--threads N]');
    process.exit(2);
  }
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all' });
  const feeds = {};
  for (const name of sess.inputNames) {
    const a = readNpy(path.join(inDir, name + '.npy'));
    feeds[name] = new ort.Tensor(a.type, a.data, a.shape);
  }
  const out = await sess.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of sess.outputNames) {
    const t = out[name];
    writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'), t.type, t.dims, t.data);
  }
}
main().catch(e => { console.error(e.message); process.exit(1); });
