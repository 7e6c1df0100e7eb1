/* Depthwise float32 convolution: direct AVX-512 row kernels (stride 1 and 2), the AVX2 one
 * (conv_dw_avx2.c) and a portable path. See conv_internal.h. */
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_internal.h"

/* ---- depthwise ---------------------------------------------------------------------------- */

typedef struct dw_ctx {
  const kiln_conv2d_f32_params *p;
  const float *x, *w, *bias, *res;
  float *y;
  const kiln_act *act;
  int isa;
} dw_ctx;

/* One output plane, portable C: rows accumulated tap by tap over clamped column ranges. */
static void dw_plane_c(const kiln_conv2d_f32_params *p, const float *xp, const float *wk, float bv,
                       const float *rp, float *yp) {
  for (int64_t oy = 0; oy < p->oh; oy++) {
    float *restrict yr = yp + oy * p->ow;
    for (int64_t ox = 0; ox < p->ow; ox++) yr[ox] = bv;
    for (int64_t ky = 0; ky < p->kh; ky++) {
      int64_t iy = oy * p->sh - p->pt + ky * p->dh;
      if (iy < 0 || iy >= p->h) continue;
      const float *restrict xr = xp + iy * p->w;
      for (int64_t kx = 0; kx < p->kw; kx++) {
        float wv = wk[ky * p->kw + kx];
        int64_t off = kx * p->dw - p->pl, a, b;
        col_range(off, p->sw, p->w, p->ow, &a, &b);
        if (p->sw == 1)
          for (int64_t ox = a; ox < b; ox++) yr[ox] += wv * xr[ox + off];
        else
          for (int64_t ox = a; ox < b; ox++) yr[ox] += wv * xr[ox * p->sw + off];
      }
    }
    if (rp)
      for (int64_t ox = 0; ox < p->ow; ox++) yr[ox] += rp[oy * p->ow + ox];
  }
}

#ifdef KILN_HAVE_X86_KERNELS
/* 16 lanes xr[s + sw * j] (sw 1 or 2). */
V512 __m512 dw_in16(const float *xr, int64_t s, int sw) {
  if (sw == 1) return _mm512_loadu_ps(xr + s);
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(_mm512_loadu_ps(xr + s), ev, _mm512_loadu_ps(xr + s + 16));
}

/* The padded plane for dw_plane_avx512 (16 lanes) and kiln_dw_plane_avx2 (8): rows [0, ph) x
 * columns [0, pw) where padded (r, q) is input (r - pt, q - pl), zero outside. Sizes so that
 * every chunk's taps lie inside. */
static void dw_pad_dims(const kiln_conv2d_f32_params *p, int64_t lanes, int64_t *ph, int64_t *pw) {
  int64_t nch = (p->ow + lanes - 1) / lanes;
  *ph = conv_in_rows(p, p->oh);
  *pw = (nch - 1) * lanes * p->sw + (p->kw - 1) * p->dw + lanes * p->sw;
}

/* Writes every element of the padded plane (zeros only where there is no input). */
static void dw_pad(const kiln_conv2d_f32_params *p, const float *xp, float *pad, int64_t ph,
                   int64_t pw) {
  int64_t l = p->pl < pw ? p->pl : pw, n = p->w < pw - l ? p->w : pw - l;
  for (int64_t r = 0; r < ph; r++) {
    float *d = pad + r * pw;
    int64_t iy = r - p->pt;
    if (iy < 0 || iy >= p->h) {
      memset(d, 0, sizeof(float) * (size_t)pw);
      continue;
    }
    if (l) memset(d, 0, sizeof(float) * (size_t)l);
    memcpy(d + l, xp + iy * p->w, sizeof(float) * (size_t)n);
    if (l + n < pw) memset(d + l + n, 0, sizeof(float) * (size_t)(pw - l - n));
  }
}

/* One output plane, stride 1 or 2 in x, from the padded plane: units of 16 output columns of
 * one row, four at a time with their own accumulators (across rows when rows are narrow), all
 * taps in registers with plain loads. */
