/* Fast float32 2-D convolution (NCHW), with a fused epilogue.
 *
 *   y[n, m, oy, ox] = act(sum x[n, c, iy, ix] * w[m, c', ky, kx] + bias[m] + residual[n, m, oy, ox])
 *   iy = oy * sh + ky * dh - pt,  ix = ox * sw + kx * dw - pl  (outside the input: 0)
 *
 * Paths:
 * - depthwise (one input channel per group, any channel multiplier): a direct kernel per
 *   (n, output channel) plane, taps accumulated in registers over runs of output columns,
 *   padding handled by masked loads (AVX-512) or clamped column ranges (portable C);
 * - otherwise per (n, group) a GEMM of the weights with the input itself (1x1, stride 1, no
 *   padding) or with a row-wise im2col buffer (runs of contiguous input copied with memcpy,
 *   padding zero-filled), then bias + residual + activation in one pass per channel.
 * Loops run on `pool` (NULL: the calling thread).
 */
#ifndef KILN_KERNELS_CONV2D_F32_H
#define KILN_KERNELS_CONV2D_F32_H

#include <stdint.h>

#include "base/status.h"
#include "kernels/act.h"
#include "runtime/threadpool.h"

typedef struct kiln_conv2d_f32_params {
  int64_t n, c, h, w;         /* input [n, c, h, w] */
  int64_t m, group;           /* output channels; groups (c and m divisible by it) */
  int64_t kh, kw;             /* kernel; weights are [m, c / group, kh, kw] */
  int64_t sh, sw, dh, dw;     /* strides and dilations (>= 1) */
  int64_t pt, pl;             /* padding at the top and left (bottom/right follow from oh/ow) */
  int64_t oh, ow;             /* output [n, m, oh, ow] */
} kiln_conv2d_f32_params;

typedef struct kiln_conv2d_f32_epilogue {
  const float *bias;     /* m values, or NULL */
  const float *residual; /* shaped like y, or NULL; added before the activation */
  kiln_act act;          /* KILN_ACT_NONE: none */
} kiln_conv2d_f32_epilogue;

/* Writes every element of y (which must not overlap x, w, bias or residual).
 * ep may be NULL. Returns KILN_ERR_INVALID_ARG for inconsistent parameters, KILN_ERR_NOMEM
 * when scratch cannot be allocated. `isa`: KILN_ISA_AUTO or a level to force (tests). */
kiln_code kiln_conv2d_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                          const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep,
                          float *y);

#endif
