/* The profiler's work counts (kiln_cost_fn, see ops/op.h) of the compute-heavy ops, shared by
 * the standard op and the fused ops built on it. An op that is not here keeps the presets. */
#ifndef KILN_OPS_COST_H
#define KILN_OPS_COST_H

#include "ops/op.h"

/* Conv, ConvInteger, FusedConv: every output element sums (C/group) * kernel taps products. */
void kiln_cost_conv(const kiln_kctx *c, double *flops, double *bytes);
/* FusedConvMaxPool: the convolution's products (its output is pooled; pooling is free). */
void kiln_cost_conv_pool(const kiln_kctx *c, double *flops, double *bytes);
/* MatMul, MatMulInteger, FusedMatMul: 2 * output elements * K. */
void kiln_cost_matmul(const kiln_kctx *c, double *flops, double *bytes);
/* Gemm, FusedGemm: 2 * M * N * K. */
void kiln_cost_gemm(const kiln_kctx *c, double *flops, double *bytes);
/* ai.kiln Attention: Q K^T and the product with V. */
void kiln_cost_attention(const kiln_kctx *c, double *flops, double *bytes);
/* The other families count a few flops per output element (their roofs are memory roofs):
 * elementwise 1 (transcendentals too), FusedElementwise about one per operation of its program,
 * BatchNormalization 2, layer/instance/group norms 8, softmax 5, reductions and global pools
 * one per input element, pools one per kernel tap. Views (Reshape and the like) move no bytes
 * when their output shares the input's memory. */
void kiln_cost_elementwise(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_fused_elementwise(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_batchnorm(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_norm(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_softmax(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_reduce(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_pool(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_global_pool(const kiln_kctx *c, double *flops, double *bytes);
void kiln_cost_view(const kiln_kctx *c, double *flops, double *bytes);

#endif
