/* Fast float32 2-D convolution: depthwise direct kernel, im2col + packed GEMM, fused
 * epilogue. See conv2d_f32.h. */
#include "kernels/conv2d_f32.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "kernels/winograd_f32.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#endif

/* ---- shared pieces ------------------------------------------------------------------------ */

/* Output columns [*ox0, *ox1) whose input column ox * sw + off lies in [0, w). */
static void col_range(int64_t off, int64_t sw, int64_t w, int64_t ow, int64_t *ox0, int64_t *ox1) {
  int64_t a = off >= 0 ? 0 : (-off + sw - 1) / sw;
  int64_t b = w - 1 - off < 0 ? 0 : (w - 1 - off) / sw + 1;
  if (a > ow) a = ow;
  if (b > ow) b = ow;
  if (b < a) b = a;
  *ox0 = a;
  *ox1 = b;
}

/* y[i] += b (+ r[i]) for i < n. */
static void add_bias_res_c(float *restrict y, int64_t n, float b, const float *r) {
  if (r)
    for (int64_t i = 0; i < n; i++) y[i] += b + r[i];
  else
    for (int64_t i = 0; i < n; i++) y[i] += b;
}

#ifdef KILN_HAVE_X86_KERNELS
#define T512 KILN_TARGET_AVX512
#define V512 KILN_INLINE T512

T512 static void add_bias_res_avx512(float *y, int64_t n, float b, const float *r) {
  __m512 vb = _mm512_set1_ps(b);
  int64_t i = 0;
  if (r) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(y + i), vb),
                                            _mm512_loadu_ps(r + i)));
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), vb));
  }
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), vb);
    if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}
#endif

#ifdef KILN_HAVE_X86_KERNELS
/* Whether act is a clamp applied in registers here (none, relu, clip). */
static bool act_inline(const kiln_act *a) {
  return a->kind == KILN_ACT_NONE || a->kind == KILN_ACT_RELU || a->kind == KILN_ACT_CLIP;
}

/* The inline activations, with the same operations as the GEMM's (max(v, 0); min(max(v, lo), hi)). */
V512 __m512 act_inline512(__m512 v, const kiln_act *a) {
  if (a->kind == KILN_ACT_RELU) return _mm512_max_ps(v, _mm512_setzero_ps());
  if (a->kind == KILN_ACT_CLIP)
    return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(a->alpha)), _mm512_set1_ps(a->beta));
  return v;
}

/* y[i] = act(y[i] + b (+ r[i])) in one pass, act inline (act_inline). */
T512 static void bias_res_act_avx512(float *y, int64_t n, float b, const float *r, const kiln_act *a) {
  __m512 vb = _mm512_set1_ps(b);
  int64_t i = 0;
  if (r) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(y + i, act_inline512(_mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(y + i), vb),
                                                          _mm512_loadu_ps(r + i)), a));
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(y + i, act_inline512(_mm512_add_ps(_mm512_loadu_ps(y + i), vb), a));
  }
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), vb);
    if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r + i));
    _mm512_mask_storeu_ps(y + i, m, act_inline512(v, a));
  }
}
#endif

static void add_bias_res(int isa, float *y, int64_t n, float b, const float *r) {
#ifdef KILN_HAVE_X86_KERNELS
  if (isa >= KILN_ISA_AVX512) {
    add_bias_res_avx512(y, n, b, r);
    return;
  }
#endif
  (void)isa;
  add_bias_res_c(y, n, b, r);
}

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

/* The padded plane for dw_plane_avx512: rows [0, ph) x columns [0, pw) where padded (r, q) is
 * input (r - pt, q - pl), zero outside. Sizes so that every 16-lane chunk's taps lie inside. */
