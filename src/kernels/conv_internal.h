/* Pieces shared by the convolution kernels (conv2d_f32.c: im2col/direct GEMM paths and the
 * entry point; conv_dw_f32.c: depthwise). Internal to src/kernels. */
#ifndef KILN_KERNELS_CONV_INTERNAL_H
#define KILN_KERNELS_CONV_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm_internal.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#endif

/* Output columns [*ox0, *ox1) whose input column ox * sw + off lies in [0, w). */
static inline void col_range(int64_t off, int64_t sw, int64_t w, int64_t ow, int64_t *ox0, int64_t *ox1) {
  int64_t a = off >= 0 ? 0 : (-off + sw - 1) / sw;
  int64_t b = w - 1 - off < 0 ? 0 : (w - 1 - off) / sw + 1;
  if (a > ow) a = ow;
  if (b > ow) b = ow;
  if (b < a) b = a;
  *ox0 = a;
  *ox1 = b;
}

/* Parameters any convolution entry point takes: sizes >= 0 (channels >= 1), groups dividing
 * the channels, kernel, strides and dilations >= 1, top and left pads >= 0. */
static inline bool conv_params_ok(const kiln_conv2d_f32_params *p) {
  return p && p->n >= 0 && p->c >= 1 && p->h >= 0 && p->w >= 0 && p->m >= 0 && p->group >= 1 &&
         p->c % p->group == 0 && p->m % p->group == 0 && p->kh >= 1 && p->kw >= 1 && p->sh >= 1 && p->sw >= 1 &&
         p->dh >= 1 && p->dw >= 1 && p->pt >= 0 && p->pl >= 0 && p->oh >= 0 && p->ow >= 0;
}

/* Input rows that r output rows of p read, from the first row's first tap to the last row's
 * last (padded coordinates). */
static inline int64_t conv_in_rows(const kiln_conv2d_f32_params *p, int64_t r) {
  return (r - 1) * p->sh + (p->kh - 1) * p->dh + 1;
}

/* Input columns that n output columns of p read, likewise. */
static inline int64_t conv_in_cols(const kiln_conv2d_f32_params *p, int64_t n) {
  return (n - 1) * p->sw + (p->kw - 1) * p->dw + 1;
}

/* The zero-padded plane inside which every tap of p reads: rows [0, *hp), columns [0, *wp);
 * padded (r, q) is input (r - pt, q - pl). */
static inline void conv_padded_dims(const kiln_conv2d_f32_params *p, int64_t *hp, int64_t *wp) {
  int64_t ry = conv_in_rows(p, p->oh), rx = conv_in_cols(p, p->ow);
  *hp = ry > p->pt + p->h ? ry : p->pt + p->h;
  *wp = rx > p->pl + p->w ? rx : p->pl + p->w;
}

/* y[i] += b (+ r[i]) for i < n. */
static inline void add_bias_res_c(float *restrict y, int64_t n, float b, const float *r) {
  if (r)
    for (int64_t i = 0; i < n; i++) y[i] += b + r[i];
  else
    for (int64_t i = 0; i < n; i++) y[i] += b;
}

#ifdef KILN_HAVE_X86_KERNELS
#define T512 KILN_TARGET_AVX512
#define V512 KILN_INLINE T512

T512 static inline void add_bias_res_avx512(float *y, int64_t n, float b, const float *r) {
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
static inline bool act_inline(const kiln_act *a) {
  return a->kind == KILN_ACT_NONE || a->kind == KILN_ACT_RELU || a->kind == KILN_ACT_CLIP;
}

/* The inline activations, with the same operations as the GEMM's (max(v, 0); min(max(v, lo), hi)). */
V512 __m512 act_inline512(__m512 v, const kiln_act *a) {
  if (a->kind == KILN_ACT_RELU) return _mm512_max_ps(v, _mm512_setzero_ps());
  if (a->kind == KILN_ACT_CLIP)
    return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(a->alpha)), _mm512_set1_ps(a->beta));
  return v;
}

/* r[i] (16 rows of 16) becomes its transpose: r[i][j] = old r[j][i]. */
V512 void transpose16_avx512(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; i++) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + 4 + i], 0x88);
      t[h + 4 + i] = _mm512_shuffle_f32x4(r[h + i], r[h + 4 + i], 0xDD);
    }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
  }
}

