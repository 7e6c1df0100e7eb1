#!/usr/bin/env bash
# Roll a new model version out to the replicas of deploy/replicas.sh, one replica at a time:
# deploy -> health check -> benchmark -> switch, and roll back everywhere on any failure.
#
#   deploy/rollout.sh MODEL_DIR [--run DIR] [--name NAME] [--version V] [--max-slowdown F]
#                     [--bench-s S]
#
# MODEL_DIR holds the new version's model.onnx (and any files next to it). For each replica I:
#   1. hold: RUN/rI/hold takes it out of nginx (the others keep serving);
#   2. baseline: a short wrk run (S s, default 2; --bench-s 0 skips) of the serving version;
#   3. deploy: copy MODEL_DIR to rI/repo/NAME/.tmp-V, rename it to V (atomic: the server never
#      sees half a version), ask the replica's load API (admin token from RUN/admin-token); the
#      server loads, checks and warms V up and switches to it only if that passes;
#   4. health check: V ready, one inference on V with finite outputs of the right size, and
#      unversioned requests answered by V;
#   5. benchmark: the same wrk run on V; its median latency must be within F (default 2.0) times
#      the baseline's, with no failed request;
#   6. switch: the hold is removed and nginx sends the replica traffic again.
# If a step fails, that replica and every replica already switched are rolled back one at a time
# (V removed from their repository, the load API asked again, the old version checked to answer),
# and the script exits 1 naming the step and the reason. Exit 0: V serves on every replica.
# NAME defaults to the only model in the replicas' repositories, V to the newest version + 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=${KILN_RUN_DIR:-/tmp/kiln-replicas}
name="" ver="" slow=2.0 bench_s=2

die() { echo "rollout: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
say() { echo "rollout: [$(date +%T)] $*"; }

[ $# -gt 0 ] || usage 2
case $1 in -h|--help) usage 0 ;; esac
src=$1; shift
while [ $# -gt 0 ]; do
  case $1 in
    --run) run=${2:?--run needs a folder}; shift 2 ;;
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --version) ver=${2:?--version needs a number}; shift 2 ;;
    --max-slowdown) slow=${2:?--max-slowdown needs a factor}; shift 2 ;;
    --bench-s) bench_s=${2:?--bench-s needs seconds}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -f "$src/model.onnx" ] || die "no model.onnx in $src"