T512 static void dw_plane_avx512(const kiln_conv2d_f32_params *p, const float *pad, int64_t pw,
                                 const float *wk, float bv, const float *rp, const kiln_act *act,
                                 float *yp) {
  const bool ia = act && act->kind != KILN_ACT_NONE; /* act: NULL or act_inline */
  int64_t nch = (p->ow + 15) / 16, nu = p->oh * nch, sw = p->sw, u = 0;
  __m512 vb = _mm512_set1_ps(bv);
#define DW_BASE(uu) (pad + ((uu) / nch) * p->sh * pw + ((uu) % nch) * 16 * sw)
#define DW_STORE(uu, acc)                                                                  \
  do {                                                                                     \
    int64_t oy_ = (uu) / nch, ox_ = ((uu) % nch) * 16, n_ = p->ow - ox_ < 16 ? p->ow - ox_ : 16; \
    __mmask16 m_ = (__mmask16)((1u << n_) - 1);                                            \
    __m512 v_ = (acc);                                                                     \
    if (rp) v_ = _mm512_add_ps(v_, _mm512_maskz_loadu_ps(m_, rp + oy_ * p->ow + ox_));      \
    if (ia) v_ = act_inline512(v_, act);                                                   \
    _mm512_mask_storeu_ps(yp + oy_ * p->ow + ox_, m_, v_);                                 \
  } while (0)
  for (; u + 4 <= nu; u += 4) {
    const float *b0 = DW_BASE(u), *b1 = DW_BASE(u + 1), *b2 = DW_BASE(u + 2), *b3 = DW_BASE(u + 3);
    __m512 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
    for (int64_t ky = 0; ky < p->kh; ky++)
      for (int64_t kx = 0; kx < p->kw; kx++) {
        __m512 wv = _mm512_set1_ps(wk[ky * p->kw + kx]);
        int64_t o = ky * p->dh * pw + kx * p->dw;
        a0 = _mm512_fmadd_ps(dw_in16(b0, o, (int)sw), wv, a0);
        a1 = _mm512_fmadd_ps(dw_in16(b1, o, (int)sw), wv, a1);
        a2 = _mm512_fmadd_ps(dw_in16(b2, o, (int)sw), wv, a2);
        a3 = _mm512_fmadd_ps(dw_in16(b3, o, (int)sw), wv, a3);
      }
    DW_STORE(u, a0);
    DW_STORE(u + 1, a1);
    DW_STORE(u + 2, a2);
    DW_STORE(u + 3, a3);
  }
  for (; u < nu; u++) {
    const float *b0 = DW_BASE(u);
    __m512 a0 = vb;
    for (int64_t ky = 0; ky < p->kh; ky++)
      for (int64_t kx = 0; kx < p->kw; kx++)
        a0 = _mm512_fmadd_ps(dw_in16(b0, ky * p->dh * pw + kx * p->dw, (int)sw),
                             _mm512_set1_ps(wk[ky * p->kw + kx]), a0);
    DW_STORE(u, a0);
  }
#undef DW_BASE
#undef DW_STORE
}
#endif

#ifdef KILN_HAVE_X86_KERNELS
enum { DW_KW_MAX = 16 }; /* widest kernel of dw_plane_direct_avx512 */

/* Lanes [lo, hi) of a 16-lane mask (clamped). */
static __mmask16 lane_range(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}

/* One output plane straight from the input (no padded copy), stride 1 or 2 in x: strips of 16
 * output columns, four rows at a time with their own accumulators. Per strip and column tap,
 * the lanes whose input column lies inside the row are loaded (masked: the others read 0);
 * rows outside the input give 0. Every tap is accumulated in the order ky, kx, as with a
 * zero-padded plane. */