/* y[i] = act(y[i] + b (+ r[i])) in one pass, act inline (act_inline). */
T512 static inline void bias_res_act_avx512(float *y, int64_t n, float b, const float *r, const kiln_act *a) {
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

#ifdef KILN_HAVE_X86_KERNELS
/* Output columns [lo, hi) of one im2col row: d[ox - lo] = src[ox * sw] for ox in [a, b),
 * 0 elsewhere; sw 1 or 2. Reads src[a * sw .. (b - 1) * sw] within [lo, hi) only. */
T512 static inline void im2col_seg_avx512(float *d, const float *src, int64_t a, int64_t b,
                                          int64_t lo, int64_t hi, int sw) {
  const __m512 z = _mm512_setzero_ps();
  a = a < lo ? lo : a > hi ? hi : a;
  b = b < a ? a : b > hi ? hi : b;
  for (int64_t i = lo; i < a; i += 16) {
    int64_t n = a - i < 16 ? a - i : 16;
    _mm512_mask_storeu_ps(d + (i - lo), (__mmask16)((1u << n) - 1), z);
  }
  if (sw == 1) {
    int64_t i = a;
    for (; i + 16 <= b; i += 16) _mm512_storeu_ps(d + (i - lo), _mm512_loadu_ps(src + i));
    if (i < b) {
      __mmask16 m = (__mmask16)((1u << (b - i)) - 1);
      _mm512_mask_storeu_ps(d + (i - lo), m, _mm512_maskz_loadu_ps(m, src + i));
    }
  } else {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t i = a; i < b; i += 16) {
      int64_t n = b - i < 16 ? b - i : 16, e = 2 * n - 1; /* elements read: src[2i .. 2i+e) */
      __mmask16 lo_m = (__mmask16)(e >= 16 ? 0xffffu : (1u << e) - 1);
      __mmask16 hi_m = (__mmask16)(e <= 16 ? 0u : (1u << (e - 16)) - 1);
      __m512 v0 = _mm512_maskz_loadu_ps(lo_m, src + 2 * i);
      __m512 v1 = hi_m ? _mm512_maskz_loadu_ps(hi_m, src + 2 * i + 16) : z;
      _mm512_mask_storeu_ps(d + (i - lo), (__mmask16)((1u << n) - 1), _mm512_permutex2var_ps(v0, ev, v1));
    }
  }
  for (int64_t i = b; i < hi; i += 16) {
    int64_t n = hi - i < 16 ? hi - i : 16;
    _mm512_mask_storeu_ps(d + (i - lo), (__mmask16)((1u << n) - 1), z);
  }
}

/* A whole im2col row: output columns [0, ow). */
T512 static inline void im2col_row_avx512(float *d, const float *src, int64_t a, int64_t b, int64_t ow,
                                          int sw) {
  im2col_seg_avx512(d, src, a, b, 0, ow, sw);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* For the files built with the AVX2 flags only (isa_flags.cmake). d[i] = src[i * sw] for i in
 * [a, b), 0 for i in [0, a) and [b, n); sw 1 or 2; src[i * sw] is read for i in [a, b) only.
 * No library calls: rows of a few dozen floats are copied in a loop of their own. */
static inline void kiln_phase_row_avx2(float *d, const float *src, int64_t a, int64_t b, int64_t n,
                                       int sw) {
  int64_t i = 0;
  for (; i + 8 <= a; i += 8) _mm256_storeu_ps(d + i, _mm256_setzero_ps());
  for (; i < a; i++) d[i] = 0.0f;
  if (sw == 1) {
    for (; i + 8 <= b; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(src + i));
  } else { /* 16 loaded, the even lanes kept: src[2 i + 15] must be read (2 i + 15 <= 2 b - 2) */
    for (; 2 * i + 17 <= 2 * b; i += 8) {
      __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(src + 2 * i), _mm256_loadu_ps(src + 2 * i + 8), 0x88);
      _mm256_storeu_ps(d + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xd8)));
    }
  }
  for (; i < b; i++) d[i] = src[i * sw];
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_setzero_ps());
  for (; i < n; i++) d[i] = 0.0f;
}
#endif

static inline void add_bias_res(int isa, float *y, int64_t n, float b, const float *r) {
#ifdef KILN_HAVE_X86_KERNELS
  if (isa >= KILN_ISA_AVX512) {
    add_bias_res_avx512(y, n, b, r);
    return;
  }
#endif
  (void)isa;
  add_bias_res_c(y, n, b, r);
}

/* One depthwise output plane (stride 1 or 2 in x) from the zero-padded input plane of width pw
 * (8-lane chunks, conv_dw_f32.c's dw_pad): bias bv, residual rp (or NULL), act NULL or an
 * act_inline one. AVX2+FMA (conv_dw_avx2.c): call only when kiln_cpu_isa() chose AVX2 or more. */
