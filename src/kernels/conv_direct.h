/* The direct convolution of few input channels (conv_direct_f32.c): the context its row tasks
 * share, per ISA. Internal to src/kernels. */
#ifndef KILN_KERNELS_CONV_DIRECT_H
#define KILN_KERNELS_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/conv_internal.h"

/* Output channels per block of the weight layout [mb][taps][KILN_DIR_CB]. */
#define KILN_DIR_CB 8

typedef struct kiln_dir_ctx {
  const kiln_conv2d_f32_params *p;
  const float *x;
  float *xb;           /* one region per thread: [c][hp][sw][t] for up to `cap` output rows */
  size_t region;       /* floats per region */
  int64_t cap;         /* output rows per fill of a region */
  const float *wb;     /* [mb][taps][CB] */
  const int64_t *off;  /* per tap: its offset in xb from the image, row oy * sh, column ox */
  const kiln_conv2d_f32_epilogue *ep;
  float *y;
  int64_t hp, t, taps, mb, ohw;
  const float *bias; /* mb * CB values (zeros without a bias) */
  bool clamp;        /* relu or clip: min(max(v, lo), hi) in registers (relu: hi = inf) */
  float lo, hi;
  int64_t rows_per_pass;
  /* The row task writes output row oy of channel co at y + (n * m + co) * ys + (oy - yr0) * ow:
   * the output tensor (ys = ohw, yr0 = 0), or a band of rows (kiln_conv2d_direct_f32_rows). */
  int64_t ys, yr0;
} kiln_dir_ctx;

/* Convolution then max pooling in one pass (kiln_conv2d_f32_maxpool): a task is a band of up
 * to `band` pooled rows of one image. */
typedef struct kiln_dir_pool_ctx {
  kiln_dir_ctx d;
  const kiln_pool2d_params *q;
  int64_t band, rows_cap; /* pooled rows per task; convolution rows per band (buffer rows) */
  int64_t tasks_per_image;
  float *y;               /* [n][m][q->oh][q->ow] */
} kiln_dir_pool_ctx;

/* The row task (a kiln_parallel_for body over output rows n * oh + oy, ctx a kiln_dir_ctx) at
 * AVX2+FMA (conv_direct_avx2.c): call only when kiln_cpu_isa() chose AVX2 or more. */
void kiln_conv_direct_rows_avx2(void *ctx, size_t begin, size_t end, int ti);
/* The pooling task (ctx a kiln_dir_pool_ctx) at AVX2+FMA, as above. */
void kiln_conv_direct_pool_avx2(void *ctx, size_t begin, size_t end, int ti);

#endif
