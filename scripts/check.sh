#!/usr/bin/env bash
# Quick start, command 2: install dependencies, build, and run the whole test suite:
#   1. gcc release build: unit tests + ONNX conformance (CTest)
#   2. clang build with warnings as errors
#   3. AddressSanitizer + UBSan build: unit tests
#   4. ThreadSanitizer build: the concurrency tests (scripts/check-tsan.sh)
#   5. libFuzzer targets, 60 s each (scripts/check-fuzz.sh)
#   6. scripts/check-isa.sh: tests on emulated CPUs without AVX-512 and without AVX2 (QEMU)
# The last lines printed are CTest's summary of the full run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
jobs=$(nproc)

echo "== layers: every include under src/ points down, no file over 1,000 lines"
/usr/bin/python3 scripts/check-layers.py

echo "== clang build (warnings are errors)"
CC=clang scripts/build.sh build-clang

echo "== sanitizer build (ASan + UBSan): unit tests, conformance, kiln serve and kiln-anomaly"
scripts/build.sh build-asan -DKILN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -L "unit|conformance|serve|anomaly" --output-on-failure -j"$jobs")

echo "== ThreadSanitizer build: concurrency tests"
scripts/check-tsan.sh build-tsan

echo "== fuzzing (libFuzzer, ASan + UBSan): each target 60 s"
scripts/check-fuzz.sh 60 build-fuzz

echo "== gcc release build: unit tests and ONNX conformance"
scripts/build.sh build
/usr/bin/python3 scripts/check-layers.py --symbols build  # calls up the layers too (nm on the objects)

echo "== emulated CPUs: no AVX-512 instruction on an AVX2 CPU, none beyond x86-64 on a baseline one"
scripts/check-isa.sh build build-asan

cd build
ctest --output-on-failure -j"$jobs" 2>&1 | tee ctest.log | grep -v "^\s*$" | grep -vE "^\s+(Start|[0-9]+/[0-9]+ Test)" || true
echo
echo "== conformance table"
sed -n '/^suite /,/passed, .* failed$/p' Testing/Temporary/LastTest.log | grep -E "^(suite|node|pytorch|simple|light|total|known|[0-9]+ passed)" || true
echo
grep -E "tests passed, [0-9]+ tests failed out of" ctest.log | tail -n 1
grep -q "100% tests passed" ctest.log
