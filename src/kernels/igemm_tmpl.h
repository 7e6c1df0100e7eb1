/* The packed integer GEMM kernel, instantiated per ISA by igemm_avx2.c and igemm_avx512.c:
 * VEC (a vector of int32 lanes, LANES of them), LOAD/STORE, BCAST32 (one int32 to every lane)
 * and DOT(acc, a, b) (acc + the pairwise int16 products of a and b, summed per lane). Blocks of
 * 4 rows by 2 vectors of columns, then single rows; n is a multiple of 2 * LANES (the packed b
 * is padded with zero columns) and the sums are stored, not added, into c [m, n]. */
#define IG_ROWS 4

static void IG_NAME(int64_t m, int64_t n, int64_t k2, const int16_t *ap, const int16_t *bp, int32_t *c) {
  const int64_t step = 2 * LANES;
  const int32_t *a32 = (const int32_t *)(const void *)ap; /* a pair of int16 as one int32 */
  int64_t i0 = 0;
  for (; i0 + IG_ROWS <= m; i0 += IG_ROWS)
    for (int64_t j0 = 0; j0 < n; j0 += step) {
      VEC acc[IG_ROWS][2];
      for (int r = 0; r < IG_ROWS; r++) acc[r][0] = acc[r][1] = ZERO();
      for (int64_t p = 0; p < k2; p++) {
        const int16_t *b = bp + (p * n + j0) * 2;
        VEC b0 = LOAD(b), b1 = LOAD(b + 2 * LANES);
        for (int r = 0; r < IG_ROWS; r++) {
          VEC av = BCAST32(a32[(i0 + r) * k2 + p]);
          acc[r][0] = DOT(acc[r][0], av, b0);
          acc[r][1] = DOT(acc[r][1], av, b1);
        }
      }
      for (int r = 0; r < IG_ROWS; r++) {
        STORE(c + (i0 + r) * n + j0, acc[r][0]);
        STORE(c + (i0 + r) * n + j0 + LANES, acc[r][1]);
      }
    }
  for (; i0 < m; i0++)
    for (int64_t j0 = 0; j0 < n; j0 += step) {
      VEC acc0 = ZERO(), acc1 = ZERO();
      for (int64_t p = 0; p < k2; p++) {
        const int16_t *b = bp + (p * n + j0) * 2;
        VEC av = BCAST32(a32[i0 * k2 + p]);
        acc0 = DOT(acc0, av, LOAD(b));
        acc1 = DOT(acc1, av, LOAD(b + 2 * LANES));
      }
      STORE(c + i0 * n + j0, acc0);
      STORE(c + i0 * n + j0 + LANES, acc1);
    }
}
