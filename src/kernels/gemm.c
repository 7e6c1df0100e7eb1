/* GEMM driver: argument checks, blocking, packing, threading and the matrix-vector paths.
 * The per-ISA micro-kernels live in gemm_<isa>.c. */
#include "kernels/gemm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/gemm_internal.h"
#include "kernels/scratch.h"

const kiln_gemm_isa_ops *kiln_gemm_ops_for(int isa) {
#ifdef KILN_HAVE_X86_KERNELS
  if (isa == KILN_ISA_AVX512) return &kiln_gemm_ops_avx512;
  if (isa == KILN_ISA_AVX2) return &kiln_gemm_ops_avx2;
#endif
  return &kiln_gemm_ops_scalar;
}

/* Caps: KC (K block: K is cut into equal blocks up to it), NC at that KC (KC x NC of B stays
 * in L2; for a smaller K block NC grows to keep the product), MC (rows per A block). Order 2
 * keeps an A strip (MR x KC) in L1 while it meets every B panel of the block from L2. The
 * AVX2 row is derived from the caches on first use (derive_blocking). */
static kiln_gemm_blocking g_blocking[KILN_ISA_LEVELS] = {
    {0, 0, 0, 0},
    {64, 256, 512, 1},  /* scalar 4x16 */
    {96, 384, 768, 1},  /* avx2 6x16, replaced by derive_blocking */
    {264, 768, 256, 2}, /* avx512 6x64 */
};
static pthread_once_t g_blocking_once = PTHREAD_ONCE_INIT;
/* Packed weights from which a GEMM with few rows of A streams them on several threads
 * (gemm_run): twice L2 (on one thread an eighth of this). */
static size_t g_stream_b_min_bytes = 2u << 20;

