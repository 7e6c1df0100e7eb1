/* bf16x3 GEMM on AMX tiles: see gemm_amx.h.
 *
 * Layout. W is padded to whole tiles (rows to 32, k to 32) and stored as tiles of 16 rows x
 * 32 bfloat16, [row block][k block], once for hi and once for lo. X is split per call, a
 * block of 32 columns at a time, into the tile form AMX takes for its right operand (VNNI:
 * row r of a tile holds columns 0..15 of k rows 2r and 2r + 1, interleaved), [column half]
 * [k block], hi and lo.
 *
 * Kernel (kiln_amx_mma, shared with gemm_amx_ab.c). A 32 x 32 block of C is four accumulator
 * tiles (tmm0-3); per k block of 32, two W tiles (tmm4-5) and two X tiles (tmm6-7) are loaded
 * for each of the three products hi.hi, hi.lo and lo.hi (10 tile loads, 12 tile multiplies).
 * The block is then stored to a buffer and finished row by row: bias, residual, activation,
 * masked to the matrix edges.
 *
 * Order. The larger operand is read once. When X has more columns than W has rows, a task is
 * a block of 32 columns (and, when there are few, a share of W's rows): each thread splits the
 * columns it needs into its own buffer. Otherwise X is split up front and each task takes a
 * share of W's row pairs against every column block, K in chunks (rows_task). Every thread
 * configures its own tiles and releases them when its tasks are done. */
#include "kernels/gemm_amx.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/cpu.h"
#include "kernels/gemm_amx_internal.h"
#include "kernels/scratch.h"
#include "base/threadpool.h"

#ifdef KILN_AMX_BUILD
#include <sys/syscall.h>
#include <unistd.h>
#endif

struct kiln_amx_w {
  size_t m, k;       /* the matrix */
  size_t mp, kb;     /* rows padded to 32; k blocks of 32 */
  uint16_t *hi, *lo; /* [mp / 16][kb] tiles of 16 x 32 */
};

size_t kiln_amx_w_rows(const kiln_amx_w *w) { return w ? w->m : 0; }
size_t kiln_amx_w_cols(const kiln_amx_w *w) { return w ? w->k : 0; }

void kiln_amx_w_free(kiln_amx_w *w) {
  if (!w) return;
  free(w->hi);
  free(w->lo);
  free(w);
}

#ifdef KILN_AMX_BUILD

static int g_amx_ok;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
  const kiln_cpu_features *f = kiln_cpu_get_features();
  const char *env = getenv("KILN_AMX");
  if (env && !strcmp(env, "0")) return;
  if (!f->amx_tile || !f->amx_bf16 || !f->os_amx || kiln_cpu_isa() < KILN_ISA_AVX512) return;
  /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: tile data is off for a process until asked */
  g_amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

int kiln_amx_available(void) {
  pthread_once(&g_amx_once, amx_probe);
  return g_amx_ok;
}

/* Split W's row pairs into p's tiles (AVX-512: entered only once AMX is known available). */
T_512 static void pack_w_tiles(kiln_amx_w *p, const float *w, size_t ldw) {
  for (size_t rp = 0; rp < p->mp / 32; rp++) {
    size_t t = rp * 2 * p->kb * TILE_ELEMS;
    kiln_amx_split_rows(w, ldw, p->m, p->k, p->kb, rp * 32, p->hi + t, p->lo + t);
  }
}

/* Plain C: checks AMX (and so AVX-512) before anything compiled for it runs. */
kiln_amx_w *kiln_amx_pack_w(const float *w, size_t m, size_t k, size_t ldw) {
  if (!kiln_amx_available() || !w || !m || !k) return NULL;
  kiln_amx_w *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->m = m;
  p->k = k;
  p->mp = (m + 31) / 32 * 32;
  p->kb = (k + 31) / 32;
  size_t elems = p->mp / 16 * p->kb * TILE_ELEMS;
  p->hi = kiln_malloc_weights(elems * sizeof(uint16_t));
  p->lo = kiln_malloc_weights(elems * sizeof(uint16_t));
  if (!p->hi || !p->lo) {
    kiln_amx_w_free(p);
    return NULL;
  }
  pack_w_tiles(p, w, ldw);
  return p;
}

