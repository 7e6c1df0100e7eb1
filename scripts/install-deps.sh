#!/usr/bin/env bash
# Install what kiln needs on Debian 12 (run as root). Idempotent: packages already present are
# not fetched again. Usage: scripts/install-deps.sh [--test|--bench]
#   (default) build and run: compiler, cmake, protobuf-c, Debian's onnx.proto
#   --test    also what the tests need: the ONNX conformance data (Debian 12's 1.12 package and
#             1.17 from Debian 13 into /var/cache/kiln/onnx-testdata), clang, chromium (headless,
#             for the profile report), and for the check against ONNX Runtime: python3 with
#             onnx/numpy/torch (model export) and npm
#   --bench   also the GEMM benchmark's peers (bench/gemm only, never linked into kiln)
set -euo pipefail
PKGS=(build-essential cmake pkg-config protobuf-c-compiler libprotobuf-c-dev libonnx-dev)
PKGS+=(libmicrohttpd-dev libjansson-dev) # kiln serve (src/serve), kiln-anomaly (examples/anomaly)
if [ "${1:-}" = "--test" ]; then
  PKGS+=(clang libonnx-testdata python3-onnx python3-numpy python3-torch python3-torchvision)
  PKGS+=(chromium) # renders kiln profile's HTML report in tests/graph/test_profile_cli.py
  PKGS+=(prometheus) # promtool checks kiln serve's /metrics (tests/serve)
  PKGS+=(python3-dev python3-pip python3-setuptools) # the Python package (python/) and its pip test
  PKGS+=(nginx wrk curl yamllint) # deploy/tests: replicas behind nginx under wrk load, manifests
  PKGS+=(qemu-user) # scripts/check-isa.sh: the tests on emulated CPUs without AVX-512 / AVX2
fi
if [ "${1:-}" = "--bench" ]; then
  PKGS+=(libopenblas-dev libdnnl-dev) # bench/gemm: OpenBLAS and oneDNN columns
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come with a Node.js that is not Debian's: only ask apt for it when there is none.
if [ "${1:-}" = "--test" ] && ! command -v npm >/dev/null; then missing+=(npm); fi
# The ONNX Runtime peer (npm onnxruntime-node into bench/peer) for the check against it.
install_peer() {
  [ "${1:-}" = "--test" ] || return 0
  [ -d bench/peer/node_modules/onnxruntime-node ] && return 0
  echo "install-deps: npm install onnxruntime-node into bench/peer"
  (cd bench/peer && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --silent)
}
cd "$(dirname "$0")/.."
# ONNX 1.17's conformance data (Debian 13's libonnx-testdata, unpacked, not installed)
if [ "${1:-}" = "--test" ]; then scripts/fetch-onnx-testdata.sh; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  install_peer "${1:-}"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_peer "${1:-}"
