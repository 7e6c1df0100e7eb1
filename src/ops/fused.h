/* Shared pieces of kiln's fused operators. */
#ifndef KILN_OPS_FUSED_H
#define KILN_OPS_FUSED_H

#include <stdbool.h>

#include "kernels/act.h"
#include "ops/op.h"


/* The node's activation (attributes activation, act_alpha, act_beta) as a GEMM epilogue
 * activation; false for an unknown name. */
bool kiln_fused_act(const kiln_node *n, kiln_act *act);
/* The same from the attributes named activation, alpha and beta (a fused node with several
 * activations: FusedConvBlock's expand_activation, expand_act_alpha, expand_act_beta). Names
 * given, not built: it runs on every run of every fused node. */
bool kiln_fused_act_named(const kiln_node *n, const char *activation, const char *alpha, const char *beta,
                          kiln_act *act);
/* Whether `name` is an activation the fused kernels apply. */
bool kiln_fused_activation_known(const char *name);
/* In place on float y: + bias over the last dim (may be NULL), + residual of y's shape (may be
 * NULL), then the node's `activation` (alpha, beta attributes). */
kiln_code kiln_fused_epilogue(kiln_kctx *c, kiln_tensor *y, const kiln_tensor *bias,
                              const kiln_tensor *residual);

/* The kernels/conv2d_f32 parameters of Conv inputs X, W, [B] (src/ops/conv.c);
 * KILN_ERR_UNSUPPORTED, with the node not failed, when that path does not apply (other types or
 * ranks); another code, with c failed, for invalid attributes or shapes. */
struct kiln_conv2d_f32_params;
kiln_code kiln_conv2d_f32_params_of(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                    const kiln_tensor *b, struct kiln_conv2d_f32_params *p);
/* Conv (inputs X, W, [B] of c) for float32 2-D input with the residual (NULL: none) and the
 * activation (NULL: none) fused into the kernel (src/ops/conv2d_f32.c). KILN_ERR_UNSUPPORTED, with
 * nothing stored and the node not failed, when that path does not apply. */
kiln_code kiln_conv2d_f32_run(kiln_kctx *c, const kiln_tensor *residual, const kiln_act *act);
/* FusedConvMaxPool (inputs X, W, [B]): the float32 2-D convolution with the activation, then
 * max pooling (attributes pool_kernel_shape, pool_strides, pool_pads, pool_ceil_mode), in one
 * pass where kernels/conv2d_f32 has it (kiln_conv2d_f32_maxpool_ok); otherwise fails, so the
 * node runs the chain it replaced (src/ops/conv2d_f32.c). */
kiln_code kiln_conv2d_f32_maxpool_run(kiln_kctx *c, const kiln_act *act);

/* FusedConvMaxPool's pooling from its attributes (pool_kernel_shape, 2 values; pool_strides,
 * 2, default 1; pool_pads, 4, default 0; pool_ceil_mode) over a convolution output of oh x ow
 * (-1: unknown, then so is that output dim); false when an attribute has the wrong count. */
struct kiln_pool2d_params;
bool kiln_fused_pool_params(const kiln_node *n, int64_t oh, int64_t ow, struct kiln_pool2d_params *q);

/* Prepare hooks (kiln_prepare_fn) of Conv and FusedConv (the node's packed forms of a constant
 * W that kiln_conv2d_f32_run will take for these shapes), and of FusedMatMul and FusedGemm
 * (the packs of a constant B their calls with these shapes take). */
kiln_code kiln_conv2d_f32_prepare(kiln_kctx *c);
kiln_code kiln_fused_matmul_prepare(kiln_kctx *c);
kiln_code kiln_fused_gemm_prepare(kiln_kctx *c);
/* The kernels of FusedMatMul and FusedGemm (described through the plugin ABI in
 * src/plugin/builtin.c). */
kiln_code kiln_fused_matmul_run(kiln_kctx *c);
kiln_code kiln_fused_gemm_run(kiln_kctx *c);

/* ai.kiln::Attention's streaming kernel on a plan made outside src/ops/fused_attention.c (the
 * standard Attention op, src/ops/attention.c): the caller sets the plan's q, k, v views
 * (logical (batch..., Sq, D), (batch..., D, Sk), (batch..., Sk, Dv), with strides; batch axes
 * of extent 1 broadcast), in_data, has_mask with the m view (trailing axes 1 or Sq, and 1 or
 * Sk), the o view (batch..., Sq, Dv, strides into y's data), scale, softcap and fill
 * (kernels/attention.h); the rest is filled here. mask: the m view's data, or NULL. */
struct attn_plan;
kiln_code kiln_attention_run_views(kiln_kctx *c, struct attn_plan *p, const float *mask, kiln_tensor *y);

#endif