typedef struct amx_job {
  const kiln_amx_w *w;
  size_t n, ldx, ldc, ldr;
  const float *x, *bias, *res;
  float *c;
  kiln_act act;
  size_t n_blocks;  /* column blocks of 32 */
  size_t m_parts;   /* tasks per column block (shares of W's row pairs) */
  uint16_t *xbuf;   /* per thread: 4 * kb tiles; or (rows_task) every block's, 4 * kb each */
  size_t xbuf_elems;
  float *acc;       /* rows_task with K in chunks: 32 x 32 sums per (row pair, column block) */
} amx_job;

typedef struct tile_cfg {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_cfg;

/* Eight tiles of 16 rows x 64 bytes. A constant: gcc 12 drops stores to a local whose only
 * reader is _tile_loadconfig, leaving a configuration with garbage in it. */
static const tile_cfg g_tile_cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

T_AMX void kiln_amx_tiles_on(void) { _tile_loadconfig(&g_tile_cfg); }

T_AMX void kiln_amx_tiles_off(void) { _tile_release(); }

T_AMX void kiln_amx_mma(const uint16_t *lh, const uint16_t *ll, const uint16_t *rh, const uint16_t *rl,
                        size_t tstep, size_t b0, size_t b1, const float *acc, float *out) {
  const uint16_t *w0h = lh, *w1h = lh + tstep, *w0l = ll, *w1l = ll + tstep;
  const uint16_t *x0h = rh, *x1h = rh + tstep, *x0l = rl, *x1l = rl + tstep;
  if (acc) {
    _tile_loadd(0, acc, 128);
    _tile_loadd(1, acc + 16, 128);
    _tile_loadd(2, acc + 16 * 32, 128);
    _tile_loadd(3, acc + 16 * 32 + 16, 128);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
/* the four accumulators += left tiles (tmm4, tmm5) times right tiles (tmm6, tmm7) */
#define MMA_2X2()            \
  _tile_dpbf16ps(0, 4, 6);   \
  _tile_dpbf16ps(1, 4, 7);   \
  _tile_dpbf16ps(2, 5, 6);   \
  _tile_dpbf16ps(3, 5, 7)
  for (size_t b = b0; b < b1; b++) {
    size_t o = b * TILE_ELEMS;
    _tile_loadd(4, w0h + o, 64); /* hi . hi */
    _tile_loadd(5, w1h + o, 64);
    _tile_loadd(6, x0h + o, 64);
    _tile_loadd(7, x1h + o, 64);
    MMA_2X2();
    _tile_loadd(6, x0l + o, 64); /* hi . lo */
    _tile_loadd(7, x1l + o, 64);
    MMA_2X2();
    _tile_loadd(4, w0l + o, 64); /* lo . hi */
    _tile_loadd(5, w1l + o, 64);
    _tile_loadd(6, x0h + o, 64);
    _tile_loadd(7, x1h + o, 64);
    MMA_2X2();
  }
#undef MMA_2X2
  _tile_stored(0, out, 128);
  _tile_stored(1, out + 16, 128);
  _tile_stored(2, out + 16 * 32, 128);
  _tile_stored(3, out + 16 * 32 + 16, 128);
}

/* The 32 x 32 block of C at rows r (a multiple of 32) for k blocks [b0, b1) of the split
 * column block (xhi, xlo), from acc or 0, to out (see kiln_amx_mma). */
static void mma_block(const kiln_amx_w *w, size_t r, const uint16_t *xhi, const uint16_t *xlo,
                      size_t b0, size_t b1, const float *acc, float *out) {
  const size_t tstep = w->kb * TILE_ELEMS;
  kiln_amx_mma(w->hi + r / 16 * tstep, w->lo + r / 16 * tstep, xhi, xlo, tstep, b0, b1, acc, out);
}

/* Write the block of C at rows r, columns j0 from its sums (32 x 32 floats): bias per row,
 * residual and activation, the rows and columns that exist. */
T_512 static void finish_block(const amx_job *j, size_t r, size_t j0, const float *cbuf) {
  size_t rows = j->w->m - r < 32 ? j->w->m - r : 32, cols = j->n - j0 < 32 ? j->n - j0 : 32;
  kiln_amx_finish(cbuf, rows, cols, j->c + r * j->ldc + j0, j->ldc, j->bias ? j->bias + r : NULL, NULL,
                  j->res ? j->res + r * j->ldr + j0 : NULL, j->ldr, &j->act);
}

/* Rows [r0, r1) (multiples of 32) of the column block at j0, from the split X, whole K. */
static void block_rows(const amx_job *j, size_t r0, size_t r1, size_t j0, const uint16_t *xhi,
                             const uint16_t *xlo, float *cbuf) {
  for (size_t r = r0; r < r1; r += 32) {
    mma_block(j->w, r, xhi, xlo, 0, j->w->kb, NULL, cbuf);
    finish_block(j, r, j0, cbuf);
  }
}

/* W read once, step 1: column blocks [begin, end) of X split into the shared buffer. */
static void split_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const amx_job *j = ctx;
  for (size_t blk = begin; blk < end; blk++) {
    uint16_t *xhi = j->xbuf + blk * j->xbuf_elems, *xlo = xhi + j->xbuf_elems / 2;
    kiln_amx_split_cols(j->x, j->ldx, j->w->k, j->w->kb, j->n, blk * 32, xhi, xlo);
  }
}

/* W read once, step 2: row pairs [begin, end) of W against every column block, so that a pair of
 * W's rows is read from memory once and reused from cache. A long K is taken in chunks of
 * K_CHUNK blocks, every row pair and column block per chunk, the sums kept in j->acc between
 * chunks: the chunk of W and of X then both stay in L2 (3x3 convolutions of 256 channels at
 * 14x14 have 2.4 MiB of W and 2 MiB of split X). */
static void rows_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const amx_job *j = ctx;
  float cbuf[32 * 32] __attribute__((aligned(64)));
  const size_t kb = j->w->kb, nch = (kb + K_CHUNK - 1) / K_CHUNK;
  kiln_amx_tiles_on();
  for (size_t ch = 0; ch < nch; ch++) {
    size_t b0 = ch * K_CHUNK, b1 = b0 + K_CHUNK < kb ? b0 + K_CHUNK : kb;
    for (size_t pr = begin; pr < end; pr++)
      for (size_t blk = 0; blk < j->n_blocks; blk++) {
        const uint16_t *xhi = j->xbuf + blk * j->xbuf_elems, *xlo = xhi + j->xbuf_elems / 2;
        float *acc = nch > 1 ? j->acc + (pr * j->n_blocks + blk) * 1024 : NULL;
        float *out = ch + 1 == nch ? cbuf : acc;
        mma_block(j->w, pr * 32, xhi, xlo, b0, b1, ch ? acc : NULL, out);
        if (ch + 1 == nch) finish_block(j, pr * 32, blk * 32, cbuf);
      }
  }
  kiln_amx_tiles_off();
}

