#!/usr/bin/env bash
# ThreadSanitizer: build kiln with -DKILN_TSAN=ON (clang; target_clones off, its ifunc
# resolvers crash under TSan) and run the concurrency tests: concurrent runs of one session and
# of many, the thread pools, sessions sharing one compiled model, attention on per-run scratch.
# Any race report fails the run.
# Usage: scripts/check-tsan.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
tests=(test_concurrent_runs test_threadpool test_threadpool_late test_model_share test_scratch_runs)
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${tests[@]}" >/dev/null
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"
regex=$(IFS='|'; echo "^(${tests[*]})\$")
(cd "$build" && ctest -R "$regex" --output-on-failure)