static size_t clamp_sz(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The AVX2 6x16 blocking (order 1: a B panel in L1 meets the A strips of a block from L2)
 * from the data caches of this CPU (kiln_cpu_cache_bytes): the KC x 16 B panel takes 3/4 of
 * L1 (the rest: the A strip streaming past, and C); the MC x KC A block about 1/7 of L2 (the
 * rest: the B panels read through it, C tiles, the next block); the KC x NC B block about L2.
 * A 32 KiB L1 and 1 MiB L2 (AMD Zen 4) give KC 384, MC 96, NC 672; Zen 3 (512 KiB L2) MC 48,
 * NC 336; a 48 KiB L1 (Intel Golden Cove) KC 576. */
static void derive_blocking(void) {
  size_t l1 = kiln_cpu_cache_bytes(1), l2 = kiln_cpu_cache_bytes(2);
  l1 = clamp_sz(l1 ? l1 : 32768, 16384, 65536);
  l2 = clamp_sz(l2 ? l2 : 1u << 20, 256u << 10, 4u << 20);
  g_stream_b_min_bytes = 2 * l2;
  const size_t MR = 6, NR = 16, row = NR * sizeof(float);
  kiln_gemm_blocking *b = &g_blocking[KILN_ISA_AVX2];
  b->kc = clamp_sz(l1 * 3 / 4 / row / 16 * 16, 128, 768);
  b->mc = clamp_sz(l2 / 7 / (b->kc * sizeof(float)) / MR * MR, 4 * MR, 40 * MR);
  b->nc = clamp_sz(l2 / (b->kc * sizeof(float)) / NR * NR, 8 * NR, 256 * NR);
  b->order = 1;
}

static kiln_gemm_blocking *blocking_of(int lvl) {
  pthread_once(&g_blocking_once, derive_blocking);
  return &g_blocking[lvl];
}

/* Row counts up to which B is always read in place (no packing) when not transposed. */
#define DIRECT_B_MAX_M 12
/* B with few rows (K) and many columns, read in place, has its rows far apart: every K step
 * of a panel touches another page, and a block of B streams through L2 as K separate runs.
 * With many rows of A the copy into contiguous panels is shared by enough strips to pay: the
 * 1x1 convolutions of ResNet-50 on 56x56 planes (64 -> 256 channels: M 256, K 64, N 3136)
 * ran 15-20% faster packed on an AMD EPYC (Zen 4, AVX-512), those with 64 rows of A (256 ->
 * 64, K 256) 10% slower. */
#define PACK_B_MIN_M 256
#define PACK_B_MAX_K 128
#define PACK_B_MIN_N 512
/* Strips of A up to which packed weights are streamed panel by panel (gemm_run, stream_b). */
#define STREAM_B_MAX_STRIPS 16

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

kiln_gemm_blocking kiln_gemm_get_blocking(int isa) {
  kiln_gemm_blocking z = {0, 0, 0, 0};
  int lvl = kiln_isa_resolve(isa);
  if (lvl < 0) lvl = isa;
  if (lvl < KILN_ISA_SCALAR || lvl >= KILN_ISA_LEVELS) return z;
  return *blocking_of(lvl);
}

void kiln_gemm_set_blocking(int isa, kiln_gemm_blocking b) {
  if (isa < KILN_ISA_SCALAR || isa >= KILN_ISA_LEVELS) return;
  const kiln_gemm_isa_ops *ops = kiln_gemm_ops_for(isa);
  kiln_gemm_blocking *g = blocking_of(isa);
  if (b.mc) g->mc = round_up(b.mc, ops->mr);
  if (b.kc) g->kc = b.kc;
  if (b.nc) g->nc = round_up(b.nc, ops->nr);
  if (b.order) g->order = b.order;
}

const char *kiln_gemm_kernel_name(int isa) {
  int lvl = kiln_isa_resolve(isa);
  return lvl < 0 ? "?" : kiln_gemm_ops_for(lvl)->name;
}

/* ---- per-thread scratch -------------------------------------------------------------- */

/* A 64-byte aligned buffer of at least `floats` floats owned by the calling thread, reused by
 * later calls on it and freed when the thread exits. NULL when out of memory. */
static float *ws_get(size_t floats) {
  if (floats > SIZE_MAX / sizeof(float) - 64) return NULL;
  return kiln_scratch_get(KILN_SCRATCH_GEMM, floats * sizeof(float));
}

/* ---- packing ------------------------------------------------------------------------- */

/* dst[k*w + j] = op(B)[k0 + k][n0 + j] for k < kc, j < nc; columns nc..w-1 zero. */
static void pack_b_panel(float *dst, size_t w, size_t kc, size_t nc, const float *B, size_t ldb,
                         int trans_b, size_t k0, size_t n0) {
  if (!trans_b) {
    const float *src = B + k0 * ldb + n0;
    if (nc == 16 && w == 16) { /* a whole AVX2 panel: copies of a constant size, inlined */
      for (size_t k = 0; k < kc; k++) memcpy(dst + k * 16, src + k * ldb, 16 * sizeof(float));
      return;
    }
    for (size_t k = 0; k < kc; k++) {
      memcpy(dst + k * w, src + k * ldb, nc * sizeof(float));
      if (w > nc) memset(dst + k * w + nc, 0, (w - nc) * sizeof(float));
    }
    return;
  }
  for (size_t kb = 0; kb < kc; kb += 16) {
    size_t kn = min_sz(16, kc - kb);
    for (size_t j = 0; j < nc; j++) {
      const float *src = B + (n0 + j) * ldb + k0 + kb;
      float *d = dst + kb * w + j;
      for (size_t k = 0; k < kn; k++) d[k * w] = src[k];
    }
    if (w > nc)
      for (size_t k = 0; k < kn; k++) memset(dst + (kb + k) * w + nc, 0, (w - nc) * sizeof(float));
  }
}

/* dst[i*kc + k] = op(A)[m0 + i][k0 + k] for i < mc, k < kc. */
static void pack_a_block(float *dst, size_t kc, size_t mc, const float *A, size_t lda,
                         int trans_a, size_t m0, size_t k0) {
  if (!trans_a) {
    for (size_t i = 0; i < mc; i++) memcpy(dst + i * kc, A + (m0 + i) * lda + k0, kc * sizeof(float));
    return;
  }
  for (size_t ib = 0; ib < mc; ib += 16) {
    size_t in = min_sz(16, mc - ib);
    for (size_t k = 0; k < kc; k++) {
      const float *src = A + (k0 + k) * lda + m0 + ib;
      float *d = dst + ib * kc + k;
      for (size_t i = 0; i < in; i++) d[i * kc] = src[i];
    }
  }
}

struct kiln_gemm_packed_b {
  int isa;
  size_t K, N, nr, gran, n_panels;
  size_t floats;
  float *data; /* panel q (width panel_w) at q*nr*K, K rows of its width */
};

static size_t panel_w(const kiln_gemm_packed_b *pb, size_t q) {
  return min_sz(pb->nr, round_up(pb->N - q * pb->nr, pb->gran));
}

kiln_code kiln_gemm_pack_b(int isa, int trans_b, size_t K, size_t N, const float *B, size_t ldb,
                           kiln_gemm_packed_b **out, kiln_error *err) {
  if (!out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm pack_b: out is NULL");
  *out = NULL;
  int lvl = kiln_isa_resolve(isa);
  if (lvl < 0)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm pack_b: ISA level %s not available",
                     kiln_isa_name(isa));
  if (K && N && !B) return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm pack_b: B is NULL");
  if (K && N && ldb < (trans_b ? K : N))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm pack_b: ldb %zu < %zu", ldb,
                     trans_b ? K : N);
  const kiln_gemm_isa_ops *ops = kiln_gemm_ops_for(lvl);
  kiln_gemm_packed_b *pb = calloc(1, sizeof *pb);
  if (!pb) return kiln_fail(err, KILN_ERR_NOMEM, "gemm pack_b: out of memory");
  pb->isa = lvl;
  pb->K = K;
  pb->N = N;
  pb->nr = ops->nr;
  pb->gran = ops->gran;
  pb->n_panels = div_up(N, ops->nr);
  int64_t cols = (int64_t)(pb->n_panels ? (pb->n_panels - 1) * pb->nr + panel_w(pb, pb->n_panels - 1) : 0);
  int64_t floats;
  if (!kiln_mul_ok(cols, (int64_t)K, &floats) || (uint64_t)floats > SIZE_MAX / sizeof(float) - 64) {
    free(pb);
    return kiln_fail(err, KILN_ERR_NOMEM, "gemm pack_b: %zu x %zu too large", K, N);
  }
  pb->floats = (size_t)floats;
  pb->data = kiln_malloc_weights(pb->floats * sizeof(float) + 1);
  if (!pb->data) {
    size_t bytes = pb->floats * sizeof(float);
    free(pb);
    return kiln_fail(err, KILN_ERR_NOMEM, "gemm pack_b: out of memory (%zu bytes)", bytes);
  }
  for (size_t q = 0; q < pb->n_panels; q++) {
    size_t n0 = q * pb->nr;
    pack_b_panel(pb->data + n0 * K, panel_w(pb, q), K, min_sz(pb->nr, N - n0), B, ldb, trans_b,
                 0, n0);
  }
  *out = pb;
  return KILN_OK;
}

