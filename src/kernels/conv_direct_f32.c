/* Direct float32 convolution for few input channels (the first layer of CNNs: 3 -> 32/64,
 * 7x7 or 3x3, stride 2). Their im2col GEMM is short in K (27, 147): the copy of the input
 * into the im2col block costs about as much as the multiplications. Here instead:
 *
 * 1. Each thread copies the input rows its output rows read into its own zero-padded buffer,
 *    rows split into the x stride's phases (stride 2: even and odd columns). Tap (ky, kx) of output columns
 *    [ox, ox + 16) then reads 16 consecutive floats of one phase row: no gathers, no masks,
 *    no bounds (the padding is in the buffer). Its size is about the input's share of the
 *    thread; fill and compute are one parallel loop.
 * 2. Output rows, a contiguous range per thread, are computed in blocks of 8 output
 *    channels times 1-3 vectors of 16 output columns (up to 24 accumulators), every tap one
 *    load per vector and one broadcast weight per channel; then bias, residual and relu/clip
 *    in registers (other activations over the stored row).
 *
 * Every output element sums its taps in the same order (input channel, ky, kx) whatever the
 * thread count or the tile it falls in, so the result does not depend on the threads.
 * Weights are laid out per call ([m / 8][taps][8], zero-padded channels): m * taps floats,
 * far less than the work. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_direct.h"
#include "kernels/conv_internal.h"
#include "kernels/scratch.h"

/* Channels per block: 8 broadcasts per tap against up to 3 input vectors. */
enum { CB = KILN_DIR_CB, MAX_NS = 3 };

int kiln_conv2d_f32_uses_direct(const kiln_conv2d_f32_params *p, int isa) {
#ifdef KILN_HAVE_X86_KERNELS
  return p && isa >= KILN_ISA_AVX2 && p->group == 1 && p->c <= 4 && p->sw <= 2 &&
         p->kh * p->kw > 1 && p->ow >= 16 && p->m >= 4;
#else
  (void)p;
  (void)isa;
  return 0;
#endif
}

#ifdef KILN_HAVE_X86_KERNELS

typedef kiln_dir_ctx dir_ctx; /* conv_direct.h: shared with the AVX2 row task */

/* One phase row for fill_rows (conv_direct_tasks.h). */
T512 static void phase_row(float *dst, const float *src, int64_t a, int64_t b, int64_t t, int sw) {
  if (a == b)
    memset(dst, 0, sizeof(float) * (size_t)t);
  else
    im2col_row_avx512(dst, src, a, b, t, sw);
}

/* Channels [co, co + nc) (nc <= CB) of output columns [ox, ox + 16 * NS) (the last vector
 * masked by lm) of the row at y0 (channel co; channels ys apart), from input xr (image, row
 * oy * sh, column ox); the residual row at r0, channels d->ohw apart. */
KILN_INLINE T512 void block_avx512(const dir_ctx *d, const float *xr, const float *wb, int NS,
                                   __mmask16 lm, float *y0, int64_t ys, int64_t co, int64_t nc,
                                   const float *r0) {
  __m512 acc[MAX_NS][CB];
  for (int s = 0; s < NS; s++)
    for (int c = 0; c < CB; c++) acc[s][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < d->taps; k++) {
    const float *src = xr + d->off[k], *wk = wb + k * CB;
    __m512 v[MAX_NS];
    for (int s = 0; s < NS; s++) v[s] = _mm512_loadu_ps(src + 16 * s);
    for (int c = 0; c < CB; c++) {
      __m512 wv = _mm512_set1_ps(wk[c]);
      for (int s = 0; s < NS; s++) acc[s][c] = _mm512_fmadd_ps(v[s], wv, acc[s][c]);
    }
  }
  /* the epilogue from locals (stores to y could alias *d in the compiler's view) */
  const float *bias = d->bias + co;
  const bool clamp = d->clamp;
  const __m512 lo = _mm512_set1_ps(d->lo), hi = _mm512_set1_ps(d->hi);
  const int64_t ohw = d->ohw;
  for (int c = 0; c < CB; c++) {
    if (c >= nc) break;
    __m512 vb = _mm512_set1_ps(bias[c]);
    for (int s = 0; s < NS; s++) {
      __mmask16 m = s == NS - 1 ? lm : (__mmask16)0xffff;
      __m512 v = _mm512_add_ps(acc[s][c], vb);
      if (r0) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r0 + c * ohw + 16 * s));
      if (clamp) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_mask_storeu_ps(y0 + c * ys + 16 * s, m, v);
    }
  }
}

