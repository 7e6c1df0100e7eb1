/* Depthwise float32 convolution, AVX2+FMA: one output plane (stride 1 or 2 in x) from the
 * zero-padded input plane that conv_dw_f32.c builds (dw_pad, 8-lane chunks). Entered only from
 * conv_dw_f32.c's dw_task when kiln_cpu_isa() chose AVX2; built with the AVX2 flags
 * (isa_flags.cmake). */
#include <stdbool.h>

#include "kernels/conv_internal.h"

#ifdef KILN_HAVE_X86_KERNELS

/* 8 lanes xr[s + sw * j] (sw 1 or 2): for sw 2 the even lanes of 16 values. */
static inline __m256 dw_in8(const float *xr, int64_t s, int sw) {
  if (sw == 1) return _mm256_loadu_ps(xr + s);
  __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(xr + s), _mm256_loadu_ps(xr + s + 8), 0x88);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xd8));
}

/* The inline activations (act_inline), as act_inline512 does them. */
static inline __m256 dw_act8(__m256 v, const kiln_act *a) {
  if (a->kind == KILN_ACT_RELU) return _mm256_max_ps(v, _mm256_setzero_ps());
  if (a->kind == KILN_ACT_CLIP)
    return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(a->alpha)), _mm256_set1_ps(a->beta));
  return v;
}

