/* ai.kiln::Attention's hot path in 512-bit AVX-512: 32 keys / 32 value columns per microkernel
 * step (BK and DVPAD are multiples of it). Compiled with the AVX-512 flags (CMakeLists.txt);
 * entered only through kiln_attn_kernels_get(). */
#include <string.h>

#include "kernels/attention.h"
#include "kernels/vmath.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512DQ__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "attention_avx512.c must be compiled with its ISA flags (CMakeLists.txt)"
#endif
#include <immintrin.h>

#define AT_FN(name) name##_avx512
#define AT_VW 16
#define AT_QB 8
#define AT_FMA(acc, a, b) ((acc) = _mm512_fmadd_ps((a), (b), (acc)))
#define AT_FMA_SPLAT(e, r, c) ((e) = _mm512_fmadd_ps((e), (r), _mm512_set1_ps(c)))
#include "kernels/attention_tiles.h"
#endif
