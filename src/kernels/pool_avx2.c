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

/* Widest plane maxpool_plane_k3s2_avx2 takes (its per-vector masks are on the stack). */
enum { PLANE_MAX_W = 1024 };

/* As plain_chk (pool_avx512.c): *nan ORs in its NaN lanes, *lo the int32 minimum of its bits. */
PV void plain_chk(__m256 a, __m256 *nan, __m256i *lo) {
  *nan = _mm256_or_ps(*nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  *lo = _mm256_min_epi32(*lo, _mm256_castps_si256(a));
}

/* As vmax_pair (pool_avx512.c), 8 columns under the lane mask m. */
PV void vmax_pair(const float *r, int64_t W, __m256i m, int two, __m256 *a, __m256 *b, __m256 *nan, __m256i *lo) {
  __m256 x0 = _mm256_maskload_ps(r, m), x1 = _mm256_maskload_ps(r + W, m), x2 = _mm256_maskload_ps(r + 2 * W, m);
  plain_chk(x0, nan, lo);
  plain_chk(x1, nan, lo);
  *a = _mm256_max_ps(_mm256_max_ps(x0, x1), x2);
  if (!two) return;
  __m256 x3 = _mm256_maskload_ps(r + 3 * W, m);
  plain_chk(x2, nan, lo);
  plain_chk(x3, nan, lo);
  *b = _mm256_max_ps(_mm256_max_ps(x2, x3), _mm256_maskload_ps(r + 4 * W, m));
}

/* The even lanes of v0:v1 in order. */
PV __m256 even8(__m256 v0, __m256 v1) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0x88)), 0xd8));
}

/* Lanes 2j, 2j + 1, 2j + 2 of the column maxima v0:v1 (even lanes e) and the next pair's
 * even lanes en. */
PV __m256 hmax3(__m256 e, __m256 v0, __m256 v1, __m256 en) {
  __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0xdd)), 0xd8));
  __m256 sh = _mm256_permutevar8x32_ps(_mm256_blend_ps(e, en, 0x01), _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0));
  return _mm256_max_ps(_mm256_max_ps(e, o), sh);
}

/* As maxpool_plane_k3s2_avx512, 8 columns per vector. */
static int maxpool_plane_k3s2_avx2(const float *xp, float *yp, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  (void)H;
  if (W > PLANE_MAX_W) return 0;
  int64_t nj = (OW + 7) / 8, ol = OW - 8 * (nj - 1);
  __m256i vm[PLANE_MAX_W / 8 + 4]; /* the columns of vector k inside the row */
  for (int64_t k = 0; k < 2 * nj + 2 || 8 * k < W; k++) {
    int64_t n = W - 8 * k;
    vm[k] = mask8(n >= 8 ? 8 : n > 0 ? n : 0);
  }
  __m256 nan = _mm256_setzero_ps();
  __m256i lo = _mm256_set1_epi32(INT32_MAX);
  for (int64_t oy = 0; oy < OH; oy += 2) {
    int two = oy + 1 < OH;
    const float *r = xp + 2 * oy * W;
    float *y = yp + oy * OW;
    __m256 a0, a1, b0 = _mm256_setzero_ps(), b1 = b0;
    vmax_pair(r, W, vm[0], two, &a0, &b0, &nan, &lo);
    vmax_pair(r + 8, W, vm[1], two, &a1, &b1, &nan, &lo);
    __m256 ea = even8(a0, a1), eb = even8(b0, b1);
    for (int64_t j = 0; j < nj; j++) {
      __m256 pa0 = a0, pa1 = a1, pb0 = b0, pb1 = b1;
      vmax_pair(r + 16 * j + 16, W, vm[2 * j + 2], two, &a0, &b0, &nan, &lo);
      vmax_pair(r + 16 * j + 24, W, vm[2 * j + 3], two, &a1, &b1, &nan, &lo);
      __m256 ena = even8(a0, a1), enb = even8(b0, b1);
      int64_t n = j + 1 < nj ? 8 : ol;
      store_n(y + 8 * j, n, hmax3(ea, pa0, pa1, ena));
      if (two) store_n(y + OW + 8 * j, n, hmax3(eb, pb0, pb1, enb));
      ea = ena;
      eb = enb;
    }
  }
  /* the last row the windows read (2 OH), which no output row checked */
  const float *last = xp + 2 * OH * W;
  for (int64_t k = 0; 8 * k < W; k++) plain_chk(_mm256_maskload_ps(last + 8 * k, vm[k]), &nan, &lo);
  __m128i l4 = _mm_min_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
  l4 = _mm_min_epi32(l4, _mm_shuffle_epi32(l4, 0x4e));
  l4 = _mm_min_epi32(l4, _mm_shuffle_epi32(l4, 0xb1));
  return !_mm256_movemask_ps(nan) && _mm_cvtsi128_si32(l4) != INT32_MIN;
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

const kiln_pool_simd kiln_pool_simd_avx2 = {maxpool_row_avx2, maxpool_2rows_k3s2_avx2, maxpool_plane_k3s2_avx2,
                                            gavg4_avx2};
#endif
