/* Fast float32 2-D convolution (NCHW), with a fused epilogue.
 *
 *   y[n, m, oy, ox] = act(sum x[n, c, iy, ix] * w[m, c', ky, kx] + bias[m] + residual[n, m, oy, ox])
 *   iy = oy * sh + ky * dh - pt,  ix = ox * sw + kx * dw - pl  (outside the input: 0)
 *
 * Paths:
 * - depthwise (one input channel per group, any channel multiplier): a direct kernel per
 *   (n, output channel) plane. AVX-512, x stride 1 or 2: strips of 16 output columns, four
 *   rows at a time, accumulate every tap in registers, read straight from the input with
 *   masked loads (lanes and rows outside the input read 0); kernels wider than 16 columns
 *   copy the plane into a per-thread zero-padded buffer first. Otherwise portable C over
 *   clamped column ranges. Bias, residual and relu/clip are applied in registers. At AVX-512,
 *   on input planes of at most 256 pixels with a channel multiplier of 1, blocks of 16
 *   channels instead (conv_dw_cb.c): lanes are channels, the block copied through register
 *   transposes into a zero-padded buffer of 16-float cells; the same bytes.
 * - few input channels (at most 4, one group, x stride 1 or 2, output rows of 16 and more:
 *   the first layer of CNNs) at AVX-512 and AVX2: a direct kernel (conv_direct_f32.c; the
 *   AVX2 tiles, 4 channels x up to 3 vectors of 8 columns, in conv_direct_avx2.c). The input is
 *   copied once into a zero-padded buffer with each row split into the stride's phases, so
 *   every tap reads 16 consecutive floats; each output row is computed in blocks of 8 output
 *   channels x up to 3 vectors of 16 columns in registers, bias, residual and relu/clip
 *   applied before the store. The im2col GEMM is short in K there (27, 147) and its copy costs
 *   about as much as the multiplications.
 * - otherwise per (n, group, tile of output rows) a GEMM (kiln_gemm_f32_rows) of the weights
 *   with the input itself (1x1, stride 1, no padding) or with a row-wise im2col block
 *   (contiguous runs copied, strided ones gathered, padding zero-filled; about 512 KiB so it
 *   stays in L2 until the GEMM reads it, but at least 4 columns per weight row). The bias (one
 *   per output channel: a row bias of C = W * X), residual and activation are applied by the
 *   GEMM's epilogue as each C tile is stored. With enough tiles each thread takes whole tiles
 *   with its own buffer (one barrier per call); with few tiles on several threads the rows
 *   (1x1 with few channels: the columns) are cut into as many equal tiles per thread when
 *   they stay wide enough; else the tiles run in turn with the im2col and GEMM loops on the
 *   pool.
 * - 1x1 kernels with small output planes (7x7 and the like, one group;
 *   kiln_conv2d_f32_uses_transposed) and W^T packed beforehand (kiln_conv2d_f32_args.wt):
 *   C^T = X^T * W^T, vectorised along the output channels instead of the plane (49 of 64
 *   lanes), the input (or, strided, its im2col block) read transposed in place, the bias per
 *   column of C^T; C^T is written back to NCHW through 16 x 16 register transposes that add
 *   the residual and apply the activation. With several threads only from 24 MFLOP per
 *   thread (the rows of C^T split unevenly); both formulations give the same bytes.
 * - larger kernels (3x3 and the like) on planes up to 1024 outputs, where the level has a
 *   gathered-A GEMM kernel (AVX-512; kiln_gemm_f32_packed_gather) and W^T is packed
 *   beforehand: the same C^T = X^T * W^T without an im2col block, the kernel reading tap
 *   (ci, ky, kx) of output pixel q from a zero-padded copy of the input (or the input itself
 *   when no tap reaches the padding) at row offset arow[q] plus K offset koff[k]. Same K
 *   order and blocks as the im2col GEMM: the same bytes.
 * - 3x3, stride 1, dilation 1, one group, enough channels and a large enough output plane:
 *   Winograd (kernels/winograd_f32.h: F(4x4, 3x3) on planes of 24x24 and up, F(2x2, 3x3) below),
 *   weights transformed per call (F(2x2)) unless the caller passes them transformed
 *   (kiln_conv2d_f32_args.wu; the transformed weights say which tile size they are for).
 * Loops run on `pool` (NULL: the calling thread).
 */
#ifndef KILN_KERNELS_CONV2D_F32_H
#define KILN_KERNELS_CONV2D_F32_H

#include <stdint.h>

#include "base/status.h"
#include "kernels/act.h"
#include "kernels/gemm.h"
#include "base/threadpool.h"

