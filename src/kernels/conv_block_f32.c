/* An inverted residual block (MobileNetV2's expansion, depthwise, projection) in one call:
 * small planes whole and channels-last, larger ones in bands of rows. See kiln_conv_block_f32
 * in kernels/conv2d_f32.h. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/conv_internal.h"
#include "kernels/scratch.h"

/* Input planes of at most KILN_CONV_BLOCK_WHOLE_PLANE pixels run whole, channels-last, their
 * GEMMs on the pool. Larger ones run in bands of output rows, each thread its own rows: a
 * band's expanded rows stay in L2 (MobileNetV2's whole 96 x 112x112 is 4.8 MB), and at several
 * threads each core reads the rows it wrote (the convolutions one by one split the channels,
 * so every node reads what the other core wrote). */

/* Floats of expanded input rows per band (640 KiB: with the band's depthwise rows within a
 * 1 MiB L2). */
enum { BAND_FLOATS = 160 * 1024 };

/* The expansion's direct convolution e: its output is d's input. */
static bool e_conv_ok(const kiln_conv2d_f32_params *e, const kiln_conv2d_f32_params *d, int64_t c, int isa) {
  return conv_params_ok(e) && kiln_conv2d_f32_uses_direct(e, isa) && e->n == d->n && e->c == c && e->m == d->c && e->oh == d->h &&
         e->ow == d->w && e->h >= 1 && e->w >= 1;
}

int kiln_conv_block_f32_ok(const kiln_conv2d_f32_params *d, int64_t c, int64_t m, const kiln_act *e_act,
                           const kiln_act *d_act, const kiln_conv2d_f32_params *e_conv, int isa) {
#ifdef KILN_HAVE_X86_KERNELS
  if (!d || c < 1 || m < 1 || d->n < 1 || !act_inline(e_act) || !act_inline(d_act)) return 0;
  if (e_conv && (d->h * d->w <= KILN_CONV_BLOCK_WHOLE_PLANE || !e_conv_ok(e_conv, d, c, isa))) return 0;
  if (d->h * d->w <= KILN_CONV_BLOCK_WHOLE_PLANE) return kiln_dw_cb_f32_fits(d, isa);
  /* bands: AVX-512 as the small planes; depthwise with multiplier 1; every GEMM of two rows
   * and two columns or more (one would take a matrix-vector path, which sums in another order
   * than the convolutions one by one) */
  return isa >= KILN_ISA_AVX512 && d->group == d->c && d->m == d->c && d->c >= 2 && m >= 2 && d->w >= 2 &&
         d->ow >= 2;
#else
  (void)d, (void)c, (void)m, (void)e_act, (void)d_act, (void)e_conv, (void)isa;
  return 0;
#endif
}

/* Floats rounded up to whole cache lines, so each part of the scratch stays 64-byte aligned. */
static size_t lines(int64_t floats) { return ((size_t)floats + 15) / 16 * 16; }

/* ---- large planes: bands of output rows ------------------------------------------------ */

typedef struct band_job {
  const kiln_conv_block_f32_args *a;
  const kiln_conv2d_f32_params *d;
  int isa;
  int64_t c, m, ob;                  /* input and output channels, output rows per band */
  int64_t parts;                     /* row ranges per image (one per thread) */
  size_t e_floats, d_floats, per_thread;
  float *mem;
  atomic_int *err;
} band_job;

/* Input rows [*iy0, *iy1) that output rows [oy0, oy1) read, and the band's depthwise
 * parameters over them (padding above only where the band reaches above the plane). */
static kiln_conv2d_f32_params band_params(const kiln_conv2d_f32_params *d, int64_t oy0, int64_t oy1, int64_t *iy0,
                                          int64_t *iy1) {
  int64_t top = oy0 * d->sh - d->pt, bot = top + conv_in_rows(d, oy1 - oy0);
  *iy0 = top > 0 ? top : 0;
  *iy1 = bot < d->h ? bot : d->h;
  kiln_conv2d_f32_params b = *d;
  b.n = 1;
  b.h = *iy1 - *iy0;
  b.pt = *iy0 - top;
  b.oh = oy1 - oy0;
  return b;
}