[ -f "$run/replicas" ] && [ -f "$run/ready" ] || die "no running replicas in $run (deploy/replicas.sh)"
token=$(cat "$run/admin-token")
mapfile -t ports < <(awk '{print $2}' "$run/replicas")
n=${#ports[@]}
if [ -z "$name" ]; then
  mapfile -t models < <(find "$run/r0/repo" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n')
  [ ${#models[@]} = 1 ] || die "the repository holds ${#models[@]} models; say which with --name"
  name=${models[0]}
fi
if [ -z "$ver" ]; then
  last=$(find "$run/r0/repo/$name" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9]+' -printf '%f\n' | sort -n | tail -n 1)
  ver=$(( ${last:-0} + 1 ))
fi
[[ $ver =~ ^[0-9]+$ ]] || die "--version must be a number, got '$ver'"
for ((i = 0; i < n; i++)); do
  [ ! -e "$run/r$i/repo/$name/$ver" ] || die "replica $i already has $name version $ver"
done

url() { echo "http://127.0.0.1:${ports[$1]}$2"; }
served_version() { "$here/probe.py" "$(url "$1" "/v2/models/$name${2:+/versions/$2}/infer")" 2> "$run/probe.err"; }

# hold: nginx's gate for the replica answers 503 from now on and nginx sends its requests to the
# others; those already at the replica finish. With one replica there is no other to send them
# to: it keeps serving through the roll-out.
hold() {
  [ "$n" -gt 1 ] || return 0
  touch "$run/r$1/hold"
  sleep 0.5
}
unhold() { rm -f "$run/r$1/hold"; }

load_api() { # replica -> prints HTTP code, body in $run/load.out
  curl -s -o "$run/load.out" -w '%{http_code}' -m 300 -X POST -H "Authorization: Bearer $token" \
    "$(url "$1" "/v2/repository/models/$name/load")" || echo 000
}

# p50 ms of a short wrk run on replica $1's unversioned infer; "" when the run lost requests
bench() {
  local out r
  out=$(wrk -t1 -c2 -d"${bench_s}s" --timeout 10s -s "$here/tests/infer.lua" \
        "$(url "$1" "/v2/models/$name/infer")" -- "@$run/bench-body.json" 2>&1 | grep '^wrk-json' | sed 's/^wrk-json //')
  /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["p50_ms"] if r["lost"]==0 and r["requests"]>0 else "")' "$out" 2>/dev/null || true
}

# a request body for the benchmark, from the model's metadata (as probe.py builds it)
/usr/bin/python3 -c '
import importlib.util, json, sys, urllib.request
spec = importlib.util.spec_from_file_location("probe", sys.argv[1]); p = importlib.util.module_from_spec(spec)
spec.loader.exec_module(p)
code, raw = p.fetch(sys.argv[2])
if code != 200: sys.exit("rollout: model metadata: HTTP %d" % code)
json.dump({"inputs": p.make_inputs(json.loads(raw), 1)}, open(sys.argv[3], "w"))
' "$here/probe.py" "$(url 0 "/v2/models/$name")" "$run/bench-body.json" || die "replica 0 does not serve $name"

declare -a old_ver
failed_step="" reason=""

deploy_one() {
  local i=$1 port=${ports[$1]} base new code v
  say "replica $i (port $port): hold"
  hold "$i"
  old_ver[$i]=$(served_version "$i") || { failed_step="before"; reason="not serving: $(cat "$run/probe.err")"; return 1; }
  if [ "$bench_s" != 0 ]; then
    base=$(bench "$i")
    [ -n "$base" ] || { failed_step="baseline"; reason="the serving version lost requests"; return 1; }
    say "replica $i: baseline version ${old_ver[$i]} p50 $base ms"
  fi
  local dst=$run/r$i/repo/$name
  rm -rf "$dst/.tmp-$ver"
  cp -a "$src" "$dst/.tmp-$ver"
  mv "$dst/.tmp-$ver" "$dst/$ver"
  code=$(load_api "$i")
  say "replica $i: deployed version $ver, load API: HTTP $code $(head -c 300 "$run/load.out")"
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$(url "$i" "/v2/models/$name/versions/$ver/ready")" || echo 000)
  [ "$code" = 200 ] || { failed_step="load"; reason="version $ver not ready (HTTP $code): $(head -c 300 "$run/load.out")"; return 1; }
  v=$(served_version "$i" "$ver") || { failed_step="health check"; reason=$(cat "$run/probe.err"); return 1; }
  v=$(served_version "$i") || { failed_step="health check"; reason=$(cat "$run/probe.err"); return 1; }
  [ "$v" = "$ver" ] || { failed_step="health check"; reason="unversioned requests answered by version $v, not $ver"; return 1; }
  say "replica $i: health check passed (version $ver answers, outputs finite)"
  if [ "$bench_s" != 0 ]; then
    new=$(bench "$i")
    [ -n "$new" ] || { failed_step="benchmark"; reason="version $ver lost requests"; return 1; }
    if ! awk -v a="$new" -v b="$base" -v f="$slow" 'BEGIN { exit !(a <= b * f) }'; then
      failed_step="benchmark"; reason="version $ver p50 $new ms > $slow x baseline $base ms"; return 1
    fi
    say "replica $i: benchmark passed (p50 $new ms, baseline $base ms, budget x$slow)"
  fi
  unhold "$i"
  say "replica $i: switched to version $ver"
}

rollback_one() {
  local i=$1 v="" code
  [ -e "$run/r$i/hold" ] || hold "$i"
  rm -rf "$run/r$i/repo/$name/$ver" "$run/r$i/repo/$name/.tmp-$ver"
  code=$(load_api "$i")
  for _ in $(seq 1 100); do
    v=$(served_version "$i" 2>/dev/null) && [ "$v" = "${old_ver[$i]:-$v}" ] && break
    sleep 0.1
  done
  unhold "$i"
  if [ -n "$v" ] && [ "$v" = "${old_ver[$i]:-$v}" ]; then
    say "replica $i: rolled back, version $v serving (load API: HTTP $code)"
  else
    say "replica $i: ROLLBACK INCOMPLETE: serving '${v}', expected '${old_ver[$i]:-}' (load API: HTTP $code $(head -c 200 "$run/load.out"))"
    return 1
  fi
}

say "rolling $name version $ver from $src out to $n replicas"
for ((i = 0; i < n; i++)); do
  if ! deploy_one "$i"; then
    say "replica $i: $failed_step failed: $reason"
    rc=0
    for ((k = i; k >= 0; k--)); do rollback_one "$k" || rc=1; done
    if [ "$rc" = 0 ]; then
      say "FAILED at replica $i ($failed_step: $reason); rolled back, version ${old_ver[0]:-?} serving on all $n replicas"
    else
      say "FAILED at replica $i ($failed_step: $reason); rollback incomplete, see above"
    fi
    exit 1
  fi
done
say "version $ver serving on all $n replicas"
