/* Fast float32 2-D convolution: im2col + packed GEMM, direct 1x1, Winograd and depthwise
 * dispatch, fused epilogue. See conv2d_f32.h. */
#include "kernels/conv2d_f32.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm_internal.h"
#include "kernels/conv_internal.h"
#include "kernels/scratch.h"
#include "kernels/winograd_f32.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#endif

/* 1x1, stride 1, no padding: the GEMM reads the input itself, no im2col block. */
static bool conv_plain_1x1(const kiln_conv2d_f32_params *p) {
  return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 &&
         p->oh == p->h && p->ow == p->w;
}

/* ---- im2col + GEMM ------------------------------------------------------------------------ */

typedef struct col_ctx {
  const kiln_conv2d_f32_params *p;
  const float *xg; /* first input channel of the group */
  float *col;      /* [cg * kh * kw, tn] */
  int64_t c0, tn;  /* the tile's output columns [c0, c0 + tn) of the oh x ow plane */
  int isa;
} col_ctx;

/* Output columns [lo, hi) of output row oy for im2col row (ci, ky, kx) into d. */
static void im2col_seg(const col_ctx *cc, float *d, const float *xp, int64_t ky, int64_t off,
                       int64_t a, int64_t b, int64_t oy, int64_t lo, int64_t hi) {
  const kiln_conv2d_f32_params *p = cc->p;
  int64_t iy = oy * p->sh - p->pt + ky * p->dh;
  if (iy < 0 || iy >= p->h || a == b) {
    memset(d, 0, sizeof(float) * (size_t)(hi - lo));
    return;
  }
  const float *xr = xp + iy * p->w + off;
#ifdef KILN_HAVE_X86_KERNELS
  if (cc->isa >= KILN_ISA_AVX512 && p->sw <= 2) {
    im2col_seg_avx512(d, xr, a, b, lo, hi, (int)p->sw);
    return;
  }
#endif
  /* zeros before the input, the input columns (a copy for stride 1), zeros after */
  int64_t s = a < lo ? lo : a > hi ? hi : a, e = b < s ? s : b > hi ? hi : b;
  if (s > lo) memset(d, 0, sizeof(float) * (size_t)(s - lo));
  if (p->sw == 1) {
    if (e > s) memcpy(d + (s - lo), xr + s, sizeof(float) * (size_t)(e - s));
  } else {
    for (int64_t ox = s; ox < e; ox++) d[ox - lo] = xr[ox * p->sw];
  }
  if (hi > e) memset(d + (e - lo), 0, sizeof(float) * (size_t)(hi - e));
}

/* im2col rows [begin, end) of the tile: row r = (ci, ky, kx) holds the input values under
 * that kernel tap for the tile's output columns, which may start and end mid-row. */
static void im2col_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const col_ctx *cc = ctx;
  const kiln_conv2d_f32_params *p = cc->p;
  int64_t kk = p->kh * p->kw, c1 = cc->c0 + cc->tn;
  int64_t oy0 = cc->c0 / p->ow, lo0 = cc->c0 % p->ow; /* where the tile starts */
  for (size_t r = begin; r < end; r++) {
    int64_t ci = (int64_t)r / kk, ky = (int64_t)r % kk / p->kw, kx = (int64_t)r % p->kw;
    const float *xp = cc->xg + ci * p->h * p->w;
    float *dst = cc->col + (int64_t)r * cc->tn;
    int64_t off = kx * p->dw - p->pl, a, b;
    col_range(off, p->sw, p->w, p->ow, &a, &b);
    for (int64_t c = cc->c0, oy = oy0, lo = lo0; c < c1; oy++, lo = 0) {
      int64_t hi = p->ow - lo > c1 - c ? lo + (c1 - c) : p->ow;
      im2col_seg(cc, dst + (c - cc->c0), xp, ky, off, a, b, oy, lo, hi);
      c += hi - lo;
    }
  }
}

/* Floats per im2col tile (512 KiB: well within a core's L2). */
enum { COL_TILE = 128 * 1024 };
/* Weight blocks up to this size stay in L2 beside an im2col tile (see col_tile_cols). */
#define WT_L2_BYTES (1024.0 * 1024.0)
/* Columns a tile keeps at least when few tiles are cut evenly over the threads. */
enum { EVEN_MIN_COLS = 256 };
/* Flops per thread from which a pool of several threads takes the transposed path. */
#define TR_MIN_FLOPS_PER_THREAD 24e6
/* Pools up to this size may take whole tiles per thread (per-thread results on the stack). */
enum { MAX_THREADS = 64 };

