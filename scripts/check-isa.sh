#!/usr/bin/env bash
# No instruction beyond the CPU's ISA runs, whatever CPU this machine has. Usage:
#   scripts/check-isa.sh [BUILD_DIR [STATIC_ONLY_DIR...]]
#   BUILD_DIR (default build): a built release tree (kiln, tests); STATIC_ONLY_DIR: other built
#   trees (the ASan build) that get step 1 only.
# 1. static: every exported function of libkiln.a that holds AVX / AVX-512 / AMX instructions
#    is an ISA variant (named *_avx2, *_avx512, or AMX-only), so a public entry point is plain
#    C that checks kiln_cpu_isa() before it calls one; and src/ outside src/kernels/ has no
#    ISA-specific code (target attributes, target_clones, __builtin_cpu_supports, intrinsics).
# 2. the emulator (QEMU user mode, Debian's qemu-user) raises SIGILL on AVX-512 for the AVX2
#    CPU model and on AVX2/FMA for the baseline one: the runs below would catch a leak.
# 3. on an emulated AVX2+FMA CPU without AVX-512 (Haswell): unit tests of the dispatched
#    kernels, the ONNX conformance suite, and real models (tests/real) at levels 0, 1 and 2,
#    their outputs checked against ONNX Runtime (run natively) within 1e-4.
# 4. on an emulated x86-64 baseline CPU (qemu64: neither AVX nor FMA): the same models at
#    level 2 and the conformance node tests of the SIMD-dispatched ops.
# AddressSanitizer cannot run under QEMU user mode (its 16 TiB shadow mapping is backed by
# QEMU's page tables and exhausts memory), so the ASan build gets the static check only (it
# flags the AVX-512 body of an exported function whatever the prologue does).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
AVX2_CPU="Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid" # minus what TCG cannot emulate
BASE_CPU="qemu64"
command -v qemu-x86_64 >/dev/null || { echo "check-isa: qemu-x86_64 missing (scripts/install-deps.sh --test)" >&2; exit 1; }
[ -x "$build/kiln" ] || { echo "check-isa: no $build/kiln (build first)" >&2; exit 1; }
if [ "$(uname -m)" != x86_64 ]; then echo "check-isa: not x86-64, nothing to check"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
step() { echo "-- check-isa [$((SECONDS - t0)) s]: $*"; }
fail() { echo "check-isa: FAIL: $*" >&2; exit 1; }

for d in "$build" "${@:2}"; do
  step "static: exported functions with wide instructions in $d/libkiln.a"
  scripts/isa-wide-exports.sh "$d/libkiln.a" > "$tmp/wide.txt"
  bad=$(grep -vE '_(avx2|avx512)$|^kiln_amx_(mma|tiles_on|tiles_off)$' "$tmp/wide.txt" || true)
  [ -z "$bad" ] || fail "exported functions of $d compiled for a wider ISA (make them plain C that checks kiln_cpu_isa(), and move the variant into a *_avx2.c / *_avx512.c file): $bad"
  echo "   variants: $(tr '\n' ' ' < "$tmp/wide.txt")"
done
bad=$(grep -rnE '__attribute__\(\(target|target_clones|__builtin_cpu_supports|getenv\("KILN_(ISA|AMX)|immintrin|_mm(256|512)?_' src \
        --include='*.c' --include='*.h' | grep -v '^src/kernels/' \
        | grep -vE '^src/base/threadpool\.c:.*(immintrin|_mm_pause)' || true)
[ -z "$bad" ] || fail "ISA-specific code outside src/kernels/:
$bad"

step "the emulator rejects what the CPU models lack"
cat > "$tmp/probe.c" <<'EOF'
#include <string.h>
int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "avx512")) __asm__ volatile("vaddps %%zmm0, %%zmm0, %%zmm0" ::: "xmm0");
  if (argc > 1 && !strcmp(argv[1], "fma")) __asm__ volatile("vfmadd231ps %%ymm0, %%ymm0, %%ymm0" ::: "xmm0");
  return 0;
}
EOF
cc -O0 "$tmp/probe.c" -o "$tmp/probe"
probe() { set +e; qemu-x86_64 -cpu "$1" "$tmp/probe" "$2" 2>/dev/null; local rc=$?; set -e; echo $rc; }
[ "$(probe "$AVX2_CPU" none)" = 0 ] || fail "the probe does not run under $AVX2_CPU"
[ "$(probe "$AVX2_CPU" fma)" = 0 ] || fail "$AVX2_CPU does not emulate AVX2+FMA"
[ "$(probe "$AVX2_CPU" avx512)" = 132 ] || fail "$AVX2_CPU runs AVX-512 (SIGILL expected): the test would prove nothing"
[ "$(probe "$BASE_CPU" fma)" = 132 ] || fail "$BASE_CPU runs AVX2/FMA (SIGILL expected)"