T512 static void dw_plane_direct_avx512(const kiln_conv2d_f32_params *p, const float *xp,
                                        const float *wk, float bv, const float *rp,
                                        const kiln_act *act, float *yp) {
  const bool ia = act && act->kind != KILN_ACT_NONE; /* act: NULL or act_inline */
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512 vb = _mm512_set1_ps(bv), z = _mm512_setzero_ps();
  const int64_t sw = p->sw, W = p->w, H = p->h, kw = p->kw;
  for (int64_t ox0 = 0; ox0 < p->ow; ox0 += 16) {
    int64_t n = p->ow - ox0 < 16 ? p->ow - ox0 : 16;
    __mmask16 m0[DW_KW_MAX], m1[DW_KW_MAX], sm = (__mmask16)((1u << n) - 1);
    int64_t off[DW_KW_MAX];
    for (int64_t kx = 0; kx < kw; kx++) {
      int64_t base = ox0 * sw + kx * p->dw - p->pl, lo = base < 0 ? -base : 0;
      int64_t hi = W - base < (n - 1) * sw + 1 ? W - base : (n - 1) * sw + 1;
      off[kx] = base;
      m0[kx] = lane_range(lo, hi);
      m1[kx] = lane_range(lo - 16, hi - 16);
    }
#define DW_LD(r, kx)                                                                         \
  (sw == 1 ? _mm512_maskz_loadu_ps(m0[kx], (r) + off[kx])                                    \
           : _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m0[kx], (r) + off[kx]), ev,        \
                                    _mm512_maskz_loadu_ps(m1[kx], (r) + off[kx] + 16)))
    for (int64_t oy = 0; oy < p->oh; oy += 4) {
      int64_t nr = p->oh - oy < 4 ? p->oh - oy : 4;
      __m512 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
      for (int64_t ky = 0; ky < p->kh; ky++) {
        const float *r[4];
        for (int i = 0; i < 4; i++) {
          int64_t iy = (oy + i) * p->sh - p->pt + ky * p->dh;
          r[i] = i < nr && iy >= 0 && iy < H ? xp + iy * W : NULL;
        }
        for (int64_t kx = 0; kx < kw; kx++) {
          __m512 wv = _mm512_set1_ps(wk[ky * kw + kx]);
          a0 = _mm512_fmadd_ps(r[0] ? DW_LD(r[0], kx) : z, wv, a0);
          a1 = _mm512_fmadd_ps(r[1] ? DW_LD(r[1], kx) : z, wv, a1);
          a2 = _mm512_fmadd_ps(r[2] ? DW_LD(r[2], kx) : z, wv, a2);
          a3 = _mm512_fmadd_ps(r[3] ? DW_LD(r[3], kx) : z, wv, a3);
        }
      }
      __m512 acc[4] = {a0, a1, a2, a3};
      for (int64_t i = 0; i < nr; i++) {
        int64_t o = (oy + i) * p->ow + ox0;
        __m512 v = acc[i];
        if (rp) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(sm, rp + o));
        if (ia) v = act_inline512(v, act);
        _mm512_mask_storeu_ps(yp + o, sm, v);
      }
    }
#undef DW_LD
  }
}
#endif

#ifdef KILN_HAVE_X86_KERNELS
/* ---- 3x3, dilation 1, strides 1 or 2 (MobileNet's depthwise layers) ----------------------
 * Blocks of 8 output rows x 16 output columns: each input row of the block is loaded once
 * (its 3 column taps) and feeds every output row of the block that uses it, with the 9
 * weights in registers. The loops are unrolled for a constant stride so that everything
 * stays in registers; dw_plane_direct_avx512 does the same work with a load per tap. */

/* The lanes [lo, hi) of the elements [0, e) from b that lie in the row [0, w): lo and hi
 * 16-lane halves. */
static void dw3_mask(int64_t b, int64_t e, int64_t w, __mmask16 *lo, __mmask16 *hi) {
  int64_t z = w - b < e ? w - b : e;
  *lo = lane_range(-b, z);
  *hi = lane_range(-b - 16, z - 16);
}

/* The 3 column taps of one input row for 16 output columns from input column b: stride 1,
 * three loads (masks m[0..2]); stride 2, the even and odd elements of [b, b + 32) (masks
 * m[0], m[1]) for taps 0 and 1 and the even ones of [b + 2, b + 34) (m[2], m[3]) for tap 2. */
