/* Depthwise float32 convolution in blocks of 16 channels (AVX-512).
 *
 * The row kernels of conv_dw_f32.c vectorise along an output row, so a small plane fills few
 * lanes and every tap needs a shifted copy of an input row. Here the lanes are 16 channels
 * instead: each block of 16 channels of one image is copied, through 16 x 16 register
 * transposes, into a per-thread zero-padded buffer of cells of 16 floats (one cell per padded
 * input pixel), every tap of an output pixel is then one aligned load and one FMA, and 16
 * output pixels at a time go back to the NCHW output through a register transpose, with the
 * residual and activation. The bias and the taps (in the order ky, kx) are accumulated as in
 * the row kernels, so both give the same bytes. See kiln_dw_cb_f32_fits for where it is taken. */

#include "kernels/conv_internal.h"
#include "kernels/scratch.h"

#ifdef KILN_HAVE_X86_KERNELS

enum { CB_MAX_TAPS = 49 };

typedef struct cb_ctx {
  const kiln_conv2d_f32_params *p;
  const float *x, *w, *bias, *res;
  float *y;
  const kiln_act *act;
  int64_t ldx, ldy;         /* > 0: x, y channels-last ([pixel][channel], rows of ldx, ldy
                               floats; one image, no residual); 0: NCHW */
  const int32_t *in_cell;  /* h * w: the padded cell of each input pixel */
  const int32_t *out_cell; /* ohw rounded up to 16: the cell under tap (0, 0) of each output
                              pixel; past ohw, that of the last one */
  int32_t tap[CB_MAX_TAPS]; /* cell offset of tap (ky, kx) */
  int64_t hp, wp;           /* the padded plane */
  size_t buf_floats;        /* per thread: hp * wp cells of 16 floats, then taps x 16 weights */
  float *bufs;
} cb_ctx;

/* Per-thread buffer floats for p. */
static size_t cb_buf_floats(const kiln_conv2d_f32_params *p) {
  int64_t hp, wp;
  conv_padded_dims(p, &hp, &wp);
  return (size_t)(hp * wp + p->kh * p->kw) * 16;
}

/* Cells of the padded plane that no input pixel fills (its border), zeroed once per thread
 * and call: the copies of the channel blocks write the other cells only. */
T512 static void cb_zero_border(const cb_ctx *d, float *buf) {
  const kiln_conv2d_f32_params *p = d->p;
  const __m512 z = _mm512_setzero_ps();
  for (int64_t r = 0; r < d->hp; r++) {
    bool inside = r >= p->pt && r < p->pt + p->h;
    for (int64_t q = 0; q < d->wp; q++)
      if (!inside || q < p->pl || q >= p->pl + p->w) _mm512_store_ps(buf + (r * d->wp + q) * 16, z);
  }
}

/* Channels [0, nc) of x (planes of h * w, or channels-last rows) into the interior cells of buf. */
T512 static void cb_pack(const cb_ctx *d, const float *x, int64_t nc, float *buf) {
  const int64_t hw = d->p->h * d->p->w;
  if (d->ldx) {
    const __mmask16 cm = (__mmask16)((1u << nc) - 1);
    for (int64_t q = 0; q < hw; q++)
      _mm512_store_ps(buf + (int64_t)d->in_cell[q] * 16, _mm512_maskz_loadu_ps(cm, x + q * d->ldx));
    return;
  }
  for (int64_t q0 = 0; q0 < hw; q0 += 16) {
    int64_t nq = hw - q0 < 16 ? hw - q0 : 16;
    __mmask16 qm = (__mmask16)((1u << nq) - 1);
    __m512 r[16];
    for (int l = 0; l < 16; l++)
      r[l] = l < nc ? _mm512_maskz_loadu_ps(qm, x + l * hw + q0) : _mm512_setzero_ps();
    transpose16_avx512(r);
    for (int64_t j = 0; j < nq; j++) _mm512_store_ps(buf + (int64_t)d->in_cell[q0 + j] * 16, r[j]);
  }
}

/* Output pixels [q0, q0 + 16) of the block's channels (a[i]: pixel q0 + i, 16 channels) to
 * y's planes yc (channel c0 of image nn), with the residual and an inline activation. */
V512 void cb_store(const cb_ctx *d, __m512 a[16], int64_t nn, int64_t c0, int64_t nc, int64_t q0) {
  const int64_t ohw = d->p->oh * d->p->ow, nq = ohw - q0 < 16 ? ohw - q0 : 16;
  const __mmask16 qm = (__mmask16)((1u << nq) - 1);
  const bool inl = act_inline(d->act);
  if (d->ldy) { /* channels-last: a[i] is the row of pixel q0 + i */
    const __mmask16 cm = (__mmask16)((1u << nc) - 1);
    for (int64_t i = 0; i < nq; i++)
      _mm512_mask_storeu_ps(d->y + (q0 + i) * d->ldy + c0, cm, inl ? act_inline512(a[i], d->act) : a[i]);
    return;
  }
  transpose16_avx512(a);
  for (int64_t l = 0; l < nc; l++) {
    int64_t off = (nn * d->p->m + c0 + l) * ohw + q0;
    __m512 v = a[l];
    if (d->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(qm, d->res + off));
    if (inl) v = act_inline512(v, d->act);
    _mm512_mask_storeu_ps(d->y + off, qm, v);
  }
}