/* Rows of output per pass over the channel blocks when the weights are large (7x7 stem: 37
 * KiB; they and the input rows of one output row, 22 KiB, do not fit L1 together): one
 * block's weights (taps * 8 floats) stay in L1 while these rows are computed, and the input
 * rows of 4 output rows (stem: 41 KiB) about do too (measured 2% faster than 16 rows). Small
 * weights (3x3: 7 KiB) stay in L1 anyway: then one row at a time, every block reading its
 * input rows from L1 (measured 5-7% faster on 3x3 stems). */
enum { ROWS_PER_PASS = 4 };

/* Output row i (n * oh + oy), channel block b, from a region filled from output row oy0 of the
 * same image: the row in vectors of 16 columns taken 3 at a time (4 left: 2 + 2). Channel co's
 * row goes to yb + co * ys + yr * ow: the output (yb the image, ys its plane, yr = oy), or a
 * buffer of some rows (kiln_conv2d_f32_maxpool). */
T512 static void row_block(const dir_ctx *d, const float *reg, int64_t oy0, int64_t i, int64_t b,
                           float *yb, int64_t ys, int64_t yr) {
  const kiln_conv2d_f32_params *p = d->p;
  const kiln_conv2d_f32_epilogue *ep = d->ep;
  int64_t nv = (p->ow + 15) / 16;
  __mmask16 tail = (__mmask16)(p->ow % 16 ? (1u << (p->ow % 16)) - 1 : 0xffffu);
  int64_t nn = i / p->oh, oy = i % p->oh;
  const float *xi = reg + (oy - oy0) * p->sh * p->sw * d->t;
  int64_t co = b * CB, nc = p->m - co < CB ? p->m - co : CB;
  int64_t yo = co * ys + yr * p->ow, ro = (nn * p->m + co) * d->ohw + oy * p->ow;
  const float *wb = d->wb + b * d->taps * CB;
  for (int64_t v0 = 0; v0 < nv;) {
    int64_t left = nv - v0, ns = left == 4 ? 2 : left < MAX_NS ? left : MAX_NS;
    __mmask16 lm = v0 + ns == nv ? tail : (__mmask16)0xffff;
    const float *xr = xi + 16 * v0, *r0 = ep->residual ? ep->residual + ro + 16 * v0 : NULL;
    float *y0 = yb + yo + 16 * v0;
    if (ns == 3)
      block_avx512(d, xr, wb, 3, lm, y0, ys, co, nc, r0);
    else if (ns == 2)
      block_avx512(d, xr, wb, 2, lm, y0, ys, co, nc, r0);
    else
      block_avx512(d, xr, wb, 1, lm, y0, ys, co, nc, r0);
    v0 += ns;
  }
  if (!act_inline(&ep->act))
    for (int64_t c = 0; c < nc; c++)
      kiln_f32_act(KILN_ISA_AVX512, yb + yo + c * ys, (size_t)p->ow, &ep->act);
}

/* row_task, and pool_task after pool_band below */
#define DIR_TASK_ATTR T512 static
#define DIR_LEAF_ATTR T512 static
#define DIR_ROW_TASK row_task
#define DIR_POOL_TASK pool_task
T512 static void pool_band(const kiln_dir_pool_ctx *pc, int64_t nn, int64_t q0, int64_t q1, const float *cb,
                           int64_t r0, float *tmp);
#include "kernels/conv_direct_tasks.h"

/* The context of a direct convolution whose threads compute up to `cap` output rows per
 * region fill, with `extra` floats per thread after their region (aligned), in this thread's
 * scratch (not a malloc per call: in a network the scratch lines other convolutions just used
 * are still in cache; MobileNetV2's stem took 0.476 against 0.524 ms, kiln profile, thread
 * time, 1 thread, AMD EPYC Zen 5, avx512). */