void kiln_gemm_packed_b_free(kiln_gemm_packed_b *pb) {
  if (!pb) return;
  free(pb->data);
  free(pb);
}

size_t kiln_gemm_packed_b_k(const kiln_gemm_packed_b *pb) { return pb ? pb->K : 0; }
size_t kiln_gemm_packed_b_n(const kiln_gemm_packed_b *pb) { return pb ? pb->N : 0; }
int kiln_gemm_packed_b_isa(const kiln_gemm_packed_b *pb) { return pb ? pb->isa : KILN_ISA_AUTO; }
size_t kiln_gemm_packed_b_bytes(const kiln_gemm_packed_b *pb) {
  return pb ? pb->floats * sizeof(float) : 0;
}

/* ---- blocked GEMM -------------------------------------------------------------------- */

typedef struct gemm_job {
  const kiln_gemm_isa_ops *ops;
  kiln_gemm_blocking blk;
  int trans_a, trans_b, pack_a, direct_b;
  int a_outer; /* loop order inside a block: A strips outside B panels */
  int stream_b; /* B panels outside, the next one prefetched across the strips (gemm_run) */
  size_t M, N, K;
  const float *A;
  size_t lda;
  const float *B;
  size_t ldb;
  const kiln_gemm_packed_b *pb;
  const int32_t *arow, *koff; /* A gathered (A at its base): see kiln_gemm_f32_packed_gather */
  float *C;
  size_t ldc;
  kiln_gemm_tile tile; /* alpha, beta, act, res_after, ldr; bias/res at (0,0) */
  size_t m_step, n_step, tn, n_tasks;
  size_t kc, nc, mc; /* K block; caps on the N and M blocks */
  float *ws;
  size_t ws_stride; /* floats per thread */
} gemm_job;

/* The B panel for columns [col, col + nr) and K rows [pc, pc + kc); *ld gets its row stride. */
static const float *b_panel(const gemm_job *j, const float *bbuf, size_t col, size_t jr, size_t pc,
                            size_t kc, size_t nr, size_t *ld) {
  if (j->pb) {
    *ld = panel_w(j->pb, col / j->ops->nr);
    return j->pb->data + col * j->K + pc * *ld;
  }
  if (j->direct_b) {
    *ld = j->ldb;
    return j->B + pc * j->ldb + col;
  }
  *ld = round_up(nr, j->ops->gran);
  return bbuf + jr * kc;
}

/* The width of the B panel at column jr of a block of ncb columns: NR, or what is left; where
 * that would leave a last panel of one vector (NV=1: six FMAs per K step against seven loads,
 * and six accumulators for four cycles of FMA latency on two pipes), this panel gives up one
 * vector to it (64 + 4 -> 48 + 20: the same vectors, none of them alone). Packed panels
 * (weights packed beforehand) keep their widths. The sums are the same either way: each
 * element's K steps run in the same order whatever the panel's width. */
static size_t panel_cols(const gemm_job *j, size_t ncb, size_t jr) {
  const size_t NR = j->ops->nr, G = j->ops->gran;
  size_t left = ncb - jr;
  if (left <= NR) return left;
  return !j->pb && NR >= 3 * G && left - NR <= G ? NR - G : NR;
}

