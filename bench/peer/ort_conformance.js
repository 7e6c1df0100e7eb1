#!/usr/bin/env node
// Run ONNX conformance tests on ONNX Runtime (CPU), for comparison with kiln_conformance.
// usage: node ort_conformance.js MANIFEST.json RESULTS.json
// MANIFEST (written by tests/conformance/ort_conformance.py) lists per test the model and its
// data sets, each tensor as {name, type, dims, b64 | strings}. RESULTS gets {test: "pass" |
// "fail: why" | "error: why"}. Floats compare as kiln's runner does: |a-e| <= 1e-5 + 1e-3*|e|,
// NaN equals NaN; other types exactly.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};

function toTensor(t) {
  if (t.type === 'string') return new ort.Tensor('string', t.strings, t.dims);
  const raw = Buffer.from(t.b64, 'base64');
  const copy = new Uint8Array(raw.length);
  copy.set(raw);
  const C = ARRAYS[t.type];
  if (!C) throw new Error(`element type ${t.type}`);
  return new ort.Tensor(t.type, new C(copy.buffer, 0, raw.length / C.BYTES_PER_ELEMENT), t.dims);
}

function half(h) {
  const s = h >> 15 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function compare(got, exp) {
  if (got.type !== exp.type) return `type ${got.type}, expected ${exp.type}`;
  if (got.dims.join(',') !== exp.dims.join(',')) return `dims [${got.dims}], expected [${exp.dims}]`;
  const e = toTensor(exp).data, a = got.data;
  const isFloat = ['float32', 'float64', 'float16'].includes(exp.type);
  for (let i = 0; i < e.length; i++) {
    if (!isFloat) {
      if (a[i] !== e[i]) return `element ${i} is ${a[i]}, expected ${e[i]}`;
      continue;
    }
    const x = exp.type === 'float16' ? half(a[i]) : a[i], y = exp.type === 'float16' ? half(e[i]) : e[i];
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    if (x === y) continue;
    if (!(Math.abs(x - y) <= 1e-5 + 1e-3 * Math.abs(y))) return `element ${i} is ${x}, expected ${y}`;
  }
  return null;
}

async function runTest(t) {
  if (t.skip) return `error: ${t.skip}`;
  let s;
  try {
    s = await ort.InferenceSession.create(t.model, { graphOptimizationLevel: 'all', intraOpNumThreads: 1 });
  } catch (e) {
    return `error: load: ${String(e.message || e).split('\n')[0]}`;
  }
  for (const set of t.sets) {
    const feeds = {};
    for (const i of set.inputs) feeds[i.name] = toTensor(i);
    let out;
    try {
      out = await s.run(feeds);
    } catch (e) {
      return `error: run: ${String(e.message || e).split('\n')[0]}`;
    }
    for (const o of set.outputs) {
      if (!(o.name in out)) return `error: no output ${o.name}`;
      const why = compare(out[o.name], o);
      if (why) return `fail: output '${o.name}': ${why}`;
    }
  }
  return 'pass';
}

async function main() {
  const [manifest, results] = process.argv.slice(2);
  if (!manifest || !results || manifest === '--help' || manifest === '-h') {
    console.error('usage: node ort_conformance.js MANIFEST.json RESULTS.json');
    process.exit(manifest === '--help' || manifest === '-h' ? 0 : 2);
  }
  const tests = JSON.parse(fs.readFileSync(manifest, 'utf8'));
  const res = {};
  for (const t of tests) res[t.name] = await runTest(t);
  fs.writeFileSync(results, JSON.stringify(res, null, 1));
}
main().catch(e => { console.error(e); process.exit(1); });
