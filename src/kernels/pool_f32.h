/* SIMD pieces of MaxPool and global AveragePool (src/ops/pool.c is the operator), chosen once
 * from kiln_cpu_isa(). Each gives exactly the scalar loop's values. */
#ifndef KILN_KERNELS_POOL_F32_H
#define KILN_KERNELS_POOL_F32_H

#include <stdint.h>

typedef struct kiln_pool_simd {
  /* MaxPool output columns [c0, c1) of one row of a plane xp (W columns) whose windows lie
   * wholly inside the row (all kw taps valid), tap rows [a0, a1) from input row h0 with row
   * dilation dh; x stride sw 1 or 2, left pad pl, column dilation dw. NULL: not at this ISA. */
  void (*maxpool_row)(const float *xp, float *yr, int64_t W, int64_t h0, int64_t a0, int64_t a1, int64_t dh,
                      int64_t c0, int64_t c1, int64_t sw, int64_t pl, int64_t kw, int64_t dw);
  /* Kernel 3x3 at stride 2, dilation 1: output rows y0, y1 over [c0, c1) from input rows
   * h0 .. h0 + 4 (all inside). */
  void (*maxpool_2rows_k3s2)(const float *xp, float *y0, float *y1, int64_t W, int64_t h0, int64_t c0, int64_t c1,
                             int64_t pl);
  /* Kernel 3x3 at stride 2, dilation 1, no padding, on a whole H x W plane whose OH x OW
   * windows all lie inside (2 OH < H, 2 OW < W). Returns 0 where the plane holds a NaN or a
   * -0.0 (where its order of comparisons would show) or is too wide; the caller then rewrites
   * the plane with the rows above, which give the scalar loop's values. */
  int (*maxpool_plane_k3s2)(const float *xp, float *yp, int64_t H, int64_t W, int64_t OH, int64_t OW);
  /* Sums, in double, of 4 consecutive float planes of n values (global AveragePool). */
  void (*gavg4)(const float *x, int64_t n, double out[4]);
} kiln_pool_simd;

/* out[r]: the sum in double of row r of `rows` consecutive rows of n floats, in gavg4's order
 * (lane l of 8 adds the values i + l, i a multiple of 8, the tail goes to lane 0, then the
 * lanes in order, from +0): four rows at a time through gavg4 where kiln_cpu_isa() has it,
 * the rest in C, the same bits either way (GlobalAveragePool, row ReduceSum / Mean). */
void kiln_sum_rows_f32(const float *x, int64_t rows, int64_t n, double *out);

/* The pieces for kiln_cpu_isa() (members NULL where the level has none); chosen once. */
const kiln_pool_simd *kiln_pool_simd_get(void);

extern const kiln_pool_simd kiln_pool_simd_avx512;
extern const kiln_pool_simd kiln_pool_simd_avx2;

#endif