void kiln_dw_plane_avx2(const kiln_conv2d_f32_params *p, const float *pad, int64_t pw,
                        const float *wk, float bv, const float *rp, const kiln_act *act,
                        float *yp);

/* One depthwise output plane of a 3x3 kernel, dilation 1, strides 1 or 2, straight from the
 * input plane xp (no padded copy; rows outside it read from `zero`, p->w + 32 zeros): bias
 * bv, residual rp (or NULL), act NULL or an act_inline one. AVX2+FMA (conv_dw_avx2.c), as
 * above. */
void kiln_dw3_plane_avx2(const kiln_conv2d_f32_params *p, const float *xp, const float *wk,
                         float bv, const float *rp, const kiln_act *act, float *yp,
                         const float *zero);

/* 1 when kiln_dw_cb_f32 computes depthwise p (channel multiplier 1, at most 49 taps, a padded
 * plane of 16-channel cells within its per-thread budget) at ISA level isa (AVX-512). */
int kiln_dw_cb_f32_fits(const kiln_conv2d_f32_params *p, int isa);
/* Depthwise p in blocks of 16 channels (conv_dw_cb.c), the same bytes as the row kernels;
 * KILN_ERR_NOMEM when its scratch cannot be had (nothing written then). */
kiln_code kiln_dw_cb_f32(kiln_threadpool *pool, const kiln_conv2d_f32_params *p, const float *x,
                         const float *w, const kiln_conv2d_f32_epilogue *ep, float *y);
/* y[co][q] = act(t[q][co] + res[co][q]) for an output plane of ohw pixels and m channels: C^T
 * of the transposed GEMM written back to NCHW (res may be NULL), on the pool when large. */
void kiln_conv_tr_write_back(kiln_threadpool *pool, int isa, const float *t, int64_t ohw, int64_t m,
                             const float *res, const kiln_act *act, float *y);

/* Bytes of scratch kiln_dw_cb_f32_cl needs for p on `threads` threads. */
size_t kiln_dw_cb_f32_scratch(const kiln_conv2d_f32_params *p, int threads);
/* The same on channels-last data of one image (p->n 1): x[q * ldx + ci] for input pixel q,
 * y[q * ldy + co] for output pixel q, bias (or NULL) and an inline activation (act_inline), no
 * residual; scratch: kiln_dw_cb_f32_scratch(p, kiln_threadpool_size(pool)) bytes, 64-byte
 * aligned. AVX-512 (kiln_dw_cb_f32_fits). */
void kiln_dw_cb_f32_cl(kiln_threadpool *pool, const kiln_conv2d_f32_params *p, const float *x, int64_t ldx,
                       const float *w, const float *bias, const kiln_act *act, float *y, int64_t ldy,
                       float *scratch);

/* Depthwise convolution (one input channel per group, any channel multiplier), any padding,
 * stride and dilation; planes split over the pool. */
void kiln_conv2d_dw_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                        const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep, float *y);

/* 1 when p (one group, at most 4 input channels, x stride 1 or 2, a kernel larger than 1x1,
 * output rows of 16 and more) is computed by kiln_conv2d_direct_f32 at ISA level isa
 * (resolved): the first layers of CNNs, whose im2col GEMM is short in K (27, 147) and spends
 * much of its time copying. */
int kiln_conv2d_f32_uses_direct(const kiln_conv2d_f32_params *p, int isa);

/* Direct convolution for kiln_conv2d_f32_uses_direct shapes (AVX-512 or AVX2; see
 * conv_direct_f32.c).
 * Parameters validated by the caller. */
kiln_code kiln_conv2d_direct_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                 const float *x, const float *w,
                                 const kiln_conv2d_f32_epilogue *ep, float *y);

/* Output rows [oy0, oy1) of kiln_conv2d_direct_f32 for one image (p->n == 1, no residual), on
 * the calling thread: output channel co's row oy at y + co * ys + (oy - oy0) * ow, the same
 * bytes as the whole convolution's. KILN_ERR_INVALID_ARG where p is not a direct shape at isa
 * or the rows are out of range. */
kiln_code kiln_conv2d_direct_f32_rows(int isa, const kiln_conv2d_f32_params *p, const float *x, const float *w,
                                      const kiln_conv2d_f32_epilogue *ep, int64_t oy0, int64_t oy1, float *y,
                                      int64_t ys);

#endif
