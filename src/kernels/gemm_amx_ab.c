/* bf16x3 GEMM on AMX tiles for C = A op(B) with constant B (MatMul and Gemm weights): see
 * gemm_amx.h. The mirror of gemm_amx.c: B is packed once into the tiles AMX takes as its right
 * operand (VNNI, [column block of 16][k block of 32], hi and lo), A is split per call into
 * row-major tiles ([row block of 16][k block]). The larger operand is read once: with B
 * larger (a few rows of activations), all of A is split up front and each task takes a share
 * of B's column pairs against every row pair of A, K over K_CHUNK blocks in chunks with the
 * sums kept between them; with A larger (batched inputs), each task splits a row pair of A at
 * a time and meets all of B. */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_amx.h"

#include "base/status.h"
#include "kernels/gemm_amx_internal.h"
#include "kernels/scratch.h"
#include "base/threadpool.h"

enum { A_GROUP_BYTES = 512 * 1024 };

struct kiln_amx_b {
  size_t k, n;
  size_t kb, np;     /* k blocks of 32; column pairs (32 columns) */
  uint16_t *hi, *lo; /* [np * 2][kb] tiles */
};

size_t kiln_amx_b_k(const kiln_amx_b *b) { return b ? b->k : 0; }
size_t kiln_amx_b_n(const kiln_amx_b *b) { return b ? b->n : 0; }

void kiln_amx_b_free(kiln_amx_b *b) {
  if (!b) return;
  free(b->hi);
  free(b->lo);
  free(b);
}

#ifdef KILN_AMX_BUILD

/* A tile seen as 16 x 16 pairs of bf16 (32 bits each), transposed in place. */
static void transpose_pairs(uint16_t *tile) {
  for (size_t r = 0; r < 16; r++)
    for (size_t c = r + 1; c < 16; c++) {
      uint16_t *x = tile + 2 * (r * 16 + c), *y = tile + 2 * (c * 16 + r), t[2];
      memcpy(t, x, sizeof t);
      memcpy(x, y, sizeof t);
      memcpy(y, t, sizeof t);
    }
}

/* Split op(B)'s column pairs into p's tiles (AVX-512: entered only once AMX is known available). */
T_512 static void pack_b_tiles(kiln_amx_b *p, const float *b, size_t ldb, int trans) {
  size_t k = p->k, n = p->n;
  for (size_t cp = 0; cp < p->np; cp++) {
    size_t t = cp * 2 * p->kb * TILE_ELEMS;
    if (!trans) {
      kiln_amx_split_cols(b, ldb, k, p->kb, n, cp * 32, p->hi + t, p->lo + t);
      continue;
    }
    /* B given as n x k: its rows are B's columns. Split them as row-major tiles, whose 32-bit
     * pairs [column][k pair] transposed are the VNNI tiles' [k pair][column]. */
    kiln_amx_split_rows(b, ldb, n, k, p->kb, cp * 32, p->hi + t, p->lo + t);
    for (size_t q = 0; q < 2 * p->kb; q++) {
      transpose_pairs(p->hi + t + q * TILE_ELEMS);
      transpose_pairs(p->lo + t + q * TILE_ELEMS);
    }
  }
}

/* Plain C: checks AMX (and so AVX-512) before anything compiled for it runs. */
kiln_amx_b *kiln_amx_pack_b(const float *b, size_t k, size_t n, size_t ldb, int trans) {
  if (!kiln_amx_available() || !b || !k || !n) return NULL;
  kiln_amx_b *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->k = k;
  p->n = n;
  p->kb = (k + 31) / 32;
  p->np = (n + 31) / 32;
  size_t elems = p->np * 2 * p->kb * TILE_ELEMS;
  p->hi = kiln_malloc_weights(elems * sizeof(uint16_t));
  p->lo = kiln_malloc_weights(elems * sizeof(uint16_t));
  if (!p->hi || !p->lo) {
    kiln_amx_b_free(p);
    return NULL;
  }
  pack_b_tiles(p, b, ldb, trans);
  return p;
}

typedef struct ab_job {
  const kiln_amx_b *b;
  size_t m, lda, ldc, ldr;
  const float *a, *bias, *res;
  float *c;
  kiln_act act;
  size_t mp;      /* row pairs of A */
  uint16_t *abuf; /* per row pair: hi [2][kb] tiles, then lo [2][kb] */
  float *acc;     /* K in chunks: 32 x 32 sums per (column pair, row pair) */
} ab_job;

/* Rows [32 rp, 32 rp + 32) of A into row-major tiles at dst: hi [2][kb], then lo [2][kb]. */
T_512 static void split_rows(const ab_job *j, size_t rp, uint16_t *dst) {
  const size_t kb = j->b->kb;
  kiln_amx_split_rows(j->a, j->lda, j->m, j->b->k, kb, rp * 32, dst, dst + 2 * kb * TILE_ELEMS);
}

static void split_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const ab_job *j = ctx;
  for (size_t rp = begin; rp < end; rp++) split_rows(j, rp, j->abuf + rp * 4 * j->b->kb * TILE_ELEMS);
}

/* The block of C at row pair rp, column pair cp from its sums: bias per column, residual,
 * activation, the rows and columns that exist. */
T_512 static void finish(const ab_job *j, size_t rp, size_t cp, const float *cbuf) {
  size_t r = rp * 32, c0 = cp * 32;
  size_t rows = j->m - r < 32 ? j->m - r : 32, cols = j->b->n - c0 < 32 ? j->b->n - c0 : 32;
  kiln_amx_finish(cbuf, rows, cols, j->c + r * j->ldc + c0, j->ldc, NULL, j->bias ? j->bias + c0 : NULL,
                  j->res ? j->res + r * j->ldr + c0 : NULL, j->ldr, &j->act);
}

