/* Activations the standard set added late: Gelu (opset 20, approximate "none" | "tanh") and
 * Swish (opset 24, y = x * sigmoid(alpha * x)).
 *
 * float32 Gelu runs kiln's GELU kernel (kiln_gelu_map_f32, the one ai.kiln::Gelu and the GEMM
 * epilogues use; src/opt/fuse_gelu.c also rewrites a standard Gelu into those fused forms);
 * float16, bfloat16 and double go through double arithmetic. */
#include <math.h>
#include <string.h>

#include "kernels/vec_f32.h"
#include "ops/cost.h"
#include "ops/op.h"

static bool is_float_dtype(kiln_dtype t) {
  return t == KILN_FLOAT || t == KILN_DOUBLE || t == KILN_FLOAT16 || t == KILN_BFLOAT16;
}

/* The input (a float tensor of any of the four float types) and its output. */
static kiln_code unary_float(kiln_kctx *c, const kiln_tensor **x, kiln_tensor **y) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  *x = kiln_in(c, 0);
  if (!is_float_dtype((*x)->dtype))
    return kiln_kfail(c, "input must be float, double, float16 or bfloat16, not %s", kiln_dtype_name((*x)->dtype));
  *y = kiln_out_uninit(c, 0, (*x)->dtype, (*x)->rank, (*x)->dims); /* every element written */
  return *y ? KILN_OK : c->err->code;
}

static double gelu_ref(double x, bool th) {
  if (th) return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
}

static kiln_code gelu_run(kiln_kctx *c) {
  const char *a = kiln_attr_str(c->node, "approximate", "none");
  bool th = !strcmp(a, "tanh");
  if (!th && strcmp(a, "none")) return kiln_kfail(c, "approximate must be \"none\" or \"tanh\", not \"%s\"", a);
  const kiln_tensor *x;
  kiln_tensor *y;
  kiln_code rc = unary_float(c, &x, &y);
  if (rc) return rc;
  if (x->dtype == KILN_FLOAT) {
    kiln_gelu_map_f32(y->data, x->data, NULL, x->numel, th);
    return KILN_OK;
  }
  for (int64_t i = 0; i < x->numel; i++) kiln_store_f64(y, i, gelu_ref(kiln_load_f64(x, i), th));
  return KILN_OK;
}

static kiln_code swish_run(kiln_kctx *c) {
  const kiln_tensor *x;
  kiln_tensor *y;
  kiln_code rc = unary_float(c, &x, &y);
  if (rc) return rc;
  float alpha = kiln_attr_float(c->node, "alpha", 1.0f);
  if (x->dtype == KILN_FLOAT) {
    const float *xs = x->data;
    float *ys = y->data;
    for (int64_t i = 0; i < x->numel; i++) ys[i] = xs[i] / (1.0f + expf(-alpha * xs[i]));
    return KILN_OK;
  }
  for (int64_t i = 0; i < x->numel; i++) {
    double v = kiln_load_f64(x, i);
    kiln_store_f64(y, i, v / (1.0 + exp(-(double)alpha * v)));
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_gelu_swish[] = {
    {.domain = "", .name = "Gelu", .since = 20, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = gelu_run, .flags = KILN_OPF_IN_PLACE,
     .cost = kiln_cost_elementwise, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "Swish", .since = 24, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = swish_run, .flags = KILN_OPF_IN_PLACE,
     .cost = kiln_cost_elementwise, .flow = KILN_FLOW_SAME},
    {0},
};
