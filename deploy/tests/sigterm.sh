#!/usr/bin/env bash
# SIGTERM of a replica under load loses no request: 3 kiln serve replicas behind nginx (drain
# DRAIN s, default 2), wrk at 16 connections for SECONDS (default 6), replica 1 sent SIGTERM at a
# third of the way. The replica must turn not-ready at once, keep serving while draining, exit 0
# within drain + exit timeout; wrk must see 0 non-2xx and 0 socket errors.
# usage: deploy/tests/sigterm.sh [SECONDS] [DRAIN]
source "$(dirname "$0")/lib.sh"
secs=${1:-6}
drain=${2:-2}
start_replicas 3 --drain-s "$drain" --no-restart
port1=$((base_port + 1))
say "3 replicas on $base_port.., nginx on $lb_port; wrk -c16 for ${secs}s"
wrk_bg 16 "$secs" "http://127.0.0.1:$lb_port/v2/models/$NAME/infer"
sleep "$(awk -v s="$secs" 'BEGIN { print s / 3 }')"
victim=$(cat "$run/r1/pid")
t0=$(date +%s.%N)
kill -TERM "$victim"
say "SIGTERM replica 1 (pid $victim)"
sleep 0.2
code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$port1/v2/health/ready" || true)
check "replica 1 not ready while draining (HTTP $code)" [ "$code" = 503 ]
live=$(infer_version "$port1")
check "replica 1 still serves inferences while draining (version '$live')" [ "$live" = 1 ]
gone=1
for _ in $(seq 1 $(( (drain + 15) * 10 ))); do
  kill -0 "$victim" 2>/dev/null || { gone=0; break; }
  sleep 0.1
done
t1=$(date +%s.%N)
expect $gone "replica 1 exited $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s after SIGTERM"
wrk_wait
say "wrk: $r"
sent=$(jfield "$r" requests); lost=$(jfield "$r" lost)
echo "result sigterm: requests $sent non2xx $(jfield "$r" non2xx) socket_errors $((lost - $(jfield "$r" non2xx)))"
status_line() { # the supervisor notes the exit within its next 0.5 s round
  for _ in $(seq 1 50); do grep -q "replica 1 (pid $victim) exited" "$run/supervisor.log" && break; sleep 0.1; done
  grep -q "replica 1 (pid $victim) exited with status 0" "$run/supervisor.log"
}
check "replica 1 exited with status 0" status_line
check "load reached the replicas ($sent requests)" [ "$sent" -gt 100 ]
check "no request lost across the drain (lost $lost)" [ "$lost" = 0 ]
finish
