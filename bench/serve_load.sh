#!/usr/bin/env bash
# kiln serve and ONNX Runtime (bench/peer/ort_serve.js, onnxruntime-node behind Node's http
# server) under the same HTTP load: wrk POSTing the same KServe v2 JSON request, at each
# connection count, for SECONDS each, ROUNDS rounds alternating which server goes first.
# Prints a Markdown table of medians over the rounds (requests/s, p50, p99, non-2xx, socket
# errors) and writes every run to OUT.jsonl.
#
#   bench/serve_load.sh [--model M.onnx] [--seconds S] [--rounds R] [--conns "1 16 64"]
#                       [--threads T] [--out FILE.jsonl] [-- extra kiln serve flags]
#
# Defaults: examples/models/tiny_cnn.onnx, 30 s, 1 round, connections 1 16 64, T=1 kernel
# thread for both runtimes (kiln: --threads 1 --instances 1; ORT: intraOpNumThreads 1), request
# logs off. wrk uses 1 thread at 1 connection, 2 above. Both servers bind 127.0.0.1; wrk and the
# server share the machine's cores, so name the CPU beside the figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
KILN=${KILN:-$root/build/kiln}
model=$root/examples/models/tiny_cnn.onnx secs=30 rounds=1 conns="1 16 64" threads=1
out=/tmp/serve_load.jsonl extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "serve_load: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$KILN" ] || { echo "serve_load: no kiln at $KILN" >&2; exit 2; }
[ -d "$root/bench/peer/node_modules/onnxruntime-node" ] || { echo "serve_load: install the peer (bench/README.md)" >&2; exit 2; }
name=$(basename "$model" .onnx)
read -r kport oport < <(/usr/bin/python3 -c '
import socket; s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

"$KILN" serve "$model" --http-port "$kport" --threads "$threads" --instances 1 --log-format off \
  "${extra[@]}" > "$tmp/kiln.log" 2>&1 &
pids+=($!)
node "$root/bench/peer/ort_serve.js" "$model" --name "$name" --port "$oport" --threads "$threads" \
  > "$tmp/ort.log" 2>&1 &
pids+=($!)
for p in "$kport" "$oport"; do
  for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/v2/health/ready")" = 200 ] && break
    sleep 0.1
  done
done
# the same request body for both, from the model's metadata on kiln serve
/usr/bin/python3 -c '
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("probe", sys.argv[1]); p = importlib.util.module_from_spec(spec)
spec.loader.exec_module(p)
code, raw = p.fetch(sys.argv[2])
if code != 200: sys.exit("serve_load: model metadata: HTTP %d" % code)
json.dump({"inputs": p.make_inputs(json.loads(raw), 1)}, open(sys.argv[3], "w"))
' "$root/deploy/probe.py" "http://127.0.0.1:$kport/v2/models/$name" "$tmp/body.json"
for p in "$kport" "$oport"; do
  "$root/deploy/probe.py" "http://127.0.0.1:$p/v2/models/$name/infer" > /dev/null ||
    { echo "serve_load: the server on port $p does not answer"; cat "$tmp"/*.log; exit 1; }
done
echo "serve_load: $name, kiln serve on $kport, ORT on $oport, ${secs}s per run, $rounds round(s)" >&2
: > "$out"
one() { # server port conns round
  local t=$(( $3 < 2 ? 1 : 2 )) r
  r=$(wrk -t"$t" -c"$3" -d"${secs}s" --timeout 10s -s "$root/deploy/tests/infer.lua" \
      "http://127.0.0.1:$2/v2/models/$name/infer" -- "@$tmp/body.json" | grep '^wrk-json' | sed 's/^wrk-json //')
  echo "{\"server\":\"$1\",\"conns\":$3,\"round\":$4,\"wrk\":$r}" >> "$out"
  echo "serve_load: $1 c=$3 round $4: $r" >&2
}
for ((k = 1; k <= rounds; k++)); do
  for c in $conns; do
    if (( k % 2 )); then one kiln "$kport" "$c" "$k"; one ort "$oport" "$c" "$k"
    else one ort "$oport" "$c" "$k"; one kiln "$kport" "$c" "$k"; fi
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"kiln": "kiln serve", "ort": "ORT (node wrapper)"}
print("| connections | server | requests/s | p50 ms | p99 ms | non-2xx | socket errors | kiln/ORT req/s |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for c in sorted({r["conns"] for r in rows}):
    med = {}
    for s in ("kiln", "ort"):
        rs = [r["wrk"] for r in rows if r["conns"] == c and r["server"] == s]
        med[s] = {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50_ms", "p99_ms")}
        med[s]["non2xx"] = sum(x["non2xx"] for x in rs)
        med[s]["sock"] = sum(x["lost"] - x["non2xx"] for x in rs)
    for s in ("kiln", "ort"):
        m = med[s]
        ratio = f"{med['kiln']['rps'] / med['ort']['rps']:.2f}" if s == "kiln" and med["ort"]["rps"] else ""
        print(f"| {c} | {names[s]} | {m['rps']:.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | "
              f"{m['non2xx']} | {m['sock']} | {ratio} |")
PY
