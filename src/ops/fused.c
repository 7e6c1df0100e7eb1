/* kiln's fused operators (domain ai.kiln). Each fused node replaced a chain of standard ops
 * and keeps that chain as its "original" attribute for fallback and validation.
 *
 * FusedConv(X, W, [B], [R])      Conv, + residual R, then `activation`
 * FusedMatMul(A, B, [bias], [R]) MatMul, + bias over the last dim, + R, then `activation`
 * Activations: "" (none), Relu, LeakyRelu(alpha), Clip(alpha=min, beta=max), Sigmoid,
 * HardSigmoid(alpha, beta), HardSwish, Tanh, Gelu (erf form), GeluTanh.
 *
 * The convolution and matrix product run in the standard kernels, writing the output once;
 * bias, residual and activation are applied to that output in place, so no intermediate
 * tensor is materialised. */
#include <math.h>
#include <string.h>

#include "ops/fused.h"
#include "ops/registry.h"

typedef enum { ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_CLIP, ACT_SIGMOID, ACT_HSIGMOID, ACT_HSWISH, ACT_TANH, ACT_GELU, ACT_GELU_TANH } act_kind;

static const struct { const char *name; act_kind k; } acts[] = {
    {"", ACT_NONE},           {"Relu", ACT_RELU},         {"LeakyRelu", ACT_LEAKY},
    {"Clip", ACT_CLIP},       {"Sigmoid", ACT_SIGMOID},   {"HardSigmoid", ACT_HSIGMOID},
    {"HardSwish", ACT_HSWISH}, {"Tanh", ACT_TANH},        {"Gelu", ACT_GELU},
    {"GeluTanh", ACT_GELU_TANH}};

bool kiln_fused_activation_known(const char *name) {
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    if (!strcmp(acts[i].name, name)) return true;
  return false;
}

static float act_apply(act_kind k, float x, float a, float b) {
  switch (k) {
    case ACT_NONE: return x;
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_LEAKY: return x >= 0 ? x : a * x;
    case ACT_CLIP: return x < a ? a : x > b ? b : x;
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case ACT_HSIGMOID: {
      float y = a * x + b;
      return y < 0 ? 0 : y > 1 ? 1 : y;
    }
    case ACT_HSWISH: {
      float y = x / 6.0f + 0.5f;
      return x * (y < 0 ? 0 : y > 1 ? 1 : y);
    }
    case ACT_TANH: return tanhf(x);
    case ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ACT_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
  return x;
}

kiln_code kiln_fused_epilogue(kiln_kctx *c, kiln_tensor *y, const kiln_tensor *bias,
                              const kiln_tensor *residual) {
  if (y->dtype != KILN_FLOAT) return kiln_kunsup(c, "fused epilogue supports float only, got %s", kiln_dtype_name(y->dtype));
  const char *name = kiln_attr_str(c->node, "activation", "");
  act_kind k = ACT_NONE;
  bool found = false;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    if (!strcmp(acts[i].name, name)) {
      k = acts[i].k;
      found = true;
    }
  if (!found) return kiln_kfail(c, "unknown activation '%s'", name);
  float a = kiln_attr_float(c->node, "alpha", 0.01f), b = kiln_attr_float(c->node, "beta", 0.0f);
  float *p = y->data;
  int64_t n = y->numel;
  if (bias) {
    if (bias->dtype != KILN_FLOAT || y->rank < 1 || bias->numel != y->dims[y->rank - 1])
      return kiln_kfail(c, "bias of %lld values does not match the last dim", (long long)bias->numel);
    const float *pb = bias->data;
    int64_t cols = bias->numel;
    for (int64_t i = 0; i < n; i++) p[i] += pb[i % cols];
  }
  if (residual) {
    if (residual->dtype != KILN_FLOAT || !kiln_same_shape(residual, y))
      return kiln_kfail(c, "residual input does not match the output shape");
    const float *pr = residual->data;
    for (int64_t i = 0; i < n; i++) p[i] += pr[i];
  }
  if (k != ACT_NONE)
    for (int64_t i = 0; i < n; i++) p[i] = act_apply(k, p[i], a, b);
  return KILN_OK;
}

/* Run the standard op `name` on this node's first n inputs (its attributes are the fused
 * node's, which carry the standard op's own). */
static kiln_code run_standard(kiln_kctx *c, const char *name, int opset, size_t n) {
  const kiln_op_schema *s = kiln_op_find("", name, opset);
  if (!s) return kiln_kfail(c, "standard op %s is not available", name);
  kiln_kctx sc = *c;
  sc.opset = opset;
  sc.n_in = n < c->n_in ? n : c->n_in;
  return s->run(&sc);
}

/* Shape function of the standard op on the first n inputs: the fused epilogue keeps shapes. */
static kiln_code infer_standard(kiln_ictx *c, const char *name, int opset, size_t n) {
  const kiln_op_schema *s = kiln_op_find("", name, opset);
  if (!s || !s->infer) return KILN_OK;
  kiln_ictx sc = *c;
  sc.opset = opset;
  sc.n_in = n < c->n_in ? n : c->n_in;
  return s->infer(&sc);
}

static kiln_code fused_conv_infer(kiln_ictx *c) { return infer_standard(c, "Conv", 11, 3); }
static kiln_code fused_matmul_infer(kiln_ictx *c) { return infer_standard(c, "MatMul", 13, 2); }
static kiln_code fused_gemm_infer(kiln_ictx *c) { return infer_standard(c, "Gemm", 13, 3); }

static kiln_code fused_conv_run(kiln_kctx *c) {
  kiln_code rc = run_standard(c, "Conv", 11, 3);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], NULL, kiln_in(c, 3));
}

static kiln_code fused_matmul_run(kiln_kctx *c) {
  kiln_code rc = run_standard(c, "MatMul", 13, 2);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], kiln_in(c, 2), kiln_in(c, 3));
}

static kiln_code fused_gemm_run(kiln_kctx *c) {
  kiln_code rc = run_standard(c, "Gemm", 13, 3);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], NULL, NULL);
}

const kiln_op_schema kiln_ops_fused[] = {
    {KILN_FUSED_DOMAIN, "FusedGemm", 1, 2, 3, 1, 1, fused_gemm_infer, fused_gemm_run},
    {KILN_FUSED_DOMAIN, "FusedConv", 1, 2, 4, 1, 1, fused_conv_infer, fused_conv_run},
    {KILN_FUSED_DOMAIN, "FusedMatMul", 1, 2, 4, 1, 1, fused_matmul_infer, fused_matmul_run},
    {0},
};