/* 3x3, dilation 1: the nine weight vectors stay in registers, each tap a load at a constant
 * offset from the pixel's cell. */
T512 static void cb_run3(const cb_ctx *d, const float *buf, const float *wr, __m512 bv, int64_t nn,
                         int64_t c0, int64_t nc) {
  const int64_t ohw = d->p->oh * d->p->ow, row = d->wp * 16;
  __m512 w[9];
  for (int t = 0; t < 9; t++) w[t] = _mm512_load_ps(wr + t * 16);
  for (int64_t q0 = 0; q0 < ohw; q0 += 16) {
    __m512 a[16];
    const int32_t *oc = d->out_cell + q0;
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      const float *s = buf + (int64_t)oc[i] * 16;
      __m512 v = bv;
      v = _mm512_fmadd_ps(_mm512_load_ps(s), w[0], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + 16), w[1], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + 32), w[2], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + row), w[3], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + row + 16), w[4], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + row + 32), w[5], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + 2 * row), w[6], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + 2 * row + 16), w[7], v);
      v = _mm512_fmadd_ps(_mm512_load_ps(s + 2 * row + 32), w[8], v);
      a[i] = v;
    }
    cb_store(d, a, nn, c0, nc, q0);
  }
}

/* Any kernel: tap by tap over 16 output pixels, the weight vector loaded once per tap. */
T512 static void cb_run(const cb_ctx *d, const float *buf, const float *wr, __m512 bv, int64_t nn,
                        int64_t c0, int64_t nc) {
  const int64_t ohw = d->p->oh * d->p->ow, taps = d->p->kh * d->p->kw;
  for (int64_t q0 = 0; q0 < ohw; q0 += 16) {
    __m512 a[16];
    const int32_t *oc = d->out_cell + q0;
    for (int i = 0; i < 16; i++) a[i] = bv;
    for (int64_t t = 0; t < taps; t++) {
      const __m512 wv = _mm512_load_ps(wr + t * 16);
      const float *s = buf + (int64_t)d->tap[t] * 16;
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(_mm512_load_ps(s + (int64_t)oc[i] * 16), wv, a[i]);
    }
    cb_store(d, a, nn, c0, nc, q0);
  }
}

/* Channel block cb (channels 16 cb .. + 16) of image nn. */
T512 static void cb_block(const cb_ctx *d, int64_t nn, int64_t cb, float *buf) {
  const kiln_conv2d_f32_params *p = d->p;
  const int64_t c0 = cb * 16, nc = p->c - c0 < 16 ? p->c - c0 : 16, taps = p->kh * p->kw;
  const int64_t ohw = p->oh * p->ow;
  float *wr = buf + d->hp * d->wp * 16;
  cb_pack(d, d->ldx ? d->x + c0 : d->x + (nn * p->c + c0) * p->h * p->w, nc, buf);
  for (int64_t t = 0; t < taps; t++)
    for (int64_t l = 0; l < 16; l++) wr[t * 16 + l] = l < nc ? d->w[(c0 + l) * taps + t] : 0.0f;
  const __mmask16 cm = (__mmask16)((1u << nc) - 1);
  const __m512 bv = d->bias ? _mm512_maskz_loadu_ps(cm, d->bias + c0) : _mm512_setzero_ps();
  if (p->kh == 3 && p->kw == 3 && p->dh == 1 && p->dw == 1)
    cb_run3(d, buf, wr, bv, nn, c0, nc);
  else
    cb_run(d, buf, wr, bv, nn, c0, nc);
  if (!act_inline(d->act)) /* NCHW only (kiln_dw_cb_f32_cl takes inline ones) */
    for (int64_t l = 0; l < nc; l++)
      kiln_f32_act(KILN_ISA_AVX512, d->y + (nn * p->m + c0 + l) * ohw, (size_t)ohw, d->act);
}

static void cb_task(void *ctx, size_t begin, size_t end, int ti) {
  const cb_ctx *d = ctx;
  float *buf = d->bufs + (size_t)ti * d->buf_floats;
  int64_t ncb = (d->p->c + 15) / 16;
  cb_zero_border(d, buf);
  for (size_t t = begin; t < end; t++) cb_block(d, (int64_t)t / ncb, (int64_t)t % ncb, buf);
}

#endif

