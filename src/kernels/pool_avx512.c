/* MaxPool rows and global AveragePool planes in AVX-512 (compiled with the AVX-512 flags,
 * CMakeLists.txt; entered only through kiln_pool_simd_get(), src/kernels/pool_f32.c). The
 * same comparisons and additions in the same order as the scalar loops of src/ops/pool.c. */
#include <stdbool.h>
#include <stdint.h>

#include "kernels/pool_f32.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "pool_avx512.c must be compiled with its ISA flags (CMakeLists.txt)"
#endif
#include <immintrin.h>

/* n <= 16 lanes src[j * sw] (sw 1 or 2), reading nothing past src[(n - 1) * sw]. */
static inline __attribute__((always_inline)) __m512 ld_strided16(const float *src, int64_t n, int64_t sw) {
  __mmask16 m = (__mmask16)((1u << n) - 1);
  if (sw == 1) return _mm512_maskz_loadu_ps(m, src);
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  int64_t e = 2 * n - 1; /* elements read: src[0 .. e) */
  __mmask16 lo = (__mmask16)(e >= 16 ? 0xffffu : (1u << e) - 1);
  __mmask16 hi = (__mmask16)(e <= 16 ? 0u : (1u << (e - 16)) - 1);
  __m512 v1 = hi ? _mm512_maskz_loadu_ps(hi, src + 16) : _mm512_setzero_ps();
  return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, src), ev, v1);
}

/* The 3 column taps (dilation 1) of 16 output columns at x stride 2 from row + 0: the even
 * and odd lanes of one pair of loads, and the even lanes of a pair from row + 2 (masks lo, hi
 * and lo2, hi2 read only the elements used). */
static inline __attribute__((always_inline)) void max3_taps_s2(const float *row, __mmask16 lo, __mmask16 hi,
                                                  __mmask16 lo2, __mmask16 hi2, __m512 t[3]) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 l = _mm512_maskz_loadu_ps(lo, row), h = _mm512_maskz_loadu_ps(hi, row + 16);
  t[0] = _mm512_permutex2var_ps(l, ev, h);
  t[1] = _mm512_permutex2var_ps(l, od, h);
  t[2] = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo2, row + 2), ev,
                                _mm512_maskz_loadu_ps(hi2, row + 18));
}

/* MaxPool output columns [c0, c1) of one row whose windows lie wholly inside the input row
 * range (all kw taps valid), taps rows [a0, a1): 16 columns per vector, the same comparisons
 * in the same order as the scalar loop (m = first tap, then x > m ? x : m). Kernel width 3 at
 * x stride 2 and dilation 1 (SqueezeNet, ResNet) loads each row's taps as one pair and a half. */
static void maxpool_row_avx512(const float *xp, float *yr, int64_t W, int64_t h0, int64_t a0, int64_t a1,
                               int64_t dh, int64_t c0, int64_t c1, int64_t sw, int64_t pl, int64_t kw,
                               int64_t dw) {
  const bool k3s2 = kw == 3 && sw == 2 && dw == 1;
  int64_t ox = c0;
  if (k3s2) /* two whole vectors at a time: two independent chains of comparisons */
    for (; ox + 32 <= c1; ox += 32) {
      const float *r0 = xp + (h0 + a0 * dh) * W + ox * 2 - pl;
      __m512 t[3], u[3];
      max3_taps_s2(r0, 0xffff, 0xffff, 0xffff, 0x7fff, t);
      max3_taps_s2(r0 + 32, 0xffff, 0xffff, 0xffff, 0x7fff, u);
      __m512 m = _mm512_max_ps(t[2], _mm512_max_ps(t[1], t[0]));
      __m512 q = _mm512_max_ps(u[2], _mm512_max_ps(u[1], u[0]));
      for (int64_t a = a0 + 1; a < a1; a++) {
        const float *r = xp + (h0 + a * dh) * W + ox * 2 - pl;
        max3_taps_s2(r, 0xffff, 0xffff, 0xffff, 0x7fff, t);
        max3_taps_s2(r + 32, 0xffff, 0xffff, 0xffff, 0x7fff, u);
        m = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], m)));
        q = _mm512_max_ps(u[2], _mm512_max_ps(u[1], _mm512_max_ps(u[0], q)));
      }
      _mm512_storeu_ps(yr + ox, m);
      _mm512_storeu_ps(yr + ox + 16, q);
    }
  for (; ox < c1; ox += 16) {
    int64_t n = c1 - ox < 16 ? c1 - ox : 16, w0 = ox * sw - pl;
    __mmask16 m1 = (__mmask16)((1u << n) - 1);
    __m512 m;
    if (k3s2) { /* taps 0, 1 read the elements [0, 2n); tap 2 the even ones of [2, 2n + 1) */
      __mmask16 lo = (__mmask16)(n >= 8 ? 0xffffu : (1u << (2 * n)) - 1);
      __mmask16 hi = (__mmask16)(n <= 8 ? 0u : (1u << (2 * n - 16)) - 1);
      __mmask16 lo2 = (__mmask16)(n >= 9 ? 0xffffu : (1u << (2 * n - 1)) - 1);
      __mmask16 hi2 = (__mmask16)(n <= 8 ? 0u : (1u << (2 * n - 17)) - 1);
      __m512 t[3];
      max3_taps_s2(xp + (h0 + a0 * dh) * W + w0, lo, hi, lo2, hi2, t);
      m = _mm512_max_ps(t[2], _mm512_max_ps(t[1], t[0]));
      for (int64_t a = a0 + 1; a < a1; a++) {
        max3_taps_s2(xp + (h0 + a * dh) * W + w0, lo, hi, lo2, hi2, t);
        m = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], m)));
      }
    } else {
      m = ld_strided16(xp + (h0 + a0 * dh) * W + w0, n, sw);
      for (int64_t a = a0; a < a1; a++) {
        const float *row = xp + (h0 + a * dh) * W + w0;
        for (int64_t b = 0; b < kw; b++) m = _mm512_max_ps(ld_strided16(row + b * dw, n, sw), m);
      }
    }
    _mm512_mask_storeu_ps(yr + ox, m1, m);
  }
}