/* One band: E (ce planes of the band's input rows, in e) from the rows the band before left
 * there (*prev0, *prev_rows: its first input row and count; none: 0) and the expansion of the
 * rest, the depthwise into dd, the projection into the output rows; *prev0, *prev_rows then
 * say what e holds for the next band. */
static kiln_code band_run(const band_job *j, const float *x, int64_t nn, int64_t oy0, int64_t oy1, int64_t *prev0,
                          int64_t *prev_rows, float *e, float *dd) {
  const kiln_conv2d_f32_params *d = j->d;
  const kiln_conv_block_f32_args *a = j->a;
  const int64_t w = d->w, ce = d->c, hw = d->h * d->w, ohw = d->oh * d->ow;
  int64_t iy0, iy1;
  kiln_conv2d_f32_params bp = band_params(d, oy0, oy1, &iy0, &iy1);
  int64_t rows = iy1 - iy0, p0 = *prev0, pr = *prev_rows;
  *prev0 = iy0; /* what e holds after this band */
  *prev_rows = rows;
  /* The shared rows move to the front of each plane, plane after plane: with planes no longer
   * than before, no move overwrites rows still to be moved. */
  int64_t keep = rows <= pr && p0 <= iy0 && p0 + pr > iy0 ? p0 + pr - iy0 : 0;
  for (int64_t k = 0; k < ce && keep; k++)
    memmove(e + k * rows * w, e + (k * pr + iy0 - p0) * w, sizeof(float) * (size_t)(keep * w));
  kiln_gemm_ctx g = {NULL, j->isa};
  kiln_gemm_epilogue ge = {.act = a->e_ep.act};
  kiln_code rc = KILN_OK;
  if (keep < rows && a->e_conv) { /* the direct convolution's rows, image nn */
    kiln_conv2d_f32_params ec = *a->e_conv;
    ec.n = 1;
    rc = kiln_conv2d_direct_f32_rows(j->isa, &ec, x, a->we, &a->e_ep, iy0 + keep, iy1, e + keep * w, rows * w);
  } else if (keep < rows) {
    rc = kiln_gemm_f32_rows(&g, 0, 0, (size_t)ce, (size_t)((rows - keep) * w), (size_t)j->c, 1.0f, a->we,
                            (size_t)j->c, x + (iy0 + keep) * w, (size_t)hw, 0.0f, e + keep * w, (size_t)(rows * w),
                            &ge, a->e_ep.bias, NULL);
  }
  if (rc) return rc;
  kiln_conv2d_f32_epilogue dep = {a->d_ep.bias, NULL, a->d_ep.act};
  kiln_conv2d_dw_f32(NULL, j->isa, &bp, e, a->wd, &dep, dd);
  int64_t yo = nn * j->m * ohw + oy0 * d->ow, nq = (oy1 - oy0) * d->ow;
  kiln_gemm_epilogue gp = {.act = a->p_ep.act, .residual = a->p_ep.residual ? a->p_ep.residual + yo : NULL,
                           .ldr = (size_t)ohw};
  return kiln_gemm_f32_rows(&g, 0, 0, (size_t)j->m, (size_t)nq, (size_t)ce, 1.0f, a->wp, (size_t)ce, dd, (size_t)nq,
                            0.0f, a->y + yo, (size_t)ohw, &gp, a->p_ep.bias, NULL);
}

/* Output rows [oy0, oy1) of image nn, band by band. */
static kiln_code band_range(const band_job *j, int64_t nn, int64_t oy0, int64_t oy1, float *mem) {
  const kiln_conv2d_f32_params *in = j->a->e_conv ? j->a->e_conv : j->d; /* the block input's plane */
  const float *x = j->a->x + nn * j->c * in->h * in->w;
  float *e = mem, *dd = mem + j->e_floats;
  int64_t prev0 = 0, prev_rows = 0;
  for (int64_t b0 = oy0; b0 < oy1; b0 += j->ob) {
    int64_t b1 = b0 + j->ob < oy1 ? b0 + j->ob : oy1;
    kiln_code rc = band_run(j, x, nn, b0, b1, &prev0, &prev_rows, e, dd);
    if (rc) return rc;
  }
  return KILN_OK;
}