/* C[m0:m1, n0:n1] for the whole K; n0 is a multiple of NR, m0 of MR. */
static void gemm_region(const gemm_job *j, size_t m0, size_t m1, size_t n0, size_t n1, float *ws) {
  const kiln_gemm_isa_ops *ops = j->ops;
  const size_t MR = ops->mr, NR = ops->nr, G = ops->gran;
  const size_t K = j->K, KC = j->kc;
  /* split the region evenly into blocks no larger than the caps */
  const size_t NC = round_up(div_up(n1 - n0, div_up(n1 - n0, j->nc)), NR);
  const size_t MC = round_up(div_up(m1 - m0, div_up(m1 - m0, j->mc)), MR);
  float *bbuf = ws, *abuf = ws + (j->pb || j->direct_b ? 0 : j->kc * j->nc); /* as sized below */
  const float *bias = j->tile.bias, *brow = j->tile.bias_row, *res = j->tile.res;
  kiln_gemm_tile t = j->tile;
  /* B stays in L1 between kernel calls only when one panel is reused by consecutive A strips
   * (B panel outer) and fits (at most 32 KiB, and packed: rows of the caller's matrix may
   * collide in the cache). */
  t.pf_b = j->a_outer || j->direct_b || KC * NR * sizeof(float) > 32768;
  for (size_t jc = n0; jc < n1; jc += NC) {
    size_t ncb = min_sz(NC, n1 - jc);
    for (size_t pc = 0; pc < K; pc += KC) {
      size_t kc = min_sz(KC, K - pc);
      t.flags = (pc == 0 ? KILN_GT_FIRST : 0) | (pc + kc == K ? KILN_GT_LAST : 0);
      if (!j->pb && !j->direct_b)
        for (size_t jr = 0, nr; jr < ncb; jr += nr) {
          nr = panel_cols(j, ncb, jr);
          pack_b_panel(bbuf + jr * kc, round_up(nr, G), kc, nr, j->B, j->ldb, j->trans_b, pc, jc + jr);
        }
      /* A read in place by rows (not transposed, gathered or packed): prefetch the next strip */
      const bool pf_a = !j->trans_a && !j->arow && !j->pack_a;
      for (size_t ic = m0; ic < m1; ic += MC) {
        size_t mc = min_sz(MC, m1 - ic);
        /* A in place: row ir of the block at ablk + ir * astep, K step alda apart */
        const float *ablk = j->trans_a ? j->A + pc * j->lda + ic : j->A + ic * j->lda + pc;
        size_t alda = j->lda, astep = j->trans_a ? 1 : j->lda;
        kiln_f32_ukernel ukr = j->trans_a ? ops->ukernel_at : ops->ukernel;
        if (j->arow) { /* gathered: the kernel finds rows and K steps through t.arow, t.koff */
          ablk = j->A;
          astep = 0;
          ukr = ops->ukernel_gather;
          t.koff = j->koff + pc;
        }
        if (j->pack_a) {
          pack_a_block(abuf, kc, mc, j->A, j->lda, j->trans_a, ic, pc);
          ablk = abuf;
          alda = astep = kc;
          ukr = ops->ukernel;
        }
        if (j->a_outer) {
          /* A strip (L1) against every B panel of the block (L2). The rows are spread evenly
           * over the strips (128 = 18 x 6 + 4 x 5, not 21 x 6 + 2): a short strip would
           * stream the B panels from L2 for little work. */
          size_t n_strips = div_up(mc, MR), base = mc / n_strips, extra = mc % n_strips;
          for (size_t s = 0, ir = 0; s < n_strips; s++) {
            size_t mr = base + (s < extra), row = ic + ir;
            for (size_t jr = 0, nr; jr < ncb; jr += nr) {
              nr = panel_cols(j, ncb, jr);
              size_t col = jc + jr, bld;
              const float *bp = b_panel(j, bbuf, col, jr, pc, kc, nr, &bld);
              t.bias = bias ? bias + col : NULL;
              t.bias_row = brow ? brow + row : NULL;
              t.res = res ? res + row * t.ldr + col : NULL;
              t.arow = j->arow ? j->arow + row : NULL;
              /* the next strip, with the first panel (the later ones find it in cache) */
              t.pf_a = pf_a && jr == 0 && s + 1 < n_strips ? ablk + (ir + mr) * astep : NULL;
              t.pf_a_rows = (int)(base + (s + 1 < extra));
              ukr(mr, nr, kc, ablk + ir * astep, alda, bp, bld, j->C + row * j->ldc + col, j->ldc,
                  &t);
            }
            ir += mr;
          }
        } else {
          /* B panel (L1) against every A strip of the block (L2) */
          for (size_t jr = 0, nr; jr < ncb; jr += nr) {
            nr = panel_cols(j, ncb, jr);
            size_t col = jc + jr, bld;
            const float *bp = b_panel(j, bbuf, col, jr, pc, kc, nr, &bld);
            t.bias = bias ? bias + col : NULL;
            /* streamed weights (j->stream_b): the next panel comes into L2, each strip's
             * kernel asking for its share spread over its K steps (in one burst before the
             * call, ResNet-50's layer4 took 0.4-0.7 ms more of 9.6) */
            const char *nxt = NULL;
            size_t nxt_lines = 0, nxt_done = 0, n_str = div_up(mc, MR);
            if (j->stream_b && jr + NR < ncb) {
              size_t nld, nnr = min_sz(NR, ncb - jr - NR);
              nxt = (const char *)b_panel(j, bbuf, col + NR, jr + NR, pc, kc, nnr, &nld);
              nxt_lines = kc * nld * sizeof(float) / 64;
            }
            for (size_t ir = 0; ir < mc; ir += MR) {
              size_t upto = nxt_lines * (ir / MR + 1) / n_str;
              t.pf_l2 = nxt ? nxt + nxt_done * 64 : NULL;
              t.pf_l2_lines = upto - nxt_done;
              nxt_done = upto;
              size_t row = ic + ir;
              t.bias_row = brow ? brow + row : NULL;
              t.res = res ? res + row * t.ldr + col : NULL;
              t.arow = j->arow ? j->arow + row : NULL;
              /* the next strip, during the first panel's sweep (the block then sits in L2) */
              t.pf_a = pf_a && jr == 0 && ir + MR < mc ? ablk + (ir + MR) * astep : NULL;
              t.pf_a_rows = t.pf_a ? (int)min_sz(MR, mc - ir - MR) : 0;
              ukr(min_sz(MR, mc - ir), nr, kc, ablk + ir * astep, alda, bp, bld,
                  j->C + row * j->ldc + col, j->ldc, &t);
            }
          }
        }
      }
    }
  }
}

static void gemm_task(void *ctx, size_t b, size_t e, int tid) {
  const gemm_job *j = ctx;
  float *ws = j->ws + (size_t)tid * j->ws_stride;
  for (size_t t = b; t < e; t++) {
    size_t m0 = t / j->tn * j->m_step, n0 = t % j->tn * j->n_step;
    gemm_region(j, m0, min_sz(j->M, m0 + j->m_step), n0, min_sz(j->N, n0 + j->n_step), ws);
  }
}

/* Strips of MR rows per thread from which a gathered A is cut by rows only (plan_grid). */
enum { GATHER_ROW_CUT_STRIPS = 8 };

static int gather_cuts_rows(const kiln_gemm_isa_ops *ops, size_t M, int n_threads) {
  return div_up(M, ops->mr) >= GATHER_ROW_CUT_STRIPS * (size_t)n_threads;
}

