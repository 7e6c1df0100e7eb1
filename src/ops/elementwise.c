/* elementwise operators. */
#include "ops/op.h"

static kiln_code relu_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  for (int64_t i = 0; i < x->numel; i++) {
    double v = kiln_get_f64(x, i);
    kiln_set_f64(y, i, v > 0 ? v : 0);
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_elementwise[] = {
    {"", "Relu", 1, 1, 1, 1, 1, kiln_infer_unary, relu_run},
    {0},
};