static void dw_pad_dims(const kiln_conv2d_f32_params *p, int64_t *ph, int64_t *pw) {
  int64_t nch = (p->ow + 15) / 16;
  *ph = (p->oh - 1) * p->sh + (p->kh - 1) * p->dh + 1;
  *pw = (nch - 1) * 16 * p->sw + (p->kw - 1) * p->dw + 16 * p->sw;
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

static void dw_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const dw_ctx *d = ctx;
  const kiln_conv2d_f32_params *p = d->p;
  int64_t ohw = p->oh * p->ow, mult = p->m / p->c;
  float *pad = NULL;
  int64_t ph = 0, pw = 0;
#ifdef KILN_HAVE_X86_KERNELS
  bool direct = d->isa >= KILN_ISA_AVX512 && (p->sw == 1 || p->sw == 2) && p->kw <= DW_KW_MAX;
  if (!direct && d->isa >= KILN_ISA_AVX512 && (p->sw == 1 || p->sw == 2)) {
    dw_pad_dims(p, &ph, &pw);
    pad = kiln_malloc(sizeof(float) * (size_t)(ph * pw)); /* NULL: the portable path */
  }
#endif
  int64_t padded_ci = -1, padded_n = -1;
  (void)ph, (void)pw, (void)padded_ci, (void)padded_n;
  for (size_t t = begin; t < end; t++) {
    int64_t nn = (int64_t)t / p->m, mo = (int64_t)t % p->m, ci = mo / mult;
    const float *xp = d->x + (nn * p->c + ci) * p->h * p->w, *wk = d->w + mo * p->kh * p->kw;
    const float *rp = d->res ? d->res + (int64_t)t * ohw : NULL;
    float *yp = d->y + (int64_t)t * ohw, bv = d->bias ? d->bias[mo] : 0.0f;
#ifdef KILN_HAVE_X86_KERNELS
    if (direct) {
      dw_plane_direct_avx512(p, xp, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
      if (act_inline(d->act)) continue; /* applied in registers */
    } else if (pad) {
      if (ci != padded_ci || nn != padded_n) { /* channel multipliers share one padded plane */
        dw_pad(p, xp, pad, ph, pw);
        padded_ci = ci;
        padded_n = nn;
      }
      dw_plane_avx512(p, pad, pw, wk, bv, rp, act_inline(d->act) ? d->act : NULL, yp);
      if (act_inline(d->act)) continue; /* applied in registers */
    } else
#endif
      dw_plane_c(p, xp, wk, bv, rp, yp);
    if (d->act->kind != KILN_ACT_NONE) kiln_f32_act(d->isa, yp, (size_t)ohw, d->act);
  }
  free(pad);
}

/* ---- im2col + GEMM ------------------------------------------------------------------------ */

typedef struct col_ctx {
  const kiln_conv2d_f32_params *p;
  const float *xg; /* first input channel of the group */
  float *col;      /* [cg * kh * kw, (oy1 - oy0) * ow] */
  int64_t oy0, oy1; /* the output rows of this tile */
  int isa;
} col_ctx;

#ifdef KILN_HAVE_X86_KERNELS
/* One im2col row: d[ox] = src[ox * sw] for ox in [a, b), 0 elsewhere in [0, ow); sw 1 or 2.
 * Reads src[a * sw .. (b - 1) * sw] only. */
T512 static void im2col_row_avx512(float *d, const float *src, int64_t a, int64_t b, int64_t ow,
                                   int sw) {
  const __m512 z = _mm512_setzero_ps();
  for (int64_t i = 0; i < a; i += 16) {
    int64_t n = a - i < 16 ? a - i : 16;
    _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << n) - 1), z);
  }
  if (sw == 1) {
    int64_t i = a;
    for (; i + 16 <= b; i += 16) _mm512_storeu_ps(d + i, _mm512_loadu_ps(src + i));
    if (i < b) {
      __mmask16 m = (__mmask16)((1u << (b - i)) - 1);
      _mm512_mask_storeu_ps(d + i, m, _mm512_maskz_loadu_ps(m, src + i));
    }
  } else {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t i = a; i < b; i += 16) {
      int64_t n = b - i < 16 ? b - i : 16, e = 2 * n - 1; /* elements read: src[2i .. 2i+e) */
      __mmask16 lo = (__mmask16)(e >= 16 ? 0xffffu : (1u << e) - 1);
      __mmask16 hi = (__mmask16)(e <= 16 ? 0u : (1u << (e - 16)) - 1);
      __m512 v0 = _mm512_maskz_loadu_ps(lo, src + 2 * i);
      __m512 v1 = hi ? _mm512_maskz_loadu_ps(hi, src + 2 * i + 16) : z;
      _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << n) - 1), _mm512_permutex2var_ps(v0, ev, v1));
    }
  }
  for (int64_t i = b; i < ow; i += 16) {
    int64_t n = ow - i < 16 ? ow - i : 16;
    _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << n) - 1), z);
  }
}
#endif

