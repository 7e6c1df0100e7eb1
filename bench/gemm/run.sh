#!/usr/bin/env bash
# Run the GEMM benchmark: FMA peak, dispatch round trip, then the shapes with 1 and 2 threads.
# OpenBLAS's own tuning overrides are unset for its runs; OpenMP (oneDNN) threads sleep when
# idle so they do not steal the cores from the next implementation in the rotation.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/build/gemm_bench"
[ -x "$bin" ] || bash "$here/build.sh"
reps="${REPS:-21}"
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive "$bin" "$@"; }
run --threads 1 --peak --dispatch --no-gemm --threads 2
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 run --threads 1 --reps "$reps" "$@"
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 run --threads 2 --reps "$reps" "$@"