V512 void dw3_taps(const float *row, int64_t b, int sw, const __mmask16 *m, __m512 v[3]) {
  if (sw == 1) {
    v[0] = _mm512_maskz_loadu_ps(m[0], row + b);
    v[1] = _mm512_maskz_loadu_ps(m[1], row + b + 1);
    v[2] = _mm512_maskz_loadu_ps(m[2], row + b + 2);
    return;
  }
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 lo = _mm512_maskz_loadu_ps(m[0], row + b), hi = _mm512_maskz_loadu_ps(m[1], row + b + 16);
  v[0] = _mm512_permutex2var_ps(lo, ev, hi);
  v[1] = _mm512_permutex2var_ps(lo, od, hi);
  v[2] = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m[2], row + b + 2), ev,
                                _mm512_maskz_loadu_ps(m[3], row + b + 18));
}

enum { DW3_ROWS = 8 }; /* output rows per block (at most): 8 independent FMA chains */

/* Software prefetch (into L2) of the next input plane, `per` of its `lines` cache lines per
 * block, when planes are large enough for the hardware prefetchers to lag (one from L3 takes
 * as long as a block's arithmetic). */
typedef struct dw3_prefetch {
  const char *next; /* NULL: none */
  int64_t lines, per;
} dw3_prefetch;
enum { DW3_PREFETCH_MIN = 8192 }; /* plane bytes */

/* Output rows per block: 7 where that divides the plane and 8 does not (28, 14, 7 rows), 4 on
 * planes of at most 4 rows, so that no block computes rows past the end. */
static int dw3_rows(const kiln_conv2d_f32_params *p) {
  if (p->oh <= 4 && p->sh == p->sw) return 4; /* bands of an inverted residual block (conv_block_f32.c) */
  return p->oh % 8 && p->oh % 7 == 0 && p->sh == p->sw ? 7 : DW3_ROWS;
}

static dw3_prefetch dw3_prefetch_plan(const kiln_conv2d_f32_params *p) {
  dw3_prefetch f = {NULL, 0, 0};
  int64_t bytes = p->h * p->w * (int64_t)sizeof(float);
  if (bytes < DW3_PREFETCH_MIN) return f;
  int64_t blocks = ((p->oh + dw3_rows(p) - 1) / dw3_rows(p)) * ((p->ow + 15) / 16);
  f.lines = (bytes + 63) / 64;
  f.per = (f.lines + blocks - 1) / blocks;
  return f;
}

/* One output plane; sh, sw (1 or 2) and R (7 or 8 rows per block) are constants at each call. Taps are accumulated in
 * the order ky, kx onto the bias; rows outside the input are read from `zero` (w zeros), so
 * that the unrolled loop has no branches and the accumulators stay in registers. */
V512 void dw3_plane(const kiln_conv2d_f32_params *p, const float *xp, const float *wk, float bv,
                    const float *rp, const kiln_act *act, float *yp, const dw3_prefetch *pf,
                    const float *zero, const int sh, const int sw, const int R) {
  const bool ia = act && act->kind != KILN_ACT_NONE; /* act: NULL or act_inline */
  const int64_t H = p->h, W = p->w, oh = p->oh, ow = p->ow, nlines = pf->next ? pf->lines : 0;
  int64_t pfl = 0;
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(wk[k]);
  for (int64_t oy0 = 0; oy0 < oh; oy0 += R) {
    int64_t nr = oh - oy0 < R ? oh - oy0 : R, iy0 = oy0 * sh - p->pt;
    for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
      int64_t n = ow - ox0 < 16 ? ow - ox0 : 16, b = ox0 * sw - p->pl;
      __mmask16 m[4], sm = (__mmask16)((1u << n) - 1);
      if (sw == 1) {
        for (int kx = 0; kx < 3; kx++) m[kx] = lane_range(-(b + kx), W - (b + kx)) & sm;
        m[3] = 0;
      } else {
        dw3_mask(b, 2 * n, W, &m[0], &m[1]);
        dw3_mask(b + 2, 2 * n - 1, W, &m[2], &m[3]);
      }
      for (int64_t e = pfl + pf->per < nlines ? pfl + pf->per : nlines; pfl < e; pfl++)
        _mm_prefetch(pf->next + pfl * 64, _MM_HINT_T1);
      __m512 a[DW3_ROWS];
      for (int i = 0; i < R; i++) a[i] = _mm512_set1_ps(bv);
#pragma GCC unroll 17
      for (int l = 0; l < (R - 1) * sh + 3; l++) { /* the input rows of the block */
        int64_t iy = iy0 + l;
        __m512 v[3];
        dw3_taps(iy >= 0 && iy < H ? xp + iy * W : zero, b, sw, m, v);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
          int ky = l - i * sh;
          if (ky < 0 || ky > 2) continue;
          a[i] = _mm512_fmadd_ps(v[0], wv[ky * 3], a[i]);
          a[i] = _mm512_fmadd_ps(v[1], wv[ky * 3 + 1], a[i]);
          a[i] = _mm512_fmadd_ps(v[2], wv[ky * 3 + 2], a[i]);
        }
      }
      for (int64_t i = 0; i < nr; i++) {
        int64_t o = (oy0 + i) * ow + ox0;
        __m512 r = a[i];
        if (rp) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(sm, rp + o));
        if (ia) r = act_inline512(r, act);
        _mm512_mask_storeu_ps(yp + o, sm, r);
      }
    }
  }
}

