#!/usr/bin/env bash
# The install tree serves C users: `cmake --install` into a temporary DESTDIR, then the README's
# C example is built against the installed headers and libraries through pkg-config and through
# find_package(kiln), shared and static, and run. libkiln.so exports the public API only.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
# (grep reads here-strings, not pipes: under pipefail a grep -q that stops early makes the
# writer die of SIGPIPE and the check fail by chance)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$tmp/stage cmake --install "$build" --prefix /usr >/dev/null
root=$tmp/stage/usr
libdir=$(dirname "$(find "$root" -name libkiln.a | head -n 1)")
[ -d "$libdir" ] || fail "libkiln.a not installed"
for f in "$root/include/kiln/kiln.h" "$root/include/kiln/kiln_op.h" "$root/bin/kiln" \
         "$libdir/libkiln.so" "$libdir/pkgconfig/kiln.pc" "$libdir/cmake/kiln/kilnConfig.cmake"; do
  [ -e "$f" ] || fail "not installed: ${f#$tmp/stage}"
done
echo "installed into DESTDIR: ${libdir#$tmp/stage}"

# soname and exports
soname=$(readelf -d "$libdir/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libkiln.so.0" ] || fail "soname is '$soname', expected libkiln.so.0"
[ -e "$libdir/$soname" ] || fail "$soname missing"
exports=$(nm -D --defined-only "$libdir/libkiln.so" | awk '{print $3}' | grep -v '^KILN_0$' | sed 's/@.*//')
n=$(echo "$exports" | wc -l)
bad=$(echo "$exports" | grep -v '^kiln_' || true)
[ -z "$bad" ] || fail "libkiln.so exports non-kiln symbols: $(echo $bad | head -c 300)"
for f in kiln_session_create kiln_session_run kiln_model_load kiln_tensor_free; do
  grep -qx "$f" <<<"$exports" || fail "libkiln.so does not export $f"
done
grep -qx kiln_fail <<<"$exports" && fail "libkiln.so exports the internal kiln_fail"
echo "libkiln.so ($soname): $n exported symbols, all kiln_*"

# the README's C example
sed -n '/^```c$/,/^```$/p' "$src/README.md" | sed '1d;$d' >"$tmp/app.c"
[ -s "$tmp/app.c" ] || fail "no C example in README.md"
check_run() { # name exe: the example runs from the source tree and prints a probability
  local out
  out=$(cd "$src" && LD_LIBRARY_PATH=$libdir "$2" 2>&1) || fail "$1: example failed: $out"
  grep -q "class 0 probability 0\.[0-9]" <<<"$out" || fail "$1: unexpected output: $out"
  echo "$1: $out"
}
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -std=c11 -Wall -Werror "$tmp/app.c" $(pkg-config --cflags --libs kiln) -o "$tmp/pc_shared"
grep -q 'libkiln.so.0 =>' <<<"$(ldd "$tmp/pc_shared")" || fail "pkg-config shared: not linked to libkiln.so.0"
check_run "pkg-config, shared" "$tmp/pc_shared"
cc -std=c11 -Wall -Werror "$tmp/app.c" $(pkg-config --cflags kiln) \
   $(pkg-config --static --libs kiln | sed 's/-lkiln\b/-l:libkiln.a/') -o "$tmp/pc_static"
grep -q libkiln <<<"$(ldd "$tmp/pc_static")" && fail "pkg-config static: linked to libkiln.so"
check_run "pkg-config, static" "$tmp/pc_static"

mkdir -p "$tmp/proj"
cp "$tmp/app.c" "$tmp/proj/app.c"
cat >"$tmp/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(kiln_app C)
find_package(kiln 0.1 REQUIRED)
add_executable(app_shared app.c)
target_link_libraries(app_shared PRIVATE kiln::kiln)
add_executable(app_static app.c)
target_link_libraries(app_static PRIVATE kiln::kiln_static)
CM
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$root" >/dev/null ||
  fail "find_package(kiln) configure failed"
cmake --build "$tmp/proj/build" >/dev/null || fail "find_package(kiln) build failed"
grep -q 'libkiln.so.0 =>' <<<"$(ldd "$tmp/proj/build/app_shared")" || fail "kiln::kiln is not libkiln.so"
grep -q libkiln <<<"$(ldd "$tmp/proj/build/app_static")" && fail "kiln::kiln_static linked to libkiln.so"
check_run "find_package, kiln::kiln" "$tmp/proj/build/app_shared"
check_run "find_package, kiln::kiln_static" "$tmp/proj/build/app_static"
"$root/bin/kiln" --help >/dev/null || fail "installed kiln --help failed"
echo "install tree OK"