/* Output columns per im2col tile: about COL_TILE floats of im2col block, in whole vectors,
 * spread evenly over the tiles the plane needs. Every tile streams the whole weight block
 * (mg x kk) again: when that block does not stay in L2 beside the tile (over WT_L2_BYTES),
 * a tile keeps at least 4 columns per weight row. */
static int64_t col_tile_cols(int64_t kk, int64_t mg, int64_t ohw) {
  int64_t tc = COL_TILE / kk / 16 * 16;
  if (tc < 64) tc = 64;
  if ((double)mg * (double)kk * sizeof(float) > WT_L2_BYTES && tc < 4 * mg) tc = 4 * mg;
  if (tc >= ohw) return ohw;
  int64_t nt = (ohw + tc - 1) / tc;
  tc = ((ohw + nt - 1) / nt + 15) & ~(int64_t)15;
  return tc < ohw ? tc : ohw;
}

/* Columns per tile for at least `ntiles` tiles per plane, whole vectors, where the planes'
 * tiles then split evenly over nthr threads and keep min_cols columns; else 0. */
static int64_t even_tile_cols(int64_t planes, int64_t ohw, int64_t ntiles, int nthr,
                              int64_t min_cols) {
  int64_t nt = ntiles;
  while ((planes * nt) % nthr) nt++;
  int64_t tc = ((ohw + nt - 1) / nt + 15) & ~(int64_t)15;
  return tc >= min_cols && (planes * ((ohw + tc - 1) / tc)) % nthr == 0 ? tc : 0;
}

typedef struct tile_job {
  const kiln_conv2d_f32_params *p;
  const float *x, *w;
  const kiln_amx_w *wa; /* W for the AMX GEMM (one group), or NULL */
  const kiln_conv2d_f32_epilogue *ep;
  float *y;
  int64_t kk, cg, mg, ntiles;
  int64_t tcols;     /* output columns (of the oh * ow plane) per tile */
  bool direct;
  int isa;
  float *col;        /* col_floats per thread (NULL when direct) */
  size_t col_floats;
  kiln_code *rc;     /* per thread */
} tile_job;

/* Task t = (n, group, tile of output columns): im2col, GEMM, epilogue. Loops inside run on
 * `pool` (NULL: this thread). */
static kiln_code run_tile(const tile_job *j, int64_t t, float *col, kiln_threadpool *pool) {
  const kiln_conv2d_f32_params *p = j->p;
  const kiln_conv2d_f32_epilogue *ep = j->ep;
  int64_t tile = t % j->ntiles, gr = t / j->ntiles % p->group, nn = t / j->ntiles / p->group;
  int64_t ohw = p->oh * p->ow, c0 = tile * j->tcols; /* the tile's first output column */
  int64_t tn = ohw - c0 < j->tcols ? ohw - c0 : j->tcols;
  const float *xg = j->x + (nn * p->c + gr * j->cg) * p->h * p->w, *b = xg + c0;
  size_t ldb = (size_t)ohw;
  if (!j->direct) {
    col_ctx cc = {p, xg, col, c0, tn, j->isa};
    kiln_parallel_for(pool, (size_t)j->kk, im2col_task, &cc, 0);
    b = col;
    ldb = (size_t)tn;
  }
  int64_t yoff = (nn * p->m + gr * j->mg) * ohw + c0;
  float *yb = j->y + yoff;
  const float *res = ep->residual ? ep->residual + yoff : NULL;
  /* bias (per output channel: per row of C), residual and activation from registers */
  kiln_gemm_epilogue gep = {0};
  gep.act = ep->act;
  gep.residual = res;
  gep.ldr = (size_t)ohw;
  if (j->wa)
    return kiln_amx_gemm(pool, j->wa, (size_t)tn, b, ldb, yb, (size_t)ohw, ep->bias, res,
                         (size_t)ohw, &ep->act);
  kiln_gemm_ctx gctx = {pool, j->isa};
  kiln_code rc = kiln_gemm_f32_rows(&gctx, 0, 0, (size_t)j->mg, (size_t)tn, (size_t)j->kk, 1.0f,
                                    j->w + gr * j->mg * j->kk, (size_t)j->kk, b, ldb, 0.0f, yb,
                                    (size_t)ohw, &gep, ep->bias ? ep->bias + gr * j->mg : NULL,
                                    NULL);
  return rc;
}

static void tile_task(void *ctx, size_t begin, size_t end, int ti) {
  const tile_job *j = ctx;
  for (size_t t = begin; t < end; t++)
    if (!j->rc[ti]) j->rc[ti] = run_tile(j, (int64_t)t, j->col ? j->col + (size_t)ti * j->col_floats : NULL, NULL);
}

/* ---- transposed GEMM for small output planes ------------------------------------------------ */

