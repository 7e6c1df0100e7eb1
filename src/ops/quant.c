/* Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.
 * (QLinearConv and QLinearMatMul live with their float forms in conv.c and matmul.c, whose
 * product machinery they share.)
 *
 * Arithmetic is done in float, as the ONNX reference and onnxruntime do, so results at exact
 * rounding boundaries match theirs; rounding is half to even (rintf under the default rounding
 * mode) and results saturate to the 8-bit range.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* Range of a quantized type. */
static bool q_range(kiln_dtype t, float *lo, float *hi) {
  switch (t) {
    case KILN_UINT8: *lo = 0, *hi = 255; return true;
    case KILN_INT8: *lo = -128, *hi = 127; return true;
    case KILN_INT32: *lo = -2147483648.0f, *hi = 2147483520.0f; return true; /* largest float < 2^31 */
    default: return false;
  }
}

/* Per-tensor or per-axis parameters: how flat index i of x selects a scale / zero point. */
typedef struct q_axis {
  int64_t inner, count; /* channel of element i: (i / inner) % count; count 1 = per-tensor */
} q_axis;

/* Checks scale (and zero point, may be NULL) against x and the axis attribute (opset >= 13). */
static kiln_code q_params(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *scale,
                          const kiln_tensor *zp, q_axis *qa) {
  if (!is_tensor(scale) || !kiln_dtype_is_float(scale->dtype))
    return kiln_kfail(c, "the scale must be a float tensor");
  qa->inner = 1;
  qa->count = 1;
  if (scale->numel != 1) {
    if (scale->rank != 1) return kiln_kfail(c, "the scale must be a scalar or 1-D");
    int ax = kiln_axis(c, c->opset >= 13 ? kiln_attr_int(c->node, "axis", 1) : 1, x->rank);
    if (ax < 0) return KILN_ERR_RUN;
    if (scale->numel != x->dims[ax])
      return kiln_kfail(c, "the scale has %lld values but axis %d has %lld", (long long)scale->numel,
                        ax, (long long)x->dims[ax]);
    qa->count = x->dims[ax];
    for (int d = ax + 1; d < x->rank; d++) qa->inner *= x->dims[d];
  }
  if (zp && (!is_tensor(zp) || zp->numel != scale->numel))
    return kiln_kfail(c, "the zero point must have the scale's shape");
  return KILN_OK;
}

static int64_t q_chan(const q_axis *qa, int64_t i) {
  return qa->count == 1 ? 0 : (i / qa->inner) % qa->count;
}

static kiln_code quantize_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *s = kiln_in(c, 1), *zp = kiln_in(c, 2);
  if (zp && zp->kind == KILN_KIND_NONE) zp = NULL;
  if (!is_tensor(x) || (!kiln_dtype_is_float(x->dtype) && x->dtype != KILN_INT32))
    return kiln_kfail(c, "x must be a float or int32 tensor");
  q_axis qa;
  kiln_code rc = q_params(c, x, s, zp, &qa);
  if (rc) return rc;
  kiln_dtype yt = zp ? zp->dtype : KILN_UINT8;
  float lo, hi;
  if (yt == KILN_INT32 || !q_range(yt, &lo, &hi))
    return kiln_kunsup(c, "quantizing to %s is not supported", kiln_dtype_name(yt));
  kiln_tensor *y = kiln_out(c, 0, yt, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = q_chan(&qa, i);
    float xv = x->dtype == KILN_FLOAT ? ((const float *)x->data)[i] : (float)kiln_get_f64(x, i);
    float v = rintf(xv / (float)kiln_get_f64(s, ch)) + (zp ? (float)kiln_get_i64(zp, ch) : 0.0f);
    v = v < lo ? lo : v > hi ? hi : v; /* NaN falls through to the cast below as 0 */
    kiln_set_i64(y, i, v == v ? (int64_t)v : 0);
  }
  return KILN_OK;
}

static kiln_code dequantize_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *s = kiln_in(c, 1), *zp = kiln_in(c, 2);
  if (zp && zp->kind == KILN_KIND_NONE) zp = NULL;
  float lo, hi;
  if (!is_tensor(x) || !q_range(x->dtype, &lo, &hi))
    return kiln_kfail(c, "x must be a uint8, int8 or int32 tensor");
  if (zp && zp->dtype != x->dtype) return kiln_kfail(c, "x_zero_point must have x's type");
  q_axis qa;
  kiln_code rc = q_params(c, x, s, zp, &qa);
  if (rc) return rc;
  kiln_tensor *y = kiln_out(c, 0, KILN_FLOAT, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  float *yv = y->data;
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = q_chan(&qa, i);
    int64_t d = kiln_get_i64(x, i) - (zp ? kiln_get_i64(zp, ch) : 0);
    yv[i] = (float)d * (float)kiln_get_f64(s, ch);
  }
  return KILN_OK;
}

static kiln_code dynquant_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || x->dtype != KILN_FLOAT) return kiln_kfail(c, "x must be a float tensor");
  const float *xv = x->data;
  /* The range always includes 0 so that 0 is exactly representable. */
  float mn = 0, mx = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    mn = xv[i] < mn ? xv[i] : mn;
    mx = xv[i] > mx ? xv[i] : mx;
  }
  float scale = (mx - mn) / 255.0f, zpf = 0;
  if (scale > 0) {
    zpf = 0.0f - mn / scale;
    zpf = rintf(zpf < 0 ? 0 : zpf > 255 ? 255 : zpf);
  }
  kiln_tensor *y = kiln_out(c, 0, KILN_UINT8, x->rank, x->dims);
  kiln_tensor *ys = kiln_out(c, 1, KILN_FLOAT, 0, NULL);
  kiln_tensor *yz = kiln_out(c, 2, KILN_UINT8, 0, NULL);
  if (!y || !ys || !yz) return KILN_ERR_NOMEM;
  ((float *)ys->data)[0] = scale;
  ((uint8_t *)yz->data)[0] = (uint8_t)zpf;
  uint8_t *yv = y->data;
  for (int64_t i = 0; i < x->numel; i++) {
    float v = scale > 0 ? rintf(xv[i] / scale) + zpf : zpf;
    yv[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
  }
  return KILN_OK;
}

/* ---- shape functions ------------------------------------------------------------------------ */

static kiln_code quantize_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *zp = c->n_in > 2 ? c->in[2] : NULL;
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_dtype dt = zp && zp->kind == KILN_T_TENSOR ? zp->dtype : zp ? KILN_UNDEFINED : KILN_UINT8;
  kiln_infer_tensor(c, 0, dt, x->rank, x->dims);
  return KILN_OK;
}

static kiln_code dequantize_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_infer_tensor(c, 0, KILN_FLOAT, x->rank, x->dims);
  return KILN_OK;
}

static kiln_code dynquant_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_infer_tensor(c, 0, KILN_UINT8, x->rank, x->dims);
  kiln_infer_tensor(c, 1, KILN_FLOAT, 0, NULL);
  kiln_infer_tensor(c, 2, KILN_UINT8, 0, NULL);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_quant[] = {
    {.domain = "", .name = "QuantizeLinear", .since = 10, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = quantize_infer, .run = quantize_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "DequantizeLinear", .since = 10, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = dequantize_infer, .run = dequantize_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "DynamicQuantizeLinear", .since = 11, .inputs = {1, 1}, .outputs = {3, 3},
     .infer = dynquant_infer, .run = dynquant_run},
    {0},
};
