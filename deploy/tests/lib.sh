# Shared by the load and failure tests in deploy/tests (sourced, not run). Every test runs on
# loopback ports picked free at start, in its own temporary run folder, and stops everything it
# started on exit.
set -euo pipefail
tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deploy_dir=$(dirname "$tests_dir")
root=$(dirname "$deploy_dir")
export KILN=${KILN:-$root/build/kiln}
MODEL=${MODEL:-$root/examples/models/tiny_cnn.onnx}
NAME=${NAME:-tiny_cnn}
fails=0
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-deploy-test.XXXXXX")
chmod 755 "$work"   # nginx workers (nobody, when run as root) reach the run folder
run=$work/run

say() { echo "[$(date +%T)] $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
expect() { # expect STATUS MESSAGE: ok when STATUS is 0
  if [ "$1" = 0 ]; then ok "$2"; else fail "$2"; fi
}
check() { # check MESSAGE COMMAND...: ok when COMMAND succeeds (set -e does not stop the test)
  local msg=$1; shift
  if "$@"; then ok "$msg"; else fail "$msg"; fi
}

# N free loopback TCP ports, one per line
free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# start_replicas N [replicas.sh options...]: N replicas of $MODEL behind nginx, detached;
# sets lb_port and base_port
start_replicas() {
  local n=$1; shift
  local ports; ports=$(free_ports 4)
  lb_port=$(echo "$ports" | sed -n 1p)
  # the replicas' range must not hold nginx's port (free too when picked: a run once took
  # 33985.. with nginx on 33987, and nginx could not bind)
  base_port=$(/usr/bin/python3 - "$n" "$lb_port" <<'PY'
import socket, sys, random
n, lb = int(sys.argv[1]), int(sys.argv[2])
for _ in range(200):
    b = random.randint(20000, 60000 - n)
    if b <= lb < b + n:
        continue
    try:
        socks = []
        for p in range(b, b + n):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(b); break
    except OSError:
        pass
PY
)
  "$deploy_dir/replicas.sh" "$n" "$MODEL" --name "$NAME" --run "$run" --port "$lb_port" \
    --base-port "$base_port" --detach "$@"
}

stop_replicas() {
  [ -f "$run/supervisor.pid" ] && "$deploy_dir/replicas.sh" stop --run "$run" > /dev/null 2>&1 || true
}

cleanup() {
  local rc=$?
  stop_replicas
  [ -n "${wrk_pid:-}" ] && kill "$wrk_pid" 2>/dev/null || true
  if [ "$fails" -gt 0 ] || [ "$rc" -ne 0 ]; then
    echo "--- logs kept in $work"
    for f in "$run"/supervisor.log "$run"/r*/log "$run"/logs/error.log; do
      [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
    done
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# wrk_bg CONNECTIONS SECONDS URL [lua args...]: wrk in the background, its output in $work/wrk.out
wrk_bg() {
  local c=$1 d=$2 url=$3; shift 3
  local t=$(( c < 2 ? 1 : 2 ))
  wrk -t"$t" -c"$c" -d"${d}s" --timeout 10s --latency -s "$tests_dir/infer.lua" "$url" -- "$@" \
    > "$work/wrk.out" 2>&1 &
  wrk_pid=$!
}
# wrk_wait: wait for it (in this shell, not a subshell), its summary JSON in $r
wrk_wait() {
  wait "$wrk_pid" || true
  wrk_pid=""
  r=$(sed -n 's/^wrk-json //p' "$work/wrk.out")
  [ -n "$r" ] || { cat "$work/wrk.out"; r='{"requests":0,"lost":-1,"non2xx":-1}'; fail "wrk printed no summary"; }
}
# jfield JSON FIELD
jfield() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# infer_version PORT [VERSION]: the model_version that answers one request ("" if it failed)
infer_version() {
  local path="/v2/models/$NAME/infer"
  [ -n "${2:-}" ] && path="/v2/models/$NAME/versions/$2/infer"
  /usr/bin/python3 "$deploy_dir/probe.py" "http://127.0.0.1:$1$path" --field model_version 2>/dev/null || true
}

# rss_kb PID: resident set size in KiB
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

finish() {
  if [ "$fails" -gt 0 ]; then echo "FAILED: $fails check(s)"; exit 1; fi
  echo "passed"
}