/* C = W * X is vectorised along the output plane; a small plane fills few vector lanes (7x7:
 * 49 of 64), so such convolutions compute C^T[HW x M] = X^T * W^T, vectorised along the
 * output channels, with W^T packed once (kiln_gemm_pack_b), and write C^T back to NCHW. */

/* Share of the vector lanes a row of `n` columns fills. */
static double lane_use(int64_t n) { return (double)n / (double)((n + 15) / 16 * 16); }

/* Whether C^T's rows (output channels) fill the vector lanes clearly better than C's rows
 * (the output plane) would. */
static bool tr_fills_lanes(const kiln_conv2d_f32_params *p) {
  return lane_use(p->m) >= lane_use(p->oh * p->ow) + 0.1;
}

/* Offsets of a zero-padded copy of one image (or of the image itself, when no tap reaches
 * outside it) for the gathered GEMM: [c][hp][wp], the input at row pt, column pl. */
typedef struct pad_geom {
  int64_t hp, wp;
  bool copy; /* some tap reads padding: a padded copy is needed */
} pad_geom;

static pad_geom pad_geom_of(const kiln_conv2d_f32_params *p) {
  pad_geom g;
  conv_padded_dims(p, &g.hp, &g.wp); /* the input itself where no tap reads padding */
  g.copy = p->pt || p->pl || g.hp > p->h || g.wp > p->w;
  return g;
}

/* 1 when kiln_conv2d_f32 takes the gathered GEMM (an implicit im2col, transposed) for p at
 * level lvl: a kernel for it, offsets within int32, and the input it reads (padded) no larger
 * than the im2col block. A strided 1x1 reads 4x more that way (the input of 1024 -> 2048 at
 * 14x14 -> 7x7 beside the weight block in L2 measured 10% slower than its im2col block). */
static int implicit_ok(const kiln_conv2d_f32_params *p, int lvl) {
  if (!kiln_gemm_has_gather(lvl)) return 0;
  pad_geom g = pad_geom_of(p);
  double src = (double)p->c * (double)g.hp * (double)g.wp;
  return src < 2147483647.0 && src <= (double)(p->c * p->kh * p->kw) * (double)(p->oh * p->ow);
}

int kiln_conv2d_f32_uses_transposed(const kiln_conv2d_f32_params *p, int isa) {
  int lvl = kiln_isa_resolve(isa);
  if (!p || lvl < 0 || !kiln_gemm_ops_for(lvl)->ukernel_at) return 0; /* X^T read in place */
  if (p->group != 1 || p->c < 2 || p->m < 1 || kiln_conv2d_f32_uses_winograd(p, 1)) return 0;
  if (kiln_conv2d_f32_uses_direct(p, lvl)) return 0;
  int64_t ohw = p->oh * p->ow;
  /* Larger kernels only with the gathered GEMM, which reads the taps from the (padded) input
   * instead of an im2col block: with the block (3x3 at 7x7, K = 4608) and weights that come
   * from memory, as in ResNet-18's last stage, the usual formulation measured up to 15%
   * faster. The gathered one skips the block's writing and reading and fills the lanes with
   * output channels: ResNet's 3x3 at 7x7 and stride 2 to 7x7 measured 12-15% faster, to 14x14
   * and 28x28 3-7% (AMD EPYC Zen 4, AVX-512, 1 thread). C^T (ohw * m floats) stays in L2. */
  if (p->kh != 1 || p->kw != 1)
    return implicit_ok(p, lvl) && p->m >= 64 && ohw >= 2 && ohw <= 1024 && ohw * p->m <= 256 * 1024;
  /* C^T passes through a buffer (ohw * m floats): planes small enough for it to stay in L2 */
  if (ohw > 256 || ohw * p->m > 512 * 1024) return 0;
  /* one output pixel: both formulations would take a matrix-vector path, whose summation
   * order differs, so a choice made by thread count (below) would change the result */
  if (ohw < 2) return 0;
  /* Projections (fewer output than input channels) too, whatever the lanes: X^T's strips meet
   * one short panel of W^T where W's few strips met every panel of a long X. MobileNetV2 on
   * 14x14 (kiln profile, thread time, 1 thread, AMD EPYC Zen 5, avx512): 384 -> 64 (4 nodes)
   * 0.210-0.212 -> 0.193-0.199 ms, 384 and 576 -> 96 (3 nodes) 0.334-0.338 -> 0.310-0.318 ms;
   * expansions measured the other way (64 -> 384 on 14x14: 0.248-0.253 -> 0.270-0.275 ms).
   * ResNet-50 and SqueezeNet stayed within the noise, at 1 and 2 threads; at KILN_ISA=avx2
   * MobileNetV2 took 0.99 of its time. */
  return p->m < p->c || tr_fills_lanes(p);
}

