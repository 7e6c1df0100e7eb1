/* The packed integer GEMM on AVX2: vpmaddwd (pairs of int16 products summed into int32, exact
 * for |values| <= 255) and vpaddd. Entered only from igemm.c after kiln_cpu_isa() >= AVX2. */
#include <stdint.h>

#include "kernels/igemm.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__)
#error "igemm_avx2.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

#define VEC __m256i
#define LANES 8
#define ZERO() _mm256_setzero_si256()
#define LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define ADD(x, y) _mm256_add_epi32((x), (y))
#define BCAST32(v) _mm256_set1_epi32(v)
#define DOT(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#define IG_NAME igemm_avx2
#include "kernels/igemm_tmpl.h"

void kiln_igemm_packed_avx2(int64_t m, int64_t n, int64_t k2, const int16_t *ap, const int16_t *bp, int32_t *c) {
  igemm_avx2(m, n, k2, ap, bp, c);
}
#endif
