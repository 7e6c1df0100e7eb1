/* Integer GEMM: dispatch, packing, the scalar kernel and the threaded drivers (see igemm.h). */
#include "kernels/igemm.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* Work below which a product runs on the calling thread (multiply-adds). */
enum { IGEMM_PAR_MIN = 1 << 18 };

kiln_isa kiln_igemm_isa(void) {
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512) return kiln_cpu_get_features()->avx512_vnni ? KILN_ISA_AVX512 : KILN_ISA_AVX2;
  return isa >= KILN_ISA_AVX2 ? KILN_ISA_AVX2 : KILN_ISA_SCALAR;
}

int kiln_igemm_isa_ok(kiln_isa isa) {
  return isa == KILN_ISA_SCALAR || ((isa == KILN_ISA_AVX2 || isa == KILN_ISA_AVX512) && isa <= kiln_igemm_isa());
}

static int32_t byte_val(uint8_t x, int is_signed) { return is_signed ? (int32_t)(int8_t)x : (int32_t)x; }

/* The portable kernel on the packed operands: per row of A, each group of four k added along
 * the packed row of B (i-p-j order, so the compiler vectorises the j loop); sums in uint32, which
 * wrap without undefined behaviour. */
#define IG_ROW_LOOP(BT)                                                                          \
  for (int64_t j = 0; j < g->n; j++)                                                             \
    acc[j] += (uint32_t)(a0 * (BT)b[4 * j] + a1 * (BT)b[4 * j + 1] + a2 * (BT)b[4 * j + 2] +      \
                         a3 * (BT)b[4 * j + 3])

static void igemm_scalar(const kiln_igemm_args *g) {
  const int a_signed = g->b_unsigned;
  for (int64_t i = 0; i < g->m; i++) {
    const uint8_t *a = g->a + i * g->k4 * 4;
    uint32_t *acc = (uint32_t *)(g->c + i * g->ldc);
    for (int64_t j = 0; j < g->n; j++) acc[j] = 0;
    for (int64_t p = 0; p < g->k4; p++) {
      const uint8_t *b = g->b + p * g->ldb * 4;
      const int32_t a0 = byte_val(a[4 * p], a_signed), a1 = byte_val(a[4 * p + 1], a_signed),
                    a2 = byte_val(a[4 * p + 2], a_signed), a3 = byte_val(a[4 * p + 3], a_signed);
      if (g->b_unsigned)
        IG_ROW_LOOP(uint8_t);
      else
        IG_ROW_LOOP(int8_t);
    }
    for (int64_t j = 0; j < g->n; j++) {
      uint32_t s = acc[j];
      if (g->r) s += (uint32_t)g->r[i];
      if (g->u) s -= (uint32_t)g->u[i] * (uint32_t)g->cs[j];
      if (g->v) s += (uint32_t)g->v[i] * (uint32_t)g->zb[j];
      acc[j] = s;
    }
  }
}
#undef IG_ROW_LOOP

void kiln_igemm_kernel(kiln_isa isa, const kiln_igemm_args *g) {
  if (g->m <= 0 || g->n <= 0) return;
#if defined(__x86_64__) || defined(__i386__)
  if (isa == KILN_ISA_AVX512 && kiln_igemm_isa_ok(KILN_ISA_AVX512)) {
    kiln_igemm_kernel_avx512(g);
    return;
  }
  if (isa >= KILN_ISA_AVX2 && kiln_igemm_isa_ok(KILN_ISA_AVX2)) {
    kiln_igemm_kernel_avx2(g);
    return;
  }
#else
  (void)isa;
#endif
  igemm_scalar(g);
}

void kiln_igemm_pack_b(int64_t k, int64_t n, const uint8_t *src, int64_t lds, uint8_t flip, uint8_t *dst,
                       int64_t ldb) {
  int64_t k4 = (k + 3) / 4;
  memset(dst, 0, (size_t)(k4 * ldb * 4));
  for (int64_t p = 0; p < k; p++) {
    const uint8_t *s = src + p * lds;
    uint8_t *d = dst + (p / 4) * ldb * 4 + p % 4;
    for (int64_t j = 0; j < n; j++) d[j * 4] = s[j] ^ flip;
  }
}