static kiln_code dir_setup(int64_t nthr, const kiln_conv2d_f32_params *p, const float *x,
                           const float *w, const kiln_conv2d_f32_epilogue *ep, float *y,
                           int64_t cap, size_t extra, dir_ctx *d) {
  int64_t taps = p->c * p->kh * p->kw, mb = (p->m + CB - 1) / CB;
  /* buffer rows reach row (oh - 1) * sh + (kh - 1) * dh; phase rows reach element
   * (vectors of the row) * 16 - 1 + (kw - 1) * dw / sw, and are whole cache lines from an
   * aligned start, so the taps at phase offset 0 load without line splits (measured 2-8%) */
  int64_t hp = conv_in_rows(p, cap); /* region rows per channel */
  int64_t t = ((p->ow + 15) / 16 * 16 + (p->kw - 1) * p->dw / p->sw + 1 + 15) / 16 * 16;
  size_t region = ((size_t)(p->c * hp * p->sw * t) + extra + 15) / 16 * 16; /* 64-byte steps */
  size_t xbn = region * (size_t)nthr;
  size_t wbn = (size_t)(mb * taps * CB);
  float *xb = kiln_scratch_get(KILN_SCRATCH_CONV, sizeof(float) * (xbn + wbn + (size_t)(mb * CB)) +
                                                     sizeof(int64_t) * (size_t)taps);
  if (!xb) return KILN_ERR_NOMEM;
  float *wb = xb + xbn, *bias = wb + wbn;
  int64_t *off = (int64_t *)(void *)(bias + mb * CB);
  for (int64_t co = 0; co < mb * CB; co++) bias[co] = ep->bias && co < p->m ? ep->bias[co] : 0.0f;
  for (int64_t co = 0; co < mb * CB; co++)
    for (int64_t k = 0; k < taps; k++)
      wb[(co / CB * taps + k) * CB + co % CB] = co < p->m ? w[co * taps + k] : 0.0f;
  int64_t kk = p->kh * p->kw;
  for (int64_t k = 0; k < taps; k++) {
    int64_t ci = k / kk, ky = k % kk / p->kw, kx = k % p->kw, j = kx * p->dw;
    off[k] = ((ci * hp + ky * p->dh) * p->sw + j % p->sw) * t + j / p->sw;
  }
  bool relu = ep->act.kind == KILN_ACT_RELU, clip = ep->act.kind == KILN_ACT_CLIP;
  *d = (dir_ctx){p,    x,  xb,   region, cap, wb,  off,  ep,  y,
                 hp,   t,  taps, mb, p->oh * p->ow, bias, relu || clip,
                 clip ? ep->act.alpha : 0.0f, clip ? ep->act.beta : INFINITY,
                 sizeof(float) * wbn <= 16384 ? 1 : ROWS_PER_PASS, p->oh * p->ow, 0};
  return KILN_OK;
}

kiln_code kiln_conv2d_direct_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                 const float *x, const float *w,
                                 const kiln_conv2d_f32_epilogue *ep, float *y) {
  int64_t nthr = kiln_threadpool_size(pool), rows = p->n * p->oh;
  int64_t cap = (rows + nthr - 1) / nthr; /* the static share of one thread */
  if (cap > p->oh) cap = p->oh;
  dir_ctx d;
  kiln_code rc = dir_setup(nthr, p, x, w, ep, y, cap, 0, &d);
  if (rc) return rc;
  /* one contiguous range of rows per thread: taken in passes from a shared counter, the
   * rows interleave between the threads and measured 10-50% slower at 2 threads */
  kiln_parallel_for(pool, (size_t)rows, isa >= KILN_ISA_AVX512 ? row_task : kiln_conv_direct_rows_avx2,
                    &d, 0);
  return KILN_OK;
}

kiln_code kiln_conv2d_direct_f32_rows(int isa, const kiln_conv2d_f32_params *p, const float *x, const float *w,
                                      const kiln_conv2d_f32_epilogue *ep, int64_t oy0, int64_t oy1, float *y,
                                      int64_t ys) {
  if (!conv_params_ok(p) || !kiln_conv2d_f32_uses_direct(p, isa) || p->n != 1 || ep->residual || oy0 < 0 ||
      oy1 > p->oh || oy0 >= oy1)
    return KILN_ERR_INVALID_ARG;
  dir_ctx d;
  kiln_code rc = dir_setup(1, p, x, w, ep, y, oy1 - oy0, 0, &d);
  if (rc) return rc;
  d.ys = ys;
  d.yr0 = oy0;
  if (isa >= KILN_ISA_AVX512)
    row_task(&d, (size_t)oy0, (size_t)oy1, 0);
  else
    kiln_conv_direct_rows_avx2(&d, (size_t)oy0, (size_t)oy1, 0);
  return KILN_OK;
}

