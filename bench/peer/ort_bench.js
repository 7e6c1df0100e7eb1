#!/usr/bin/env node
// Time a model on ONNX Runtime (CPU), the way `kiln bench --json` times it on kiln.
// usage: node ort_bench.js MODEL INPUT_DIR [--threads N] [--warmup N] [--repeat N] [--json FILE]
// INPUT_DIR holds <input name>.npy. Session: intraOpNumThreads N, interOpNumThreads 1,
// graphOptimizationLevel 'all', sequential execution. Each timed iteration is one
// `await session.run(feeds)` on the same feeds, measured with process.hrtime (monotonic).
// Prints one JSON object (the same field names as kiln bench) to stdout or FILE. Run one process
// per model: peak_rss_bytes is this process's high-water mark (resourceUsage().maxRSS), which
// includes Node itself: baseline_rss_bytes is the high-water mark before ONNX Runtime was loaded.
'use strict';
const baselineRss = process.resourceUsage().maxRSS * 1024;
const fs = require('fs');
const path = require('path');

function usage(msg) {
  if (msg) console.error('ort_bench: ' + msg);
  console.error('usage: node ort_bench.js MODEL INPUT_DIR [--threads N] [--warmup N] [--repeat N] [--json FILE]');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { threads: 1, warmup: 10, repeat: 100, json: null, pos: [] };
  for (let i = 0; i < argv.length; i++) {
    const o = argv[i];
    if (o === '-h' || o === '--help') usage();
    if (!o.startsWith('--')) { a.pos.push(o); continue; }
    const v = argv[++i];
    if (v === undefined) usage(`${o} needs a value`);
    if (o === '--json') { a.json = v; continue; }
    const n = Number(v);
    const min = o === '--repeat' ? 1 : 0;
    if (!Number.isInteger(n) || n < min) usage(`${o} expects an integer >= ${min}, got '${v}'`);
    if (o === '--threads') a.threads = n;
    else if (o === '--warmup') a.warmup = n;
    else if (o === '--repeat') a.repeat = n;
    else usage(`unknown option ${o}`);
  }
  if (a.pos.length !== 2) usage();
  return a;
}

// Linear interpolation between order statistics (numpy's default), as kiln bench does.
function quantile(sorted, q) {
  const pos = q * (sorted.length - 1);
  const i = Math.floor(pos);
  if (i + 1 >= sorted.length) return sorted[sorted.length - 1];
  return sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]);
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const [model, inDir] = a.pos;
  const ort = require('onnxruntime-node');
  const { readNpy } = require('./npy');
  const ortLoadedRss = process.resourceUsage().maxRSS * 1024;
  const t0 = process.hrtime.bigint();
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential' });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {};
  const inputs = [];
  for (const name of sess.inputNames) {
    const t = readNpy(path.join(inDir, name + '.npy'));
    feeds[name] = new ort.Tensor(t.type, t.data, t.shape);
    inputs.push({ name, dtype: t.type, shape: t.shape });
  }
  const times = [];
  let firstMs = 0;
  for (let i = 0; i < a.warmup + a.repeat; i++) {
    const s = process.hrtime.bigint();
    await sess.run(feeds);
    const e = process.hrtime.bigint();
    if (i === 0) firstMs = Number(e - s) / 1e6;
    if (i >= a.warmup) times.push(Number(e - s) / 1e6);
  }
  const mean = times.reduce((x, y) => x + y, 0) / times.length;
  const sd = times.length > 1
    ? Math.sqrt(times.reduce((x, y) => x + (y - mean) * (y - mean), 0) / (times.length - 1)) : 0;
  const sorted = times.slice().sort((x, y) => x - y);
  const median = quantile(sorted, 0.5);
  const batch = inputs.length && inputs[0].shape.length ? inputs[0].shape[0] : 1;
  const r = {
    model, runtime: `onnxruntime-node ${require('onnxruntime-node/package.json').version}`,
    batch, threads: a.threads, warmup: a.warmup, repeat: a.repeat, load_ms: loadMs, first_run_ms: firstMs,
    median_ms: median, p90_ms: quantile(sorted, 0.9), p99_ms: quantile(sorted, 0.99),
    min_ms: sorted[0], max_ms: sorted[sorted.length - 1], mean_ms: mean, stddev_ms: sd,
    throughput: batch * 1000 / median,
    peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
    baseline_rss_bytes: baselineRss, ort_loaded_rss_bytes: ortLoadedRss,
    inputs,
  };
  const text = JSON.stringify(r, null, 1) + '\n';
  if (a.json) fs.writeFileSync(a.json, text);
  else process.stdout.write(text);
}
main().catch(e => { console.error('ort_bench: ' + e.message); process.exit(1); });