void kiln_igemm_pack_a(int64_t m, int64_t k, const uint8_t *src, int64_t lds, uint8_t flip, int is_signed,
                       uint8_t *dst, int32_t *rs) {
  int64_t k4 = (k + 3) / 4;
  for (int64_t i = 0; i < m; i++) {
    const uint8_t *s = src + i * lds;
    uint8_t *d = dst + i * k4 * 4;
    int32_t sum = 0;
    for (int64_t p = 0; p < k; p++) {
      d[p] = s[p] ^ flip;
      sum += byte_val(d[p], is_signed);
    }
    for (int64_t p = k; p < k4 * 4; p++) d[p] = 0;
    if (rs) rs[i] = sum; /* |sum| <= 255 k: no overflow below 8 million */
  }
}

void kiln_igemm_colsum(int64_t k4, int64_t ldb, const uint8_t *bp, int is_signed, int32_t *cs) {
  for (int64_t j = 0; j < ldb; j++) cs[j] = 0;
  for (int64_t p = 0; p < k4; p++) {
    const uint8_t *b = bp + p * ldb * 4;
    if (is_signed)
      for (int64_t j = 0; j < ldb; j++)
        cs[j] += (int8_t)b[4 * j] + (int8_t)b[4 * j + 1] + (int8_t)b[4 * j + 2] + (int8_t)b[4 * j + 3];
    else
      for (int64_t j = 0; j < ldb; j++) cs[j] += b[4 * j] + b[4 * j + 1] + b[4 * j + 2] + b[4 * j + 3];
  }
}

void kiln_igemm_interleave4(const uint8_t *const rows[4], int64_t n, int64_t ldb, uint8_t *dst, int32_t *cs) {
  const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
  /* one 32-bit store per column, the bytes in little-endian order (x86-64, AArch64) */
  for (int64_t j = 0; j < n; j++) {
    uint32_t v = (uint32_t)r0[j] | (uint32_t)r1[j] << 8 | (uint32_t)r2[j] << 16 | (uint32_t)r3[j] << 24;
    memcpy(dst + 4 * j, &v, sizeof v);
  }
  memset(dst + 4 * n, 0, (size_t)(4 * (ldb - n)));
  if (cs)
    for (int64_t j = 0; j < n; j++) cs[j] += (int32_t)r0[j] + r1[j] + r2[j] + r3[j];
}

static int64_t round_nb(int64_t n) { return (n + KILN_IGEMM_NB - 1) / KILN_IGEMM_NB * KILN_IGEMM_NB; }

/* ---- products with B packed chunk by chunk ---- */

typedef struct many_job {
  kiln_isa isa;
  int64_t n, k4, chunk, n_chunks;
  kiln_igemm_task_fn task;
  kiln_igemm_pack_fn pack;
  void *ctx;
  uint8_t *buf; /* per thread: the chunk [k4][chunk][4], then its column sums [chunk] */
  size_t stride;
} many_job;

static void many_run(void *v, size_t begin, size_t end, int t) {
  const many_job *j = v;
  uint8_t *bp = j->buf + (size_t)t * j->stride;
  int32_t *cs = (int32_t *)(void *)(bp + (size_t)(j->k4 * j->chunk * 4));
  for (size_t idx = begin; idx < end; idx++) {
    int64_t task = (int64_t)idx / j->n_chunks, j0 = (int64_t)idx % j->n_chunks * j->chunk;
    int64_t j1 = j0 + j->chunk < j->n ? j0 + j->chunk : j->n, ldb = round_nb(j1 - j0);
    kiln_igemm_args g;
    memset(&g, 0, sizeof g);
    j->task(j->ctx, task, &g);
    j->pack(j->ctx, task, j0, j1, bp, ldb, g.u ? cs : NULL);
    g.b = bp;
    g.ldb = ldb;
    g.cs = cs;
    g.n = j1 - j0;
    g.c += j0;
    if (g.zb) g.zb += j0;
    kiln_igemm_kernel(j->isa, &g);
  }
}

