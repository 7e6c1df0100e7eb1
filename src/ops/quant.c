/* Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.
 * (QLinearConv and QLinearMatMul live with their float forms in conv.c and matmul.c, whose
 * product machinery they share.)
 *
 * Arithmetic is done in float, as the ONNX reference and onnxruntime do, so results at exact
 * rounding boundaries match theirs; rounding is half to even (rintf under the default rounding
 * mode) and results saturate to the output type's range.
 *
 * Opsets 19-23: outputs and inputs of 16-bit, 4-bit (int4/uint4) and float8 / float4e2m1 types
 * (those round x / scale to the nearest code, `saturate` as in Cast: see ir/small_types.h),
 * `output_dtype`, and block quantization: with block_size B > 0 the scale has x's rank and
 * x's dims except ceil(d / B) along `axis`, element (.., a, ..) taking scale (.., a / B, ..).
 */
#include <math.h>
#include <string.h>

#include "ir/small_types.h"
#include "kernels/quant_u8.h"
#include "ops/op.h"

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* Range of an integer quantized type. */
static bool q_range(kiln_dtype t, float *lo, float *hi) {
  switch (t) {
    case KILN_UINT8: *lo = 0, *hi = 255; return true;
    case KILN_INT8: *lo = -128, *hi = 127; return true;
    case KILN_UINT16: *lo = 0, *hi = 65535; return true;
    case KILN_INT16: *lo = -32768, *hi = 32767; return true;
    case KILN_UINT4: *lo = 0, *hi = 15; return true;
    case KILN_INT4: *lo = -8, *hi = 7; return true;
    case KILN_INT32: *lo = -2147483648.0f, *hi = 2147483520.0f; return true; /* largest float < 2^31 */
    default: return false;
  }
}

/* A scale's float types: float, float16, bfloat16 (and double, which kiln also takes). */
static bool scale_type_ok(kiln_dtype t) { return kiln_dtype_is_float(t); }

/* How flat index i of x selects a scale / zero point: per tensor, per axis or per block. */
typedef struct q_axis {
  int64_t inner, adim, sdim, block; /* block 0: per tensor; sdim = ceil(adim / block) */
  bool blocked;
} q_axis;

static kiln_code q_blocked(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *scale, int ax,
                           int64_t block, q_axis *qa) {
  if (scale->rank != x->rank)
    return kiln_kfail(c, "block quantization: the scale has rank %d, x rank %d", scale->rank, x->rank);
  for (int d = 0; d < x->rank; d++) {
    int64_t want = d == ax ? (x->dims[d] + block - 1) / block : x->dims[d];
    if (scale->dims[d] != want)
      return kiln_kfail(c, "block quantization: scale dim %d is %lld, block_size %lld over x's %lld needs %lld",
                        d, (long long)scale->dims[d], (long long)block, (long long)x->dims[d], (long long)want);
  }
  qa->blocked = true;
  qa->block = block;
  qa->adim = x->dims[ax];
  qa->sdim = scale->dims[ax];
  for (int d = ax + 1; d < x->rank; d++) qa->inner *= x->dims[d];
  return KILN_OK;
}

