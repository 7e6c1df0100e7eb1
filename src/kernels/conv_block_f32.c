/* An inverted residual block (MobileNetV2's expansion, depthwise, projection) in one call on
 * small planes, its inner tensors kept channels-last. See kiln_conv_block_f32 in
 * kernels/conv2d_f32.h. */
#include "kernels/conv_internal.h"
#include "kernels/scratch.h"

int kiln_conv_block_f32_ok(const kiln_conv2d_f32_params *d, int64_t c, int64_t m, const kiln_act *e_act,
                           const kiln_act *d_act, int isa) {
#ifdef KILN_HAVE_X86_KERNELS
  return d && c >= 1 && m >= 1 && d->n >= 1 && kiln_dw_cb_f32_fits(d, isa) && act_inline(e_act) &&
         act_inline(d_act);
#else
  (void)d, (void)c, (void)m, (void)e_act, (void)d_act, (void)isa;
  return 0;
#endif
}

/* Floats rounded up to whole cache lines, so each part of the scratch stays 64-byte aligned. */
static size_t lines(int64_t floats) { return ((size_t)floats + 15) / 16 * 16; }

kiln_code kiln_conv_block_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *d, int64_t c,
                              int64_t m, const kiln_conv_block_f32_args *a) {
  if (!kiln_conv_block_f32_ok(d, c, m, &a->e_ep.act, &a->d_ep.act, isa) || !a->we_t || !a->wp_t ||
      kiln_gemm_packed_b_isa(a->we_t) != isa || kiln_gemm_packed_b_isa(a->wp_t) != isa ||
      kiln_gemm_packed_b_k(a->we_t) != (size_t)c || kiln_gemm_packed_b_n(a->we_t) != (size_t)d->c ||
      kiln_gemm_packed_b_k(a->wp_t) != (size_t)d->c || kiln_gemm_packed_b_n(a->wp_t) != (size_t)m)
    return KILN_ERR_UNSUPPORTED;
  const int64_t ce = d->c, hw = d->h * d->w, ohw = d->oh * d->ow;
  kiln_conv2d_f32_params d1 = *d;
  d1.n = 1;
  size_t et = lines(hw * ce), dt = lines(ohw * ce), ct = lines(ohw * m);
  size_t dws = kiln_dw_cb_f32_scratch(&d1, kiln_threadpool_size(pool));
  float *e = kiln_scratch_get(KILN_SCRATCH_CONV, (et + dt + ct) * sizeof(float) + dws);
  if (!e) return KILN_ERR_NOMEM;
  float *dd = e + et, *t = dd + dt, *buf = t + ct;
  kiln_gemm_ctx g = {pool, isa};
  kiln_gemm_epilogue ge = {.bias = a->e_ep.bias, .act = a->e_ep.act};
  kiln_gemm_epilogue gp = {.bias = a->p_ep.bias};
  for (int64_t nn = 0; nn < d->n; nn++) {
    const float *x = a->x + nn * c * hw;
    /* E^T = X^T We^T: the expansion, channels-last */
    kiln_code rc = kiln_gemm_f32_packed(&g, 1, (size_t)hw, 1.0f, x, (size_t)hw, a->we_t, 0.0f, e, (size_t)ce, &ge, NULL);
    if (rc) return rc;
    kiln_dw_cb_f32_cl(pool, &d1, e, ce, a->wd, a->d_ep.bias, &a->d_ep.act, dd, ce, buf);
    /* C^T = D^T Wp^T, then NCHW with the residual and activation */
    rc = kiln_gemm_f32_packed(&g, 0, (size_t)ohw, 1.0f, dd, (size_t)ce, a->wp_t, 0.0f, t, (size_t)m, &gp, NULL);
    if (rc) return rc;
    int64_t yoff = nn * m * ohw;
    kiln_conv_tr_write_back(pool, isa, t, ohw, m, a->p_ep.residual ? a->p_ep.residual + yoff : NULL,
                            &a->p_ep.act, a->y + yoff);
  }
  return KILN_OK;
}