/* Whether kiln_conv2d_f32 takes the transposed path that kiln_conv2d_f32_uses_transposed
 * allows, at this thread count. Several threads split the 49 rows of C^T unevenly (30 + 19)
 * and the write-back adds a loop: MobileNetV2's 7x7 layers (15-30 MFLOP) measured 7-20% slower
 * transposed at 2 threads, ResNet-50's (100 MFLOP and more) 20-25% faster. A 1x1 projection
 * taken for its shape alone (its lanes no fuller) reads X^T in place, strided, on every
 * thread: in a network at 2 threads X comes from the other core's cache that way, and
 * ResNet-50's 1024 -> 256 and 1024 -> 512 on 14x14 took 0.38 ms against 0.32-0.34 the usual
 * way, the whole model 0.98 of its time (at 1 thread transposed stays 3% faster: 0.52
 * against 0.535 ms). Both formulations round every element alike (same K blocks and order,
 * bias then residual then activation), so a choice by thread count leaves the result
 * unchanged. */
static bool transposed_at(const kiln_conv2d_f32_params *p, int nthr) {
  if (nthr == 1) return true;
  double flops = 2.0 * (double)(p->n * p->m * p->c * p->kh * p->kw) * (double)(p->oh * p->ow);
  if (flops / nthr < TR_MIN_FLOPS_PER_THREAD) return false;
  return p->kh != 1 || p->kw != 1 || tr_fills_lanes(p);
}

typedef struct tr_ctx {
  const float *t;   /* C^T: [ohw, m] */
  float *y;         /* [m, ohw] */
  const float *res; /* like y, or NULL */
  int64_t ohw, m;
  int64_t q_lo, q_hi; /* the output pixels written back: [q_lo, q_hi) */
  const kiln_act *act;
  int isa;
} tr_ctx;

#ifdef KILN_HAVE_X86_KERNELS
/* Channels [co0, co0 + nc) (nc <= 16) of y[co][q] = act(t[q][co] + res[co][q]) for the
 * task's pixels, through 16 x 16 blocks transposed in registers. */
T512 static void write_back_avx512(const tr_ctx *e, int64_t co0, int64_t nc) {
  const int64_t ohw = e->ohw, m = e->m;
  const __mmask16 cm = (__mmask16)(nc >= 16 ? 0xffffu : (1u << nc) - 1);
  const bool inl = act_inline(e->act);
  __m512 r[16];
  for (int64_t q0 = e->q_lo; q0 < e->q_hi; q0 += 16) {
    int64_t nq = e->q_hi - q0 < 16 ? e->q_hi - q0 : 16;
    const __mmask16 qm = (__mmask16)(nq >= 16 ? 0xffffu : (1u << nq) - 1);
    for (int64_t i = 0; i < 16; i++)
      r[i] = i < nq ? _mm512_maskz_loadu_ps(cm, e->t + (q0 + i) * m + co0) : _mm512_setzero_ps();
    transpose16_avx512(r);
    for (int64_t c = 0; c < nc; c++) {
      float *yr = e->y + (co0 + c) * ohw + q0;
      __m512 v = r[c];
      if (e->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(qm, e->res + (co0 + c) * ohw + q0));
      if (inl) v = act_inline512(v, e->act);
      _mm512_mask_storeu_ps(yr, qm, v);
    }
  }
  if (!inl)
    for (int64_t c = 0; c < nc; c++)
      kiln_f32_act(KILN_ISA_AVX512, e->y + (co0 + c) * ohw + e->q_lo, (size_t)(e->q_hi - e->q_lo),
                   e->act);
}
#endif

/* y[co][q] = act(t[q][co] + res[co][q]) for the blocks of 16 channels of the task. */
static void tr_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const tr_ctx *e = ctx;
  int64_t ohw = e->ohw, m = e->m;
  for (size_t blk = begin; blk < end; blk++) {
    int64_t co0 = (int64_t)blk * 16, nc = m - co0 < 16 ? m - co0 : 16;
#ifdef KILN_HAVE_X86_KERNELS
    if (e->isa >= KILN_ISA_AVX512) {
      write_back_avx512(e, co0, nc);
      continue;
    }
#endif
    for (int64_t co = co0; co < co0 + nc; co++) {
      float *yr = e->y + co * ohw;
      const float *rr = e->res ? e->res + co * ohw : NULL, *tc = e->t + co;
      for (int64_t q = e->q_lo; q < e->q_hi; q++) yr[q] = rr ? tc[q * m] + rr[q] : tc[q * m];
      if (e->act->kind != KILN_ACT_NONE)
        kiln_f32_act(e->isa, yr + e->q_lo, (size_t)(e->q_hi - e->q_lo), e->act);
    }
  }
}