/* Kernel 3x3 at stride 2 (dilation 1): output rows oh and oh + 1 together over columns
 * [c0, c1), from input rows h0 .. h0 + 4 (all inside), row h0 + 2 loaded once for both. Each
 * output keeps scalar order: its rows in order, taps 0, 1, 2 in each. */
static void maxpool_2rows_k3s2_avx512(const float *xp, float *y0, float *y1, int64_t W, int64_t h0, int64_t c0,
                                      int64_t c1, int64_t pl) {
  for (int64_t ox = c0; ox < c1; ox += 16) {
    int64_t n = c1 - ox < 16 ? c1 - ox : 16;
    __mmask16 m1 = (__mmask16)((1u << n) - 1);
    __mmask16 lo = (__mmask16)(n >= 8 ? 0xffffu : (1u << (2 * n)) - 1);
    __mmask16 hi = (__mmask16)(n <= 8 ? 0u : (1u << (2 * n - 16)) - 1);
    __mmask16 lo2 = (__mmask16)(n >= 9 ? 0xffffu : (1u << (2 * n - 1)) - 1);
    __mmask16 hi2 = (__mmask16)(n <= 8 ? 0u : (1u << (2 * n - 17)) - 1);
    const float *r = xp + h0 * W + ox * 2 - pl;
    __m512 t[3], a, b;
    max3_taps_s2(r, lo, hi, lo2, hi2, t);
    a = _mm512_max_ps(t[2], _mm512_max_ps(t[1], t[0]));
    max3_taps_s2(r + W, lo, hi, lo2, hi2, t);
    a = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], a)));
    max3_taps_s2(r + 2 * W, lo, hi, lo2, hi2, t);
    a = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], a)));
    b = _mm512_max_ps(t[2], _mm512_max_ps(t[1], t[0]));
    max3_taps_s2(r + 3 * W, lo, hi, lo2, hi2, t);
    b = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], b)));
    max3_taps_s2(r + 4 * W, lo, hi, lo2, hi2, t);
    b = _mm512_max_ps(t[2], _mm512_max_ps(t[1], _mm512_max_ps(t[0], b)));
    _mm512_mask_storeu_ps(y0 + ox, m1, a);
    _mm512_mask_storeu_ps(y1 + ox, m1, b);
  }
}

/* Sums of 4 float planes of n values in double, each exactly as the scalar 8-lane loop of AveragePool's global form (src/ops/pool.c): lane
 * l adds the values i + l (i a multiple of 8), the tail goes to lane 0, then the lanes in order
 * (the four planes are independent chains of additions). */
static void gavg4_avx512(const float *x, int64_t n, double out[4]) {
  __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; k++)
      a[k] = _mm512_add_pd(a[k], _mm512_cvtps_pd(_mm256_loadu_ps(x + k * n + i)));
  for (int k = 0; k < 4; k++) {
    double lane[8], acc = 0;
    _mm512_storeu_pd(lane, a[k]);
    for (int64_t t = i; t < n; t++) lane[0] += x[k * n + t];
    for (int l = 0; l < 8; l++) acc += lane[l];
    out[k] = acc;
  }
}

const kiln_pool_simd kiln_pool_simd_avx512 = {maxpool_row_avx512, maxpool_2rows_k3s2_avx512, gavg4_avx512};
#endif
