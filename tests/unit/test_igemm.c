/* The integer GEMM of the quantized ops (kernels/igemm) at every kernel level this CPU runs
 * (scalar, AVX2 vpmaddwd, AVX-512 VNNI vpdpbusd) and through both threaded drivers, against a
 * plain int64 reference of sum (a - za)(b - zb) reduced modulo 2^32: results must be equal bit for
 * bit. Every dtype pair (u8 / s8 for A and for B) in both operand orders (B unsigned or A
 * unsigned, the sign bit flipped where the dtype differs), scalar and per-row / per-column zero
 * points, odd m, n and k (the 4-row blocks and their tail, the last partial strip, k padded to
 * 4) and values at the extremes (the largest products, where vpmaddubsw would saturate); the
 * convolutions' packing (kiln_igemm_interleave4) on the chunked driver. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/igemm.h"
#include "testutil.h"

typedef struct mat {
  int is_signed;
  uint8_t *v;
  int32_t *z; /* zero point per row (A) or column (B), or all the same */
} mat;

static int32_t val(const mat *x, int64_t i) { return x->is_signed ? (int8_t)x->v[i] : x->v[i]; }

static void fill(mat *x, int64_t n, int64_t nz, int is_signed, int extreme, int per) {
  x->is_signed = is_signed;
  x->v = malloc((size_t)n);
  x->z = malloc(sizeof(int32_t) * (size_t)nz);
  for (int64_t i = 0; i < n; i++) {
    int r = extreme ? (kt_rand() & 1 ? 255 : 0) : (int)(kt_rand() & 255);
    x->v[i] = (uint8_t)(extreme && is_signed ? (r ? 0x80 : 0x7f) : r);
  }
  int32_t z0 = (int32_t)kt_rand_in(is_signed ? -128 : 0, is_signed ? 127 : 255);
  if (extreme) z0 = is_signed ? 127 : 0;
  for (int64_t i = 0; i < nz; i++) x->z[i] = per ? (int32_t)kt_rand_in(is_signed ? -128 : 0, is_signed ? 127 : 255) : z0;
}

static void reference(int64_t m, int64_t n, int64_t k, const mat *a, const mat *b, int32_t *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t s = 0;
      for (int64_t p = 0; p < k; p++) s += (int64_t)(val(a, i * k + p) - a->z[i]) * (val(b, p * n + j) - b->z[j]);
      c[i * n + j] = (int32_t)(uint32_t)((uint64_t)s & 0xffffffffu);
    }
}

/* What the ops do: flip the operands into the kernel's u8 x s8 form, pack, fold the zero points. */
typedef struct setup {
  int64_t m, n, k, k4, ldb;
  uint8_t *ap, *bp, *bsrc;
  uint8_t bflip;
  int32_t *rs, *r, *u, *v, *cs, *zb;
  kiln_igemm_args g;
} setup;

static void make_setup(setup *s, int64_t m, int64_t n, int64_t k, const mat *a, const mat *b, int b_unsigned,
                       int zb_per_col, int32_t *c) {
  memset(s, 0, sizeof *s);
  s->m = m, s->n = n, s->k = k, s->k4 = (k + 3) / 4;
  s->ldb = (n + KILN_IGEMM_NB - 1) / KILN_IGEMM_NB * KILN_IGEMM_NB;
  int a_signed = b_unsigned; /* the operand kinds the kernel multiplies */
  uint8_t aflip = a->is_signed != a_signed ? 0x80 : 0;
  s->bflip = b->is_signed != !a_signed ? 0x80 : 0;
  int32_t ashift = aflip ? (a_signed ? -128 : 128) : 0, bshift = s->bflip ? (a_signed ? 128 : -128) : 0;
  s->ap = malloc((size_t)(m * s->k4 * 4));
  s->bp = malloc((size_t)(s->k4 * s->ldb * 4));
  s->rs = malloc(sizeof(int32_t) * (size_t)m * 5);
  s->r = s->rs + m, s->u = s->r + m, s->v = s->u + m;
  int32_t *za = s->v + m;
  s->cs = calloc((size_t)s->ldb * 2, sizeof(int32_t));
  s->zb = s->cs + s->ldb;
  kiln_igemm_pack_a(m, k, a->v, k, aflip, a_signed, s->ap, s->rs);
  kiln_igemm_pack_b(k, n, b->v, n, s->bflip, s->bp, s->ldb);
  kiln_igemm_colsum(s->k4, s->ldb, s->bp, !a_signed, s->cs);
  for (int64_t i = 0; i < m; i++) za[i] = a->z[i] + ashift;
  for (int64_t j = 0; j < n; j++) s->zb[j] = b->z[j] + bshift;
  int any = kiln_igemm_zero_terms(m, k, za, 0, s->rs, zb_per_col, s->zb[0], s->r, s->u, s->v);
  s->g = (kiln_igemm_args){m, n, s->k4, s->ap, s->bp, s->ldb, c, n, b_unsigned, zb_per_col ? NULL : s->r,
                           any ? s->u : NULL, zb_per_col ? s->v : NULL, s->cs, s->zb};
}

