/* The packed integer GEMM on AVX-512 VNNI: vpdpwssd (pairs of int16 products added into int32
 * lanes in one instruction; the non-saturating form, exact for |values| <= 255). Entered only
 * from igemm.c after kiln_igemm_has_vnni(). */
#include <stdint.h>

#include "kernels/igemm.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512VNNI__)
#error "igemm_avx512.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

#define VEC __m512i
#define LANES 16
#define ZERO() _mm512_setzero_si512()
#define LOAD(p) _mm512_loadu_si512((const void *)(p))
#define STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define ADD(x, y) _mm512_add_epi32((x), (y))
#define BCAST32(v) _mm512_set1_epi32(v)
#define DOT(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#define IG_NAME igemm_vnni
#include "kernels/igemm_tmpl.h"

void kiln_igemm_packed_avx512(int64_t m, int64_t n, int64_t k2, const int16_t *ap, const int16_t *bp, int32_t *c) {
  igemm_vnni(m, n, k2, ap, bp, c);
}
#endif