void kiln_conv_tr_write_back(kiln_threadpool *pool, int isa, const float *t, int64_t ohw, int64_t m,
                             const float *res, const kiln_act *act, float *y) {
  tr_ctx e = {t, y, res, ohw, m, 0, ohw, act, isa};
  kiln_parallel_for(ohw * m >= 64 * 1024 ? pool : NULL, (size_t)(m + 15) / 16, tr_task, &e, 0);
}

/* One image (or the batch, image by image): im2col (unless 1x1), C^T = col^T * W^T with the
 * bias per column, then the write-back with residual and activation. */
static kiln_code conv_transposed(kiln_threadpool *pool, const kiln_conv2d_f32_params *p,
                                 const float *x, const kiln_gemm_packed_b *wt,
                                 const kiln_conv2d_f32_epilogue *ep, float *y) {
  int isa = kiln_gemm_packed_b_isa(wt);
  int64_t ohw = p->oh * p->ow, kk = p->c * p->kh * p->kw;
  bool direct = conv_plain_1x1(p);
  size_t floats = (size_t)(ohw * p->m + (direct ? 0 : kk * ohw));
  float *t = kiln_scratch_get(KILN_SCRATCH_CONV, sizeof(float) * floats);
  if (!t) return KILN_ERR_NOMEM;
  float *col = t + ohw * p->m;
  kiln_gemm_epilogue gep = {0};
  gep.bias = ep->bias;
  kiln_gemm_ctx gctx = {pool, isa};
  kiln_code rc = KILN_OK;
  for (int64_t nn = 0; nn < p->n && !rc; nn++) {
    const float *xn = x + nn * p->c * p->h * p->w, *a = xn;
    if (!direct) {
      col_ctx cc = {p, xn, col, 0, ohw, isa};
      kiln_parallel_for(pool, (size_t)kk, im2col_task, &cc, 0);
      a = col;
    }
    rc = kiln_gemm_f32_packed(&gctx, 1, (size_t)ohw, 1.0f, a, (size_t)ohw, wt, 0.0f, t,
                              (size_t)p->m, &gep, NULL);
    if (rc) break;
    int64_t yoff = nn * p->m * ohw;
    kiln_conv_tr_write_back(pool, isa, t, ohw, p->m, ep->residual ? ep->residual + yoff : NULL, &ep->act, y + yoff);
  }
  return rc;
}

/* ---- transposed with the taps gathered (no im2col) ------------------------------------------- */

/* C^T = A * W^T with A's element (q, k) at xp[arow[q] + koff[k]] for output pixel q = (oy, ox)
 * and k = (ci, ky, kx), xp a zero-padded copy of the input rows the pixels read (or the input
 * itself, when no tap reads padding). The K order and blocks are those of the im2col GEMM, so
 * every element rounds alike, however the rows are cut.
 *
 * In parts: each part is a band of output rows that one thread pads, multiplies and writes
 * back on its own, into its own padded copy, where the GEMM would cut rows only anyway. The
 * pool-wide loops instead padded by channels and wrote back by channels while the GEMM cut
 * rows, so each thread read half its rows of the copy, and half its rows of C^T, from the
 * other core's cache: ResNet-50's 3x3 stride-2 layers at 2 threads took 0.998 -> 0.847 ms
 * (128 -> 128, 56x56 -> 28x28) and 0.93 -> 0.87 ms (256 -> 256, 28x28 -> 14x14) in parts,
 * the whole model 0.968 of its time (kiln profile; kiln bench, 6 alternations; AMD EPYC Zen 5,
 * avx512), unchanged at 1 thread. */
typedef struct gather_job {
  const kiln_conv2d_f32_params *p;
  const float *x;   /* the image */
  const kiln_gemm_packed_b *wt;
  const kiln_conv2d_f32_epilogue *ep;
  const float *res; /* the image's residual, or NULL */
  float *t, *y;     /* C^T [ohw, m]; the image's output */
  float *xp;        /* parts x part_floats: each part's padded rows (NULL: x read in place) */
  size_t part_floats;
  const int32_t *arow, *koff;
  pad_geom g;
  int64_t plane;    /* floats per channel of a part's copy (of x when read in place) */
  int parts, isa;
  kiln_code *rc;    /* per part */
} gather_job;

/* Output rows [oy0, oy1) of part t, and the padded input rows [r0, r1) their taps read. */
typedef struct part_rows {
  int64_t oy0, oy1, r0, r1;
} part_rows;

static part_rows part_rows_of(const kiln_conv2d_f32_params *p, int t, int parts) {
  part_rows r;
  r.oy0 = p->oh * t / parts;
  r.oy1 = p->oh * (t + 1) / parts;
  r.r0 = r.oy0 * p->sh;
  r.r1 = r.r0 + conv_in_rows(p, r.oy1 - r.oy0);
  return r;
}

