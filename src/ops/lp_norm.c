/* LpNormalization (opset 1; 22 adds bfloat16): x divided by its L1 or L2 norm along `axis`
 * (default -1), p = 2 by default. A slice whose norm is 0 stays 0, as in ONNX Runtime (ONNX's
 * numpy reference would divide 0 by 0). */
#include <math.h>

#include "ops/op.h"

static kiln_code lpn_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (!kiln_dtype_is_float(x->dtype)) return kiln_kfail(c, "input must be floating point");
  const int64_t p = kiln_attr_int(c->node, "p", 2);
  if (p != 1 && p != 2) return kiln_kfail(c, "p must be 1 or 2, got %lld", (long long)p);
  if (x->rank < 1) return kiln_kfail(c, "input must have rank 1 or more");
  const int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -1), x->rank);
  if (axis < 0) return c->err->code;
  int64_t outer = 1, inner = 1;
  const int64_t n = x->dims[axis];
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  kiln_tensor *y = kiln_out_uninit(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const int64_t base = o * n * inner + i;
      double norm = 0;
      for (int64_t k = 0; k < n; k++) {
        double v = kiln_get_f64(x, base + k * inner);
        norm += p == 1 ? fabs(v) : v * v;
      }
      if (p == 2) norm = sqrt(norm);
      for (int64_t k = 0; k < n; k++)
        kiln_set_f64(y, base + k * inner, norm > 0 ? kiln_get_f64(x, base + k * inner) / norm : 0);
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_lp_norm[] = {
    {.domain = "", .name = "LpNormalization", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = lpn_run, .flow = KILN_FLOW_SAME},
    {0},
};
