// Minimal .npy reader/writer for the peer scripts (little-endian, C order).
'use strict';
const fs = require('fs');

const DT = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array], '|u1': ['uint8', Uint8Array],
  '|i1': ['int8', Int8Array], '|b1': ['bool', Uint8Array], '<f2': ['float16', Uint16Array],
};

function readNpy(path) {
  const buf = fs.readFileSync(path);
  const major = buf[6];
  const hlen = major >= 2 ? buf.readUInt32LE(8) : buf.readUInt16LE(8);
  const hoff = major >= 2 ? 12 : 10;
  const header = buf.toString('latin1', hoff, hoff + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  const [type, Ctor] = DT[descr] || (() => { throw new Error(`${path}: dtype ${descr}`); })();
  const start = hoff + hlen;
  const bytes = buf.subarray(start);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  const data = new Ctor(copy.buffer, 0, bytes.length / Ctor.BYTES_PER_ELEMENT);
  return { type, shape, data };
}

function writeNpy(path, type, shape, data) {
  const descr = Object.keys(DT).find(k => DT[k][0] === type);
  if (!descr) throw new Error(`cannot write dtype ${type}`);
  const shp = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shp}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(pre, 0);
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

module.exports = { readNpy, writeNpy };
