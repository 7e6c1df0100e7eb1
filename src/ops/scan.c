/* Scans: CumSum (opset 11) and CumProd (opset 26), the running sum or product along the axis
 * given as an integer scalar input, inclusive or `exclusive` (the first value is 0 or 1),
 * forwards or in `reverse`. float32 accumulates in float, like numpy; other floats through
 * double; integers wrap like their fixed-width type. */
#include "ops/op.h"

/* The running value, in each kind of element type. */
typedef struct scan_acc {
  double f;
  uint64_t i; /* unsigned: wraps as the fixed-width type does */
  float f32;
} scan_acc;

static void scan_store(kiln_tensor *o, int64_t p, const scan_acc *a, bool fl) {
  if (o->dtype == KILN_FLOAT)
    ((float *)o->data)[p] = a->f32;
  else if (fl)
    kiln_set_f64(o, p, a->f);
  else
    kiln_set_i64(o, p, (int64_t)a->i);
}

static void scan_step(scan_acc *a, const kiln_tensor *x, int64_t p, bool fl, bool prod) {
  if (x->dtype == KILN_FLOAT) {
    float v = ((const float *)x->data)[p];
    a->f32 = prod ? a->f32 * v : a->f32 + v;
  } else if (fl) {
    double v = kiln_get_f64(x, p);
    a->f = prod ? a->f * v : a->f + v;
  } else {
    uint64_t v = (uint64_t)kiln_get_i64(x, p);
    a->i = prod ? a->i * v : a->i + v;
  }
}

static kiln_code run_scan(kiln_kctx *c, bool prod) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t a = 0;
  if ((rc = kiln_scalar_int(c, c->in[1], "axis", &a))) return rc;
  int axis = kiln_axis(c, a, x->rank ? x->rank : 1);
  if (axis < 0) return c->err->code;
  bool fl = kiln_dtype_is_float(x->dtype);
  if (!fl && (!kiln_dtype_is_int(x->dtype) || x->dtype == KILN_BOOL))
    return kiln_kfail(c, "unsupported type %s", kiln_dtype_name(x->dtype));
  bool excl = kiln_attr_int(c->node, "exclusive", 0), rev = kiln_attr_int(c->node, "reverse", 0);
  kiln_tensor *o = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!o) return c->err->code;
  int64_t len = x->rank ? x->dims[axis] : 1, inner = 1, outer = 1;
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  const scan_acc start = prod ? (scan_acc){1.0, 1, 1.0f} : (scan_acc){0.0, 0, 0.0f};
  for (int64_t b = 0; b < outer; b++)
    for (int64_t in = 0; in < inner; in++) {
      scan_acc acc = start;
      for (int64_t j = 0; j < len; j++) {
        int64_t p = (b * len + (rev ? len - 1 - j : j)) * inner + in;
        if (excl) scan_store(o, p, &acc, fl);
        scan_step(&acc, x, p, fl, prod);
        if (!excl) scan_store(o, p, &acc, fl);
      }
    }
  return KILN_OK;
}

static kiln_code run_cumsum(kiln_kctx *c) { return run_scan(c, false); }
static kiln_code run_cumprod(kiln_kctx *c) { return run_scan(c, true); }

const kiln_op_schema kiln_ops_scan[] = {
    {.domain = "", .name = "CumSum", .since = 11, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_cumsum, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "CumProd", .since = 26, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_cumprod, .flow = KILN_FLOW_SAME},
    {0},
};
