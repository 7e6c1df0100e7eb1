/* DynamicQuantizeLinear's passes on AVX2 (see quant_u8.h); entered only from quant_u8.c after
 * kiln_cpu_isa() == AVX2. NaN as in quant_u8_avx512.c; the tail runs in scalar code with the
 * scalar loop's operations. */
#include <math.h>
#include <stdint.h>

#include "kernels/quant_u8.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__)
#error "quant_u8_avx2.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

static float hmin(__m256 v) {
  __m128 a = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_min_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_min_ss(a, _mm_shuffle_ps(a, a, 1)));
}
static float hmax(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(a, _mm_shuffle_ps(a, a, 1)));
}

void kiln_minmax_f32_avx2(const float *x, int64_t n, float *mn, float *mx) {
  __m256 lo = _mm256_setzero_ps(), hi = lo;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(x + i);
    lo = _mm256_min_ps(a, lo);
    hi = _mm256_max_ps(a, hi);
  }
  float l = hmin(lo), h = hmax(hi);
  for (; i < n; i++) {
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  *mn = l;
  *mx = h;
}

void kiln_quantize_u8_f32_avx2(const float *x, int64_t n, float scale, float zp, uint8_t *y) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zp), top = _mm256_set1_ps(255), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), s);
    v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
    __m128i q = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
        _mm256_shuffle_epi8(_mm256_cvtps_epi32(v), _mm256_set1_epi32(0x0c080400)), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0)));
    _mm_storel_epi64((__m128i *)(void *)(y + i), q);
  }
  for (; i < n; i++) {
    float v = rintf(x[i] / scale) + zp;
    y[i] = (uint8_t)(v > 0 ? (v < 255 ? v : 255) : 0);
  }
}
#endif