int kiln_igemm_many(kiln_threadpool *pool, kiln_isa isa, int64_t n_tasks, int64_t n, int64_t k4, int64_t m,
                    kiln_igemm_task_fn task, kiln_igemm_pack_fn pack, void *ctx) {
  if (n_tasks <= 0 || n <= 0) return 0;
  int threads = kiln_threadpool_size(pool);
  if ((double)n_tasks * (double)m * (double)n * (double)k4 * 4.0 < IGEMM_PAR_MIN) threads = 1;
  /* a chunk of B stays within 128 KiB (in L2 while the rows of A pass over it); enough
   * chunks that every thread gets two */
  int64_t chunk = (128 << 10) / (k4 * 4 > 0 ? k4 * 4 : 1) / KILN_IGEMM_NB * KILN_IGEMM_NB;
  if (chunk < KILN_IGEMM_NB) chunk = KILN_IGEMM_NB;
  if (chunk > KILN_IGEMM_CHUNK_MAX) chunk = KILN_IGEMM_CHUNK_MAX;
  if (chunk > round_nb(n)) chunk = round_nb(n);
  if (threads > 1 && n_tasks * ((n + chunk - 1) / chunk) < 2 * threads) {
    int64_t per = (2 * threads + n_tasks - 1) / n_tasks; /* chunks wanted per task */
    chunk = round_nb((n + per - 1) / per);
  }
  many_job j = {isa, n, k4, chunk, (n + chunk - 1) / chunk, task, pack, ctx, NULL, 0};
  j.stride = ((size_t)(k4 * chunk * 4) + sizeof(int32_t) * (size_t)chunk + 63) / 64 * 64;
  j.buf = kiln_malloc(j.stride * (size_t)threads);
  if (!j.buf) return -1;
  size_t total = (size_t)(n_tasks * j.n_chunks);
  if (threads <= 1 || total <= 1)
    many_run(&j, 0, total, 0);
  else
    kiln_parallel_for(pool, total, many_run, &j, 1);
  free(j.buf);
  return 0;
}

/* ---- one product on packed B ---- */

typedef struct one_job {
  kiln_isa isa;
  const kiln_igemm_args *g;
  int64_t m_step, n_step, tn;
} one_job;

static void one_run(void *v, size_t begin, size_t end, int t) {
  (void)t;
  const one_job *j = v;
  for (size_t idx = begin; idx < end; idx++) {
    int64_t i0 = (int64_t)idx / j->tn * j->m_step, j0 = (int64_t)idx % j->tn * j->n_step;
    kiln_igemm_args g = *j->g;
    g.m = i0 + j->m_step < g.m ? j->m_step : g.m - i0;
    g.n = j0 + j->n_step < g.n ? j->n_step : g.n - j0;
    g.a += i0 * g.k4 * 4;
    g.b += j0 * 4;
    g.c += i0 * g.ldc + j0;
    if (g.r) g.r += i0;
    if (g.u) g.u += i0;
    if (g.v) g.v += i0;
    if (g.cs) g.cs += j0;
    if (g.zb) g.zb += j0;
    kiln_igemm_kernel(j->isa, &g);
  }
}

void kiln_igemm(kiln_threadpool *pool, kiln_isa isa, const kiln_igemm_args *g) {
  if (g->m <= 0 || g->n <= 0) return;
  int threads = kiln_threadpool_size(pool);
  if ((double)g->m * (double)g->n * (double)g->k4 * 4.0 < IGEMM_PAR_MIN || threads <= 1) {
    kiln_igemm_kernel(isa, g);
    return;
  }
  int64_t want = 2 * threads, cols = round_nb(g->n) / KILN_IGEMM_NB, rows = (g->m + 3) / 4;
  int64_t tn = cols < want ? cols : want, tm = (want + tn - 1) / tn;
  if (tm > rows) tm = rows;
  one_job j = {isa, g, (rows + tm - 1) / tm * 4, (cols + tn - 1) / tn * KILN_IGEMM_NB, 0};
  j.tn = (g->n + j.n_step - 1) / j.n_step;
  int64_t tasks = j.tn * ((g->m + j.m_step - 1) / j.m_step);
  kiln_parallel_for(pool, (size_t)tasks, one_run, &j, 1);
}

int kiln_igemm_zero_terms(int64_t m, int64_t k, const int32_t *za, int32_t za0, const int32_t *rs, int zb_per_col,
                          int32_t zb0, int32_t *r, int32_t *u, int32_t *v) {
  int any = 0;
  for (int64_t i = 0; i < m; i++) {
    uint32_t z = (uint32_t)(za ? za[i] : za0), w = (uint32_t)k * z - (uint32_t)rs[i];
    u[i] = (int32_t)z;
    any |= z != 0;
    if (zb_per_col)
      v[i] = (int32_t)w;
    else
      r[i] = (int32_t)(w * (uint32_t)zb0);
  }
  return any;
}