/* ---- convolution then max pooling, in one pass ---------------------------------------------
 * A task is a band of up to `band` pooled rows of one image: the convolution rows its windows
 * read go to the thread's buffer after its region, [m][rows_cap][ow], and are pooled from
 * there: the convolution's output never reaches memory and the pooling reads it from L2. Pooling: per pooled row the
 * column-wise max of its window's rows, then, stride 2 along x, the max of the window's 2 or 3
 * columns as even/odd lanes (-inf in the padding). */
typedef kiln_dir_pool_ctx pool_ctx; /* conv_direct.h: shared with the AVX2 task */

/* out[px] = max of t[2 px + j], j < kw (2 or 3), for px < n; t has 2 n + 2 valid floats. */
T512 static void pool_cols_s2(const float *t, int64_t kw, int64_t n, float *out) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 e = _mm512_permutex2var_ps(_mm512_loadu_ps(t), ev, _mm512_loadu_ps(t + 16));
  for (int64_t px = 0; px < n; px += 16) {
    const float *s = t + 2 * px;
    __m512 a = _mm512_loadu_ps(s), b = _mm512_loadu_ps(s + 16);
    __m512 o = _mm512_permutex2var_ps(a, od, b), v = _mm512_max_ps(e, o);
    __m512 en = _mm512_permutex2var_ps(_mm512_loadu_ps(s + 32), ev, _mm512_loadu_ps(s + 48));
    if (kw == 3) /* the next even lane: e shifted by one, its last from the next group */
      v = _mm512_max_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(en),
                                                                    _mm512_castps_si512(e), 1)));
    __mmask16 m = n - px >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - px)) - 1);
    _mm512_mask_storeu_ps(out + px, m, v);
    e = en;
  }
}

/* Pooled rows [q0, q1) of every channel of image nn from the convolution rows in cb: row r of
 * channel co at cb + (co * pc->rows_cap + r - r0) * ow; tmp: a thread's row of
 * 2 * round_up(q->ow, 16) + 64 floats. */
T512 static void pool_band(const pool_ctx *pc, int64_t nn, int64_t q0, int64_t q1, const float *cb,
                           int64_t r0, float *tmp) {
  const kiln_conv2d_f32_params *p = pc->d.p;
  const kiln_pool2d_params *q = pc->q;
  const int64_t ow = p->ow, width = 2 * ((q->ow + 15) / 16 * 16) + 64;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < width; i += 16) _mm512_storeu_ps(tmp + i, ninf);
  for (int64_t co = 0; co < p->m; co++) {
    const float *plane = cb + co * pc->rows_cap * ow;
    float *yc = pc->y + ((nn * p->m + co) * q->oh) * q->ow;
    for (int64_t py = q0; py < q1; py++) {
      int64_t a = py * q->sh - q->pt, b = a + q->kh;
      if (a < 0) a = 0;
      if (b > p->oh) b = p->oh;
      float *t = tmp + q->pl; /* t[cx] = max over the window's rows of column cx */
      for (int64_t cx = 0; cx < ow; cx += 16) {
        __mmask16 m = ow - cx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ow - cx)) - 1);
        __m512 v = ninf;
        for (int64_t r = a; r < b; r++)
          v = _mm512_max_ps(v, _mm512_maskz_loadu_ps(m, plane + (r - r0) * ow + cx));
        _mm512_mask_storeu_ps(t + cx, m, v);
      }
      pool_cols_s2(tmp, q->kw, q->ow, yc + py * q->ow);
    }
  }
}


int kiln_conv2d_f32_maxpool_ok(const kiln_conv2d_f32_params *p, const kiln_pool2d_params *q, int isa) {
  /* one input channel takes the depthwise kernel in kiln_conv2d_f32, whose sums are ordered
   * otherwise: the one pass is to give the chain's bits */
  if (!p || !q || !kiln_conv2d_f32_uses_direct(p, isa) || p->n < 1 || p->group != 1 || p->c < 2) return 0;
  /* (windows up to 64 rows tall and apart: a stem's; larger ones keep the sizes below small) */
  if (q->sw != 2 || (q->kw != 2 && q->kw != 3) || q->kh < 1 || q->kh > 64 || q->sh < 1 || q->sh > 64 ||
      q->oh < 1 || q->ow < 1)
    return 0;
  if (q->pt < 0 || q->pt >= q->kh || q->pl < 0 || q->pl > 1 || q->pl >= q->kw) return 0;
  /* every window starts inside the convolution's output (ONNX: the last may hang over) */
  if ((q->oh - 1) * q->sh - q->pt >= p->oh || (q->ow - 1) * q->sw - q->pl >= p->ow) return 0;
  /* and pool_cols_s2 reads at most 2 * round_up(ow, 16) + 48 floats of its row */
  return 2 * q->ow + q->kw - 1 - q->pl <= 2 * ((q->ow + 15) / 16 * 16) + 48;
}

