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
echo
echo "== kiln optimize $model build/tiny_cnn.opt.onnx   (fusion: what each pass did)"
build/kiln optimize "$model" build/tiny_cnn.opt.onnx
echo
echo "== kiln validate $model --dim N=2   (fused graph against the original)"
build/kiln validate "$model" --dim N=2
