#!/usr/bin/env bash
# Fuzzing: build the libFuzzer targets of tests/fuzz (clang, ASan + UBSan), replay every input
# kept in tests/fuzz/regress/TARGET/ (crashes found and fixed), then run each target for
# about SECONDS (default 60) on the seed corpus from the conformance models (scripts/fuzz-corpus.sh).
# Any crash, sanitizer report, leak or timeout fails the run and leaves the input in
# BUILD/fuzz-artifacts/. Usage: scripts/check-fuzz.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
# A fixed seed and a fixed number of inputs (about 10,000 a second on one core) make the run the
# same on every machine, so a landing never depends on luck; longer campaigns take
# `-max_total_time` by hand (tests/fuzz/fuzz_model.c says how).
runs=$((secs * 10000))
build=${2:-build-fuzz}
targets=(fuzz_model fuzz_optimize fuzz_inputs fuzz_plugin_desc fuzz_infer_request)
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DKILN_SANITIZE=ON -DKILN_FUZZ=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
[ -d "$build/corpus/infer_request" ] || scripts/fuzz-corpus.sh "$build/corpus"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/fuzz-artifacts"
for t in "${targets[@]}"; do
  corpus=$build/corpus/${t#fuzz_}
  mkdir -p "$corpus"
  if [ -d "tests/fuzz/regress/$t" ]; then
    echo "== $t: replaying tests/fuzz/regress/$t ($(ls "tests/fuzz/regress/$t" | wc -l) inputs)"
    "$build/tests/fuzz/$t" -runs=1 "tests/fuzz/regress/$t"/* 2>&1 | tail -n 1
  fi
  echo "== $t: $runs inputs (about ${secs} s) from seed 1 on $corpus"
  "$build/tests/fuzz/$t" -seed=1 -runs="$runs" -max_total_time=$((secs * 4)) -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$t-" "$corpus" 2>"$build/fuzz-$t.log" ||
    { tail -n 60 "$build/fuzz-$t.log"; echo "check-fuzz: $t failed; input in $build/fuzz-artifacts/" >&2; exit 1; }
  grep -E "^(#[0-9]+ +DONE|Done [0-9]+ runs)" "$build/fuzz-$t.log" | tail -n 2
  echo
done
echo "check-fuzz: ${#targets[@]} targets, $runs inputs each from seed 1, no crash"
