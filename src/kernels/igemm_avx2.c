/* The packed integer GEMM on AVX2: each lane's four bytes widened to two pairs of int16 (bytes
 * 0, 2 and 1, 3) and multiplied with vpmaddwd, pairs of products that cannot saturate (vpmaddubsw
 * would saturate its sums of two u8 x s8 products). Entered only from igemm.c after
 * kiln_igemm_isa_ok(KILN_ISA_AVX2). */
#include <stdint.h>
#include <string.h>

#include "kernels/igemm.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__)
#error "igemm_avx2.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

#define IG_CAT_(a, b) a##b
#define IG_CAT(a, b) IG_CAT_(a, b)
#define VEC __m256i
#define LANES 8
#define ZERO() _mm256_setzero_si256()
#define LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define ADD(x, y) _mm256_add_epi32((x), (y))
#define SUB(x, y) _mm256_sub_epi32((x), (y))
#define MUL(x, y) _mm256_mullo_epi32((x), (y))
#define BCAST32(v) _mm256_set1_epi32(v)
#define IG_ROWS 4

typedef struct pair16 {
  __m256i even, odd; /* bytes 0, 2 and 1, 3 of each lane as int16 */
} pair16;

static inline pair16 widen_u8(__m256i x) {
  return (pair16){_mm256_and_si256(x, _mm256_set1_epi16(0xff)), _mm256_srli_epi16(x, 8)};
}
static inline pair16 widen_s8(__m256i x) {
  return (pair16){_mm256_srai_epi16(_mm256_slli_epi16(x, 8), 8), _mm256_srai_epi16(x, 8)};
}
static inline __m256i dot_pairs(__m256i acc, pair16 a, pair16 b) {
  return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a.even, b.even), _mm256_madd_epi16(a.odd, b.odd)));
}

#define BOP pair16
#define AOP pair16
#define DOT(acc, a, b) dot_pairs((acc), (a), (b))

/* B unsigned, A signed */
#define PREP_B(p) widen_u8(LOAD(p))
#define PREP_A(v) widen_s8(_mm256_set1_epi32(v))
#define IG_NAME igemm_avx2_bu
#include "kernels/igemm_tmpl.h"
#undef PREP_B
#undef PREP_A
#undef IG_NAME
/* A unsigned, B signed */
#define PREP_B(p) widen_s8(LOAD(p))
#define PREP_A(v) widen_u8(_mm256_set1_epi32(v))
#define IG_NAME igemm_avx2_au
#include "kernels/igemm_tmpl.h"

void kiln_igemm_kernel_avx2(const kiln_igemm_args *g) {
  if (g->b_unsigned)
    igemm_avx2_bu(g);
  else
    igemm_avx2_au(g);
}
#endif
