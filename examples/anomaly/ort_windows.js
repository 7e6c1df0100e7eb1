#!/usr/bin/env node
// The anomaly model on ONNX Runtime in kiln-anomaly's loop, for a side-by-side throughput figure:
// read the CSV, normalise with config.json, cut the same windows (window, stride), run them in
// batches (default 32, one thread), and time the inference calls alone, as kiln-anomaly's
// "inference alone" figure does. Also prints the mean squared reconstruction error, to set
// beside kiln's (the same model must give the same numbers).
// usage: node ort_windows.js MODEL_DIR INPUT.csv [--batch N] [--threads N] [--rounds N]
'use strict';
const fs = require('fs');
const path = require('path');

function usage(msg) {
  if (msg) console.error('ort_windows: ' + msg);
  console.error('usage: node ort_windows.js MODEL_DIR INPUT.csv [--batch N] [--threads N] [--rounds N]');
  process.exit(2);
}

async function main() {
  const argv = process.argv.slice(2), pos = [];
  const opt = { batch: 32, threads: 1, rounds: 3 };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--help' || argv[i] === '-h') usage();
    if (argv[i].startsWith('--')) {
      const k = argv[i].slice(2), v = Number(argv[++i]);
      if (!(k in opt) || !(v >= 1)) usage(`bad option ${argv[i - 1]}`);
      opt[k] = v;
    } else pos.push(argv[i]);
  }
  if (pos.length !== 2) usage();
  const ort = require(path.join(__dirname, '../../bench/peer/node_modules/onnxruntime-node'));
  const cfg = JSON.parse(fs.readFileSync(path.join(pos[0], 'config.json'), 'utf8'));
  const lines = fs.readFileSync(pos[1], 'utf8').split('\n').filter((l) => l.length);
  const header = lines[0].split(',');
  const cols = cfg.channels.map((c) => header.indexOf(c));
  if (cols.some((c) => c < 1)) usage('the CSV header does not name the model\'s channels');
  const W = cfg.window, C = cfg.channels.length, n = lines.length - 1;
  const x = new Float32Array(n * C);
  for (let r = 0; r < n; r++) {
    const f = lines[r + 1].split(',');
    for (let c = 0; c < C; c++) x[r * C + c] = (Number(f[cols[c]]) - cfg.mean[c]) / cfg.std[c];
  }
  const starts = [];
  for (let s = 0; s + W <= n; s += cfg.stride) starts.push(s);
  const sess = await ort.InferenceSession.create(path.join(pos[0], cfg.model || 'model.onnx'), {
    intraOpNumThreads: opt.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential' });
  let best = Infinity, sse = 0;
  for (let round = 0; round < opt.rounds; round++) {
    let infer = 0;
    sse = 0;
    for (let b = 0; b < starts.length; b += opt.batch) {
      const nb = Math.min(opt.batch, starts.length - b), buf = new Float32Array(nb * W * C);
      for (let i = 0; i < nb; i++) buf.set(x.subarray(starts[b + i] * C, (starts[b + i] + W) * C), i * W * C);
      const t0 = process.hrtime.bigint();
      const out = await sess.run({ [cfg.input]: new ort.Tensor('float32', buf, [nb, W, C]) });
      infer += Number(process.hrtime.bigint() - t0) / 1e9;
      const y = out[cfg.output].data;
      for (let i = 0; i < y.length; i++) sse += (y[i] - buf[i]) ** 2;
    }
    best = Math.min(best, infer);
  }
  const mse = sse / (starts.length * W * C);
  console.log(JSON.stringify({ runtime: 'onnxruntime-node', windows: starts.length, batch: opt.batch,
    threads: opt.threads, inference_s: best, windows_per_s: starts.length / best, mse }));
}

main().catch((e) => { console.error('ort_windows: ' + e.message); process.exit(1); });
