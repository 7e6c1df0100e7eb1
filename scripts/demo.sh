#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, and run kiln on the bundled example model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
model=examples/models/tiny_cnn.onnx
echo
echo "== kiln info $model"
build/kiln info "$model"
echo
echo "== kiln run $model --dim N=2   (random, seeded inputs)"
build/kiln run "$model" --dim N=2