typedef struct pad_ctx {
  const gather_job *j;
  float *xp;     /* the part's copy: [c][r1 - r0][wp] */
  int64_t r0, r1; /* its padded rows */
} pad_ctx;

/* Channels [begin, end) of a part's copy: its padded rows, zeros outside the input. */
static void pad_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const pad_ctx *pc = ctx;
  const kiln_conv2d_f32_params *p = pc->j->p;
  const int64_t wp = pc->j->g.wp;
  for (size_t ci = begin; ci < end; ci++) {
    float *d = pc->xp + (int64_t)ci * pc->j->plane;
    const float *s = pc->j->x + (int64_t)ci * p->h * p->w;
    for (int64_t r = pc->r0; r < pc->r1; r++, d += wp) {
      int64_t iy = r - p->pt;
      if (iy < 0 || iy >= p->h) {
        memset(d, 0, sizeof(float) * (size_t)wp);
        continue;
      }
      memset(d, 0, sizeof(float) * (size_t)p->pl);
      memcpy(d + p->pl, s + iy * p->w, sizeof(float) * (size_t)p->w);
      memset(d + p->pl + p->w, 0, sizeof(float) * (size_t)(wp - p->pl - p->w));
    }
  }
}

/* Part t: its padded rows, its rows of C^T, their write-back (loops inside on pool). */
static kiln_code gather_part(const gather_job *j, int t, kiln_threadpool *pool) {
  const kiln_conv2d_f32_params *p = j->p;
  part_rows r = part_rows_of(p, t, j->parts);
  const float *a = j->x;
  if (j->xp) {
    pad_ctx pc = {j, j->xp + (size_t)t * j->part_floats, r.r0, r.r1};
    kiln_parallel_for(j->part_floats >= 64 * 1024 ? pool : NULL, (size_t)p->c, pad_task, &pc, 0);
    a = pc.xp;
  }
  int64_t q0 = r.oy0 * p->ow, q1 = r.oy1 * p->ow;
  kiln_gemm_epilogue gep = {0};
  gep.bias = j->ep->bias;
  kiln_gemm_ctx gctx = {pool, j->isa};
  kiln_code rc = kiln_gemm_f32_packed_gather(&gctx, (size_t)(q1 - q0), a, j->arow + q0, j->koff,
                                             j->wt, j->t + q0 * p->m, (size_t)p->m, &gep, NULL);
  if (rc) return rc;
  tr_ctx e = {j->t, j->y, j->res, p->oh * p->ow, p->m, q0, q1, &j->ep->act, j->isa};
  kiln_parallel_for((q1 - q0) * p->m >= 64 * 1024 ? pool : NULL, (size_t)(p->m + 15) / 16, tr_task,
                    &e, 0);
  return KILN_OK;
}

static void gather_part_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const gather_job *j = ctx;
  for (size_t t = begin; t < end; t++) j->rc[t] = gather_part(j, (int)t, NULL);
}

/* Parts of kiln_conv2d_f32's gathered GEMM on nthr threads: one per thread where the GEMM
 * would cut the output pixels among them anyway (and each keeps an output row), else 1 (the
 * loops inside on the pool: the GEMM may cut the output channels). */
static int gather_parts(const kiln_conv2d_f32_params *p, int isa, int nthr) {
  if (nthr < 2 || nthr > MAX_THREADS || p->oh < nthr) return 1;
  return kiln_gemm_gather_rows_only(isa, (size_t)(p->oh * p->ow), nthr) ? nthr : 1;
}

