#!/usr/bin/env bash
# Seed corpora for the libFuzzer targets (tests/fuzz), built from the ONNX conformance data
# (Debian's libonnx-testdata) rather than committed: OUT/model and OUT/optimize get every
# model.onnx, OUT/inputs every input .pb (behind the target's selector byte) and a few .npy
# files, OUT/plugin_desc a few descriptions, OUT/infer_request a few KServe v2 infer requests
# (JSON, binary data, strings) for the model of tests/fuzz/fuzz_infer_request.c.
# Usage: scripts/fuzz-corpus.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/fuzz-corpus.sh OUT}
data=/usr/share/libonnx-testdata/data
[ -d "$data" ] || { echo "fuzz-corpus: $data missing; run scripts/install-deps.sh --test" >&2; exit 1; }
mkdir -p "$out"/model "$out"/optimize "$out"/inputs "$out"/plugin_desc "$out"/infer_request
n=0
for m in "$data"/*/*/model.onnx examples/models/*.onnx; do
  name=$(basename "$(dirname "$m")")_$(basename "$m" .onnx)
  cp "$m" "$out/model/$name"
  cp "$m" "$out/optimize/$name"
  n=$((n + 1))
done
# inputs: selector byte 0 (guess), 1 TensorProto, 2 SequenceProto, 3 OptionalProto, 4 .npy
i=0
for f in "$data"/node/*/test_data_set_0/input_*.pb; do
  sel=1
  case "$f" in *sequence*) sel=2 ;; *optional*) sel=3 ;; esac
  { printf "\\x0$sel"; cat "$f"; } > "$out/inputs/pb_$i"
  i=$((i + 1))
  [ $i -ge 400 ] && break
done
/usr/bin/python3 - "$out/inputs" <<'PY'
import io, sys
import numpy as np
for k, a in enumerate([np.zeros((2, 3), np.float32), np.arange(5, dtype=np.int64), np.array(True),
                       np.ones((1, 2, 2), np.uint8), np.array([1.5], np.float64), np.zeros((0, 4), np.int32)]):
    b = io.BytesIO()
    np.save(b, a)
    open(f"{sys.argv[1]}/npy_{k}", "wb").write(b"\x04" + b.getvalue())
PY
# plugin descriptions: a few byte strings that decode to plausible descriptions
printf 'x\x01\x05my.op\x04Relu\x03\x00\x01\x02in\x00\x00\x00\x00\x00\x01\x03out\x00\x00\x00\x00\x00\x00\x01' > "$out/plugin_desc/simple"
printf 'x\x01\x05my.op\x04Conv\x03\x00\x02\x01X\x00\x00\x00\x00\x01\x01W\x00\x00\x00\x00\x01\x01\x01Y\x00\x00\x00\x00\x00\x02\x05alpha\x02\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x04mode\x03\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07' > "$out/plugin_desc/attrs"
# infer requests: two bytes of Inference-Header-Content-Length (0: all JSON), then the body
/usr/bin/python3 - "$out/infer_request" <<'PY'
import json, struct, sys
X = {"name": "X", "datatype": "FP32", "shape": [2, 4], "data": [[1, 2.5, -3, 4e10], [0, -0.0, 1e-3, 7]]}
rest = [{"name": "M", "datatype": "INT64", "shape": [], "data": [9007199254740993]},
        {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["a", "\u00e9\"q\""]},
        {"name": "B", "datatype": "BOOL", "shape": [2, 2], "data": [True, False, False, True]},
        {"name": "H", "datatype": "FP16", "shape": [3], "data": [1.5, -65504, 6e-8]}]
def put(name, req, binary=b""):
    j = json.dumps(req).encode()
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<H", len(j) if binary else 0) + j + binary)
put("json", {"id": "r1", "inputs": [X] + rest})
put("outputs", {"inputs": [X] + rest, "outputs": [{"name": "T"}, {"name": "Y", "parameters": {"binary_data": True}}]})
xb = struct.pack("<8f", *range(8))
sb = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"\x00\xff"))
bx = dict(X, parameters={"binary_data_size": len(xb)}); del bx["data"]
bs = dict(rest[1], parameters={"binary_data_size": len(sb)}); del bs["data"]
put("binary", {"inputs": [bx, rest[0], bs, rest[2], rest[3]], "parameters": {"binary_data_output": True}}, xb + sb)
PY
echo "fuzz-corpus: $n models, $(ls "$out/inputs" | wc -l) input files, $(ls "$out/plugin_desc" | wc -l) descriptions, $(ls "$out/infer_request" | wc -l) infer requests in $out"