typedef struct kiln_conv2d_f32_params {
  int64_t n, c, h, w;         /* input [n, c, h, w] */
  int64_t m, group;           /* output channels; groups (c and m divisible by it) */
  int64_t kh, kw;             /* kernel; weights are [m, c / group, kh, kw] */
  int64_t sh, sw, dh, dw;     /* strides and dilations (>= 1) */
  int64_t pt, pl;             /* padding at the top and left (bottom/right follow from oh/ow) */
  int64_t oh, ow;             /* output [n, m, oh, ow] */
  int winograd;               /* Winograd: 0 where it is faster (the default), 1
                                 wherever it applies (3x3, stride 1, dilation 1, one group; for
                                 tests and benchmarks), -1 never */
  int dw_blocked;             /* depthwise in blocks of 16 channels: 0 where it applies (the
                                 default), -1 never (the row kernels; tests, benchmarks) */
} kiln_conv2d_f32_params;

typedef struct kiln_conv2d_f32_epilogue {
  const float *bias;     /* m values, or NULL */
  const float *residual; /* shaped like y, or NULL; added before the activation */
  kiln_act act;          /* KILN_ACT_NONE: none */
} kiln_conv2d_f32_epilogue;

/* The operands of one convolution, by designated initializers; what is left out is none.
 * The prepared weights are optional, e.g. made once for constant weights; each is used only
 * when its path is taken and it matches p, else the kernel works from w. */
struct kiln_amx_w;
typedef struct kiln_conv2d_f32_args {
  const float *x;              /* input [n, c, h, w] */
  const float *w;              /* weights [m, c / group, kh, kw] */
  float *y;                    /* output [n, m, oh, ow]: every element written; must not
                                  overlap x, w, the bias or the residual */
  kiln_conv2d_f32_epilogue ep; /* bias, residual, activation ({0}: none) */
  /* w transformed by kiln_wino_f32_weights (kernels/winograd_f32.h: 16 * m * c floats), for
   * the Winograd path (kiln_conv2d_f32_uses_winograd); without it w is transformed per call */
  const float *wu;
  /* W^T packed by kiln_gemm_pack_b (kiln_conv2d_f32_uses_transposed) */
  const kiln_gemm_packed_b *wt;
  /* W packed by kiln_amx_pack_w (kiln_conv2d_f32_uses_amx; takes precedence over wt) */
  const struct kiln_amx_w *wa;
} kiln_conv2d_f32_args;

/* The convolution p of a->x by a->w into a->y, with a->ep's epilogue. Returns
 * KILN_ERR_INVALID_ARG for inconsistent parameters, KILN_ERR_NOMEM when scratch cannot be
 * allocated. `isa`: KILN_ISA_AUTO or a level to force (tests). E.g.
 *   kiln_conv2d_f32(pool, isa, &p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y,
 *                                                           .ep = {.bias = b}});         */
kiln_code kiln_conv2d_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                          const kiln_conv2d_f32_args *a);

/* 1 when p (1x1, one group, small output plane; or a larger kernel on a plane of up to 1024
 * outputs where `isa` has the gathered GEMM) is computed faster transposed, C^T = X^T * W^T
 * vectorised along the output channels, at ISA level `isa`: then kiln_conv2d_f32 takes (as
 * .wt) W^T packed by kiln_gemm_pack_b(isa, 1, c * kh * kw, m, w, c * kh * kw, ...). */
int kiln_conv2d_f32_uses_transposed(const kiln_conv2d_f32_params *p, int isa);

/* 1 when p's GEMM (im2col or 1x1, one group) may run on AMX tiles in bf16x3 (see
 * kernels/gemm_amx.h: within a few 1e-6 of float32) at ISA level `isa`: then
 * kiln_conv2d_f32 takes (as .wa) W packed by kiln_amx_pack_w(w, m, c * kh * kw, c * kh * kw). */
int kiln_conv2d_f32_uses_amx(const kiln_conv2d_f32_params *p, int isa);

/* 1 when kiln_conv2d_f32 computes p (valid parameters) with Winograd, given
 * transformed weights (cached 1) or not (0: fewer shapes gain, the transform is per call). */
int kiln_conv2d_f32_uses_winograd(const kiln_conv2d_f32_params *p, int cached);

/* An inverted residual block (MobileNetV2): a 1x1 expansion c -> ce (bias, activation), the
 * depthwise convolution d of the ce channels (bias, activation), a 1x1 projection ce -> m (bias,
 * residual, activation), in one call, its inner tensors in scratch.
 * - Small planes (at most 256 pixels), one image at a time, channels-last: E^T = X^T We^T (the
 *   transposed GEMM of small planes), the depthwise kernel in blocks of 16 channels reading
 *   and writing those rows (no transposes), C^T = D^T Wp^T, written back to NCHW with the
 *   residual.
 * - Larger planes in bands of output rows, each thread its own rows, band after band, in the
 *   convolutions' own layout and kernels: E = We X over the band's input rows (the rows it
 *   shares with the band before copied, not computed again), the depthwise kernel on them, then
 *   Y = Wp D into the output rows with the residual.
 * The same bytes as the three convolutions one by one (but on a plane of one pixel, where
 * those take a matrix-vector path). */
