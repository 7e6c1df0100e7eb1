#!/usr/bin/env node
// Per-node times of a model on ONNX Runtime (CPU), to set beside `kiln profile --json`.
// usage: node ort_profile.js MODEL INPUT_DIR [--threads N] [--warmup N] [--repeat N]
// Session as in ort_bench.js, with ONNX Runtime's profiler on; the warm-up runs are profiled
// too and dropped here. Prints one JSON object: {"runs", "nodes": [{name, op_type, output,
// ms_per_run}]} in execution order, times averaged over the timed runs.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

function usage(msg) {
  if (msg) console.error('ort_profile: ' + msg);
  console.error('usage: node ort_profile.js MODEL INPUT_DIR [--threads N] [--warmup N] [--repeat N]');
  process.exit(2);
}

async function main() {
  const argv = process.argv.slice(2);
  const a = { threads: 1, warmup: 5, repeat: 20, pos: [] };
  for (let i = 0; i < argv.length; i++) {
    const o = argv[i];
    if (o === '-h' || o === '--help') usage();
    if (!o.startsWith('--')) { a.pos.push(o); continue; }
    const n = Number(argv[++i]);
    if (!Number.isInteger(n) || n < (o === '--repeat' ? 1 : 0)) usage(`${o} expects an integer`);
    if (o === '--threads') a.threads = n;
    else if (o === '--warmup') a.warmup = n;
    else if (o === '--repeat') a.repeat = n;
    else usage(`unknown option ${o}`);
  }
  if (a.pos.length !== 2) usage();
  const [model, inDir] = a.pos;
  const ort = require('onnxruntime-node');
  const { readNpy } = require('./npy');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ortprof-'));
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential', enableProfiling: true, profileFilePrefix: path.join(dir, 'p') });
  const feeds = {};
  for (const name of sess.inputNames) {
    const t = readNpy(path.join(inDir, name + '.npy'));
    feeds[name] = new ort.Tensor(t.type, t.data, t.shape);
  }
  for (let i = 0; i < a.warmup + a.repeat; i++) await sess.run(feeds);
  sess.endProfiling();
  await sess.release();
  const file = fs.readdirSync(dir).find((f) => f.endsWith('.json'));
  const events = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
  fs.rmSync(dir, { recursive: true, force: true });
  // model_run events bound each run; node events ("<name>_kernel_time") fall inside one.
  const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').sort((x, y) => x.ts - y.ts);
  const timed = runs.slice(a.warmup);
  const first = timed.length ? timed[0].ts : Infinity;
  const nodes = new Map();
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || e.ts < first) continue;
    const name = e.name.slice(0, -'_kernel_time'.length);
    if (!nodes.has(name)) {
      const shapes = (e.args && e.args.output_type_shape) || [];
      nodes.set(name, { name, op_type: (e.args && e.args.op_name) || '', output: JSON.stringify(shapes[0] || {}),
                        us: 0, order: nodes.size });
    }
    nodes.get(name).us += e.dur;
  }
  const out = [...nodes.values()].sort((x, y) => x.order - y.order).map((n) => (
    { name: n.name, op_type: n.op_type, output: n.output, ms_per_run: n.us / 1000 / timed.length }));
  process.stdout.write(JSON.stringify({ runs: timed.length, nodes: out }, null, 1) + '\n');
}

main().catch((e) => { console.error('ort_profile: ' + (e && e.message ? e.message : e)); process.exit(1); });
