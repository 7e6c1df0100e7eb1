/* The memory-bound float32 kernels for AVX2 + FMA (compiled with -mavx2 -mfma, CMakeLists.txt;
 * entered only through vec_f32.c), with GELU's erf as a rational function in intrinsics. */
#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "vec_f32_avx2.c must be compiled with its ISA flags (CMakeLists.txt)"
#endif
#include <immintrin.h>
#include <stddef.h>

static void gelu_erf_avx2(float *x, size_t n);
#define VEC_FN(name) name##_avx2
#define VEC_GELU_ERF gelu_erf_avx2
#include "kernels/vec_f32_tmpl.h"

static void gelu_erf_avx2(float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i), z = _mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f));
    z = _mm256_min_ps(_mm256_max_ps(z, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
    __m256 z2 = _mm256_mul_ps(z, z), p = _mm256_set1_ps(erf_num[6]), q = _mm256_set1_ps(erf_den[4]);
    for (int k = 5; k >= 0; k--) p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(erf_num[k]));
    for (int k = 3; k >= 0; k--) q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(erf_den[k]));
    __m256 r = _mm256_rcp_ps(q);
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(q, r, _mm256_set1_ps(2.0f)));
    __m256 h = _mm256_mul_ps(v, _mm256_set1_ps(0.5f));
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(h, _mm256_mul_ps(_mm256_mul_ps(z, p), r), h));
  }
  gelu_erf_scalar_avx2(x + i, n - i);
}
#endif