static kiln_code conv_implicit(kiln_threadpool *pool, const kiln_conv2d_f32_params *p,
                               const float *x, const kiln_gemm_packed_b *wt,
                               const kiln_conv2d_f32_epilogue *ep, float *y) {
  gather_job j;
  memset(&j, 0, sizeof j);
  j.p = p;
  j.wt = wt;
  j.ep = ep;
  j.isa = kiln_gemm_packed_b_isa(wt);
  j.g = pad_geom_of(p);
  j.parts = gather_parts(p, j.isa, kiln_threadpool_size(pool));
  int64_t ohw = p->oh * p->ow, kk = p->c * p->kh * p->kw;
  /* a part's copy: the padded rows of the largest band */
  j.plane = j.g.copy ? conv_in_rows(p, (p->oh + j.parts - 1) / j.parts) * j.g.wp : p->h * p->w;
  j.part_floats = j.g.copy ? (size_t)(p->c * j.plane) : 0;
  size_t bytes = sizeof(float) * (size_t)ohw * (size_t)p->m +
                 sizeof(float) * j.part_floats * (size_t)j.parts +
                 sizeof(int32_t) * (size_t)(ohw + kk);
  j.t = kiln_scratch_get(KILN_SCRATCH_CONV, bytes);
  if (!j.t) return KILN_ERR_NOMEM;
  float *xp = j.t + ohw * p->m;
  int32_t *arow = (int32_t *)(xp + j.part_floats * (size_t)j.parts), *koff = arow + ohw;
  j.xp = j.g.copy ? xp : NULL;
  j.arow = arow;
  j.koff = koff;
  /* a pixel's row offset is from its part's first padded row (from row 0 read in place) */
  for (int t = 0; t < j.parts; t++) {
    part_rows r = part_rows_of(p, t, j.parts);
    int64_t base = j.g.copy ? r.r0 : 0;
    for (int64_t oy = r.oy0; oy < r.oy1; oy++)
      for (int64_t ox = 0; ox < p->ow; ox++)
        arow[oy * p->ow + ox] = (int32_t)((oy * p->sh - base) * j.g.wp + ox * p->sw);
  }
  for (int64_t ci = 0, k = 0; ci < p->c; ci++)
    for (int64_t ky = 0; ky < p->kh; ky++)
      for (int64_t kx = 0; kx < p->kw; kx++, k++)
        koff[k] = (int32_t)(ci * j.plane + ky * p->dh * j.g.wp + kx * p->dw);
  kiln_code rcs[MAX_THREADS] = {0};
  j.rc = rcs;
  for (int64_t nn = 0; nn < p->n; nn++) {
    int64_t yoff = nn * p->m * ohw;
    j.x = x + nn * p->c * p->h * p->w;
    j.y = y + yoff;
    j.res = ep->residual ? ep->residual + yoff : NULL;
    if (j.parts == 1) {
      kiln_code rc = gather_part(&j, 0, pool);
      if (rc) return rc;
      continue;
    }
    kiln_parallel_for(pool, (size_t)j.parts, gather_part_task, &j, 1);
    for (int t = 0; t < j.parts; t++)
      if (rcs[t]) return rcs[t];
  }
  return KILN_OK;
}

/* ---- entry ------------------------------------------------------------------------------- */

int kiln_conv2d_f32_uses_winograd(const kiln_conv2d_f32_params *p, int cached) {
  return p && p->winograd >= 0 && kiln_wino_f32_supported(p) &&
         (p->winograd > 0 || kiln_wino_f32_pick(p, cached));
}

int kiln_conv2d_f32_uses_amx(const kiln_conv2d_f32_params *p, int isa) {
  if (!p || kiln_isa_resolve(isa) != KILN_ISA_AVX512 || !kiln_amx_available()) return 0;
  if (p->group != 1 || p->c < 2 || kiln_conv2d_f32_uses_winograd(p, 1) ||
      kiln_conv2d_f32_uses_direct(p, isa))
    return 0;
  /* X is split per call (a pass over it) and each 32x32 block of C has a fixed cost: short
   * K or few output channels do not repay them (measured per layer on ResNet-50, MobileNetV2
   * and SqueezeNet: K 16-64 with 64 channels ran up to 1.8x slower, K >= 32 with 128 channels
   * or more and K >= 128 with 64 or more 1.2-2.8x faster) */
  int64_t kk = p->c * p->kh * p->kw, ohw = p->oh * p->ow;
  if (kk < 32 || p->m < 64 || (p->m < 128 && kk < 128)) return 0;
  /* K under 64 pays only with many output channels and columns (SqueezeNet's 32 -> 128 at
   * 27x27 and 48 -> 192 at 13x13 ran 1.2-1.4x slower at 2 threads, MobileNetV2's 32 -> 192
   * at 28x28 twice as fast) */
  if (kk < 64 && (p->m < 192 || ohw < 256)) return 0;
  return 1;
}

