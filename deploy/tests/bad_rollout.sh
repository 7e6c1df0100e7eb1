#!/usr/bin/env bash
# Roll-outs under load, through deploy/rollout.sh, with 3 kiln serve replicas behind nginx and
# wrk at 16 connections all along:
#   1. a corrupt model.onnx (the server refuses it): the roll-out fails at replica 0's load,
#      version 1 keeps serving, the failure is counted in kiln_model_load_failures_total;
#   2. a model whose outputs are NaN (loads and runs): the health check catches it after the
#      server switched replica 0, which is rolled back to version 1;
#   3. a good version with an impossible latency budget (--max-slowdown 0.001): the benchmark
#      fails, replica 0 is rolled back;
#   4. a good version (a loose latency budget, x10: the CPUs are shared): it serves on every
#      replica, through nginx too.
# wrk must see 0 non-2xx and 0 socket errors over all of it.
# usage: deploy/tests/bad_rollout.sh
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 "$tests_dir/make_versions.py" "$MODEL" "$work/versions"
start_replicas 3 --drain-s 1
say "3 replicas on $base_port.., nginx on $lb_port; wrk -c16 until the roll-outs end"
wrk_bg 16 300 "http://127.0.0.1:$lb_port/v2/models/$NAME/infer"
sleep 1

every_replica_serves() { # VERSION -> 0 when each replica answers unversioned requests with it
  local i v
  for i in 0 1 2; do
    v=$(infer_version $((base_port + i)))
    [ "$v" = "$1" ] || { echo "  replica $i answers version '$v'"; return 1; }
  done
}

rollout() { # KIND VERSION [options] -> rollout.sh's status; its output in $work/rollout-KIND.log
  local kind=$1 ver=$2; shift 2
  local rc=0
  "$deploy_dir/rollout.sh" "$work/versions/$kind" --run "$run" --name "$NAME" --version "$ver" \
    --bench-s 1 "$@" > "$work/rollout-$kind.log" 2>&1 || rc=$?
  sed 's/^/  | /' "$work/rollout-$kind.log"
  return $rc
}

rc=0; rollout corrupt 2 || rc=$?
check "corrupt version: rollout.sh fails (status $rc)" [ "$rc" = 1 ]
check "corrupt version: refused at replica 0's load" grep -q "replica 0: load failed" "$work/rollout-corrupt.log"
check "corrupt version: version 1 still serves on every replica" every_replica_serves 1
fails_total=$(curl -s "http://127.0.0.1:$base_port/metrics" | awk -v m="$NAME" '$1 == "kiln_model_load_failures_total{model=\"" m "\"}" {print $2}')
check "corrupt version: kiln_model_load_failures_total is ${fails_total:-absent}" [ "${fails_total:-0}" -ge 1 ]
curl -s -X POST -H "Authorization: Bearer $(cat "$run/admin-token")" "http://127.0.0.1:$base_port/v2/repository/index" > "$work/index.json"
check "corrupt version: the repository index gives the reason: $(head -c 300 "$work/index.json")" grep -q '"reason"' "$work/index.json"

rc=0; rollout nan 3 || rc=$?
check "NaN version: rollout.sh fails (status $rc)" [ "$rc" = 1 ]
check "NaN version: caught by the health check at replica 0" grep -q "replica 0: health check failed: probe: output .probs. has non-finite values" "$work/rollout-nan.log"
check "NaN version: rolled back" grep -q "rolled back, version 1 serving on all 3 replicas" "$work/rollout-nan.log"
check "NaN version: version 1 serves on every replica" every_replica_serves 1

rc=0; rollout good 4 --max-slowdown 0.001 || rc=$?
check "latency budget: rollout.sh fails (status $rc)" [ "$rc" = 1 ]
check "latency budget: the benchmark fails at replica 0" grep -q "replica 0: benchmark failed" "$work/rollout-good.log"
check "latency budget: version 1 serves on every replica" every_replica_serves 1

rc=0; rollout good 5 --max-slowdown 10 || rc=$?   # a loose budget: the CPUs are shared
check "good version: rollout.sh succeeds (status $rc)" [ "$rc" = 0 ]
check "good version: version 5 serves on every replica" every_replica_serves 5
check "good version: nginx answers with version 5" [ "$(infer_version "$lb_port")" = 5 ]

kill -INT "$wrk_pid" 2>/dev/null || true
wrk_wait
say "wrk: $r"
sent=$(jfield "$r" requests); lost=$(jfield "$r" lost)
echo "result bad_rollout: requests $sent non2xx $(jfield "$r" non2xx) socket_errors $((lost - $(jfield "$r" non2xx)))"
check "load reached the replicas ($sent requests)" [ "$sent" -gt 100 ]
check "no request lost across four roll-outs (lost $lost)" [ "$lost" = 0 ]
finish
