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

#endif