/* Checks scale (and zero point, may be NULL) against x and the axis / block_size attributes. */
static kiln_code q_params(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *scale,
                          const kiln_tensor *zp, q_axis *qa) {
  if (!is_tensor(scale) || !scale_type_ok(scale->dtype))
    return kiln_kfail(c, "the scale must be a float, float16 or bfloat16 tensor");
  *qa = (q_axis){.inner = 1, .adim = 1, .sdim = 1, .block = 0};
  int64_t block = c->opset >= 21 ? kiln_attr_int(c->node, "block_size", 0) : 0;
  if (block < 0) return kiln_kfail(c, "block_size must be >= 0, not %lld", (long long)block);
  if (scale->numel != 1 || block > 0) {
    int ax = kiln_axis(c, c->opset >= 13 ? kiln_attr_int(c->node, "axis", 1) : 1, x->rank);
    if (ax < 0) return KILN_ERR_RUN;
    if (block > 0) {
      kiln_code rc = q_blocked(c, x, scale, ax, block, qa);
      if (rc) return rc;
    } else {
      if (scale->rank != 1) return kiln_kfail(c, "the scale must be a scalar or 1-D (or set block_size)");
      if (scale->numel != x->dims[ax])
        return kiln_kfail(c, "the scale has %lld values but axis %d has %lld", (long long)scale->numel,
                          ax, (long long)x->dims[ax]);
      qa->adim = qa->sdim = x->dims[ax];
      qa->block = 1;
      for (int d = ax + 1; d < x->rank; d++) qa->inner *= x->dims[d];
    }
  }
  if (zp && (!is_tensor(zp) || zp->numel != scale->numel))
    return kiln_kfail(c, "the zero point must have the scale's shape");
  return KILN_OK;
}

static int64_t q_chan(const q_axis *qa, int64_t i) {
  if (!qa->block) return 0;
  int64_t a = (i / qa->inner) % qa->adim;
  if (!qa->blocked) return a;
  int64_t outer = i / (qa->inner * qa->adim);
  return (outer * qa->sdim + a / qa->block) * qa->inner + i % qa->inner;
}

/* x / scale rounded to x's own precision, as the ONNX reference divides in x's type. */
static float q_div(kiln_dtype xt, float x, float s) {
  float q = x / s;
  if (xt == KILN_FLOAT16) return kiln_f16_to_f32(kiln_f32_to_f16(q));
  if (xt == KILN_BFLOAT16) return kiln_bf16_to_f32(kiln_f32_to_bf16(q));
  return q;
}

/* The output type: output_dtype (opset 21+), else the zero point's, else uint8. */
static kiln_dtype q_out_type(const kiln_node *node, int opset, const kiln_tensor *zp) {
  int64_t od = opset >= 21 ? kiln_attr_int(node, "output_dtype", 0) : 0;
  if (od > 0) return (kiln_dtype)od;
  return zp ? zp->dtype : KILN_UINT8;
}

static kiln_code quantize_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *s = kiln_in(c, 1), *zp = kiln_in(c, 2);
  if (zp && zp->kind == KILN_KIND_NONE) zp = NULL;
  if (!is_tensor(x) || (!kiln_dtype_is_float(x->dtype) && x->dtype != KILN_INT32))
    return kiln_kfail(c, "x must be a float, float16, bfloat16 or int32 tensor");
  q_axis qa;
  kiln_code rc = q_params(c, x, s, zp, &qa);
  if (rc) return rc;
  kiln_dtype yt = q_out_type(c->node, c->opset, zp);
  if (zp && zp->dtype != yt)
    return kiln_kfail(c, "output_dtype %s differs from the zero point's %s", kiln_dtype_name(yt),
                      kiln_dtype_name(zp->dtype));
  const bool small = kiln_dtype_is_small_float(yt), saturate = kiln_attr_int(c->node, "saturate", 1) != 0;
  float lo = 0, hi = 0;
  if (!small && (yt == KILN_INT32 || !q_range(yt, &lo, &hi)))
    return kiln_kunsup(c, "quantizing to %s is not supported", kiln_dtype_name(yt));
  kiln_tensor *y = kiln_out(c, 0, yt, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = q_chan(&qa, i);
    float xv = x->dtype == KILN_FLOAT ? ((const float *)x->data)[i] : (float)kiln_get_f64(x, i);
    float q = q_div(x->dtype, xv, (float)kiln_get_f64(s, ch));
    if (small) { /* float8 / float4: round the quotient (plus a zero point, 0 in practice) */
      double z = zp ? kiln_get_f64(zp, ch) : 0.0;
      ((uint8_t *)y->data)[i] = kiln_small_from_f64(yt, (double)q + z, saturate);
      continue;
    }
    float v = rintf(q) + (zp ? (float)kiln_get_i64(zp, ch) : 0.0f);
    v = v < lo ? lo : v > hi ? hi : v; /* NaN falls through to the cast below as 0 */
    kiln_set_i64(y, i, v == v ? (int64_t)v : 0);
  }
  return KILN_OK;
}