/* Tasks: a grid of tn x tm blocks of C, up to `want` of them. N is cut in panels of NR
 * columns, M in strips of MR rows. Of the grids, the one whose slowest thread (tasks taken in
 * rounds of n_threads, each costing its largest block's strips x column vectors) is quickest,
 * or nearly so. Uneven cuts such as 196 columns as
 * 64 + 64 + 64 + 4 leave one thread idle for a third of the GEMM; this picks 2 x 128 rows. */
static void plan_grid(gemm_job *j, int n_threads) {
  const size_t MR = j->ops->mr, unit = j->ops->nr, G = j->ops->gran;
  size_t m_strips = div_up(j->M, MR), n_units = div_up(j->N, unit);
  double flops = 2.0 * (double)j->M * (double)j->N * (double)j->K;
  size_t want = 1;
  if (n_threads > 1) {
    double w = flops / 1.0e6;
    want = w < 1.0 ? 1 : w > 2.0 * n_threads ? 2 * (size_t)n_threads : (size_t)w;
    if (want > 1 && want < (size_t)n_threads) want = (size_t)n_threads;
  }
  /* Gathered A (a convolution's taps read in place) is cut by rows only where there are
   * strips enough: threads that split the columns each gather every row, at the same time.
   * ResNet-50's 3x3 stride-2 layer 128 -> 128 at 56x56 -> 28x28 took a median 1.6-1.8 ms at
   * 2 threads in a 2 x 2 grid, 0.83-1.06 ms cut by rows, 1.2 ms at 1 thread (conv_bench, AMD
   * EPYC Zen 5, avx512); at 7x7 (9 strips) the column cut stays the faster. */
  size_t max_tn = j->arow && gather_cuts_rows(j->ops, j->M, n_threads) ? 1 : n_units;
  /* two passes: the least cost, then of the grids at that cost the most tasks, on a tie the
   * larger tn. (Grids within 5% of it, with more tasks for the dynamic schedule to even out
   * a thread delayed by others, cut ResNet-50's 1x1 layers on 56x56 into 4 column blocks
   * that alternated between 2 threads: the next node read half its band of the plane from
   * the other core's cache. Halves instead, with the convolution tiles' contiguous runs: the
   * model 0.976-0.983 of its time at 2 threads, kiln bench, 34 alternations; the other bench
   * models 0.98-1.0. AMD EPYC Zen 5, avx512.) */
  double least = (double)div_up(j->N, G) * (double)m_strips;
  size_t best_ns = n_units, best_ms = m_strips, best_tasks = 1;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t tn = min_sz(max_tn, want); tn >= 1; tn--) {
      for (size_t tm = 1; tn * tm <= want && tm <= m_strips; tm++) {
        size_t ns = div_up(n_units, tn), ms = div_up(m_strips, tm);
        size_t tasks = div_up(n_units, ns) * div_up(m_strips, ms);
        size_t vecs = div_up(min_sz(ns * unit, j->N), G); /* the widest task's */
        double cost = (double)div_up(tasks, (size_t)n_threads) * (double)vecs * (double)ms;
        if (pass == 0) {
          if (cost < least) least = cost;
        } else if (cost <= least && tasks > best_tasks) {
          best_ns = ns;
          best_ms = ms;
          best_tasks = tasks;
        }
      }
    }
  }
  j->n_step = best_ns * unit;
  j->m_step = best_ms * MR;
  j->tn = div_up(j->N, j->n_step);
  j->n_tasks = j->tn * div_up(j->M, j->m_step);
}

/* ---- matrix-vector ------------------------------------------------------------------- */

typedef struct gemv_job {
  const kiln_gemm_isa_ops *ops;
  size_t K, n, step;
  const float *x;         /* K values */
  const float *mat;       /* the matrix the n outputs run over */
  size_t ld;
  int rows_dot;           /* 1: out[i] = dot(x, mat row i); 0: out[i] = sum_k x[k] mat[k][i] */
  const kiln_gemm_packed_b *pb; /* instead of mat: out = x . packed B */
  float *y;               /* raw results */
  float *out;             /* contiguous output, finished in the task, or NULL */
  kiln_gemm_tile tile;    /* for out; bias/res at index 0 */
} gemv_job;

static void gemv_task(void *ctx, size_t b, size_t e, int tid) {
  (void)tid;
  const gemv_job *g = ctx;
  size_t i0 = b * g->step, i1 = min_sz(g->n, e * g->step);
  if (g->pb) {
    for (size_t col = i0; col < i1; col += g->pb->nr) {
      size_t q = col / g->pb->nr, w = panel_w(g->pb, q);
      g->ops->gemv_n(g->K, min_sz(g->pb->nr, g->n - col), g->x, g->pb->data + col * g->K, w,
                     g->y + col);
    }
  } else if (g->rows_dot) {
    g->ops->gemv_t(g->K, i1 - i0, g->x, g->mat + i0 * g->ld, g->ld, g->y + i0);
  } else {
    g->ops->gemv_n(g->K, i1 - i0, g->x, g->mat + i0, g->ld, g->y + i0);
  }
  if (g->out) {
    kiln_gemm_tile t = g->tile;
    if (t.bias) t.bias += i0;
    if (t.res) t.res += i0;
    g->ops->epilogue_row(g->out + i0, g->y + i0, i1 - i0, &t);
  }
}

