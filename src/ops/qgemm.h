/* The integer GEMM of the quantized ops (ConvInteger, QLinearConv, MatMulInteger,
 * QLinearMatMul) on kernels/igemm: constant weights packed once per node (kept in its cache,
 * made at session creation by the ops' prepare hooks), activations packed per run, the
 * products on the session's threads.
 *
 * The kernels multiply unsigned by signed bytes: activations go on the unsigned side, weights on
 * the signed one, each flipped (x ^ 0x80) where its dtype is the other, with its zero point moved
 * by 128 (kernels/igemm.h). */
#ifndef KILN_OPS_QGEMM_H
#define KILN_OPS_QGEMM_H

#include "ops/op.h"

/* Weights in the kernels' signed form. As A (a convolution's W [rows, k]): rows of k4 * 4 bytes,
 * sums = the row sums. As B (a MatMul's B [k, cols]): packed [k4][ld][4], sums = the column sums
 * [ld]. */
typedef struct kiln_q8_pack {
  const void *source;  /* the tensor data it was made from */
  int as_b;            /* 0: A layout, 1: B layout */
  int64_t rows, cols;  /* A: rows, k; B: k, cols */
  int64_t k4, ld;      /* groups of 4 along k; B: padded columns */
  uint8_t flip;        /* what was xor-ed into every byte (0x80 for uint8 weights) */
  int64_t quad_ksize;  /* A: 0, or k in channel quads over taps of this many (kiln_qconv_quads) */
  int32_t *sums;
  uint8_t *data;
} kiln_q8_pack;

/* The pack of uint8 / int8 weights w (input wi of the node) in layout as_b with the given
 * dims (A: k in channel quads over taps of quad_ksize when that is not 0): the node's cached one
 * when w is constant (made and published on first use), else a new one in *owned, which the
 * caller frees with kiln_q8_pack_free. NULL when out of memory. */
const kiln_q8_pack *kiln_q8_pack_of(kiln_kctx *c, size_t wi, const kiln_tensor *w, int as_b, int64_t rows,
                                    int64_t cols, int64_t quad_ksize, kiln_q8_pack **owned);
void kiln_q8_pack_free(void *p);

/* A quantized convolution as im2col products: per batch item and group, C[mg, ysize] = W_g [mg,
 * kk] x im2col(x)[kk, ysize] where kk = cg * ksize. */
typedef struct kiln_qconv {
  int64_t n, c, m, group, cg, mg, kk, ksize, xsize, ysize;
  const int64_t *map; /* [ksize][ysize]: offset in an input plane of each tap, -1 padding; NULL:
                         the input plane is the im2col row (1x1, unit strides, no padding), or
                         d2 describes the taps */
  const int64_t *d2;  /* NULL, or for 2-D: ih, iw, oh, ow, kh, kw, stride h, w, dilation h, w, pad
                         h, w (at the beginning) */
} kiln_qconv;

/* Channel quads: a 2-D convolution with taps of ksize > 1 and a multiple of 4 channels per group
 * runs k over (quad of 4 channels, tap, channel in the quad), so that four packed k rows are four
 * adjacent bytes of the input laid out [quad][row][column][4]: im2col becomes one copy per run
 * of output columns, with no interleaving. Returns ksize where that applies, else 0 (the plain
 * k order: channel, tap). */
int64_t kiln_qconv_quads(int64_t cg, int64_t ksize, int spatial_dims);

/* y [n, m, ysize] int32 = sum (x - xz)(w - wz) for uint8 / int8 x and w; wz per output channel
 * (wzs [m]) or wz0. */
kiln_code kiln_qconv_run(kiln_kctx *c, size_t wi, const kiln_qconv *q, const kiln_tensor *x, int64_t xz,
                         const kiln_tensor *w, const int64_t *wzs, int64_t wz0, int32_t *y);

/* y [m, n] int32 = (a - za)(b - zb) of uint8 / int8 matrices a [m, k] and b [k, n] (bytes); za per
 * row (zas [m]) or za0, zb per column (zbs [n]) or zb0; pb: b already packed (or NULL). */
kiln_code kiln_qmatmul_run(kiln_kctx *c, int64_t m, int64_t n, int64_t k, const uint8_t *a, int a_signed,
                           const int64_t *zas, int64_t za0, const uint8_t *b, int b_signed, const kiln_q8_pack *pb,
                           const int64_t *zbs, int64_t zb0, int32_t *y);

#endif