static void im2col_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const col_ctx *cc = ctx;
  const kiln_conv2d_f32_params *p = cc->p;
  int64_t kk = p->kh * p->kw, tn = (cc->oy1 - cc->oy0) * p->ow;
  for (size_t r = begin; r < end; r++) {
    int64_t ci = (int64_t)r / kk, ky = (int64_t)r % kk / p->kw, kx = (int64_t)r % p->kw;
    const float *xp = cc->xg + ci * p->h * p->w;
    float *dst = cc->col + (int64_t)r * tn - cc->oy0 * p->ow;
    int64_t off = kx * p->dw - p->pl, a, b;
    col_range(off, p->sw, p->w, p->ow, &a, &b);
    for (int64_t oy = cc->oy0; oy < cc->oy1; oy++) {
      float *d = dst + oy * p->ow;
      int64_t iy = oy * p->sh - p->pt + ky * p->dh;
      if (iy < 0 || iy >= p->h || a == b) {
        memset(d, 0, sizeof(float) * (size_t)p->ow);
        continue;
      }
      const float *xr = xp + iy * p->w;
#ifdef KILN_HAVE_X86_KERNELS
      if (cc->isa >= KILN_ISA_AVX512 && p->sw <= 2) {
        im2col_row_avx512(d, xr + off, a, b, p->ow, (int)p->sw);
        continue;
      }
#endif
      if (a) memset(d, 0, sizeof(float) * (size_t)a);
      if (p->sw == 1)
        memcpy(d + a, xr + a + off, sizeof(float) * (size_t)(b - a));
      else
        for (int64_t ox = a; ox < b; ox++) d[ox] = xr[ox * p->sw + off];
      if (b < p->ow) memset(d + b, 0, sizeof(float) * (size_t)(p->ow - b));
    }
  }
}

typedef struct ep_ctx {
  float *y;          /* first channel of the block */
  const float *bias; /* first bias of the block, or NULL */
  const float *res;  /* residual for the block, or NULL */
  int64_t n;         /* elements per channel in the block */
  int64_t ld;        /* distance between channels (y and res) */
  const kiln_act *act;
  int isa;
} ep_ctx;

static void ep_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const ep_ctx *e = ctx;
  for (size_t ch = begin; ch < end; ch++) {
    float *y = e->y + (int64_t)ch * e->ld;
#ifdef KILN_HAVE_X86_KERNELS
    if (e->isa >= KILN_ISA_AVX512 && act_inline(e->act)) {
      bias_res_act_avx512(y, e->n, e->bias ? e->bias[ch] : 0.0f,
                          e->res ? e->res + (int64_t)ch * e->ld : NULL, e->act);
      continue;
    }
#endif
    add_bias_res(e->isa, y, e->n, e->bias ? e->bias[ch] : 0.0f, e->res ? e->res + (int64_t)ch * e->ld : NULL);
    if (e->act->kind != KILN_ACT_NONE) kiln_f32_act(e->isa, y, (size_t)e->n, e->act);
  }
}

/* Floats per im2col tile (512 KiB: well within a core's L2). */
enum { COL_TILE = 128 * 1024 };
/* Output elements from which the bias/residual/activation pass is split over the pool. */
enum { EP_PAR_MIN = 512 * 1024 };
/* Direct (1x1) convolutions with a bias: output floats per tile, so that the block the GEMM
 * wrote is still in L2 when the bias/residual/activation pass reads it. */
enum { EP_TILE = 64 * 1024 };
/* Pools up to this size may take whole tiles per thread (per-thread results on the stack). */
enum { MAX_THREADS = 64 };

typedef struct tile_job {
  const kiln_conv2d_f32_params *p;
  const float *x, *w;
  const kiln_conv2d_f32_epilogue *ep;
  float *y;
  int64_t kk, cg, mg, rows, ntiles;
  int64_t tcols;     /* direct: output columns (of the oh * ow plane) per tile */
  bool direct;
  int isa;
  float *col;        /* col_floats per thread (NULL when direct) */
  size_t col_floats;
  kiln_code *rc;     /* per thread */
} tile_job;

