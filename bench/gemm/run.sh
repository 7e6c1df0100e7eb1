#!/usr/bin/env bash
# Run the GEMM benchmark: FMA peak and thread-pool dispatch, then the shapes with 1 thread
# (timed by the thread's CPU time, so time spent descheduled on a shared machine is left out)
# and with 2 threads (wall time). Extra arguments go to every GEMM run (e.g. --shape MxNxK).
# OpenBLAS's own tuning overrides are unset for its runs; OpenMP (oneDNN) threads sleep when
# idle so they do not hold a core while the next implementation in the rotation runs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/build/gemm_bench"
[ -x "$bin" ] || bash "$here/build.sh"
reps="${REPS:-21}"
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive "$bin" "$@"; }
run --threads 2 --peak --dispatch --no-gemm
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 run --threads 1 --reps "$reps" --clock thread "$@"
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 run --threads 2 --reps "$reps" "$@"