static void band_task(void *ctx, size_t begin, size_t end, int ti) {
  const band_job *j = ctx;
  for (size_t i = begin; i < end && atomic_load_explicit(j->err, memory_order_relaxed) == KILN_OK; i++) {
    int64_t nn = (int64_t)i / j->parts, part = (int64_t)i % j->parts, oh = j->d->oh;
    kiln_code rc = band_range(j, nn, oh * part / j->parts, oh * (part + 1) / j->parts,
                              j->mem + (size_t)ti * j->per_thread);
    if (rc) {
      int none = KILN_OK;
      atomic_compare_exchange_strong(j->err, &none, (int)rc);
    }
  }
}

/* Output rows per band: the most whose input rows of expanded channels stay within
 * BAND_FLOATS, in eights or else fours where there are enough (the depthwise kernel takes 8,
 * 7 or 4 rows at a time). */
static int64_t band_rows(const kiln_conv2d_f32_params *d) {
  int64_t per_row = d->w * d->c, best = 1;
  for (int64_t r = 1; r <= d->oh; r++) {
    bool fits = conv_in_rows(d, r) * per_row <= BAND_FLOATS;
    if (fits && (r % 8 == 0 || (r % 4 == 0 && best % 8) || best < 4)) best = r;
  }
  return best;
}

static kiln_code block_bands(kiln_threadpool *pool, const kiln_conv_block_f32_args *a, int isa,
                             const kiln_conv2d_f32_params *d, int64_t c, int64_t m) {
  int nthr = kiln_threadpool_size(pool);
  int64_t ob = band_rows(d);
  band_job j = {.a = a, .d = d, .isa = isa, .c = c, .m = m, .ob = ob, .parts = d->oh < nthr ? d->oh : nthr,
                .e_floats = lines(conv_in_rows(d, ob) * d->w * d->c), /* input rows of a band, at most */
                .d_floats = lines(ob * d->ow * d->c)};
  j.per_thread = j.e_floats + j.d_floats;
  /* by thread id; not the convolutions' slot, which the depthwise kernel takes inside */
  j.mem = kiln_scratch_get(KILN_SCRATCH_BLOCK, sizeof(float) * j.per_thread * (size_t)nthr);
  if (!j.mem) return KILN_ERR_NOMEM;
  atomic_int err;
  atomic_init(&err, KILN_OK);
  j.err = &err;
  kiln_parallel_for(pool, (size_t)(d->n * j.parts), band_task, &j, 0);
  return (kiln_code)atomic_load(&err);
}

/* ---- small planes: whole, channels-last, the GEMMs on the pool ------------------------- */

static kiln_code block_whole(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *d, int64_t c, int64_t m,
                             const kiln_conv_block_f32_args *a) {
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

kiln_code kiln_conv_block_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *d, int64_t c,
                              int64_t m, const kiln_conv_block_f32_args *a) {
  if (!kiln_conv_block_f32_ok(d, c, m, &a->e_ep.act, &a->d_ep.act, a->e_conv, isa)) return KILN_ERR_UNSUPPORTED;
  if (d->h * d->w > KILN_CONV_BLOCK_WHOLE_PLANE)
    return a->we && a->wp ? block_bands(pool, a, isa, d, c, m) : KILN_ERR_UNSUPPORTED;
  if (!a->we_t || !a->wp_t || kiln_gemm_packed_b_isa(a->we_t) != isa || kiln_gemm_packed_b_isa(a->wp_t) != isa ||
      kiln_gemm_packed_b_k(a->we_t) != (size_t)c || kiln_gemm_packed_b_n(a->we_t) != (size_t)d->c ||
      kiln_gemm_packed_b_k(a->wp_t) != (size_t)d->c || kiln_gemm_packed_b_n(a->wp_t) != (size_t)m)
    return KILN_ERR_UNSUPPORTED;
  return block_whole(pool, isa, d, c, m, a);
}
