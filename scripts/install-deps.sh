#!/usr/bin/env bash
# Install what kiln needs to build and test on Debian 12 (run as root). Idempotent: packages
# already present are not fetched again.
set -euo pipefail
PKGS=(build-essential cmake pkg-config clang protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
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
