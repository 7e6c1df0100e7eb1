/* The packed integer GEMM kernel (kernels/igemm.h), instantiated per ISA and per operand order
 * by igemm_avx2.c and igemm_avx512.c. They define VEC (LANES int32 lanes), LOAD/STORE, ADD,
 * SUB, MUL (the low 32 bits of lane products), BCAST32, and the operand forms: BOP (B's vector
 * as the kernel uses it) made by PREP_B(pointer), AOP (four bytes of A in every lane) made by
 * PREP_A(int32), and DOT(acc, AOP, BOP): acc plus the four byte products of each lane. IG_NAME
 * names the function. Blocks of IG_ROWS rows by a strip of 2 vectors of columns, then single
 * rows; the strip is read from packed B (padded, so whole vectors load) and the results are
 * stored in full vectors or, at the last strip, through a buffer. */
#define IG_W (2 * LANES)

static inline int32_t IG_CAT(IG_NAME, _ld32)(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* The correction terms of row i on the strip at column j0, then the store. */
static inline void IG_CAT(IG_NAME, _store)(const kiln_igemm_args *g, int64_t i, int64_t j0, VEC x0, VEC x1) {
  if (g->r) {
    VEC rv = BCAST32(g->r[i]);
    x0 = ADD(x0, rv);
    x1 = ADD(x1, rv);
  }
  if (g->u) {
    VEC uv = BCAST32(g->u[i]);
    x0 = SUB(x0, MUL(uv, LOAD(g->cs + j0)));
    x1 = SUB(x1, MUL(uv, LOAD(g->cs + j0 + LANES)));
  }
  if (g->v) {
    VEC vv = BCAST32(g->v[i]);
    x0 = ADD(x0, MUL(vv, LOAD(g->zb + j0)));
    x1 = ADD(x1, MUL(vv, LOAD(g->zb + j0 + LANES)));
  }
  int32_t *c = g->c + i * g->ldc + j0;
  int64_t left = g->n - j0;
  if (left >= IG_W) {
    STORE(c, x0);
    STORE(c + LANES, x1);
  } else {
    int32_t t[IG_W];
    STORE(t, x0);
    STORE(t + LANES, x1);
    memcpy(c, t, sizeof(int32_t) * (size_t)left);
  }
}

static void IG_NAME(const kiln_igemm_args *g) {
  const int64_t k4 = g->k4, ldb4 = g->ldb * 4, lda = k4 * 4;
  for (int64_t j0 = 0; j0 < g->n; j0 += IG_W) {
    const uint8_t *bs = g->b + j0 * 4;
    int64_t i = 0;
    for (; i + IG_ROWS <= g->m; i += IG_ROWS) {
      VEC acc[IG_ROWS][2];
      for (int r = 0; r < IG_ROWS; r++) acc[r][0] = acc[r][1] = ZERO();
      const uint8_t *a = g->a + i * lda;
      for (int64_t p = 0; p < k4; p++) {
        BOP b0 = PREP_B(bs + p * ldb4), b1 = PREP_B(bs + p * ldb4 + LANES * 4);
        for (int r = 0; r < IG_ROWS; r++) {
          AOP av = PREP_A(IG_CAT(IG_NAME, _ld32)(a + r * lda + p * 4));
          acc[r][0] = DOT(acc[r][0], av, b0);
          acc[r][1] = DOT(acc[r][1], av, b1);
        }
      }
      for (int r = 0; r < IG_ROWS; r++) IG_CAT(IG_NAME, _store)(g, i + r, j0, acc[r][0], acc[r][1]);
    }
    for (; i < g->m; i++) {
      VEC acc0 = ZERO(), acc1 = ZERO();
      const uint8_t *a = g->a + i * lda;
      for (int64_t p = 0; p < k4; p++) {
        AOP av = PREP_A(IG_CAT(IG_NAME, _ld32)(a + p * 4));
        acc0 = DOT(acc0, av, PREP_B(bs + p * ldb4));
        acc1 = DOT(acc1, av, PREP_B(bs + p * ldb4 + LANES * 4));
      }
      IG_CAT(IG_NAME, _store)(g, i, j0, acc0, acc1);
    }
  }
}
#undef IG_W
