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

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_conv_dw_avx2_unused;
#endif
