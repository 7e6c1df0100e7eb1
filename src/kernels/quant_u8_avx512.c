/* DynamicQuantizeLinear's passes on AVX-512 (see quant_u8.h); entered only from quant_u8.c after
 * kiln_cpu_isa() >= AVX512. vminps / vmaxps return their second operand when the first is NaN,
 * as the scalar comparisons keep the running value; the tail runs masked with zeros, which the
 * range already holds. */
#include <math.h>
#include <stdint.h>

#include "kernels/quant_u8.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512BW__)
#error "quant_u8_avx512.c must be compiled with its ISA flags (src/kernels/isa_flags.cmake)"
#endif
#include <immintrin.h>

void kiln_minmax_f32_avx512(const float *x, int64_t n, float *mn, float *mx) {
  __m512 lo0 = _mm512_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    lo0 = _mm512_min_ps(a, lo0);
    hi0 = _mm512_max_ps(a, hi0);
    lo1 = _mm512_min_ps(b, lo1);
    hi1 = _mm512_max_ps(b, hi1);
  }
  for (; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 a = _mm512_maskz_loadu_ps(k, x + i);
    lo0 = _mm512_min_ps(a, lo0);
    hi0 = _mm512_max_ps(a, hi0);
  }
  *mn = _mm512_reduce_min_ps(_mm512_min_ps(lo0, lo1));
  *mx = _mm512_reduce_max_ps(_mm512_max_ps(hi0, hi1));
}

void kiln_quantize_u8_f32_avx512(const float *x, int64_t n, float scale, float zp, uint8_t *y) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp), top = _mm512_set1_ps(255), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), s);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    v = _mm512_min_ps(_mm512_max_ps(v, zero), top); /* NaN: vmaxps gives 0 */
    _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
}
#endif