static void run_gemv(gemv_job *g, kiln_threadpool *pool) {
  size_t n_threads = (size_t)kiln_threadpool_size(pool);
  size_t unit = g->pb ? g->pb->nr : 64;
  double bytes = 4.0 * (double)g->K * (double)g->n;
  size_t want = bytes < 256e3 ? 1 : 2 * n_threads;
  g->step = round_up(div_up(g->n, want), unit);
  size_t tasks = div_up(g->n, g->step);
  if (tasks <= 1)
    gemv_task(g, 0, 1, 0);
  else
    kiln_parallel_for(pool, tasks, gemv_task, g, 1);
}

/* ---- entry points -------------------------------------------------------------------- */

static kiln_code gemm_run(const kiln_gemm_ctx *ctx, int lvl, int trans_a, int trans_b, size_t M,
                          size_t N, size_t K, float alpha, const float *A, size_t lda,
                          const float *B, size_t ldb, const kiln_gemm_packed_b *pb, float beta,
                          float *C, size_t ldc, const kiln_gemm_epilogue *ep,
                          const float *bias_row, const int32_t *arow, const int32_t *koff,
                          kiln_error *err) {
  const kiln_gemm_isa_ops *ops = kiln_gemm_ops_for(lvl);
  kiln_threadpool *pool = ctx ? ctx->pool : NULL;
  if (M == 0 || N == 0) return KILN_OK;
  kiln_gemm_tile tile;
  memset(&tile, 0, sizeof tile);
  tile.alpha = alpha;
  tile.beta = beta;
  tile.flags = KILN_GT_FIRST | KILN_GT_LAST;
  if (ep) {
    tile.bias = ep->bias;
    tile.res = ep->residual;
    tile.ldr = ep->ldr;
    tile.res_after = ep->residual_after_act;
    tile.act = ep->act;
  }
  tile.bias_row = bias_row;

  if (K == 0 || alpha == 0.0f) { /* C = beta C + epilogue; A and B unread */
    float *zeros = ws_get(N);
    if (!zeros) return kiln_fail(err, KILN_ERR_NOMEM, "gemm: out of memory");
    memset(zeros, 0, N * sizeof(float));
    for (size_t m = 0; m < M; m++) {
      kiln_gemm_tile t = tile;
      if (t.res) t.res += m * t.ldr;
      if (t.bias_row) t.bias_row += m;
      ops->epilogue_row(C + m * ldc, zeros, N, &t);
    }
    return KILN_OK;
  }

  if (M == 1 && !arow) { /* y = x . op(B) */
    float *ws = ws_get(K + N + 16);
    if (!ws) return kiln_fail(err, KILN_ERR_NOMEM, "gemm: out of memory");
    gemv_job g;
    memset(&g, 0, sizeof g);
    g.ops = ops;
    g.K = K;
    g.n = N;
    g.x = A;
    if (trans_a) {
      float *x = ws + N + 16;
      for (size_t k = 0; k < K; k++) x[k] = A[k * lda];
      g.x = x;
    }
    g.pb = pb;
    g.mat = B;
    g.ld = ldb;
    g.rows_dot = trans_b;
    g.y = ws;
    g.out = C;
    g.tile = tile;
    run_gemv(&g, pool);
    return KILN_OK;
  }

  if (N == 1 && !arow) { /* C[:, 0] = op(A) . b */
    float *ws = ws_get(K + 4 * M + 64);
    if (!ws) return kiln_fail(err, KILN_ERR_NOMEM, "gemm: out of memory");
    float *y = ws, *cb = y + M + 16, *bb = cb + M + 16, *rb = bb + M + 16, *x = rb + M + 16;
    const float *xv = x;
    if (pb)
      for (size_t k = 0; k < K; k++) x[k] = pb->data[k * panel_w(pb, 0)];
    else if (trans_b)
      xv = B;
    else
      for (size_t k = 0; k < K; k++) x[k] = B[k * ldb];
    gemv_job g;
    memset(&g, 0, sizeof g);
    g.ops = ops;
    g.K = K;
    g.n = M;
    g.x = xv;
    g.mat = A;
    g.ld = lda;
    g.rows_dot = !trans_a;
    g.y = y;
    run_gemv(&g, pool);
    /* the column of C is strided: finish it through contiguous copies */
    kiln_gemm_tile t = tile;
    if (beta != 0.0f)
      for (size_t m = 0; m < M; m++) cb[m] = C[m * ldc];
    if (t.bias || t.bias_row) { /* both: one sum per row, rounded differently (no caller) */
      for (size_t m = 0; m < M; m++)
        bb[m] = t.bias ? (t.bias_row ? t.bias[0] + t.bias_row[m] : t.bias[0]) : t.bias_row[m];
      t.bias = bb;
      t.bias_row = NULL;
    }
    if (t.res) {
      for (size_t m = 0; m < M; m++) rb[m] = t.res[m * t.ldr];
      t.res = rb;
    }
    ops->epilogue_row(cb, y, M, &t);
    for (size_t m = 0; m < M; m++) C[m * ldc] = cb[m];
    return KILN_OK;
  }

  gemm_job j;
  memset(&j, 0, sizeof j);
  j.ops = ops;
  j.blk = *blocking_of(lvl);
  j.trans_a = trans_a;
  j.trans_b = trans_b;
  j.M = M;
  j.N = N;
  j.K = K;
  j.A = A;
  j.lda = lda;
  j.B = B;
  j.ldb = ldb;
  j.pb = pb;
  j.arow = arow;
  j.koff = koff;
  j.C = C;
  j.ldc = ldc;
  j.tile = tile;
  /* B (not transposed) is read in place, with the kernels' prefetch, unless its rows are a
   * multiple of 4 KiB apart (then they collide in the caches and packing pays), or it is
   * reused so little (few rows of A) that packing could not pay anyway. Short, wide B met by
   * many rows of A is packed all the same (see PACK_B_MIN_M). */
  j.direct_b = !pb && !trans_b &&
               (M <= DIRECT_B_MAX_M ||
                (j.blk.order == 2 && (ldb * sizeof(float)) % 4096 != 0 &&
                 !(M >= PACK_B_MIN_M && K <= PACK_B_MAX_K && N >= PACK_B_MIN_N))); /* streamed B only */
  /* Weights packed beforehand (pb) come from memory in a network. Met by few strips of A with
   * the strip held in L1 (order 2), the first strip streams each B panel from memory at the
   * rate the kernel consumes it, and the other strips find it in cache: the stream does not
   * overlap their work. B panel outside instead (order 1), each panel prefetched into L2 a
   * share at a time while the strips of the one before run. ResNet-50's 1x1 layers on 7x7
   * (W^T packed, 49 rows of A): 2048 -> 512 with cold weights a median 0.76-0.87 -> 0.72-0.73
   * ms (conv_bench --cold, 1 thread, AMD EPYC Zen 5, avx512); hot 3-8% slower; in the model
   * (kiln profile, thread time, 1 thread) its layer4 13.0-13.5 -> 12.1-12.7 ms, all nodes
   * 47.9-49.6 -> 47.0-48.1 ms. At AVX2 (order 1 already) the prefetch measured 1.02-1.04x on
   * ResNet-50: at half the FMA rate the hardware prefetchers keep up; it is not asked for there.
   * Only weights of twice L2 or more: smaller ones, in a network whose weights L3 holds from one
   * run to the next, lost what hot ones lose (MobileNetV2's 7x7 layers, 0.6-1.6 MB each:
   * 160 -> 960 three times 0.291-0.299 ms streamed against 0.273-0.280 held, 320 -> 1280
   * 0.309-0.315 against 0.280-0.302; ResNet-50's are 4-9 MB). On one thread, weights of a
   * quarter of L2 and up to twice the strips as well: the transformers' 0.25-1 MB matrices
   * met by 128 rows (22 strips) had the first strip wait on every panel. BERT-style encoder
   * 0.964 of its time, GPT-style decoder 0.953, MobileNetV2 0.978 (its 7x7 layers among
   * the whole network's), ResNet-50 and SqueezeNet 0.99-1.0 (kiln bench, 6 alternations,
   * 1 thread, AMD EPYC Zen 5, avx512). At 2 threads the same took the transformers 1.055 of
   * their time: there the rule above stays. */
  int n_threads = kiln_threadpool_size(pool);
  size_t sb_strips = n_threads == 1 ? 2 * STREAM_B_MAX_STRIPS : STREAM_B_MAX_STRIPS;
  size_t sb_bytes = n_threads == 1 ? g_stream_b_min_bytes / 8 : g_stream_b_min_bytes;
  j.stream_b = pb && j.blk.order == 2 && div_up(M, ops->mr) <= sb_strips &&
               kiln_gemm_packed_b_bytes(pb) >= sb_bytes;
  j.a_outer = j.blk.order == 2 && !j.stream_b;
  /* Transposed A is packed. So is A whose rows are 4 KiB apart when strips are streamed past
   * an L1-resident B panel (order 1, streamed weights included); with the A strip held in L1
   * (order 2) the copy costs more than the set conflicts of its few rows. Where the ISA has a
   * kernel that reads A transposed in place, transposed A is not packed either. */
  j.pack_a = !arow && ((trans_a && !ops->ukernel_at) ||
                        (!trans_a && !j.a_outer && (lda * sizeof(float)) % 4096 == 0));
  plan_grid(&j, n_threads);
  /* K blocks of equal size up to KC; the N block keeps KC*NC (the L2 share of B) constant */
  j.kc = div_up(K, div_up(K, j.blk.kc));
  /* The micro-kernel prefetches its C tile at the start for long K blocks, or when C exceeds
   * L2 (it then comes from memory, and the prefetches overlap the misses). Otherwise the
   * burst of prefetches costs more than it saves: 1x1-convolution shapes such as
   * 512x784x128 and 256x256x64 ran 3-4% faster without it at 1 thread, while K blocks of 512
   * or more lost 2-3%, and 256x3136x64 (3.2 MB of C) lost 25% at 2 threads. */
  j.tile.pf_c = j.kc > 256 || (double)M * (double)N * sizeof(float) > (double)(2u << 20);
  j.nc = j.blk.nc * j.blk.kc / j.kc / ops->nr * ops->nr;
  if (j.nc < ops->nr) j.nc = ops->nr;
  j.mc = j.blk.mc;
  size_t per = (j.pb || j.direct_b ? 0 : j.kc * j.nc) + (j.pack_a ? j.mc * j.kc : 0);
  j.ws_stride = round_up(per, 16);
  size_t n_par = min_sz((size_t)n_threads, j.n_tasks);
  j.ws = ws_get(j.ws_stride * (n_par ? n_par : 1));
  if (!j.ws) return kiln_fail(err, KILN_ERR_NOMEM, "gemm: out of memory for packing buffers");
  if (j.n_tasks <= 1 || n_threads <= 1)
    gemm_task(&j, 0, j.n_tasks, 0);
  else
    kiln_parallel_for(pool, j.n_tasks, gemm_task, &j, 1);
  return KILN_OK;
}

