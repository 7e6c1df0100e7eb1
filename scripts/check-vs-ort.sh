#!/usr/bin/env bash
# Real-model check: PyTorch exports and tool-written models (tests/real/make_models.py) run on
# kiln and on ONNX Runtime (npm onnxruntime-node, a peer in bench/peer, never a kiln dependency);
# outputs must agree within 1e-4 relative. Usage: scripts/check-vs-ort.sh [BUILD_DIR] [LEVEL]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
level=${2:-2}
need=()
for p in python3-onnx python3-numpy python3-torch python3-torchvision; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "check-vs-ort: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ ! -d bench/peer/node_modules/onnxruntime-node ]; then
  (cd bench/peer && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --silent)
fi
models=$build/real-models
[ -f "$models/resnet18/model.onnx" ] || /usr/bin/python3 tests/real/make_models.py "$models" >/dev/null 2>&1
/usr/bin/python3 tests/real/compare_ort.py "$models" --kiln "$build/kiln" --level "$level"
