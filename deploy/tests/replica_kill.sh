#!/usr/bin/env bash
# SIGKILL of one replica mid-load loses no request: 3 kiln serve replicas behind nginx, wrk at
# 16 connections for SECONDS (default 6), replica 1 killed at a third of the way; every request
# must get a 2xx (0 non-2xx, 0 socket errors), and the supervisor brings the replica back.
# usage: deploy/tests/replica_kill.sh [SECONDS]
source "$(dirname "$0")/lib.sh"
secs=${1:-6}
start_replicas 3 --drain-s 1
say "3 replicas on $base_port.., nginx on $lb_port; wrk -c16 for ${secs}s"
wrk_bg 16 "$secs" "http://127.0.0.1:$lb_port/v2/models/$NAME/infer"
sleep "$(awk -v s="$secs" 'BEGIN { print s / 3 }')"
victim=$(cat "$run/r1/pid")
kill -KILL "$victim"
say "SIGKILL replica 1 (pid $victim)"
wrk_wait
say "wrk: $r"
sent=$(jfield "$r" requests); lost=$(jfield "$r" lost)
echo "result replica_kill: requests $sent non2xx $(jfield "$r" non2xx) socket_errors $((lost - $(jfield "$r" non2xx)))"
check "load reached the replicas ($sent requests)" [ "$sent" -gt 100 ]
check "no request lost across the kill (lost $lost)" [ "$lost" = 0 ]
check "the supervisor saw replica 1 die" grep -q "replica 1 (pid $victim) exited" "$run/supervisor.log"
back=1
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((base_port + 1))/v2/health/ready")" = 200 ] && { back=0; break; }
  sleep 0.1
done
expect $back "replica 1 restarted and ready"
check "nginx still answers after the kill" [ "$(infer_version "$lb_port")" = 1 ]
finish
