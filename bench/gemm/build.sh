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
srcs=("$here/gemm_bench.c" "$root"/src/kernels/*.c "$root/src/base/threadpool.c"
      "$root/src/base/status.c")
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
  "$here/conv_bench.c" "$root"/src/kernels/*.c "$root/src/base/threadpool.c" \
  "$root/src/base/status.c" -o "$out/conv_bench" -lpthread -lm
echo "built $out/conv_bench"
# what AMX bf16x3 could do for float32 GEMM (runs only where the CPU has AMX-BF16)
"$CC" -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -I"$root/include" -I"$root/src" \
  "$here/amx_bench.c" "$root"/src/kernels/*.c "$root/src/base/threadpool.c" \
  "$root/src/base/status.c" -o "$out/amx_bench" -lpthread -lm
echo "built $out/amx_bench"