static const int32_t dw_mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* The output chunk at row oy, columns [ox, ox + 8) (ox + n at the row's end): residual,
 * activation, store (masked only at a row's end). */
static inline void dw_store8(const kiln_conv2d_f32_params *p, int64_t oy, int64_t ox, __m256 v,
                             const float *rp, const kiln_act *act, float *yp) {
  const int64_t n = p->ow - ox < 8 ? p->ow - ox : 8, o = oy * p->ow + ox;
  if (n == 8) {
    if (rp) v = _mm256_add_ps(v, _mm256_loadu_ps(rp + o));
    if (act) v = dw_act8(v, act);
    _mm256_storeu_ps(yp + o, v);
    return;
  }
  __m256i m = _mm256_loadu_si256((const __m256i *)(dw_mask_table + 8 - n));
  if (rp) v = _mm256_add_ps(v, _mm256_maskload_ps(rp + o, m));
  if (act) v = dw_act8(v, act);
  _mm256_maskstore_ps(yp + o, m, v);
}

/* Chunks of 8 output columns in row order, four at a time with their own accumulators (across
 * rows when rows are narrow); the chunk cursor (oy, cx) steps without divisions. KH, KW > 0:
 * the kernel's size as constants (the taps unrolled, their weights in registers); 0: p's. */
static inline __attribute__((always_inline)) void dw_chunks(
    const kiln_conv2d_f32_params *p, const float *pad, int64_t pw, const float *wk, float bv,
    const float *rp, const kiln_act *act, float *yp, const int SW, const int KH, const int KW) {
  const int64_t nch = (p->ow + 7) / 8, nu = p->oh * nch;
  const int64_t kh = KH ? KH : p->kh, kw = KW ? KW : p->kw, rs = p->sh * pw;
  const int64_t dy = p->dh * pw, dx = p->dw;
  const __m256 vb = _mm256_set1_ps(bv);
  int64_t oy[4], cx[4], y = 0, c = 0;
  int64_t u = 0;
  for (; u + 4 <= nu; u += 4) {
    const float *b[4];
    for (int i = 0; i < 4; i++) {
      oy[i] = y, cx[i] = c, b[i] = pad + y * rs + c * 8 * SW;
      if (++c == nch) c = 0, y++;
    }
    __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
    for (int64_t ky = 0; ky < kh; ky++)
      for (int64_t kx = 0; kx < kw; kx++) {
        const __m256 wv = _mm256_broadcast_ss(wk + ky * kw + kx);
        const int64_t o = ky * dy + kx * dx;
        a0 = _mm256_fmadd_ps(dw_in8(b[0], o, SW), wv, a0);
        a1 = _mm256_fmadd_ps(dw_in8(b[1], o, SW), wv, a1);
        a2 = _mm256_fmadd_ps(dw_in8(b[2], o, SW), wv, a2);
        a3 = _mm256_fmadd_ps(dw_in8(b[3], o, SW), wv, a3);
      }
    dw_store8(p, oy[0], cx[0] * 8, a0, rp, act, yp);
    dw_store8(p, oy[1], cx[1] * 8, a1, rp, act, yp);
    dw_store8(p, oy[2], cx[2] * 8, a2, rp, act, yp);
    dw_store8(p, oy[3], cx[3] * 8, a3, rp, act, yp);
  }
  for (; u < nu; u++) {
    const float *b0 = pad + y * rs + c * 8 * SW;
    __m256 a0 = vb;
    for (int64_t ky = 0; ky < kh; ky++)
      for (int64_t kx = 0; kx < kw; kx++)
        a0 = _mm256_fmadd_ps(dw_in8(b0, ky * dy + kx * dx, SW), _mm256_broadcast_ss(wk + ky * kw + kx), a0);
    dw_store8(p, y, c * 8, a0, rp, act, yp);
    if (++c == nch) c = 0, y++;
  }
}

void kiln_dw_plane_avx2(const kiln_conv2d_f32_params *p, const float *pad, int64_t pw,
                        const float *wk, float bv, const float *rp, const kiln_act *act,
                        float *yp) {
  if (act && act->kind == KILN_ACT_NONE) act = NULL;
  const bool k3 = p->kh == 3 && p->kw == 3;
  if (p->sw == 1) {
    if (k3)
      dw_chunks(p, pad, pw, wk, bv, rp, act, yp, 1, 3, 3);
    else
      dw_chunks(p, pad, pw, wk, bv, rp, act, yp, 1, 0, 0);
  } else {
    if (k3)
      dw_chunks(p, pad, pw, wk, bv, rp, act, yp, 2, 3, 3);
    else
      dw_chunks(p, pad, pw, wk, bv, rp, act, yp, 2, 0, 0);
  }
}

/* ---- 3x3, dilation 1, strides 1 or 2, straight from the input (no padded copy) ----------
 * conv_dw_f32.c's dw3_plane at 8 lanes: blocks of DW3_R output rows x 8 output columns; each
 * input row of the block is loaded once (its 3 column taps) and feeds every output row of the
 * block that uses it. Rows outside the input are read from `zero`; chunks at the row's ends
 * load only the lanes inside the row (vmaskmovps loads; the others read 0). At stride 2 the
 * taps are the even and odd elements of 16 loaded ones, taken by one in-lane shuffle each:
 * their lanes hold output columns 0 1 4 5 2 3 6 7, put in order once per output vector. */
enum { DW3_R = 4 };

/* Lanes j of 8 with 0 <= s + j < w. */
static inline __m256i dw3_lanes(int64_t s, int64_t w) {
  const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t lo = -s - 1, hi = w - s;
  lo = lo < -1 ? -1 : lo > 8 ? 8 : lo;
  hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;
  return _mm256_and_si256(_mm256_cmpgt_epi32(j, _mm256_set1_epi32((int)lo)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), j));
}

static inline __m256 dw3_load(const float *r, int64_t i, const int EDGE, __m256i m) {
  return EDGE ? _mm256_maskload_ps(r + i, m) : _mm256_loadu_ps(r + i);
}

/* The 3 column taps of one input row for 8 output columns from input column b (masks m[0..3]
 * for the loads at b, b + 1 (stride 1) or b + 8 (stride 2), b + 2, b + 10). */
static inline __attribute__((always_inline)) void dw3_taps8(const float *r, int64_t b, const int SW,
                                                            const int EDGE, const __m256i *m,
                                                            __m256 v[3]) {
  if (SW == 1) {
    v[0] = dw3_load(r, b, EDGE, m[0]);
    v[1] = dw3_load(r, b + 1, EDGE, m[1]);
    v[2] = dw3_load(r, b + 2, EDGE, m[2]);
    return;
  }
  __m256 lo = dw3_load(r, b, EDGE, m[0]), hi = dw3_load(r, b + 8, EDGE, m[1]);
  v[0] = _mm256_shuffle_ps(lo, hi, 0x88);
  v[1] = _mm256_shuffle_ps(lo, hi, 0xdd);
  v[2] = _mm256_shuffle_ps(dw3_load(r, b + 2, EDGE, m[2]), dw3_load(r, b + 10, EDGE, m[3]), 0x88);
}

/* The block of output rows [oy0, oy0 + nr) (nr <= DW3_R) x columns [ox0, ox0 + 8) (fewer at
 * the row's end). */
static inline __attribute__((always_inline)) void dw3_block(
    const kiln_conv2d_f32_params *p, const float *xp, const __m256 *wv, __m256 vb,
    const float *rp, const kiln_act *act, float *yp, const float *zero, int64_t oy0, int64_t nr,
    int64_t ox0, const int SH, const int SW, const int EDGE) {
  const int64_t H = p->h, W = p->w, b = ox0 * SW - p->pl, iy0 = oy0 * SH - p->pt;
  __m256i m[4];
  if (EDGE) {
    m[0] = dw3_lanes(b, W);
    m[1] = dw3_lanes(b + (SW == 1 ? 1 : 8), W);
    m[2] = dw3_lanes(b + 2, W);
    m[3] = dw3_lanes(b + 10, W);
  }
  __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
#pragma GCC unroll 16
  for (int l = 0; l < (DW3_R - 1) * SH + 3; l++) {
    const int64_t iy = iy0 + l;
    __m256 v[3];
    dw3_taps8(iy >= 0 && iy < H ? xp + iy * W : zero, b, SW, EDGE, m, v);
#define ROW(i)                                                      \
  if (l - (i) * SH >= 0 && l - (i) * SH <= 2) {                     \
    const int ky = l - (i) * SH;                                    \
    a##i = _mm256_fmadd_ps(v[0], wv[ky * 3], a##i);                 \
    a##i = _mm256_fmadd_ps(v[1], wv[ky * 3 + 1], a##i);             \
    a##i = _mm256_fmadd_ps(v[2], wv[ky * 3 + 2], a##i);             \
  }
    ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
  }
  const __m256 acc[DW3_R] = {a0, a1, a2, a3};
  for (int64_t i = 0; i < nr; i++) {
    __m256 v = acc[i];
    if (SW == 2) v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
    dw_store8(p, oy0 + i, ox0, v, rp, act, yp);
  }
}

static inline __attribute__((always_inline)) void dw3_plane8(
    const kiln_conv2d_f32_params *p, const float *xp, const float *wk, float bv, const float *rp,
    const kiln_act *act, float *yp, const float *zero, const int SH, const int SW) {
  __m256 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm256_broadcast_ss(wk + k);
  const __m256 vb = _mm256_set1_ps(bv);
  const int64_t W = p->w, reach = SW == 1 ? 10 : 18; /* columns a chunk's loads span from b */
  for (int64_t oy0 = 0; oy0 < p->oh; oy0 += DW3_R) {
    const int64_t nr = p->oh - oy0 < DW3_R ? p->oh - oy0 : DW3_R;
    for (int64_t ox0 = 0; ox0 < p->ow; ox0 += 8) {
      const int64_t b = ox0 * SW - p->pl;
      if (b >= 0 && b + reach <= W)
        dw3_block(p, xp, wv, vb, rp, act, yp, zero, oy0, nr, ox0, SH, SW, 0);
      else
        dw3_block(p, xp, wv, vb, rp, act, yp, zero, oy0, nr, ox0, SH, SW, 1);
    }
  }
}

void kiln_dw3_plane_avx2(const kiln_conv2d_f32_params *p, const float *xp, const float *wk,
                         float bv, const float *rp, const kiln_act *act, float *yp,
                         const float *zero) {
  if (act && act->kind == KILN_ACT_NONE) act = NULL;
  if (p->sh == 1 && p->sw == 1)
    dw3_plane8(p, xp, wk, bv, rp, act, yp, zero, 1, 1);
  else if (p->sh == 2 && p->sw == 2)
    dw3_plane8(p, xp, wk, bv, rp, act, yp, zero, 2, 2);
  else if (p->sh == 1)
    dw3_plane8(p, xp, wk, bv, rp, act, yp, zero, 1, 2);
  else
    dw3_plane8(p, xp, wk, bv, rp, act, yp, zero, 2, 1);
}

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_conv_dw_avx2_unused;
#endif
