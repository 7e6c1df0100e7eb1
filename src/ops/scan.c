/* Scans: CumSum, the running sum along one axis (inclusive or exclusive, forwards or in
 * reverse). */
#include "ops/op.h"

static kiln_code run_cumsum(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t a = 0;
  if ((rc = kiln_scalar_int(c, c->in[1], "axis", &a))) return rc;
  int axis = kiln_axis(c, a, x->rank);
  if (axis < 0) return c->err->code;
  if (!kiln_dtype_is_float(x->dtype) && !kiln_dtype_is_int(x->dtype))
    return kiln_kfail(c, "unsupported type %s", kiln_dtype_name(x->dtype));
  bool excl = kiln_attr_int(c->node, "exclusive", 0), rev = kiln_attr_int(c->node, "reverse", 0);
  kiln_tensor *o = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!o) return c->err->code;
  int64_t len = x->rank ? x->dims[axis] : 1, inner = 1, outer = 1;
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  bool fl = kiln_dtype_is_float(x->dtype);
  for (int64_t b = 0; b < outer; b++)
    for (int64_t in = 0; in < inner; in++) {
      double fs = 0;
      uint64_t is = 0; /* integers wrap like the fixed-width type */
      for (int64_t j = 0; j < len; j++) {
        int64_t p = (b * len + (rev ? len - 1 - j : j)) * inner + in;
        if (x->dtype == KILN_FLOAT) { /* the common case, kept in float like numpy */
          float *of = o->data;
          const float *xf = x->data;
          float prev = j ? of[p + (rev ? inner : -inner)] : 0.0f;
          float add = excl ? (j ? xf[p + (rev ? inner : -inner)] : 0.0f) : xf[p];
          of[p] = prev + add;
          continue;
        }
        /* other types through double (floats) or wrapping 64-bit integers */
        if (excl) {
          if (fl)
            kiln_set_f64(o, p, fs);
          else
            kiln_set_i64(o, p, (int64_t)is);
        }
        if (fl)
          fs += kiln_get_f64(x, p);
        else
          is += (uint64_t)kiln_get_i64(x, p);
        if (!excl) {
          if (fl)
            kiln_set_f64(o, p, fs);
          else
            kiln_set_i64(o, p, (int64_t)is);
        }
      }
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_scan[] = {
    {.domain = "", .name = "CumSum", .since = 11, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_cumsum, .flow = KILN_FLOW_SAME},
    {0},
};
