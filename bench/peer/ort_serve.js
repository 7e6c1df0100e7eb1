#!/usr/bin/env node
// A minimal HTTP server around ONNX Runtime (onnxruntime-node) that speaks the KServe v2 JSON
// inference protocol, as a peer to measure `kiln serve` against under the same load (wrk).
// usage: node ort_serve.js MODEL [--name NAME] [--port N] [--host ADDR] [--threads N]
// Endpoints: GET /v2/health/live, GET /v2/health/ready, GET /v2/models/NAME,
// POST /v2/models/NAME[/versions/V]/infer with JSON tensors ("data" flat or nested). Session:
// intraOpNumThreads N (default 1), interOpNumThreads 1, graphOptimizationLevel 'all'. Errors are
// {"error": "..."} with 400 (bad request) or 404 (unknown path or model). Not a kiln dependency.
'use strict';
const http = require('http');
const path = require('path');

const DTYPES = {
  FP32: ['float32', Float32Array], FP64: ['float64', Float64Array], INT8: ['int8', Int8Array],
  INT16: ['int16', Int16Array], INT32: ['int32', Int32Array], INT64: ['int64', BigInt64Array],
  UINT8: ['uint8', Uint8Array], UINT16: ['uint16', Uint16Array], BOOL: ['bool', Uint8Array],
};
const V2_OF = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v[0], k]));

function usage(msg) {
  if (msg) console.error('ort_serve: ' + msg);
  console.error('usage: node ort_serve.js MODEL [--name NAME] [--port N] [--host ADDR] [--threads N]');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { name: null, port: 8000, host: '127.0.0.1', threads: 1, pos: [] };
  for (let i = 0; i < argv.length; i++) {
    const o = argv[i];
    if (o === '-h' || o === '--help') usage();
    if (!o.startsWith('--')) { a.pos.push(o); continue; }
    const v = argv[++i];
    if (v === undefined) usage(`${o} needs a value`);
    if (o === '--name') a.name = v;
    else if (o === '--host') a.host = v;
    else if (o === '--port' || o === '--threads') {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) usage(`${o} expects an integer >= 0, got '${v}'`);
      a[o.slice(2)] = n;
    } else usage(`unknown option ${o}`);
  }
  if (a.pos.length !== 1) usage();
  if (!a.name) a.name = path.basename(path.dirname(path.resolve(a.pos[0])));
  return a;
}

function send(res, code, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function toTensor(ort, inp) {
  const dt = DTYPES[inp.datatype];
  if (!dt) throw new Error(`input '${inp.name}': unsupported datatype '${inp.datatype}'`);
  if (!Array.isArray(inp.shape) || !Array.isArray(inp.data)) {
    throw new Error(`input '${inp.name}': needs "shape" and "data" arrays`);
  }
  const flat = inp.data.flat(Infinity);
  const n = inp.shape.reduce((x, y) => x * y, 1);
  if (flat.length !== n) throw new Error(`input '${inp.name}': ${flat.length} values for shape [${inp.shape}]`);
  const data = dt[1] === BigInt64Array ? BigInt64Array.from(flat, BigInt) : dt[1].from(flat);
  return new ort.Tensor(dt[0], data, inp.shape);
}

async function infer(ort, sess, a, req) {
  if (!req || !Array.isArray(req.inputs)) throw new Error('request needs an "inputs" array');
  const feeds = {};
  for (const inp of req.inputs) feeds[inp.name] = toTensor(ort, inp);
  const wanted = Array.isArray(req.outputs) ? req.outputs.map(o => o.name) : sess.outputNames;
  const out = await sess.run(feeds, wanted);
  const outputs = wanted.map(name => {
    const t = out[name];
    const data = t.type === 'int64' ? Array.from(t.data, Number) : Array.from(t.data);
    return { name, datatype: V2_OF[t.type] || t.type, shape: t.dims, data };
  });
  const r = { model_name: a.name, model_version: '1', outputs };
  if (req.id !== undefined) r.id = req.id;
  return r;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = require('onnxruntime-node');
  const sess = await ort.InferenceSession.create(a.pos[0], {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential' });
  const inferPath = new RegExp(`^/v2/models/${a.name}(/versions/[^/]+)?/infer$`);
  const server = http.createServer((req, res) => {
    const url = req.url.split('?')[0];
    if (req.method === 'GET') {
      if (url === '/v2/health/live' || url === '/v2/health/ready') return send(res, 200, {});
      if (url === `/v2/models/${a.name}`) {
        const io = ms => (ms || []).map(m => ({
          name: m.name, datatype: V2_OF[m.type] || m.type,
          shape: (m.shape || []).map(d => (typeof d === 'number' ? d : -1)) }));
        return send(res, 200, { name: a.name, versions: ['1'], platform: 'onnxruntime-node',
                                inputs: io(sess.inputMetadata), outputs: io(sess.outputMetadata) });
      }
      return send(res, 404, { error: `no such path: ${url}` });
    }
    if (req.method !== 'POST' || !inferPath.test(url)) {
      return send(res, 404, { error: `no such path: ${req.method} ${url}` });
    }
    const chunks = [];
    req.on('data', c => chunks.push(c));
    req.on('end', () => {
      let body;
      try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch (e) {
        return send(res, 400, { error: `malformed JSON: ${e.message}` });
      }
      infer(ort, sess, a, body).then(r => send(res, 200, r), e => send(res, 400, { error: e.message }));
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(a.port, a.host, () => {
    console.error(`ort_serve: ${a.name} on http://${a.host}:${server.address().port} ` +
                  `(onnxruntime-node ${require('onnxruntime-node/package.json').version}, ${a.threads} thread(s))`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
main().catch(e => { console.error('ort_serve: ' + e.message); process.exit(1); });
