/* GroupNormalization: X (N, C, spatial...) normalised over each group of C / num_groups
 * channels and its spatial extent, then scaled and shifted. Opset 18 gives scale and bias per
 * group ([num_groups]), opset 21 per channel ([C]). Statistics in double. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"

static kiln_code gn_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  if (x && x->rank >= 0 && x->rank < 2) return kiln_ifail(c, "X must have rank 2 or more");
  return kiln_infer_unary(c);
}

static kiln_code gn_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  if (!kiln_dtype_is_float(x->dtype) || !kiln_dtype_is_float(scale->dtype) ||
      !kiln_dtype_is_float(bias->dtype))
    return kiln_kfail(c, "X, scale and bias must be floating point");
  if (x->rank < 2) return kiln_kfail(c, "X must have rank 2 or more");
  const int64_t groups = kiln_attr_int(c->node, "num_groups", 0), n = x->dims[0], ch = x->dims[1];
  if (groups < 1 || ch % groups)
    return kiln_kfail(c, "num_groups (%lld) must be positive and divide the %lld channels",
                      (long long)groups, (long long)ch);
  const bool per_channel = c->opset >= 21;
  const int64_t want = per_channel ? ch : groups;
  if (scale->rank != 1 || scale->numel != want || bias->rank != 1 || bias->numel != want)
    return kiln_kfail(c, "scale and bias must be [%lld] (%s at opset %d)", (long long)want,
                      per_channel ? "one per channel" : "one per group", c->opset);
  const double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  const int64_t cg = ch / groups, sp = ch ? x->numel / (n * ch) : 0, len = cg * sp;
  kiln_tensor *y = kiln_out_uninit(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  for (int64_t b = 0; b < n; b++)
    for (int64_t g = 0; g < groups; g++) {
      const int64_t base = (b * groups + g) * len;
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < len; i++) sum += kiln_get_f64(x, base + i);
      const double mean = len ? sum / (double)len : 0;
      for (int64_t i = 0; i < len; i++) {
        double d = kiln_get_f64(x, base + i) - mean;
        sq += d * d;
      }
      const double inv = 1.0 / sqrt((len ? sq / (double)len : 0) + eps);
      for (int64_t k = 0; k < cg; k++) {
        const int64_t pi = per_channel ? g * cg + k : g;
        const double a = kiln_get_f64(scale, pi) * inv, o = kiln_get_f64(bias, pi);
        for (int64_t s = 0; s < sp; s++) {
          const int64_t i = base + k * sp + s;
          kiln_set_f64(y, i, (kiln_get_f64(x, i) - mean) * a + o);
        }
      }
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_group_norm[] = {
    {.domain = "", .name = "GroupNormalization", .since = 18, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = gn_infer, .run = gn_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "GroupNormalization", .since = 21, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = gn_infer, .run = gn_run, .flow = KILN_FLOW_SAME},
    {0},
};