/* Task t = (n, group, tile of output rows): im2col, GEMM, epilogue. Loops inside run on
 * `pool` (NULL: this thread). */
static kiln_code run_tile(const tile_job *j, int64_t t, float *col, kiln_threadpool *pool) {
  const kiln_conv2d_f32_params *p = j->p;
  const kiln_conv2d_f32_epilogue *ep = j->ep;
  int64_t tile = t % j->ntiles, gr = t / j->ntiles % p->group, nn = t / j->ntiles / p->group;
  int64_t ohw = p->oh * p->ow, oy0 = tile * j->rows;
  int64_t oy1 = oy0 + j->rows < p->oh ? oy0 + j->rows : p->oh, tn = (oy1 - oy0) * p->ow;
  int64_t c0 = oy0 * p->ow; /* first output column of the tile */
  if (j->direct) {
    c0 = tile * j->tcols;
    tn = ohw - c0 < j->tcols ? ohw - c0 : j->tcols;
  }
  const float *xg = j->x + (nn * p->c + gr * j->cg) * p->h * p->w, *b = xg + c0;
  size_t ldb = (size_t)ohw;
  if (!j->direct) {
    col_ctx cc = {p, xg, col, oy0, oy1, j->isa};
    kiln_parallel_for(pool, (size_t)j->kk, im2col_task, &cc, 0);
    b = col;
    ldb = (size_t)tn;
  }
  int64_t yoff = (nn * p->m + gr * j->mg) * ohw + c0;
  float *yb = j->y + yoff;
  const float *res = ep->residual ? ep->residual + yoff : NULL;
  kiln_gemm_epilogue gep = {0};
  if (!ep->bias) { /* residual and activation fit the GEMM's own epilogue */
    gep.act = ep->act;
    gep.residual = res;
    gep.ldr = (size_t)ohw;
  }
  kiln_gemm_ctx gctx = {pool, j->isa};
  kiln_code rc = kiln_gemm_f32(&gctx, 0, 0, (size_t)j->mg, (size_t)tn, (size_t)j->kk, 1.0f,
                               j->w + gr * j->mg * j->kk, (size_t)j->kk, b, ldb, 0.0f, yb,
                               (size_t)ohw, &gep, NULL);
  if (!rc && ep->bias) {
    ep_ctx e = {yb, ep->bias + gr * j->mg, res, tn, ohw, &ep->act, j->isa};
    /* small blocks: a loop on the pool costs more than it saves */
    kiln_parallel_for(j->mg * tn >= EP_PAR_MIN ? pool : NULL, (size_t)j->mg, ep_task, &e, 0);
  }
  return rc;
}

static void tile_task(void *ctx, size_t begin, size_t end, int ti) {
  const tile_job *j = ctx;
  for (size_t t = begin; t < end; t++)
    if (!j->rc[ti]) j->rc[ti] = run_tile(j, (int64_t)t, j->col ? j->col + (size_t)ti * j->col_floats : NULL, NULL);
}

/* ---- entry ------------------------------------------------------------------------------- */

int kiln_conv2d_f32_uses_winograd(const kiln_conv2d_f32_params *p, int cached) {
  return p && p->winograd >= 0 && kiln_wino_f32_supported(p) &&
         (p->winograd > 0 || kiln_wino_f32_pick(p, cached));
}

kiln_code kiln_conv2d_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                          const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep,
                          float *y) {
  return kiln_conv2d_f32_ex(pool, isa, p, x, w, NULL, ep, y);
}