/* dw3_plane with constant strides and rows per block. */
T512 static void dw3_plane_avx512(const kiln_conv2d_f32_params *p, const float *xp, const float *wk,
                                  float bv, const float *rp, const kiln_act *act, float *yp,
                                  const dw3_prefetch *c, const float *zero) {
  bool r7 = dw3_rows(p) == 7, r4 = dw3_rows(p) == 4; /* only with sh == sw */
  if (p->sh == 1 && p->sw == 1 && r4)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 1, 1, 4);
  else if (p->sh == 2 && p->sw == 2 && r4)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 2, 2, 4);
  else if (p->sh == 1 && p->sw == 1 && r7)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 1, 1, 7);
  else if (p->sh == 1 && p->sw == 1)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 1, 1, 8);
  else if (p->sh == 2 && p->sw == 2 && r7)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 2, 2, 7);
  else if (p->sh == 2 && p->sw == 2)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 2, 2, 8);
  else if (p->sh == 1)
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 1, 2, 8);
  else
    dw3_plane(p, xp, wk, bv, rp, act, yp, c, zero, 2, 1, 8);
}

/* Whether dw3_plane_avx512 takes the shape. */
static bool dw3_fits(const kiln_conv2d_f32_params *p) {
  return p->kh == 3 && p->kw == 3 && p->dh == 1 && p->dw == 1 && (p->sh == 1 || p->sh == 2) &&
         (p->sw == 1 || p->sw == 2);
}

/* ---- small planes: at most 8 output columns, two output rows a vector ---------------------
 * Output rows r and r + 1 share a vector (lanes 0-7 and 8-15). For each kernel row, the two
 * input rows they read are loaded from column -pl (16 lanes masked to the row; a row outside
 * the input reads 0), and each column tap is one two-source permute of the pair: a 7-column
 * row does not take a 16-lane strip of its own as in dw3_plane. Four pairs at a time (eight
 * rows) keep four FMA chains going. The bias and the taps (in the order ky, kx) are accumulated
 * as in dw3_plane, so both give the same bytes. MobileNetV2 in `kiln profile` (1 thread, AMD
 * EPYC Zen 5, avx512): its stride-2 layer 576 x 14x14 -> 7x7 took 44-45 us with dw3_plane and
 * 28 us with this; the 960 x 7x7 stride-1 ones 40-43 us with the kernel this replaced (a masked
 * load per tap over the plane as one flat run) and 36-38 us. */
enum { DWP_PAIRS = 4 };

typedef struct dwp_plan {
  alignas(64) int32_t tap[3][16]; /* permute indexes of column taps 0, 1, 2 */
  alignas(64) int32_t out[16];    /* lanes 0..ow-1 and 8..8+ow-1 to 0..2ow-1 */
  __mmask16 cols;                 /* lanes of a load from column -pl that lie inside the row */
} dwp_plan;

