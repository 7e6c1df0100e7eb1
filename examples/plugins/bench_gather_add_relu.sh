#!/usr/bin/env bash
# Time the fused_gather_add_relu plugin on a large model: `kiln run` at level 0 (Gather, Add,
# Relu: three passes over the output, two intermediate tensors) against level 2 (the plugin's
# pattern makes one my.ops::FusedGatherAddRelu node), best of N runs each.
# Usage: examples/plugins/bench_gather_add_relu.sh [BUILD_DIR] [RUNS]   (after building kiln)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=${PYTHON:-/usr/bin/python3}   # Debian's python3-onnx and python3-numpy
[ -x "$py" ] || py=python3
"$py" examples/plugins/make_models.py --large "$dir" >/dev/null
model=$dir/gather_add_relu_large.onnx
for threads in 1 0; do
  for level in 0 2; do
    best=
    for _ in $(seq "$runs"); do
      t=$("$build/kiln" run "$model" --plugin "$build/plugins/fused_gather_add_relu.so" \
            --input "indices=$dir/indices.npy" --level "$level" --threads "$threads" | awk '/^time:/ {print $2}')
      best=$(awk -v a="$t" -v b="${best:-1e30}" 'BEGIN {print (a < b) ? a : b}')
    done
    echo "level $level, threads $([ "$threads" = 0 ] && echo all || echo "$threads"): best of $runs runs $best ms"
  done
done