kiln_code kiln_conv2d_f32_ex(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                             const float *x, const float *w, const float *wu,
                             const kiln_conv2d_f32_epilogue *ep, float *y) {
  static const kiln_conv2d_f32_epilogue none = {0};
  if (!ep) ep = &none;
  isa = kiln_isa_resolve(isa);
  if (isa < 0 || !p || p->n < 0 || p->c < 1 || p->h < 0 || p->w < 0 || p->m < 0 ||
      p->group < 1 || p->c % p->group || p->m % p->group || p->kh < 1 || p->kw < 1 ||
      p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1 || p->pt < 0 || p->pl < 0 ||
      p->oh < 0 || p->ow < 0)
    return KILN_ERR_INVALID_ARG;
  int64_t ohw = p->oh * p->ow, cg = p->c / p->group, mg = p->m / p->group;
  if (!p->n || !p->m || !ohw) return KILN_OK;
  if (!x || !w || !y) return KILN_ERR_INVALID_ARG;

  if (cg == 1) { /* depthwise, any channel multiplier */
    dw_ctx d = {p, x, w, ep->bias, ep->residual, y, &ep->act, isa};
    kiln_parallel_for(pool, (size_t)(p->n * p->m), dw_task, &d, 0);
    return KILN_OK;
  }

  if (kiln_conv2d_f32_uses_winograd(p, wu != NULL)) { /* 3x3 stride 1: Winograd F(2x2, 3x3) */
    if (wu) return kiln_wino_f32_conv(pool, isa, p, x, wu, ep, y);
    float *u = kiln_malloc(sizeof(float) * (size_t)kiln_wino_f32_weights_size(p->m, p->c));
    if (!u) return KILN_ERR_NOMEM;
    kiln_wino_f32_weights(w, p->m, p->c, u);
    kiln_code rc = kiln_wino_f32_conv(pool, isa, p, x, u, ep, y);
    free(u);
    return rc;
  }

  int64_t kk = cg * p->kh * p->kw;
  bool direct = p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 &&
                p->pl == 0 && p->oh == p->h && p->ow == p->w;
  /* Tiles of whole output rows whose im2col block (or input block, direct) is about COL_TILE
   * floats: it stays in cache between its writing and the GEMM's reading ... */
  int64_t rows = COL_TILE / (kk * p->ow);
  /* ... but each tile streams the whole weight block again: at least 4 columns per weight row */
  int64_t min_rows = (4 * mg + p->ow - 1) / p->ow;
  if (rows < min_rows) rows = min_rows;
  if (rows < 1) rows = 1;
  if (rows > p->oh) rows = p->oh;
  int64_t ntiles = (p->oh + rows - 1) / rows, tasks = p->n * p->group * ntiles;
  int nthr = kiln_threadpool_size(pool);
  /* Enough tiles: each thread takes whole tiles (im2col, GEMM, epilogue on its own, one
   * barrier in all); else the tiles run in turn with every loop inside on the pool. */
  bool outer = nthr > 1 && nthr <= MAX_THREADS && tasks >= 3 * (int64_t)nthr;
  int64_t tcols = rows * p->ow;
  if (direct) {
    /* nothing to keep in cache but the output block for the separate bias pass: without a
     * bias, one GEMM per (n, group) unless the tiles are spread over threads */
    if (!outer) tcols = ohw;
    if (ep->bias) {
      int64_t cap = (EP_TILE / mg) & ~(int64_t)63; /* whole 64-column micro-tiles */
      if (cap < 64) cap = 64;
      if (tcols > cap) tcols = cap;
    }
    ntiles = (ohw + tcols - 1) / tcols;
    tasks = p->n * p->group * ntiles;
    outer = nthr > 1 && nthr <= MAX_THREADS && tasks >= 3 * (int64_t)nthr;
  }
  int nbuf = outer ? nthr : 1;
  size_t col_floats = direct ? 0 : (size_t)kk * (size_t)(rows * p->ow);
  float *col = NULL;
  kiln_code rcs[MAX_THREADS] = {0};
  if (!direct) {
    col = kiln_malloc(sizeof(float) * col_floats * (size_t)nbuf);
    if (!col) return KILN_ERR_NOMEM;
  }
  tile_job j = {p, x, w, ep, y, kk, cg, mg, rows, ntiles, tcols, direct, isa, col, col_floats, rcs};
  kiln_code rc = KILN_OK;
  if (outer) {
    kiln_parallel_for(pool, (size_t)tasks, tile_task, &j, 1);
    for (int i = 0; i < nbuf && !rc; i++) rc = rcs[i];
  } else {
    for (int64_t t = 0; t < tasks && !rc; t++) rc = run_tile(&j, t, col, pool);
  }
  free(col);
  return rc;
}
