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

/* Widest plane maxpool_plane_k3s2 takes (its per-vector masks are on the stack). */
enum { PLANE_MAX_W = 1024 };

/* The NaN and -0.0 checks of maxpool_plane_k3s2 on one vector: *nan gets its NaN lanes, *lo
 * the int32 minimum of its bits (-0.0 is the least int32 of all). */
static inline __attribute__((always_inline)) void plain_chk(__m512 a, __mmask16 *nan, __m512i *lo) {
  *nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  *lo = _mm512_min_epi32(*lo, _mm512_castps_si512(a));
}

/* Columns [16 k, 16 k + 16) of rows r .. r + 4 (row stride W, lanes outside mask m: +0.0):
 * *a the column maxima of rows 0-2, *b those of rows 2-4 (rows 3-4 only where two). Rows
 * 0-3 go into the checks. */
static inline __attribute__((always_inline)) void vmax_pair(const float *r, int64_t W, __mmask16 m, int two,
                                                            __m512 *a, __m512 *b, __mmask16 *nan, __m512i *lo) {
  __m512 x0 = _mm512_maskz_loadu_ps(m, r), x1 = _mm512_maskz_loadu_ps(m, r + W), x2 = _mm512_maskz_loadu_ps(m, r + 2 * W);
  plain_chk(x0, nan, lo);
  plain_chk(x1, nan, lo);
  *a = _mm512_max_ps(_mm512_max_ps(x0, x1), x2);
  if (!two) return;
  __m512 x3 = _mm512_maskz_loadu_ps(m, r + 3 * W);
  plain_chk(x2, nan, lo);
  plain_chk(x3, nan, lo);
  *b = _mm512_max_ps(_mm512_max_ps(x2, x3), _mm512_maskz_loadu_ps(m, r + 4 * W));
}

/* Lanes 2j, 2j + 1, 2j + 2 of the column maxima v0:v1 and the next pair's even lanes en. */
static inline __attribute__((always_inline)) __m512 hmax3(__m512 e, __m512 v0, __m512 v1, __m512 en) {
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 sh = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(en), _mm512_castps_si512(e), 1));
  return _mm512_max_ps(_mm512_max_ps(e, _mm512_permutex2var_ps(v0, od, v1)), sh);
}

/* A whole plane, kernel 3x3 at stride 2, no padding, every window inside (2 OH < H, 2 OW < W,
 * W <= PLANE_MAX_W), two output rows at a time: the column maxima of each one's three input
 * rows (the middle row read once for both), then the maxima of columns 2j, 2j + 1, 2j + 2
 * (even lanes, odd lanes, even lanes shifted by one). Another order of comparisons than the
 * scalar loop's, with the same values where the plane holds no NaN and no -0.0 (ties are then
 * equal bits); where it does (or W is too wide) it returns 0 and the caller rewrites the plane. */
static int maxpool_plane_k3s2_avx512(const float *xp, float *yp, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  (void)H;
  if (W > PLANE_MAX_W) return 0;
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  int64_t nj = (OW + 15) / 16;
  __mmask16 vm[PLANE_MAX_W / 16 + 4]; /* the columns of vector k inside the row */
  for (int64_t k = 0; k < 2 * nj + 2 || 16 * k < W; k++) {
    int64_t n = W - 16 * k;
    vm[k] = (__mmask16)(n >= 16 ? 0xffffu : n > 0 ? (1u << n) - 1 : 0u);
  }
  __mmask16 om = (__mmask16)(OW % 16 ? (1u << (OW % 16)) - 1 : 0xffffu), nan = 0;
  __m512i lo = _mm512_set1_epi32(INT32_MAX);
  for (int64_t oy = 0; oy < OH; oy += 2) {
    int two = oy + 1 < OH;
    const float *r = xp + 2 * oy * W;
    float *y = yp + oy * OW;
    __m512 a0, a1, b0 = _mm512_setzero_ps(), b1 = b0;
    vmax_pair(r, W, vm[0], two, &a0, &b0, &nan, &lo);
    vmax_pair(r + 16, W, vm[1], two, &a1, &b1, &nan, &lo);
    __m512 ea = _mm512_permutex2var_ps(a0, ev, a1), eb = _mm512_permutex2var_ps(b0, ev, b1);
    for (int64_t j = 0; j < nj; j++) {
      __m512 pa0 = a0, pa1 = a1, pb0 = b0, pb1 = b1;
      vmax_pair(r + 32 * j + 32, W, vm[2 * j + 2], two, &a0, &b0, &nan, &lo);
      vmax_pair(r + 32 * j + 48, W, vm[2 * j + 3], two, &a1, &b1, &nan, &lo);
      __m512 ena = _mm512_permutex2var_ps(a0, ev, a1), enb = _mm512_permutex2var_ps(b0, ev, b1);
      __m512 ma = hmax3(ea, pa0, pa1, ena), mb = hmax3(eb, pb0, pb1, enb);
      __mmask16 sm = j + 1 < nj ? (__mmask16)0xffffu : om;
      _mm512_mask_storeu_ps(y + 16 * j, sm, ma);
      if (two) _mm512_mask_storeu_ps(y + OW + 16 * j, sm, mb);
      ea = ena;
      eb = enb;
    }
  }
  /* the last row the windows read (2 OH), which no output row checked */
  const float *last = xp + 2 * OH * W;
  for (int64_t k = 0; 16 * k < W; k++) plain_chk(_mm512_maskz_loadu_ps(vm[k], last + 16 * k), &nan, &lo);
  return !nan && _mm512_reduce_min_epi32(lo) != INT32_MIN;
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

const kiln_pool_simd kiln_pool_simd_avx512 = {maxpool_row_avx512, maxpool_2rows_k3s2_avx512, maxpool_plane_k3s2_avx512,
                                              gavg4_avx512};
#endif