kiln_code kiln_conv2d_f32_maxpool(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                  const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep,
                                  const kiln_pool2d_params *q, float *y) {
  if (!kiln_conv2d_f32_maxpool_ok(p, q, isa) || ep->residual) return KILN_ERR_INVALID_ARG;
  int64_t nthr = kiln_threadpool_size(pool);
  /* Bands of pooled rows: enough for every thread, and the band's convolution rows
   * (m * rows * ow floats) small enough to stay in L2 until pooled. One thread: about 256
   * KiB. Several: each thread's share of the rows cut into as few equal bands as keep within
   * L2 (ResNet's and SqueezeNet's stems at 2 threads: 2 bands of 14 pooled rows, 830 KiB,
   * where the 256 KiB rule gave 7 bands of 4). The next layer then reads more of its input
   * from its own core: ResNet-18 took 0.964-0.989 of its time, SqueezeNet 1.1 0.987 (kiln
   * bench, 8-12 alternations; AMD EPYC Zen 5, avx512). At 1 thread bands of 4 to 28 rows
   * took the same time. */
  int64_t per_row = p->m * p->ow * (int64_t)sizeof(float) * q->sh;
  int64_t share = (q->oh + nthr - 1) / nthr, band = share;
  if (nthr == 1) {
    band = per_row > 0 ? (256 * 1024) / per_row : 1;
  } else if (per_row > 0) {
    size_t l2 = kiln_cpu_cache_bytes(2);
    int64_t budget = l2 ? (int64_t)l2 : 1024 * 1024, fit = budget / per_row;
    int64_t nb = fit > 0 ? (share + fit - 1) / fit : share; /* bands per thread */
    band = (share + nb - 1) / nb;
  }
  if (band > share) band = share;
  if (band < 1) band = 1;
  int64_t rows_cap = (band - 1) * q->sh + q->kh;
  if (rows_cap > p->oh) rows_cap = p->oh;
  size_t extra = (size_t)(p->m * rows_cap * p->ow) + 16 + (size_t)(2 * ((q->ow + 15) / 16 * 16) + 64);
  pool_ctx pc;
  kiln_code rc = dir_setup(nthr, p, x, w, ep, NULL, rows_cap, extra, &pc.d);
  if (rc) return rc;
  pc.q = q;
  pc.band = band;
  pc.rows_cap = rows_cap;
  pc.tasks_per_image = (q->oh + band - 1) / band;
  pc.y = y;
  kiln_parallel_for(pool, (size_t)(p->n * pc.tasks_per_image),
                    isa >= KILN_ISA_AVX512 ? pool_task : kiln_conv_direct_pool_avx2, &pc, 0);
  return KILN_OK;
}

#else

kiln_code kiln_conv2d_direct_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                 const float *x, const float *w,
                                 const kiln_conv2d_f32_epilogue *ep, float *y) {
  (void)pool, (void)isa, (void)p, (void)x, (void)w, (void)ep, (void)y;
  return KILN_ERR_INVALID_ARG;
}

kiln_code kiln_conv2d_direct_f32_rows(int isa, const kiln_conv2d_f32_params *p, const float *x, const float *w,
                                      const kiln_conv2d_f32_epilogue *ep, int64_t oy0, int64_t oy1, float *y,
                                      int64_t ys) {
  (void)isa, (void)p, (void)x, (void)w, (void)ep, (void)oy0, (void)oy1, (void)y, (void)ys;
  return KILN_ERR_INVALID_ARG;
}

int kiln_conv2d_f32_maxpool_ok(const kiln_conv2d_f32_params *p, const kiln_pool2d_params *q, int isa) {
  (void)p, (void)q, (void)isa;
  return 0;
}

kiln_code kiln_conv2d_f32_maxpool(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                  const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep,
                                  const kiln_pool2d_params *q, float *y) {
  (void)pool, (void)isa, (void)p, (void)x, (void)w, (void)ep, (void)q, (void)y;
  return KILN_ERR_INVALID_ARG;
}

#endif
