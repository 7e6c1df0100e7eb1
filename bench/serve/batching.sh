#!/usr/bin/env bash
# kiln serve's dynamic batching measured with wrk: the same model and load with batching off
# (--max-batch-size 0) and on, alternating, ROUNDS rounds each; medians of requests/s and
# latency percentiles. Usage: bench/serve/batching.sh [KILN] [MODEL] [CONNECTIONS] [SECONDS] [ROUNDS]
# Requests carry one row (batch 1) of random input, as JSON, or with KILN_BINARY=1 in the binary
# tensor data extension (outputs too). KILN_BATCH_FLAGS: the server flags of the "on" runs.
# Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
kiln=${1:-build/kiln}; model=${2:-examples/models/tiny_cnn.onnx}
conns=${3:-16}; secs=${4:-10}; rounds=${5:-3}
batch_flags=${KILN_BATCH_FLAGS:---max-batch-size 16}
tmp=$(mktemp -d); pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT  # never leave a server behind
name=$(basename "$model" .onnx)
/usr/bin/python3 - "$model" "$tmp/body.json" "${KILN_BINARY:-0}" > "$tmp/hlen" <<'PY'
import json, sys, numpy as np, onnx
m = onnx.load(sys.argv[1])
inputs = []
rng = np.random.default_rng(0)
types = {1: ("FP32", np.float32)}
for i in m.graph.input:
    if i.name in {x.name for x in m.graph.initializer}:
        continue
    dims = [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
    dt, npt = types[i.type.tensor_type.elem_type]
    x = rng.standard_normal(dims).astype(npt)
    inputs.append({"name": i.name, "datatype": dt, "shape": dims, "data": x.flatten().tolist()})
if sys.argv[3] == "1":
    blobs = []
    for i in inputs:
        blobs.append(np.array(i.pop("data"), np.float32).tobytes())
        i["parameters"] = {"binary_data_size": len(blobs[-1])}
    head = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    open(sys.argv[2], "wb").write(head + b"".join(blobs))
    print(len(head))
else:
    json.dump({"inputs": inputs}, open(sys.argv[2], "w"))
PY
hlen=$(cat "$tmp/hlen")
run_one() { # $1 label, $2.. server flags
  local label=$1; shift
  rm -f "$tmp/err"  # the new server writes its own port there: never read the last one's
  "$kiln" serve "$model" --http-port 0 --log-format off --drain-s 0 "$@" 2>"$tmp/err" &
  pid=$!
  local port=""
  for _ in $(seq 200); do
    port=$(grep -so 'listening on http://[0-9.]*:[0-9]*' "$tmp/err" | sed 's/.*://' || true)
    [ -n "$port" ] && break; sleep 0.05
  done
  KILN_BODY=$tmp/body.json KILN_PATH=/v2/models/$name/infer KILN_HEADER_LEN=$hlen \
    wrk -t"$(( conns < 2 ? conns : 2 ))" -c"$conns" -d"${secs}s" --latency -s bench/serve/infer.lua "http://127.0.0.1:$port" > "$tmp/wrk"
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk")
  p50=$(awk '$1=="50%" {print $2}' "$tmp/wrk"); p99=$(awk '$1=="99%" {print $2}' "$tmp/wrk")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$tmp/wrk"); non2xx=${non2xx:-0}
  local batch
  curl -s "http://127.0.0.1:$port/metrics" > "$tmp/metrics"
  batch=$(awk '/^kiln_batch_size_sum/ {s=$2} /^kiln_batch_size_count/ {c=$2} END {if (c) printf "%.2f", s/c}' "$tmp/metrics")
  grep '^kiln_http_responses_total' "$tmp/metrics" | grep -v 'code="200"' >&2 || true
  kill -TERM "$pid"; wait "$pid" || true; pid=""
  echo "$label $rps $p50 $p99 $non2xx $batch" | tee -a "$tmp/results"
}
echo "label requests/s p50 p99 non-2xx mean-batch"
for r in $(seq "$rounds"); do
  run_one off --max-batch-size 0
  # shellcheck disable=SC2086
  run_one on $batch_flags
done
/usr/bin/python3 - "$tmp/results" <<'PY'
import sys, statistics as st
def ms(v):  # wrk prints 175.00us, 1.44ms or 1.20s
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if v.endswith(unit):
            return float(v[:-len(unit)]) * f
    return float(v)
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for lab in ("off", "on"):
    r = [x for x in rows if x[0] == lab]
    med[lab] = (st.median(float(x[1]) for x in r), st.median(ms(x[2]) for x in r), st.median(ms(x[3]) for x in r),
                sum(int(x[4]) for x in r))
    print("median batching %-3s: %8.1f req/s  p50 %7.2f ms  p99 %7.2f ms  non-2xx %d" % ((lab,) + med[lab]))
print("throughput ratio on/off: %.2fx; p50 ratio %.2fx; p99 ratio %.2fx" %
      (med["on"][0] / med["off"][0], med["on"][1] / med["off"][1], med["on"][2] / med["off"][2]))
PY
