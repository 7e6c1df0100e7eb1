/* CumProd (opset 26): cumulative product along the axis given as a 0-D integer input,
 * inclusive or `exclusive` (the first product is 1), forwards or in `reverse`. Floats in their
 * own precision (float32 in float, like numpy), the others through double; integers wrap like
 * their fixed-width type. */
#include "ops/op.h"

/* Element p of x times acc, and acc after it, for the kinds of element type. */
typedef struct cp_acc {
  double f;
  uint64_t i; /* unsigned product: wraps as the fixed-width type does */
  float f32;
} cp_acc;

static void cp_store(kiln_tensor *o, int64_t p, const cp_acc *a, bool fl) {
  if (o->dtype == KILN_FLOAT) ((float *)o->data)[p] = a->f32;
  else if (fl) kiln_set_f64(o, p, a->f);
  else kiln_set_i64(o, p, (int64_t)a->i);
}

static void cp_mul(cp_acc *a, const kiln_tensor *x, int64_t p, bool fl) {
  if (x->dtype == KILN_FLOAT) a->f32 *= ((const float *)x->data)[p];
  else if (fl) a->f *= kiln_get_f64(x, p);
  else a->i *= (uint64_t)kiln_get_i64(x, p);
}

static kiln_code cumprod_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0), *ax = kiln_in(c, 1);
  if (!kiln_dtype_is_int(ax->dtype) || ax->numel != 1) return kiln_kfail(c, "axis must be a single integer");
  int axis = kiln_axis(c, kiln_get_i64(ax, 0), x->rank ? x->rank : 1);
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
  for (int64_t b = 0; b < outer; b++)
    for (int64_t in = 0; in < inner; in++) {
      cp_acc a = {1.0, 1, 1.0f};
      for (int64_t j = 0; j < len; j++) {
        int64_t p = (b * len + (rev ? len - 1 - j : j)) * inner + in;
        if (excl) cp_store(o, p, &a, fl);
        cp_mul(&a, x, p, fl);
        if (!excl) cp_store(o, p, &a, fl);
      }
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_cumprod[] = {
    {.domain = "", .name = "CumProd", .since = 26, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = cumprod_run, .flow = KILN_FLOW_SAME},
    {0},
};