/* The output type of DequantizeLinear: output_dtype (opset 23+), else the scale's (19+). */
static kiln_dtype dq_out_type(const kiln_node *node, int opset, kiln_dtype scale_t) {
  int64_t od = opset >= 23 ? kiln_attr_int(node, "output_dtype", 0) : 0;
  if (od > 0) return (kiln_dtype)od;
  return opset >= 19 && scale_t ? scale_t : KILN_FLOAT;
}

static kiln_code dequantize_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *s = kiln_in(c, 1), *zp = kiln_in(c, 2);
  if (zp && zp->kind == KILN_KIND_NONE) zp = NULL;
  float lo, hi;
  if (!is_tensor(x) || (!q_range(x->dtype, &lo, &hi) && !kiln_dtype_is_small_float(x->dtype)))
    return kiln_kfail(c, "x must be an 8/16/32-bit or 4-bit integer, float8 or float4e2m1 tensor, not %s",
                      is_tensor(x) ? kiln_dtype_name(x->dtype) : "a non-tensor");
  if (zp && zp->dtype != x->dtype) return kiln_kfail(c, "x_zero_point must have x's type");
  q_axis qa;
  kiln_code rc = q_params(c, x, s, zp, &qa);
  if (rc) return rc;
  kiln_dtype yt = dq_out_type(c->node, c->opset, s->dtype);
  if (!kiln_dtype_is_float(yt)) return kiln_kfail(c, "output_dtype %s is not a float type", kiln_dtype_name(yt));
  kiln_tensor *y = kiln_out(c, 0, yt, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  const bool small = kiln_dtype_is_small_float(x->dtype);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = q_chan(&qa, i);
    float d = small ? (float)kiln_get_f64(x, i) - (zp ? (float)kiln_get_f64(zp, ch) : 0.0f)
                    : (float)(kiln_get_i64(x, i) - (zp ? kiln_get_i64(zp, ch) : 0));
    float v = d * (float)kiln_get_f64(s, ch);
    if (yt == KILN_FLOAT) ((float *)y->data)[i] = v;
    else kiln_set_f64(y, i, v);
  }
  return KILN_OK;
}

static kiln_code dynquant_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || x->dtype != KILN_FLOAT) return kiln_kfail(c, "x must be a float tensor");
  const float *xv = x->data;
  /* The range always includes 0 so that 0 is exactly representable. */
  float mn, mx;
  kiln_minmax_f32(xv, x->numel, &mn, &mx);
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
  if (scale > 0)
    kiln_quantize_u8_f32(xv, x->numel, scale, zpf, y->data);
  else
    memset(y->data, (int)zpf, (size_t)x->numel);
  return KILN_OK;
}

/* ---- shape functions ------------------------------------------------------------------------ */

static kiln_code quantize_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *zp = c->n_in > 2 ? c->in[2] : NULL;
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  int64_t od = c->opset >= 21 ? kiln_attr_int(c->node, "output_dtype", 0) : 0;
  kiln_dtype dt = od > 0 ? (kiln_dtype)od
                  : zp   ? (zp->kind == KILN_T_TENSOR ? zp->dtype : KILN_UNDEFINED)
                         : KILN_UINT8;
  kiln_infer_tensor(c, 0, dt, x->rank, x->dims);
  return KILN_OK;
}

static kiln_code dequantize_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *s = c->in[1];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_dtype st = s && s->kind == KILN_T_TENSOR ? s->dtype : KILN_UNDEFINED;
  kiln_infer_tensor(c, 0, dq_out_type(c->node, c->opset, st), x->rank, x->dims);
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