kiln_code kiln_conv2d_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                          const kiln_conv2d_f32_args *a) {
  if (!a) return KILN_ERR_INVALID_ARG;
  const float *x = a->x, *w = a->w, *wu = a->wu;
  const kiln_gemm_packed_b *wt = a->wt;
  const kiln_amx_w *wa = a->wa;
  const kiln_conv2d_f32_epilogue *ep = &a->ep;
  float *y = a->y;
  isa = kiln_isa_resolve(isa);
  if (isa < 0 || !conv_params_ok(p)) return KILN_ERR_INVALID_ARG;
  int64_t ohw = p->oh * p->ow, cg = p->c / p->group, mg = p->m / p->group;
  if (!p->n || !p->m || !ohw) return KILN_OK;
  if (!x || !w || !y) return KILN_ERR_INVALID_ARG;

  if (cg == 1) { /* depthwise, any channel multiplier */
    kiln_conv2d_dw_f32(pool, isa, p, x, w, ep, y);
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

  if (kiln_conv2d_f32_uses_direct(p, isa)) /* few input channels: no im2col */
    return kiln_conv2d_direct_f32(pool, isa, p, x, w, ep, y);

  int64_t kk = cg * p->kh * p->kw;
  if (wa && !(kiln_conv2d_f32_uses_amx(p, isa) && kiln_amx_w_rows(wa) == (size_t)p->m &&
              kiln_amx_w_cols(wa) == (size_t)kk))
    wa = NULL;
  if (!wa && wt && kiln_conv2d_f32_uses_transposed(p, isa) && kiln_gemm_packed_b_isa(wt) == isa &&
      kiln_gemm_packed_b_k(wt) == (size_t)kk && kiln_gemm_packed_b_n(wt) == (size_t)p->m &&
      transposed_at(p, kiln_threadpool_size(pool))) {
    bool plain = conv_plain_1x1(p);
    /* larger kernels: the taps gathered in place where the level can */
    if (!plain && implicit_ok(p, isa)) return conv_implicit(pool, p, x, wt, ep, y);
    return conv_transposed(pool, p, x, wt, ep, y);
  }
  bool direct = conv_plain_1x1(p);
  /* Tiles of output columns (whole vectors, so every im2col row starts 64-byte aligned when
   * the buffer is) whose im2col block is about COL_TILE floats: it stays in L2 between its
   * writing and the GEMM's reading, next to the weight block the tile streams. The direct
   * path has nothing to keep in cache: one GEMM per (n, group) unless there are tiles enough
   * for every thread. */
  int64_t planes = p->n * p->group, tcols = col_tile_cols(kk, mg, ohw);
  int64_t ntiles = (ohw + tcols - 1) / tcols, tasks = planes * ntiles;
  int nthr = kiln_threadpool_size(pool);
  /* Enough tiles: each thread takes whole tiles (im2col, GEMM, epilogue on its own, one
   * barrier in all); else the tiles run in turn with every loop inside on the pool. */
  bool outer = nthr > 1 && nthr <= MAX_THREADS && tasks >= 3 * (int64_t)nthr;
  if (direct && !outer) {
    tcols = ohw;
    ntiles = 1;
    tasks = planes;
    outer = nthr > 1 && nthr <= MAX_THREADS && tasks >= 3 * (int64_t)nthr;
  }
  /* Whole tiles per thread: as many tiles for each thread (at least as many as before), a
   * contiguous run of them, so a thread's columns are one band of the plane, as the nodes
   * before and after cut theirs. Handed out one at a time, the tiles of ResNet-50's 1x1
   * layers on 56x56 alternated between the threads, and the next node read half its band
   * from the other core's cache (with the GEMM's halves, plan_grid in gemm.c, the model took
   * 0.976-0.983 of its time at 2 threads; kiln bench, 34 alternations, AMD EPYC Zen 5,
   * avx512). With few tiles, only when the tiles keep EVEN_MIN_COLS columns: each thread then
   * writes and reads its own im2col block (in its own cache) with one barrier in all, instead
   * of every loop being split over the pool and the block crossing between cores. (Direct:
   * only for few output channels; with many the GEMM's own split does as well, measured
   * neutral.) */
  int64_t even_cols = 0;
  if (outer)
    even_cols = even_tile_cols(planes, ohw, ntiles, nthr, 16);
  else if (nthr > 1 && nthr <= MAX_THREADS && (!direct || mg <= 64))
    even_cols = even_tile_cols(planes, ohw, ntiles, nthr, EVEN_MIN_COLS);
  if (even_cols) {
    tcols = even_cols;
    ntiles = (ohw + tcols - 1) / tcols;
    tasks = planes * ntiles;
    outer = true;
  }
  int nbuf = outer ? nthr : 1;
  size_t col_floats = direct ? 0 : (size_t)kk * (size_t)tcols;
  float *col = NULL;
  kiln_code rcs[MAX_THREADS] = {0};
  if (!direct) {
    col = kiln_scratch_get(KILN_SCRATCH_CONV, sizeof(float) * col_floats * (size_t)nbuf);
    if (!col) return KILN_ERR_NOMEM;
  }
  tile_job j = {p, x, w, wa, ep, y, kk, cg, mg, ntiles, tcols, direct, isa, col, col_floats, rcs};
  kiln_code rc = KILN_OK;
  if (outer) {
    kiln_parallel_for(pool, (size_t)tasks, tile_task, &j, even_cols ? 0 : 1);
    for (int i = 0; i < nbuf && !rc; i++) rc = rcs[i];
  } else {
    for (int64_t t = 0; t < tasks && !rc; t++) rc = run_tile(&j, t, col, pool);
  }
  return rc;
}
