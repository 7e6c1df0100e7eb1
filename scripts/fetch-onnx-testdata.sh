#!/usr/bin/env bash
# Fetch ONNX 1.17's conformance data (Debian 13 "trixie"'s libonnx-testdata 1.17.0, an
# Architecture: all data package) into a cache folder keyed by version, without touching the
# machine's apt sources or installed packages: apt reads a private source list and keeps its
# lists and downloads in a scratch folder; the .deb is unpacked with dpkg -x, not installed.
# Idempotent: does nothing when the folder is already complete.
# Usage: scripts/fetch-onnx-testdata.sh [DEST_ROOT]   (default /var/cache/kiln/onnx-testdata)
# The data lands in DEST_ROOT/1.17.0/data/{node,pytorch-converted,pytorch-operator,simple,light,real}.
set -euo pipefail
VERSION=1.17.0
NODE_TESTS=1288 # node tests the 1.17.0 package carries: the completeness check
root=${1:-/var/cache/kiln/onnx-testdata}
dest=$root/$VERSION

complete() {
  [ -f "$dest/.complete" ] && return 0
  # a folder unpacked before the stamp existed counts when every suite is there
  local n
  n=$(find "$dest/data/node" -mindepth 1 -maxdepth 1 -type d -name 'test_*' 2>/dev/null | wc -l)
  [ "$n" -eq "$NODE_TESTS" ] && [ -d "$dest/data/light" ] && [ -d "$dest/data/simple" ] &&
    [ -d "$dest/data/pytorch-converted" ] && [ -d "$dest/data/pytorch-operator" ] &&
    touch "$dest/.complete"
}

if complete; then
  echo "fetch-onnx-testdata: ONNX $VERSION test data present in $dest"
  exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "fetch-onnx-testdata: needs apt-get and dpkg (Debian)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc" "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
echo 'deb http://deb.debian.org/debian trixie main' >"$work/etc/sources.list"
APT=(-o Dir::Etc::SourceList="$work/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
     -o APT::Sandbox::User=root)
echo "fetch-onnx-testdata: reading trixie's package list (private to $work)"
apt-get -qq "${APT[@]}" update
have=$(apt-cache "${APT[@]}" show libonnx-testdata 2>/dev/null | sed -n 's/^Version: //p' |
       grep "^$VERSION" | head -n 1 || true)
if [ -z "$have" ]; then
  echo "fetch-onnx-testdata: trixie carries no libonnx-testdata $VERSION" >&2
  exit 1
fi
echo "fetch-onnx-testdata: downloading libonnx-testdata $have"
(cd "$work/deb" && apt-get -qq "${APT[@]}" download "libonnx-testdata=$have")
dpkg -x "$work"/deb/libonnx-testdata_*.deb "$work/x"
src=$work/x/usr/share/libonnx-testdata/data
[ -d "$src/node" ] || { echo "fetch-onnx-testdata: the package holds no data/node" >&2; exit 1; }
mkdir -p "$dest"
rm -rf "$dest/data.new"
cp -a "$src" "$dest/data.new"
rm -rf "$dest/data"
mv "$dest/data.new" "$dest/data"
complete || { echo "fetch-onnx-testdata: $dest/data is incomplete after unpacking" >&2; exit 1; }
echo "fetch-onnx-testdata: ONNX $VERSION test data in $dest/data"