/* A larger than B (many rows: batched inputs): each task splits a row pair of A into its own
 * buffer and meets every column pair of B (which stays in cache), whole K. */
static void rows_task(void *ctx, size_t begin, size_t end, int ti) {
  const ab_job *j = ctx;
  float cbuf[32 * 32] __attribute__((aligned(64)));
  const size_t kb = j->b->kb, tstep = kb * TILE_ELEMS;
  uint16_t *lh = j->abuf + (size_t)ti * 4 * tstep, *ll = lh + 2 * tstep;
  kiln_amx_tiles_on();
  for (size_t rp = begin; rp < end; rp++) {
    split_rows(j, rp, lh);
    for (size_t cp = 0; cp < j->b->np; cp++) {
      kiln_amx_mma(lh, ll, j->b->hi + cp * 2 * tstep, j->b->lo + cp * 2 * tstep, tstep, 0, kb, NULL, cbuf);
      finish(j, rp, cp, cbuf);
    }
  }
  kiln_amx_tiles_off();
}

/* Column pairs [begin, end) of B against every row pair of A. */
static void cols_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const ab_job *j = ctx;
  float cbuf[32 * 32] __attribute__((aligned(64)));
  const size_t kb = j->b->kb, nch = (kb + K_CHUNK - 1) / K_CHUNK, tstep = kb * TILE_ELEMS;
  kiln_amx_tiles_on();
  for (size_t ch = 0; ch < nch; ch++) {
    size_t b0 = ch * K_CHUNK, b1 = b0 + K_CHUNK < kb ? b0 + K_CHUNK : kb;
    /* row pairs in groups whose chunk of A (4 tiles per k block each) stays in L2 while it
     * meets every column pair */
    size_t group = A_GROUP_BYTES / (4 * (b1 - b0) * TILE_ELEMS * sizeof(uint16_t));
    if (group < 1) group = 1;
    for (size_t g0 = 0; g0 < j->mp; g0 += group)
    for (size_t cp = begin; cp < end; cp++) {
      const uint16_t *rh = j->b->hi + cp * 2 * tstep, *rl = j->b->lo + cp * 2 * tstep;
      for (size_t rp = g0; rp < j->mp && rp < g0 + group; rp++) {
        const uint16_t *lh = j->abuf + rp * 4 * tstep, *ll = lh + 2 * tstep;
        float *acc = nch > 1 ? j->acc + (cp * j->mp + rp) * 1024 : NULL;
        float *out = ch + 1 == nch ? cbuf : acc;
        kiln_amx_mma(lh, ll, rh, rl, tstep, b0, b1, ch ? acc : NULL, out);
        if (ch + 1 == nch) finish(j, rp, cp, cbuf);
      }
    }
  }
  kiln_amx_tiles_off();
}

kiln_code kiln_amx_gemm_ab(struct kiln_threadpool *pool, size_t m, const float *a, size_t lda,
                           const kiln_amx_b *b, float *c, size_t ldc, const float *bias,
                           const float *res, size_t ldr, const kiln_act *act) {
  if (!b || !a || !c || !kiln_amx_available()) return KILN_ERR_INVALID_ARG;
  if (!m) return KILN_OK;
  ab_job j = {b, m, lda, ldc, ldr, a, bias, res, c, act ? *act : (kiln_act){KILN_ACT_NONE, 0, 0},
              (m + 31) / 32, NULL, NULL};
  if (j.mp > b->np) { /* A is the larger operand: read it once, row pair by row pair */
    int nthr = kiln_threadpool_size(pool);
    j.abuf = kiln_scratch_get(KILN_SCRATCH_AMX, sizeof(uint16_t) * 4 * b->kb * TILE_ELEMS * (size_t)nthr);
    if (!j.abuf) return KILN_ERR_NOMEM;
    kiln_parallel_for(j.mp >= 2 ? pool : NULL, j.mp, rows_task, &j, 0);
    return KILN_OK;
  }
  size_t abytes = sizeof(uint16_t) * 4 * b->kb * TILE_ELEMS * j.mp;
  size_t cbytes = b->kb > K_CHUNK ? sizeof(float) * 1024 * j.mp * b->np : 0;
  char *mem = kiln_scratch_get(KILN_SCRATCH_AMX, abytes + cbytes); /* kept for the next call */
  if (!mem) return KILN_ERR_NOMEM;
  j.abuf = (uint16_t *)(void *)mem;
  j.acc = cbytes ? (float *)(void *)(mem + abytes) : NULL;
  kiln_parallel_for(j.mp >= 2 ? pool : NULL, j.mp, split_task, &j, 0);
  kiln_parallel_for(b->np >= 2 ? pool : NULL, b->np, cols_task, &j, 0);
  return KILN_OK;
}

#else /* no AMX build */

kiln_amx_b *kiln_amx_pack_b(const float *b, size_t k, size_t n, size_t ldb, int trans) {
  (void)b, (void)k, (void)n, (void)ldb, (void)trans;
  return NULL;
}
kiln_code kiln_amx_gemm_ab(struct kiln_threadpool *pool, size_t m, const float *a, size_t lda,
                           const kiln_amx_b *b, float *c, size_t ldc, const float *bias,
                           const float *res, size_t ldr, const kiln_act *act) {
  (void)pool, (void)m, (void)a, (void)lda, (void)b, (void)c, (void)ldc, (void)bias, (void)res,
      (void)ldr, (void)act;
  return KILN_ERR_INVALID_ARG;
}

#endif