static void free_setup(setup *s) {
  free(s->ap);
  free(s->bp);
  free(s->rs);
  free(s->cs);
}

/* kiln_igemm_many's callbacks: one task whose B comes from the unpacked source, chunk by chunk. */
static void task_fn(void *ctx, int64_t task, kiln_igemm_args *g) {
  (void)task;
  const setup *s = ctx;
  *g = s->g;
}
/* Unsigned B: four flipped rows at a time through kiln_igemm_interleave4 (as the convolutions
 * pack); signed B: kiln_igemm_pack_b and kiln_igemm_colsum. */
static void pack_fn(void *ctx, int64_t task, int64_t j0, int64_t j1, uint8_t *bp, int64_t ldb, int32_t *cs) {
  (void)task;
  const setup *s = ctx;
  int64_t w = j1 - j0;
  if (!s->g.b_unsigned) {
    kiln_igemm_pack_b(s->k, w, s->bsrc + j0, s->n, s->bflip, bp, ldb);
    if (cs) kiln_igemm_colsum(s->k4, ldb, bp, 1, cs);
    return;
  }
  uint8_t *tmp = calloc(4, (size_t)w);
  if (cs) memset(cs, 0x3c, sizeof(int32_t) * (size_t)ldb), memset(cs, 0, sizeof(int32_t) * (size_t)w);
  for (int64_t p = 0; p < s->k4; p++) {
    const uint8_t *rows[4];
    for (int q = 0; q < 4; q++) {
      uint8_t *r = tmp + q * w;
      for (int64_t t = 0; t < w; t++) r[t] = 4 * p + q < s->k ? s->bsrc[(4 * p + q) * s->n + j0 + t] ^ s->bflip : 0;
      rows[q] = r;
    }
    kiln_igemm_interleave4(rows, w, ldb, bp + p * ldb * 4, cs);
  }
  free(tmp);
}

static kiln_threadpool *g_pool;

static void check_shape(int64_t m, int64_t n, int64_t k, int extreme) {
  for (int combo = 0; combo < 16; combo++) {
    int as = combo & 1, bs = (combo >> 1) & 1, b_unsigned = (combo >> 2) & 1, per = (combo >> 3) & 1;
    mat a, b;
    fill(&a, m * k, m, as, extreme, per);
    fill(&b, k * n, n, bs, extreme, per);
    int32_t *want = malloc(sizeof(int32_t) * (size_t)(m * n)), *c = malloc(sizeof(int32_t) * (size_t)(m * n));
    reference(m, n, k, &a, &b, want);
    setup s;
    make_setup(&s, m, n, k, &a, &b, b_unsigned, per, c);
    s.bsrc = b.v;
    for (int isa = KILN_ISA_SCALAR; isa <= KILN_ISA_AVX512; isa++) {
      if (!kiln_igemm_isa_ok((kiln_isa)isa)) continue;
      memset(c, 0x5a, sizeof(int32_t) * (size_t)(m * n));
      kiln_igemm_kernel((kiln_isa)isa, &s.g);
      CHECK_MSG(!memcmp(c, want, sizeof(int32_t) * (size_t)(m * n)), "isa %d m %lld n %lld k %lld combo %d", isa,
                (long long)m, (long long)n, (long long)k, combo);
      memset(c, 0x5a, sizeof(int32_t) * (size_t)(m * n));
      kiln_igemm(g_pool, (kiln_isa)isa, &s.g);
      CHECK_MSG(!memcmp(c, want, sizeof(int32_t) * (size_t)(m * n)), "threaded: isa %d m %lld n %lld k %lld combo %d",
                isa, (long long)m, (long long)n, (long long)k, combo);
      memset(c, 0x5a, sizeof(int32_t) * (size_t)(m * n));
      CHECK(kiln_igemm_many(g_pool, (kiln_isa)isa, 1, n, s.k4, m, task_fn, pack_fn, &s) == 0);
      CHECK_MSG(!memcmp(c, want, sizeof(int32_t) * (size_t)(m * n)), "chunked: isa %d m %lld n %lld k %lld combo %d",
                isa, (long long)m, (long long)n, (long long)k, combo);
    }
    free_setup(&s);
    free(a.v), free(a.z), free(b.v), free(b.z), free(want), free(c);
  }
}

int main(void) {
  kt_rng = 18;
  g_pool = kiln_threadpool_create(3);
  printf("test_igemm: best level %d (cpu %d)\n", (int)kiln_igemm_isa(), (int)kiln_cpu_isa());
  static const int64_t ms[] = {1, 3, 4, 5, 13};
  static const int64_t ns[] = {1, 7, 16, 17, 33, 100};
  static const int64_t ks[] = {1, 3, 4, 9, 27, 147};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
      for (size_t p = 0; p < sizeof ks / sizeof *ks; p++) check_shape(ms[i], ns[j], ks[p], 0);
  check_shape(8, 64, 1155, 1); /* the largest products */
  check_shape(64, 200, 300, 1);
  check_shape(37, 129, 577, 0);
  check_shape(70, 300, 64, 0); /* large enough for the threaded drivers to split it */
  kiln_threadpool_free(g_pool);
  return kt_finish("test_igemm");
}