/* Every tap of an output row lies within the 16 columns loaded from -pl. */
static bool dwp_fits(const kiln_conv2d_f32_params *p) {
  return dw3_fits(p) && p->ow <= 8 && (p->ow - 1) * p->sw + 2 <= 15;
}

static void dwp_build(const kiln_conv2d_f32_params *p, dwp_plan *f) {
  for (int kx = 0; kx < 3; kx++)
    for (int l = 0; l < 16; l++) {
      int64_t c = l % 8 < p->ow ? l % 8 : p->ow - 1; /* lanes past ow repeat the last column */
      f->tap[kx][l] = (int32_t)(l / 8 * 16 + c * p->sw + kx);
    }
  for (int l = 0; l < 16; l++)
    f->out[l] = (int32_t)(l < p->ow ? l : l < 2 * p->ow ? 8 + l - p->ow : 0);
  f->cols = lane_range(p->pl, p->pl + p->w);
}

/* Input row y from column -pl, masked to the row; 0 for a row outside the input. */
V512 __m512 dwp_row(const kiln_conv2d_f32_params *p, const float *xp, int64_t y, __mmask16 cols) {
  return y >= 0 && y < p->h ? _mm512_maskz_loadu_ps(cols, xp + y * p->w - p->pl)
                            : _mm512_setzero_ps();
}

T512 static void dwp_plane_avx512(const kiln_conv2d_f32_params *p, const dwp_plan *f,
                                  const float *xp, const float *wk, float bv, const float *rp,
                                  const kiln_act *act, float *yp) {
  const bool ia = act && act->kind != KILN_ACT_NONE; /* act: NULL or act_inline */
  const __m512i t0 = _mm512_load_si512(f->tap[0]), t1 = _mm512_load_si512(f->tap[1]);
  const __m512i t2 = _mm512_load_si512(f->tap[2]), to = _mm512_load_si512(f->out);
  const int64_t oh = p->oh, ow = p->ow, sh = p->sh;
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(wk[k]);
  for (int64_t r0 = 0; r0 < oh; r0 += 2 * DWP_PAIRS) {
    __m512 a[DWP_PAIRS];
#pragma GCC unroll 4
    for (int i = 0; i < DWP_PAIRS; i++) a[i] = _mm512_set1_ps(bv);
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ky++) {
#pragma GCC unroll 4
      for (int i = 0; i < DWP_PAIRS; i++) {
        int64_t y = (r0 + 2 * i) * sh - p->pt + ky;
        __m512 lo = dwp_row(p, xp, y, f->cols), hi = dwp_row(p, xp, y + sh, f->cols);
        a[i] = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, t0, hi), wv[ky * 3], a[i]);
        a[i] = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, t1, hi), wv[ky * 3 + 1], a[i]);
        a[i] = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, t2, hi), wv[ky * 3 + 2], a[i]);
      }
    }
    for (int i = 0; i < DWP_PAIRS && r0 + 2 * i < oh; i++) {
      int64_t r = r0 + 2 * i, n = r + 1 < oh ? 2 * ow : ow;
      __mmask16 m = (__mmask16)((1u << n) - 1);
      __m512 v = _mm512_permutexvar_ps(to, a[i]);
      if (rp) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rp + r * ow));
      if (ia) v = act_inline512(v, act);
      _mm512_mask_storeu_ps(yp + r * ow, m, v);
    }
  }
}

#endif

static void dw_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const dw_ctx *d = ctx;
  const kiln_conv2d_f32_params *p = d->p;
  int64_t ohw = p->oh * p->ow, mult = p->m / p->c;
  float *pad = NULL, *zero = NULL;
  int64_t ph = 0, pw = 0;
