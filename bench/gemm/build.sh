#!/usr/bin/env bash
# Build the standalone GEMM benchmark against kiln's sources (no CMake), and against OpenBLAS
# and oneDNN when their development packages are installed (benchmark peers only:
# apt-get install libopenblas-dev libdnnl-dev). Output: bench/gemm/build/gemm_bench.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/build"
mkdir -p "$out"
CC="${CC:-gcc}"
flags=(-O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter
       -I"$root/include" -I"$root/src" -I"$root/tools")
libs=(-lpthread -lm)
# kiln's kernels as objects, each ISA variant file with its flags (src/kernels/isa_flags.cmake)
kobj="$out/kernels"
mkdir -p "$kobj"
for f in "$root"/src/kernels/*.c; do
  isa=()
  case "$f" in
    *_avx512.c) isa=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c) ;;
    *_avx2.c) isa=(-mavx2 -mfma -mf16c) ;;
  esac
  case "$f" in */vec_f32_*) isa+=(-ffp-contract=off) ;; */igemm_avx512.c) isa+=(-mavx512vnni) ;; esac
  "$CC" -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -I"$root/include" -I"$root/src" "${isa[@]}" -c "$f" \
    -o "$kobj/$(basename "$f" .c).o"
done
kernels=("$kobj"/*.o "$root/src/base/threadpool.c" "$root/src/base/status.c")
srcs=("$here/gemm_bench.c" "${kernels[@]}")
if [ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] && [ "${NO_OPENBLAS:-0}" != 1 ]; then
  flags+=(-DHAVE_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread)
  libs+=(-L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas)
  echo "with OpenBLAS"
fi
if [ -f /usr/include/dnnl.h ] && [ "${NO_DNNL:-0}" != 1 ]; then
  flags+=(-DHAVE_DNNL -fopenmp)
  libs+=(-ldnnl)
  echo "with oneDNN"
fi
"$CC" "${flags[@]}" "${srcs[@]}" -o "$out/gemm_bench" "${libs[@]}"
echo "built $out/gemm_bench"
# the convolution benchmark: kiln only
"$CC" -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -I"$root/include" -I"$root/src" \
  "$here/conv_bench.c" "${kernels[@]}" -o "$out/conv_bench" -lpthread -lm
echo "built $out/conv_bench"
# what AMX bf16x3 could do for float32 GEMM (runs only where the CPU has AMX-BF16)
"$CC" -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -I"$root/include" -I"$root/src" \
  "$here/amx_bench.c" "${kernels[@]}" -o "$out/amx_bench" -lpthread -lm
echo "built $out/amx_bench"
# an inverted residual block in one call against its convolutions one by one
"$CC" -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -I"$root/include" -I"$root/src" \
  "$here/block_bench.c" "${kernels[@]}" -o "$out/block_bench" -lpthread -lm
echo "built $out/block_bench"
