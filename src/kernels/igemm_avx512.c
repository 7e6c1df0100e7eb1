/* The packed integer GEMM on AVX-512 VNNI: vpdpbusd (four u8 x s8 products added into each
 * int32 lane in one instruction; the non-saturating form, so the sums wrap like the scalar
 * kernel's). Entered only from igemm.c after kiln_igemm_isa_ok(KILN_ISA_AVX512). */
#include <stdint.h>
#include <string.h>

#include "kernels/igemm.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512VNNI__)
#error "igemm_avx512.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

#define IG_CAT_(a, b) a##b
#define IG_CAT(a, b) IG_CAT_(a, b)
#define VEC __m512i
#define LANES 16
#define ZERO() _mm512_setzero_si512()
#define LOAD(p) _mm512_loadu_si512((const void *)(p))
#define STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define ADD(x, y) _mm512_add_epi32((x), (y))
#define SUB(x, y) _mm512_sub_epi32((x), (y))
#define MUL(x, y) _mm512_mullo_epi32((x), (y))
#define BCAST32(v) _mm512_set1_epi32(v)
#define BOP __m512i
#define AOP __m512i
#define PREP_B(p) LOAD(p)
#define PREP_A(v) _mm512_set1_epi32(v)
#define IG_ROWS 4

/* B unsigned, A signed */
#define DOT(acc, a, b) _mm512_dpbusd_epi32((acc), (b), (a))
#define IG_NAME igemm_vnni_bu
#include "kernels/igemm_tmpl.h"
#undef DOT
#undef IG_NAME
/* A unsigned, B signed */
#define DOT(acc, a, b) _mm512_dpbusd_epi32((acc), (a), (b))
#define IG_NAME igemm_vnni_au
#include "kernels/igemm_tmpl.h"

void kiln_igemm_kernel_avx512(const kiln_igemm_args *g) {
  if (g->b_unsigned)
    igemm_vnni_bu(g);
  else
    igemm_vnni_au(g);
}
#endif