static kiln_code check_common(const char *fn, size_t M, size_t N, size_t K, const float *A,
                              size_t lda, int trans_a, float *C, size_t ldc,
                              const kiln_gemm_epilogue *ep, kiln_error *err) {
  if (M && K && !A) return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: A is NULL", fn);
  if (M && N && !C) return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: C is NULL", fn);
  if (M && K && lda < (trans_a ? M : K))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: lda %zu < %zu", fn, lda, trans_a ? M : K);
  if (M && N && ldc < N)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: ldc %zu < N %zu", fn, ldc, N);
  if (ep && ep->residual && M && N && ep->ldr < N)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: residual ldr %zu < N %zu", fn, ep->ldr, N);
  if (ep && (unsigned)ep->act.kind >= KILN_ACT_COUNT)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: unknown activation %d", fn, (int)ep->act.kind);
  int64_t t;
  if (!kiln_mul_ok((int64_t)M, (int64_t)N, &t) || !kiln_mul_ok((int64_t)M, (int64_t)K, &t) ||
      !kiln_mul_ok((int64_t)K, (int64_t)N, &t))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s: sizes %zu x %zu x %zu overflow", fn, M, N, K);
  return KILN_OK;
}

kiln_code kiln_gemm_f32(const kiln_gemm_ctx *ctx, int trans_a, int trans_b, size_t M, size_t N,
                        size_t K, float alpha, const float *A, size_t lda, const float *B,
                        size_t ldb, float beta, float *C, size_t ldc,
                        const kiln_gemm_epilogue *ep, kiln_error *err) {
  return kiln_gemm_f32_rows(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                            ep, NULL, err);
}

