#!/usr/bin/env bash
# Real-model check: PyTorch exports and tool-written models (tests/real/make_models.py) run on
# kiln and on ONNX Runtime (npm onnxruntime-node, a peer in bench/peer, never a kiln dependency);
# outputs must agree within 1e-4 relative. Usage: scripts/check-vs-ort.sh [BUILD_DIR] [LEVEL]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
level=${2:-2}
# Nothing is installed here: scripts/install-deps.sh --test provides the peer and the exporters.
missing=()
for m in onnx numpy torch torchvision; do
  /usr/bin/python3 -c "import $m" 2>/dev/null || missing+=("python3 module $m")
done
command -v node >/dev/null || missing+=("node")
[ -d bench/peer/node_modules/onnxruntime-node ] || missing+=("bench/peer/node_modules/onnxruntime-node")
if [ ${#missing[@]} -gt 0 ]; then
  echo "check-vs-ort: missing ${missing[*]}; run scripts/install-deps.sh --test (as root)" >&2
  exit 1
fi
models=$build/real-models
[ -f "$models/resnet18/model.onnx" ] || /usr/bin/python3 tests/real/make_models.py "$models" >/dev/null 2>&1
/usr/bin/python3 tests/real/compare_ort.py "$models" --kiln "$build/kiln" --level "$level"
