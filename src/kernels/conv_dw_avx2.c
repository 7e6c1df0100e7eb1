/* Depthwise float32 convolution, AVX2+FMA: one output plane (stride 1 or 2 in x) from the
 * zero-padded input plane that conv_dw_f32.c builds (dw_pad, 8-lane chunks). Entered only from
 * conv_dw_f32.c's dw_task when kiln_cpu_isa() chose AVX2; built with the AVX2 flags
 * (isa_flags.cmake). */
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

/* Output chunk u (8 columns of one row): residual, activation, store (masked only at a row's
 * end). */
static inline void dw_store8(const kiln_conv2d_f32_params *p, int64_t nch, int64_t u, __m256 v,
                             const float *rp, const kiln_act *act, float *yp) {
  int64_t oy = u / nch, ox = (u % nch) * 8, n = p->ow - ox < 8 ? p->ow - ox : 8;
  float *y = yp + oy * p->ow + ox;
  if (n == 8) {
    if (rp) v = _mm256_add_ps(v, _mm256_loadu_ps(rp + oy * p->ow + ox));
    if (act) v = dw_act8(v, act);
    _mm256_storeu_ps(y, v);
    return;
  }
  __m256i m = _mm256_loadu_si256((const __m256i *)(dw_mask_table + 8 - n));
  if (rp) v = _mm256_add_ps(v, _mm256_maskload_ps(rp + oy * p->ow + ox, m));
  if (act) v = dw_act8(v, act);
  _mm256_maskstore_ps(y, m, v);
}

void kiln_dw_plane_avx2(const kiln_conv2d_f32_params *p, const float *pad, int64_t pw,
                        const float *wk, float bv, const float *rp, const kiln_act *act,
                        float *yp) {
  const int sw = (int)p->sw;
  const int64_t nch = (p->ow + 7) / 8, nu = p->oh * nch, kh = p->kh, kw = p->kw;
  const __m256 vb = _mm256_set1_ps(bv);
  if (act && act->kind == KILN_ACT_NONE) act = NULL;
#define DW_BASE(uu) (pad + ((uu) / nch) * p->sh * pw + ((uu) % nch) * 8 * sw)
  int64_t u = 0;
  /* four chunks at a time, each its own chain of taps (across rows when rows are narrow) */
  for (; u + 4 <= nu; u += 4) {
    const float *b0 = DW_BASE(u), *b1 = DW_BASE(u + 1), *b2 = DW_BASE(u + 2), *b3 = DW_BASE(u + 3);
    __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
    for (int64_t ky = 0; ky < kh; ky++)
      for (int64_t kx = 0; kx < kw; kx++) {
        __m256 wv = _mm256_set1_ps(wk[ky * kw + kx]);
        int64_t o = ky * p->dh * pw + kx * p->dw;
        a0 = _mm256_fmadd_ps(dw_in8(b0, o, sw), wv, a0);
        a1 = _mm256_fmadd_ps(dw_in8(b1, o, sw), wv, a1);
        a2 = _mm256_fmadd_ps(dw_in8(b2, o, sw), wv, a2);
        a3 = _mm256_fmadd_ps(dw_in8(b3, o, sw), wv, a3);
      }
    dw_store8(p, nch, u, a0, rp, act, yp);
    dw_store8(p, nch, u + 1, a1, rp, act, yp);
    dw_store8(p, nch, u + 2, a2, rp, act, yp);
    dw_store8(p, nch, u + 3, a3, rp, act, yp);
  }
  for (; u < nu; u++) {
    const float *b0 = DW_BASE(u);
    __m256 a0 = vb;
    for (int64_t ky = 0; ky < kh; ky++)
      for (int64_t kx = 0; kx < kw; kx++)
        a0 = _mm256_fmadd_ps(dw_in8(b0, ky * p->dh * pw + kx * p->dw, sw),
                             _mm256_set1_ps(wk[ky * kw + kx]), a0);
    dw_store8(p, nch, u, a0, rp, act, yp);
  }
#undef DW_BASE
}

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_conv_dw_avx2_unused;
#endif