typedef struct kiln_conv_block_f32_args {
  const float *x;                 /* [n, c, h, w] */
  const float *we, *wp;           /* [ce, c] and [m, ce]: the 1x1 weights as they are */
  const kiln_gemm_packed_b *we_t; /* We^T: kiln_gemm_pack_b(isa, 1, c, ce, we, c, ...) */
  kiln_conv2d_f32_epilogue e_ep;  /* the expansion's bias and activation (no residual) */
  const float *wd;                /* [ce, 1, kh, kw] */
  kiln_conv2d_f32_epilogue d_ep;  /* the depthwise bias and activation (no residual) */
  const kiln_gemm_packed_b *wp_t; /* Wp^T: kiln_gemm_pack_b(isa, 1, ce, m, wp, ce, ...) */
  kiln_conv2d_f32_epilogue p_ep;  /* the projection's bias, residual [n, m, oh, ow], activation */
  float *y;                       /* [n, m, oh, ow] */
  /* NULL: the expansion is 1x1. Else it is this direct convolution (a network's first layer,
   * kiln_conv2d_f32_uses_direct: x [n, c, H, W] -> [n, ce, h, w], we [ce, c, kh, kw]), its rows
   * computed band by band as the 1x1 expansion's are (larger planes only). */
  const kiln_conv2d_f32_params *e_conv;
} kiln_conv_block_f32_args;

/* Input planes of at most this many pixels run whole, channels-last; larger ones in bands of
 * rows (kiln_conv_block_f32). */
enum { KILN_CONV_BLOCK_WHOLE_PLANE = 256 };

/* 1 when kiln_conv_block_f32 computes a block whose depthwise convolution is d ([n, ce, h, w]
 * -> [n, ce, oh, ow]), with c input and m output channels and these activations, at ISA level
 * isa: AVX-512, relu/clip/none before the projection; on small planes the depthwise kernel's
 * blocks of 16 channels (kiln_conv2d_f32 takes them on the same planes), on larger ones a
 * channel multiplier of 1, two columns or more in and out, ce and m of 2 or more. With e_conv
 * (the expansion a direct convolution; NULL: 1x1): larger planes only, e_conv a direct shape at
 * isa whose output is d's input (n, c -> ce, h x w). */
int kiln_conv_block_f32_ok(const kiln_conv2d_f32_params *d, int64_t c, int64_t m, const kiln_act *e_act,
                           const kiln_act *d_act, const kiln_conv2d_f32_params *e_conv, int isa);
/* The block; KILN_ERR_UNSUPPORTED (nothing written) where kiln_conv_block_f32_ok does not hold,
 * the packs do not match c, ce, m and isa (small planes) or we, wp are NULL (larger ones);
 * KILN_ERR_NOMEM when scratch cannot be had. */
kiln_code kiln_conv_block_f32(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *d, int64_t c,
                              int64_t m, const kiln_conv_block_f32_args *a);

/* 2-D max pooling after a convolution (kiln_conv2d_f32_maxpool): kernel kh x kw, strides
 * sh x sw, top and left pads pt, pl, output oh x ow (bottom and right padding follow). */
typedef struct kiln_pool2d_params {
  int64_t kh, kw, sh, sw, pt, pl, oh, ow;
} kiln_pool2d_params;

/* Whether kiln_conv2d_f32_maxpool computes convolution p followed by max pooling q at ISA
 * level isa: the direct kernel's shapes (2 to 4 input channels, AVX2 or AVX-512), pooling with x stride 2
 * over 2 or 3 columns, a left pad of at most 1, windows that start inside the convolution's
 * output. */
int kiln_conv2d_f32_maxpool_ok(const kiln_conv2d_f32_params *p, const kiln_pool2d_params *q, int isa);
/* y = maxpool(act(conv(x, w) + bias)) for kiln_conv2d_f32_maxpool_ok shapes (ep without a
 * residual), in one pass: the convolution's output is never stored, only pooled; y is
 * [n][m][q->oh][q->ow]. The same values as the convolution then the pooling. */
kiln_code kiln_conv2d_f32_maxpool(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                                  const float *x, const float *w, const kiln_conv2d_f32_epilogue *ep,
                                  const kiln_pool2d_params *q, float *y);

#endif
