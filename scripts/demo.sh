#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, run kiln-anomaly on the bundled labelled
# sensor stream, then kiln on the bundled example model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
echo
echo "== kiln-anomaly: anomaly detection on a pump station's sensor stream"
echo "   (examples/anomaly: model trained by train.py on data/plant_train.csv, clean rows only;"
echo "    the test stream holds 30 injected anomalies of five kinds; events -> build/anomaly_events.jsonl)"
build/kiln-anomaly examples/anomaly/model --input examples/anomaly/data/plant_test.csv \
  --labels label --events build/anomaly_events.jsonl
echo "first events:"
head -n 3 build/anomaly_events.jsonl
if [ -d bench/peer/node_modules/onnxruntime-node ] && command -v node >/dev/null; then
  echo "the same windows on ONNX Runtime (batch 32, one thread, inference calls alone):"
  node examples/anomaly/ort_windows.js examples/anomaly/model examples/anomaly/data/plant_test.csv
fi
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
