/* MaxPool rows and global AveragePool planes in AVX2 (compiled with the AVX2 flags,
 * isa_flags.cmake; entered only through kiln_pool_simd_get(), src/kernels/pool_f32.c). The
 * same comparisons and additions in the same order as the scalar loops of src/ops/pool.c. */
#include <stdbool.h>
#include <stdint.h>

#include "kernels/pool_f32.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__)
#error "pool_avx2.c must be compiled with its ISA flags (isa_flags.cmake)"
#endif
#include <immintrin.h>

#define PV static inline __attribute__((always_inline))

static const int32_t p8_mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* Lanes [0, n) on, n in 0..8. */
PV __m256i mask8(int64_t n) { return _mm256_loadu_si256((const __m256i *)(p8_mask_table + 8 - n)); }

/* Elements [0, n) of src (n <= 8; nothing else read). */
PV __m256 ld_n(const float *src, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, mask8(n));
}

/* The even (odd: 1) lanes of src[0 .. 16) in order, of which only [0, e) are read. */
PV __m256 ld_half(const float *src, int64_t e, int odd) {
  __m256 lo = ld_n(src, e < 8 ? e : 8);
  __m256 hi = e > 8 ? ld_n(src + 8, e - 8) : _mm256_setzero_ps();
  __m256 t = odd ? _mm256_shuffle_ps(lo, hi, 0xDD) : _mm256_shuffle_ps(lo, hi, 0x88);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xd8));
}

/* n <= 8 lanes src[j * sw] (sw 1 or 2), reading nothing past src[(n - 1) * sw]. */
PV __m256 ld_strided8(const float *src, int64_t n, int64_t sw) {
  return sw == 1 ? ld_n(src, n) : ld_half(src, 2 * n - 1, 0);
}

/* The 3 column taps (dilation 1) of n <= 8 output columns at x stride 2 from row + 0. */
PV void max3_taps_s2(const float *row, int64_t n, __m256 t[3]) {
  __m256 lo = ld_n(row, 2 * n < 8 ? 2 * n : 8);
  __m256 hi = n > 4 ? ld_n(row + 8, 2 * n - 8) : _mm256_setzero_ps();
  t[0] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
  t[1] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xd8));
  t[2] = ld_half(row + 2, 2 * n - 1, 0);
}

PV void store_n(float *dst, int64_t n, __m256 v) {
  if (n >= 8)
    _mm256_storeu_ps(dst, v);
  else
    _mm256_maskstore_ps(dst, mask8(n), v);
}

/* As maxpool_row_avx512 (pool_avx512.c), 8 columns per vector: m = first tap, then for every
 * tap in scalar order m = x > m ? x : m (_mm256_max_ps(x, m)). */
static void maxpool_row_avx2(const float *xp, float *yr, int64_t W, int64_t h0, int64_t a0, int64_t a1,
                             int64_t dh, int64_t c0, int64_t c1, int64_t sw, int64_t pl, int64_t kw,
                             int64_t dw) {
  const bool k3s2 = kw == 3 && sw == 2 && dw == 1;
  for (int64_t ox = c0; ox < c1; ox += 8) {
    int64_t n = c1 - ox < 8 ? c1 - ox : 8, w0 = ox * sw - pl;
    __m256 m;
    if (k3s2) {
      __m256 t[3];
      max3_taps_s2(xp + (h0 + a0 * dh) * W + w0, n, t);
      m = _mm256_max_ps(t[2], _mm256_max_ps(t[1], t[0]));
      for (int64_t a = a0 + 1; a < a1; a++) {
        max3_taps_s2(xp + (h0 + a * dh) * W + w0, n, t);
        m = _mm256_max_ps(t[2], _mm256_max_ps(t[1], _mm256_max_ps(t[0], m)));
      }
    } else {
      m = ld_strided8(xp + (h0 + a0 * dh) * W + w0, n, sw);
      for (int64_t a = a0; a < a1; a++) {
        const float *row = xp + (h0 + a * dh) * W + w0;
        for (int64_t b = 0; b < kw; b++) m = _mm256_max_ps(ld_strided8(row + b * dw, n, sw), m);
      }
    }
    store_n(yr + ox, n, m);
  }
}

/* As maxpool_2rows_k3s2_avx512: output rows y0, y1 over [c0, c1) from input rows h0 .. h0 + 4,
 * row h0 + 2 loaded once for both; each output keeps scalar order. */
static void maxpool_2rows_k3s2_avx2(const float *xp, float *y0, float *y1, int64_t W, int64_t h0, int64_t c0,
                                    int64_t c1, int64_t pl) {
  for (int64_t ox = c0; ox < c1; ox += 8) {
    int64_t n = c1 - ox < 8 ? c1 - ox : 8;
    const float *r = xp + h0 * W + ox * 2 - pl;
    __m256 t[3], a, b;
    max3_taps_s2(r, n, t);
    a = _mm256_max_ps(t[2], _mm256_max_ps(t[1], t[0]));
    max3_taps_s2(r + W, n, t);
    a = _mm256_max_ps(t[2], _mm256_max_ps(t[1], _mm256_max_ps(t[0], a)));
    max3_taps_s2(r + 2 * W, n, t);
    a = _mm256_max_ps(t[2], _mm256_max_ps(t[1], _mm256_max_ps(t[0], a)));
    b = _mm256_max_ps(t[2], _mm256_max_ps(t[1], t[0]));
    max3_taps_s2(r + 3 * W, n, t);
    b = _mm256_max_ps(t[2], _mm256_max_ps(t[1], _mm256_max_ps(t[0], b)));
    max3_taps_s2(r + 4 * W, n, t);
    b = _mm256_max_ps(t[2], _mm256_max_ps(t[1], _mm256_max_ps(t[0], b)));
    store_n(y0 + ox, n, a);
    store_n(y1 + ox, n, b);
  }
}

/* As gavg4_avx512: lane l of 8 adds the values i + l (lanes 0-3 in lo, 4-7 in hi), the tail
 * goes to lane 0, then the lanes in order. */
static void gavg4_avx2(const float *x, int64_t n, double out[4]) {
  __m256d lo[4], hi[4];
  for (int k = 0; k < 4; k++) lo[k] = hi[k] = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; k++) {
      __m256 v = _mm256_loadu_ps(x + k * n + i);
      lo[k] = _mm256_add_pd(lo[k], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi[k] = _mm256_add_pd(hi[k], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
  for (int k = 0; k < 4; k++) {
    double lane[8], acc = 0;
    _mm256_storeu_pd(lane, lo[k]);
    _mm256_storeu_pd(lane + 4, hi[k]);
    for (int64_t t = i; t < n; t++) lane[0] += x[k * n + t];
    for (int l = 0; l < 8; l++) acc += lane[l];
    out[k] = acc;
  }
}

const kiln_pool_simd kiln_pool_simd_avx2 = {maxpool_row_avx2, maxpool_2rows_k3s2_avx2, gavg4_avx2};
#endif
