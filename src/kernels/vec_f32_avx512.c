/* The memory-bound float32 kernels for AVX-512 (compiled with the AVX-512 flags,
 * CMakeLists.txt; entered only through vec_f32.c), with GELU's erf as a rational function in
 * intrinsics. */
#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "vec_f32_avx512.c must be compiled with its ISA flags (CMakeLists.txt)"
#endif
#include <immintrin.h>
#include <stddef.h>

static void gelu_erf_avx512(float *x, size_t n);
#define VEC_FN(name) name##_avx512
#define VEC_GELU_ERF gelu_erf_avx512
#include "kernels/vec_f32_tmpl.h"

static __m512 gelu16(__m512 v) {
  __m512 z = _mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f));
  z = _mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-4.0f)), _mm512_set1_ps(4.0f));
  __m512 z2 = _mm512_mul_ps(z, z), p = _mm512_set1_ps(erf_num[6]), q = _mm512_set1_ps(erf_den[4]);
  for (int k = 5; k >= 0; k--) p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(erf_num[k]));
  for (int k = 3; k >= 0; k--) q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(erf_den[k]));
  __m512 r = _mm512_rcp14_ps(q); /* q <= erf_den[0] < 0: never 0 */
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.0f)));
  __m512 h = _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
  return _mm512_fmadd_ps(h, _mm512_mul_ps(_mm512_mul_ps(z, p), r), h);
}

static void gelu_erf_avx512(float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

#endif