kiln_code kiln_gemm_f32_rows(const kiln_gemm_ctx *ctx, int trans_a, int trans_b, size_t M,
                             size_t N, size_t K, float alpha, const float *A, size_t lda,
                             const float *B, size_t ldb, float beta, float *C, size_t ldc,
                             const kiln_gemm_epilogue *ep, const float *bias_row,
                             kiln_error *err) {
  int lvl = kiln_isa_resolve(ctx ? ctx->isa : KILN_ISA_AUTO);
  if (lvl < 0)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: ISA level %s not available on this CPU",
                     kiln_isa_name(ctx->isa));
  kiln_code rc = check_common("gemm", M, N, K, A, lda, trans_a, C, ldc, ep, err);
  if (rc) return rc;
  if (K && N && !B) return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: B is NULL");
  if (K && N && ldb < (trans_b ? K : N))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: ldb %zu < %zu", ldb, trans_b ? K : N);
  return gemm_run(ctx, lvl, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, NULL, beta, C, ldc,
                  ep, bias_row, NULL, NULL, err);
}

kiln_code kiln_gemm_f32_packed(const kiln_gemm_ctx *ctx, int trans_a, size_t M, float alpha,
                               const float *A, size_t lda, const kiln_gemm_packed_b *pb,
                               float beta, float *C, size_t ldc, const kiln_gemm_epilogue *ep,
                               kiln_error *err) {
  if (!pb) return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: packed B is NULL");
  if (ctx && ctx->isa != KILN_ISA_AUTO && ctx->isa != pb->isa)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: B was packed for %s, not %s",
                     kiln_isa_name(pb->isa), kiln_isa_name(ctx->isa));
  if (kiln_isa_resolve(pb->isa) < 0)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm: B was packed for %s, not available here",
                     kiln_isa_name(pb->isa));
  kiln_code rc = check_common("gemm", M, pb->N, pb->K, A, lda, trans_a, C, ldc, ep, err);
  if (rc) return rc;
  return gemm_run(ctx, pb->isa, trans_a, 0, M, pb->N, pb->K, alpha, A, lda, NULL, 0, pb, beta, C,
                  ldc, ep, NULL, NULL, NULL, err);
}

int kiln_gemm_has_gather(int isa) {
  int lvl = kiln_isa_resolve(isa);
  return lvl >= 0 && kiln_gemm_ops_for(lvl)->ukernel_gather != NULL;
}

int kiln_gemm_gather_rows_only(int isa, size_t M, int n_threads) {
  int lvl = kiln_isa_resolve(isa);
  return lvl >= 0 && n_threads > 1 && gather_cuts_rows(kiln_gemm_ops_for(lvl), M, n_threads);
}

kiln_code kiln_gemm_f32_packed_gather(const kiln_gemm_ctx *ctx, size_t M, const float *a,
                                      const int32_t *arow, const int32_t *koff,
                                      const kiln_gemm_packed_b *pb, float *C, size_t ldc,
                                      const kiln_gemm_epilogue *ep, kiln_error *err) {
  if (!pb) return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm gather: packed B is NULL");
  if (ctx && ctx->isa != KILN_ISA_AUTO && ctx->isa != pb->isa)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm gather: B was packed for %s, not %s",
                     kiln_isa_name(pb->isa), kiln_isa_name(ctx->isa));
  if (!kiln_gemm_has_gather(pb->isa))
    return kiln_fail(err, KILN_ERR_UNSUPPORTED, "gemm gather: no gathered-A kernel at %s",
                     kiln_isa_name(pb->isa));
  if (M && pb->K && (!a || !arow || !koff))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "gemm gather: A or its offsets are NULL");
  kiln_code rc = check_common("gemm gather", M, pb->N, pb->K, a, pb->K, 0, C, ldc, ep, err);
  if (rc) return rc;
  return gemm_run(ctx, pb->isa, 0, 0, M, pb->N, pb->K, 1.0f, a, 0, NULL, 0, pb, 0.0f, C, ldc, ep,
                  NULL, arow, koff, err);
}