# kiln under the emulator, for scripts that take a kiln binary
for cpu in avx2 base; do
  model=$AVX2_CPU
  [ $cpu = base ] && model=$BASE_CPU
  printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$model" "$(realpath "$build/kiln")" > "$tmp/kiln-$cpu"
  chmod +x "$tmp/kiln-$cpu"
done
level=$("$tmp/kiln-avx2" --version 2>/dev/null | sed -n 's/^cpu: \([a-z0-9]*\) .*/\1/p')
[ "$level" = avx2 ] || fail "kiln under $AVX2_CPU runs at '$level', want avx2"
level=$("$tmp/kiln-base" --version 2>/dev/null | sed -n 's/^cpu: \([a-z0-9]*\) .*/\1/p')
[ "$level" = scalar ] || fail "kiln under $BASE_CPU runs at '$level', want scalar"

emu() { local cpu=$1; shift; qemu-x86_64 -cpu "$cpu" "$@"; }
step "AVX2 CPU: unit tests (dwconv, conv_pool, gemm_amx, threadpool; the GEMM kernels run in what follows)"
for t in test_dwconv test_conv_pool test_gemm_amx test_threadpool test_igemm test_quant_u8; do
  (cd "$build" && KILN_TEST_WRAPPER="qemu-x86_64 -cpu $AVX2_CPU" emu "$AVX2_CPU" "tests/$t" > "$tmp/$t.log" 2>&1) \
    || { tail -20 "$tmp/$t.log"; fail "$t under $AVX2_CPU"; }
  tail -1 "$tmp/$t.log"
done

step "AVX2 CPU: ONNX conformance"
expected=tests/conformance/known_failures.txt
emu "$AVX2_CPU" "$build/tests/kiln_conformance" --expected "$expected" > "$tmp/conf.log" 2>&1 \
  || { tail -20 "$tmp/conf.log"; fail "conformance under $AVX2_CPU"; }
tail -2 "$tmp/conf.log"

models=$build/real-models
[ -f "$models/squeezenet1_1/model.onnx" ] || /usr/bin/python3 tests/real/make_models.py "$models" >/dev/null 2>&1
mkdir -p "$tmp/models"
for m in squeezenet1_1 bert_encoder segnet_dynquant; do ln -s "$(realpath "$models/$m")" "$tmp/models/$m"; done
for lv in 0 1 2; do
  step "AVX2 CPU: squeezenet1_1, bert_encoder and segnet_dynquant at level $lv against ONNX Runtime"
  /usr/bin/python3 tests/real/compare_ort.py "$tmp/models" --kiln "$tmp/kiln-avx2" --level $lv \
    || fail "models under $AVX2_CPU at level $lv"
done

step "baseline CPU: conformance node tests of the dispatched ops"
for f in test_conv test_softmax test_layer_normalization test_gelu test_maxpool test_averagepool test_globalaveragepool \
         test_matmul test_gemm test_attention test_relu test_sigmoid test_dynamicquantizelinear test_convinteger \
         test_qlinearconv test_qlinearmatmul; do
  emu "$BASE_CPU" "$build/tests/kiln_conformance" --filter "node/$f" --expected "$expected" > "$tmp/conf-$f.log" 2>&1 \
    || { tail -20 "$tmp/conf-$f.log"; fail "conformance $f under $BASE_CPU"; }
done
grep -h ' passed, ' "$tmp"/conf-test_*.log | awk '{p += $1; f += $3} END {print "   " p " passed, " f " failed (known)"}'
step "baseline CPU: the models at level 2 against ONNX Runtime"
/usr/bin/python3 tests/real/compare_ort.py "$tmp/models" --kiln "$tmp/kiln-base" --level 2 \
  || fail "models under $BASE_CPU"
step "passed"