/* Input planes of at most this many pixels. Copying a block in and out through transposes
 * costs about what its taps do, so the blocks win only where the row kernels fill few lanes.
 * One-node models, `kiln bench --threads 1 --repeat 300`, 3 alternations, pinned (AMD EPYC
 * Zen 5, avx512), blocked against row kernels: 960 x 7x7 0.72; 576 x 14x14 stride 2 0.93;
 * 384 and 576 x 14x14 0.96-0.98; 192 x 28x28 stride 2 1.02; 144 x 56x56 stride 2 1.07;
 * 192 x 28x28 1.26; 144 x 56x56 1.47. */
enum { CB_MAX_PLANE = 256 };

int kiln_dw_cb_f32_fits(const kiln_conv2d_f32_params *p, int isa) {
#ifdef KILN_HAVE_X86_KERNELS
  return p->dw_blocked >= 0 && isa >= KILN_ISA_AVX512 && p->group == p->c && p->m == p->c && p->kh * p->kw <= CB_MAX_TAPS &&
         p->h * p->w <= CB_MAX_PLANE;
#else
  (void)p, (void)isa;
  return 0;
#endif
}

size_t kiln_dw_cb_f32_scratch(const kiln_conv2d_f32_params *p, int threads) {
#ifdef KILN_HAVE_X86_KERNELS
  size_t cells = (size_t)(p->h * p->w + (p->oh * p->ow + 15) / 16 * 16); /* the two tables */
  return ((size_t)threads * cb_buf_floats(p) + cells) * sizeof(float);
#else
  (void)p, (void)threads;
  return 0;
#endif
}

/* The tables and the loop over (image, channel block) on scratch of kiln_dw_cb_f32_scratch bytes. */
#ifdef KILN_HAVE_X86_KERNELS
static void cb_run_all(kiln_threadpool *pool, cb_ctx *d, float *scratch) {
  const kiln_conv2d_f32_params *p = d->p;
  conv_padded_dims(p, &d->hp, &d->wp);
  d->buf_floats = cb_buf_floats(p);
  d->bufs = scratch;
  const int64_t hw = p->h * p->w, ohw = p->oh * p->ow, nq = (ohw + 15) / 16 * 16;
  int32_t *in_cell = (int32_t *)(scratch + (size_t)kiln_threadpool_size(pool) * d->buf_floats);
  int32_t *out_cell = in_cell + hw;
  for (int64_t iy = 0, q = 0; iy < p->h; iy++)
    for (int64_t ix = 0; ix < p->w; ix++) in_cell[q++] = (int32_t)((iy + p->pt) * d->wp + ix + p->pl);
  for (int64_t q = 0; q < nq; q++) {
    int64_t o = q < ohw ? q : ohw - 1;
    out_cell[q] = (int32_t)(o / p->ow * p->sh * d->wp + o % p->ow * p->sw);
  }
  for (int64_t ky = 0; ky < p->kh; ky++)
    for (int64_t kx = 0; kx < p->kw; kx++) d->tap[ky * p->kw + kx] = (int32_t)(ky * p->dh * d->wp + kx * p->dw);
  d->in_cell = in_cell;
  d->out_cell = out_cell;
  kiln_parallel_for(pool, (size_t)(p->n * ((p->c + 15) / 16)), cb_task, d, 0);
}
#endif

kiln_code kiln_dw_cb_f32(kiln_threadpool *pool, const kiln_conv2d_f32_params *p, const float *x,
                         const float *w, const kiln_conv2d_f32_epilogue *ep, float *y) {
#ifdef KILN_HAVE_X86_KERNELS
  cb_ctx d = {.p = p, .x = x, .w = w, .bias = ep->bias, .res = ep->residual, .y = y, .act = &ep->act};
  float *scratch = kiln_scratch_get(KILN_SCRATCH_CONV, kiln_dw_cb_f32_scratch(p, kiln_threadpool_size(pool)));
  if (!scratch) return KILN_ERR_NOMEM;
  cb_run_all(pool, &d, scratch);
  return KILN_OK;
#else
  (void)pool, (void)p, (void)x, (void)w, (void)ep, (void)y;
  return KILN_ERR_UNSUPPORTED;
#endif
}

void kiln_dw_cb_f32_cl(kiln_threadpool *pool, const kiln_conv2d_f32_params *p, const float *x, int64_t ldx,
                       const float *w, const float *bias, const kiln_act *act, float *y, int64_t ldy,
                       float *scratch) {
#ifdef KILN_HAVE_X86_KERNELS
  cb_ctx d = {.p = p, .x = x, .w = w, .bias = bias, .y = y, .act = act, .ldx = ldx, .ldy = ldy};
  cb_run_all(pool, &d, scratch);
#else
  (void)pool, (void)p, (void)x, (void)ldx, (void)w, (void)bias, (void)act, (void)y, (void)ldy, (void)scratch;
#endif
}