static void amx_task(void *ctx, size_t begin, size_t end, int ti) {
  const amx_job *j = ctx;
  uint16_t *xhi = j->xbuf + (size_t)ti * j->xbuf_elems, *xlo = xhi + j->xbuf_elems / 2;
  float cbuf[32 * 32] __attribute__((aligned(64)));
  size_t pairs = j->w->mp / 32, have = (size_t)-1;
  kiln_amx_tiles_on();
  for (size_t t = begin; t < end; t++) {
    size_t blk = t / j->m_parts, part = t % j->m_parts;
    size_t j0 = blk * 32;
    if (blk != have) { /* consecutive tasks of one block share the split */
      kiln_amx_split_cols(j->x, j->ldx, j->w->k, j->w->kb, j->n, j0, xhi, xlo);
      have = blk;
    }
    size_t p0 = pairs * part / j->m_parts, p1 = pairs * (part + 1) / j->m_parts;
    block_rows(j, p0 * 32, p1 * 32, j0, xhi, xlo, cbuf);
  }
  kiln_amx_tiles_off();
}

kiln_code kiln_amx_gemm(struct kiln_threadpool *pool, const kiln_amx_w *w, size_t n,
                        const float *x, size_t ldx, float *c, size_t ldc, const float *bias,
                        const float *res, size_t ldr, const kiln_act *act) {
  if (!w || !x || !c || !kiln_amx_available()) return KILN_ERR_INVALID_ARG;
  if (!n) return KILN_OK;
  amx_job j = {w, n, ldx, ldc, ldr, x, bias, res, c, act ? *act : (kiln_act){KILN_ACT_NONE, 0, 0},
               (n + 31) / 32, 1, NULL, 0, NULL};
  int nthr = kiln_threadpool_size(pool);
  size_t pairs = w->mp / 32;
  j.xbuf_elems = 2 * 2 * w->kb * TILE_ELEMS; /* hi and lo, two column halves */
  if (w->mp > j.n_blocks * 32 && j.n_blocks > 1) {
    /* W is the larger operand: read it once (its row pairs outside), X split up front */
    size_t xbytes = j.xbuf_elems * sizeof(uint16_t) * j.n_blocks;
    size_t abytes = w->kb > K_CHUNK ? sizeof(float) * 1024 * pairs * j.n_blocks : 0;
    char *mem = kiln_scratch_get(KILN_SCRATCH_AMX, xbytes + abytes); /* kept for the next call */
    if (!mem) return KILN_ERR_NOMEM;
    j.xbuf = (uint16_t *)(void *)mem;
    j.acc = abytes ? (float *)(void *)(mem + xbytes) : NULL;
    kiln_parallel_for(j.n_blocks >= 2 ? pool : NULL, j.n_blocks, split_task, &j, 0);
    kiln_parallel_for(pairs >= 2 ? pool : NULL, pairs, rows_task, &j, 0);
    return KILN_OK;
  }
  /* few column blocks for the threads: split W's rows too (each share splits X again) */
  if (nthr > 1 && j.n_blocks < 4 * (size_t)nthr)
    j.m_parts = pairs < (size_t)nthr ? pairs : (size_t)nthr;
  j.xbuf = kiln_scratch_get(KILN_SCRATCH_AMX, j.xbuf_elems * sizeof(uint16_t) * (size_t)nthr);
  if (!j.xbuf) return KILN_ERR_NOMEM;
  size_t tasks = j.n_blocks * j.m_parts;
  if (nthr <= 1 || tasks < 2)
    amx_task(&j, 0, tasks, 0);
  else
    kiln_parallel_for(pool, tasks, amx_task, &j, 0);
  return KILN_OK;
}

#else /* no AMX build */

int kiln_amx_available(void) { return 0; }
kiln_amx_w *kiln_amx_pack_w(const float *w, size_t m, size_t k, size_t ldw) {
  (void)w, (void)m, (void)k, (void)ldw;
  return NULL;
}
kiln_code kiln_amx_gemm(struct kiln_threadpool *pool, const kiln_amx_w *w, size_t n,
                        const float *x, size_t ldx, float *c, size_t ldc, const float *bias,
                        const float *res, size_t ldr, const kiln_act *act) {
  (void)pool, (void)w, (void)n, (void)x, (void)ldx, (void)c, (void)ldc, (void)bias, (void)res,
      (void)ldr, (void)act;
  return KILN_ERR_INVALID_ARG;
}

#endif
