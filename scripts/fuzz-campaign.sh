#!/usr/bin/env bash
# A long fuzzing campaign over the libFuzzer targets of tests/fuzz, continuing from the corpora
# kept in CORPUS/TARGET (default /var/cache/kiln/fuzz-corpus) so that each campaign starts where
# the last one stopped. Every target runs as one process at the lowest priority (nice 19) until
# the given time; a crash is kept in LOG/TARGET-crashes/ and the target starts again. CPU time
# is the OS's (user + system of each libFuzzer process, from /usr/bin/time), not wall time.
# libFuzzer's -timeout counts wall time, which a nice-19 process on a busy machine spends
# waiting: it is 120 s here (the targets stop each run at 2 s of kiln_options.max_run_ms, so
# a unit still going after 120 s is a real hang, not a starved process).
# Usage: scripts/fuzz-campaign.sh UNTIL [BUILD_DIR] [CORPUS] [LOG]
#   UNTIL: a time `date -d` understands ("02:40 UTC"); BUILD_DIR as for scripts/check-fuzz.sh.
# KILN_FUZZ_CPU_S="fuzz_model=3000 fuzz_inputs=2500" (or one number for every target) also stops
# a target once its CPU seconds logged in LOG reach that budget, so that the machine goes to the
# targets still short of theirs; each libFuzzer process then runs at most 900 s (wall), and no
# longer than the CPU seconds still short.
# Then scripts/fuzz-campaign.sh --report [LOG] prints the table (CPU s, executions, cov, ft,
# crashes) of everything logged so far.
set -euo pipefail
cd "$(dirname "$0")/.."
# KILN_FUZZ_TARGETS="fuzz_a fuzz_b" runs only those.
targets=(${KILN_FUZZ_TARGETS:-fuzz_model fuzz_optimize fuzz_inputs fuzz_plugin_desc fuzz_infer_request})

report() {
  local log=$1
  printf '%-18s %10s %12s %8s %8s %8s %6s\n' target cpu_s execs cov ft crashes runs
  for t in "${targets[@]}"; do
    [ -f "$log/$t.runs" ] || continue
    # exit 72: interrupted (SIGINT, e.g. to restart on new binaries), not a finding
  awk -v t="$t" '{cpu += $2 + $3; ex += $4; if ($5 > cov) cov = $5; if ($6 > ft) ft = $6; cr += ($7 != 0 && $7 != 72); n++}
      END {printf "%-18s %10.0f %12d %8d %8d %8d %6d\n", t, cpu, ex, cov, ft, cr, n}' "$log/$t.runs"
  done
}

if [ "${1:-}" = --report ]; then
  report "${2:-/var/cache/kiln/fuzz-campaign}"
  exit 0
fi
[ "${1:-}" = --help ] || [ $# -lt 1 ] && { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }

until=$(date -d "$1" +%s)
build=${2:-build-fuzz}
corpus=${3:-/var/cache/kiln/fuzz-corpus}
log=${4:-/var/cache/kiln/fuzz-campaign}
bin=$log/bin
mkdir -p "$bin" "$corpus" "$log"
# The campaign runs copies, so that rebuilding the tree meanwhile does not touch them.
for t in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/$t" ] || { echo "fuzz-campaign: $build/tests/fuzz/$t missing (scripts/check-fuzz.sh builds it)" >&2; exit 1; }
  cp "$build/tests/fuzz/$t" "$bin/$t"
done
[ -d "$build/corpus/infer_request" ] || scripts/fuzz-corpus.sh "$build/corpus"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The CPU budget of target $1 from KILN_FUZZ_CPU_S (empty: none), and the CPU seconds logged so far.
budget_of() {
  local w
  for w in ${KILN_FUZZ_CPU_S:-}; do
    case $w in "$1="*) echo "${w#*=}"; return ;; *=*) ;; *) echo "$w"; return ;; esac
  done
}
cpu_logged() { [ -f "$log/$1.runs" ] && awk '{s += $2 + $3} END {printf "%d", s}' "$log/$1.runs" || echo 0; }

# One target: libFuzzer again and again until UNTIL (or its CPU budget); one line per process in LOG/TARGET.runs:
# start user_s sys_s executions cov ft exit_status
campaign() {
  local t=$1 seeds=$build/corpus/${1#fuzz_} dir=$corpus/$1 crashes=$log/$1-crashes budget
  budget=$(budget_of "$t")
  mkdir -p "$dir" "$crashes"
  while :; do
    local now left seed=$RANDOM$RANDOM rc=0
    now=$(date +%s)
    left=$((until - now))
    [ $left -ge 30 ] || break
    if [ -n "$budget" ]; then
      local short=$((budget - $(cpu_logged "$t")))
      [ $short -gt 0 ] || { echo "fuzz-campaign: $t reached its budget of $budget CPU s"; break; }
      [ $short -ge 60 ] || short=60 # CPU s never exceed wall s: a run of SHORT wall s cannot overshoot
      [ $left -le 900 ] || left=900
      [ $left -le $short ] || left=$short
    fi
    /usr/bin/time -f '%U %S' -o "$log/$t.time" nice -n 19 "$bin/$t" -seed="$seed" -max_total_time=$left \
      -timeout=120 -rss_limit_mb=3072 -print_final_stats=1 -artifact_prefix="$crashes/" "$dir" "$seeds" \
      >"$log/$t.last" 2>&1 || rc=$?
    local execs cov ft
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log/$t.last" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log/$t.last" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log/$t.last" | tail -n 1 | cut -d' ' -f2)
    if [ -z "$execs" ]; then # a crash ends without final stats: the last status line counts
      execs=$(grep -o '^#[0-9]*' "$log/$t.last" | tail -n 1 | tr -d '#')
    fi
    echo "$now $(tail -n 1 "$log/$t.time") ${execs:-0} ${cov:-0} ${ft:-0} $rc" >>"$log/$t.runs"
    cat "$log/$t.last" >>"$log/$t.log"
    [ $rc -eq 0 ] || { echo "fuzz-campaign: $t exited $rc (seed $seed); see $log/$t.log and $crashes/" >&2; sleep 5; }
  done
}

for t in "${targets[@]}"; do campaign "$t" & done
echo "fuzz-campaign: ${#targets[@]} targets until $(date -u -d "@$until"), corpora in $corpus, logs in $log"
wait
report "$log"