#ifdef KILN_HAVE_X86_KERNELS
  bool avx512 = d->isa >= KILN_ISA_AVX512, pair = avx512 && dwp_fits(p), dw3 = false;
  bool avx2 = d->isa == KILN_ISA_AVX2 && (p->sw == 1 || p->sw == 2); /* kiln_dw_plane_avx2 */
  bool dw3a = false; /* kiln_dw3_plane_avx2 */
  dwp_plan pp;
  if (pair) dwp_build(p, &pp);
  if (avx512 && !pair && dw3_fits(p)) /* dw3_plane reads rows outside the input from a zero row */
    dw3 = (zero = calloc((size_t)p->w, sizeof(float))) != NULL;
  if (avx2 && dw3_fits(p)) {
    dw3a = (zero = calloc((size_t)p->w + 32, sizeof(float))) != NULL;
    avx2 = !dw3a;
  }
  bool direct = avx512 && !pair && !dw3 && (p->sw == 1 || p->sw == 2) && p->kw <= DW_KW_MAX;
  if ((avx512 && !pair && !dw3 && !direct && (p->sw == 1 || p->sw == 2)) || avx2) {
    dw_pad_dims(p, avx2 ? 8 : 16, &ph, &pw);
    pad = kiln_malloc(sizeof(float) * (size_t)(ph * pw)); /* NULL: the portable path */
  }
  dw3_prefetch pf = dw3 ? dw3_prefetch_plan(p) : (dw3_prefetch){NULL, 0, 0};
#endif
  int64_t padded_ci = -1, padded_n = -1;
  (void)ph, (void)pw, (void)padded_ci, (void)padded_n;
  /* task t: batch nn, output channel mo, input channel ci (stepped, not divided, per task) */
  int64_t nn = (int64_t)begin / p->m, mo = (int64_t)begin % p->m, ci = mo / mult, k = mo % mult;
  for (size_t t = begin; t < end; t++) {
    const float *xp = d->x + (nn * p->c + ci) * p->h * p->w, *wk = d->w + mo * p->kh * p->kw;
    const float *rp = d->res ? d->res + (int64_t)t * ohw : NULL;
    float *yp = d->y + (int64_t)t * ohw, bv = d->bias ? d->bias[mo] : 0.0f;
#ifdef KILN_HAVE_X86_KERNELS
    if (pair) {
      dwp_plane_avx512(p, &pp, xp, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
    } else if (dw3) {
      /* prefetch the next task's input plane when it is another one */
      pf.next = t + 1 < end && k + 1 == mult ? (const char *)(xp + p->h * p->w) : NULL;
      dw3_plane_avx512(p, xp, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp, &pf, zero);
    } else if (dw3a) {
      kiln_dw3_plane_avx2(p, xp, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp, zero);
    } else if (direct) {
      dw_plane_direct_avx512(p, xp, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
    } else if (pad) {
      if (ci != padded_ci || nn != padded_n) { /* channel multipliers share one padded plane */
        dw_pad(p, xp, pad, ph, pw);
        padded_ci = ci;
        padded_n = nn;
      }
      if (avx2)
        kiln_dw_plane_avx2(p, pad, pw, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
      else
        dw_plane_avx512(p, pad, pw, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
    } else
#endif
      dw_plane_c(p, xp, wk, bv, rp, yp);
#ifdef KILN_HAVE_X86_KERNELS
    bool done = (pair || dw3 || dw3a || direct || pad) && act_inline(d->act); /* applied in registers */
#else
    bool done = false;
#endif
    if (!done && d->act->kind != KILN_ACT_NONE) kiln_f32_act(d->isa, yp, (size_t)ohw, d->act);
    if (++k == mult) k = 0, ci++;
    if (++mo == p->m) mo = 0, ci = 0, nn++;
  }
  free(pad);
  free(zero);
}

enum { DW_PAR_MIN = 1 << 16 }; /* multiply-adds from which planes are split over the pool */

void kiln_conv2d_dw_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                        const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep, float *y) {
  dw_ctx d = {p, x, w, ep->bias, ep->residual, y, &ep->act, isa};
  /* a few microseconds of work: one thread (waking another costs about as much) */
  int64_t macs = p->n * p->m * p->oh * p->ow * p->kh * p->kw;
  if (kiln_dw_cb_f32_fits(p, isa) && kiln_dw_cb_f32(macs >= DW_PAR_MIN ? pool : NULL, p, x, w, ep, y) == KILN_OK)
    return;
  kiln_parallel_for(macs >= DW_PAR_MIN ? pool : NULL, (size_t)(p->n * p->m), dw_task, &d, 0);
}
