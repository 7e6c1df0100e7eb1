/* Elementwise unary operators: math functions, Not, IsNaN/IsInf, and the activations
 * (Relu ... Mish, PRelu, Clip).
 *
 * Most ops are one expression of x plus the node's attributes, read once into a small struct.
 * UNARY_OP expands the expression into typed loops for float and double, so the common cases
 * make no per-element calls through kiln_get/set, and a generic loop through double for
 * float16/bfloat16. Ops that also accept integer tensors give a second expression computed in
 * int64 (`v`), so that large int64 values stay exact; `uns` tells it the input is unsigned. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/small_types.h"
#include "ops/cost.h"
#include "ops/op.h"

/* Element classes an op accepts. */
enum { C_FLOAT = 1, C_SINT = 2, C_UINT = 4, C_BOOL = 8 };
#define C_NUM (C_FLOAT | C_SINT | C_UINT)

/* Attributes of the activation ops (alpha, beta, gamma in ONNX's naming). */
typedef struct uparams {
  double alpha, beta, gamma;
} uparams;

static int dtype_class(kiln_dtype t) {
  if (kiln_dtype_is_float(t)) return C_FLOAT;
  if (t == KILN_BOOL) return C_BOOL;
  if (kiln_dtype_is_int(t)) return kiln_dtype_is_signed(t) ? C_SINT : C_UINT;
  return 0;
}

static kiln_code out_failed(kiln_kctx *c) { return c->err && c->err->code ? c->err->code : KILN_ERR_NOMEM; }

/* Checks input 0 against the accepted classes and allocates output 0 with its shape. */
static kiln_code unary_begin(kiln_kctx *c, int accept, kiln_dtype out_dtype, const kiln_tensor **x,
                             kiln_tensor **y) {
  const kiln_tensor *X = kiln_in(c, 0);
  *x = NULL;
  *y = NULL;
  if (!X || X->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 0 must be a tensor");
  if (!(dtype_class(X->dtype) & accept))
    return kiln_kfail(c, "input element type %s is not supported by this op",
                      kiln_dtype_name(X->dtype));
  *x = X;
  *y = kiln_out(c, 0, out_dtype ? out_dtype : X->dtype, X->rank, X->dims);
  return *y ? KILN_OK : out_failed(c);
}

#define UNARY_OP(NAME, ACCEPT, INIT, FEXPR, IEXPR)                                        \
  static kiln_code NAME##_run(kiln_kctx *c) {                                             \
    const kiln_tensor *X;                                                                 \
    kiln_tensor *Y;                                                                       \
    kiln_code rc_ = unary_begin(c, ACCEPT, KILN_UNDEFINED, &X, &Y);                       \
    if (rc_) return rc_;                                                                  \
    uparams p = {0, 0, 0};                                                                \
    INIT;                                                                                 \
    const int64_t n = X->numel;                                                           \
    const bool uns = !kiln_dtype_is_signed(X->dtype);                                     \
    (void)p;                                                                              \
    (void)uns;                                                                            \
    if (X->dtype == KILN_FLOAT) {                                                         \
      const float *xs = X->data;                                                          \
      float *ys = Y->data;                                                                \
      for (int64_t i = 0; i < n; i++) {                                                   \
        const double x = xs[i];                                                           \
        ys[i] = (float)(FEXPR);                                                           \
      }                                                                                   \
    } else if (X->dtype == KILN_DOUBLE) {                                                 \
      const double *xs = X->data;                                                         \
      double *ys = Y->data;                                                               \
      for (int64_t i = 0; i < n; i++) {                                                   \
        const double x = xs[i];                                                           \
        ys[i] = (FEXPR);                                                                  \
      }                                                                                   \
    } else if (kiln_dtype_is_float(X->dtype)) {                                           \
      for (int64_t i = 0; i < n; i++) {                                                   \
        const double x = kiln_get_f64(X, i);                                              \
        kiln_set_f64(Y, i, (FEXPR));                                                      \
      }                                                                                   \
    } else {                                                                              \
      for (int64_t i = 0; i < n; i++) {                                                   \
        const int64_t v = kiln_get_i64(X, i);                                             \
        kiln_set_i64(Y, i, (IEXPR));                                                      \
      }                                                                                   \
    }                                                                                     \
    return KILN_OK;                                                                       \
  }

#define NO_PARAMS ((void)0)
/* Float-only ops still need an integer expression to compile; it is never reached. */
#define NO_INT v

/* Two's complement negation without signed overflow. */
static inline int64_t neg_i64(int64_t v) { return (int64_t)(0 - (uint64_t)v); }

static inline double sign_f(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* NaN, +-0 kept */ }

/* log(1 + e^x) without overflow for large x. */
static inline double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

static inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x); /* avoids exp(-x) overflow for very negative x */
  return e / (1.0 + e);
}

static inline double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

/* ---- unary math ---- */

UNARY_OP(abs, C_NUM, NO_PARAMS, fabs(x), uns ? v : (v < 0 ? neg_i64(v) : v))
UNARY_OP(neg, C_FLOAT | C_SINT, NO_PARAMS, -x, neg_i64(v))
UNARY_OP(sign, C_NUM, NO_PARAMS, sign_f(x), uns ? v != 0 : (v > 0) - (v < 0))
UNARY_OP(exp, C_FLOAT, NO_PARAMS, exp(x), NO_INT)
UNARY_OP(log, C_FLOAT, NO_PARAMS, log(x), NO_INT)
UNARY_OP(sqrt, C_FLOAT, NO_PARAMS, sqrt(x), NO_INT)
UNARY_OP(reciprocal, C_FLOAT, NO_PARAMS, 1.0 / x, NO_INT)
UNARY_OP(floor, C_FLOAT, NO_PARAMS, floor(x), NO_INT)
UNARY_OP(ceil, C_FLOAT, NO_PARAMS, ceil(x), NO_INT)
/* nearbyint rounds half to even in the default rounding mode, as Round requires. */
UNARY_OP(round, C_FLOAT, NO_PARAMS, nearbyint(x), NO_INT)
UNARY_OP(sin, C_FLOAT, NO_PARAMS, sin(x), NO_INT)
UNARY_OP(cos, C_FLOAT, NO_PARAMS, cos(x), NO_INT)
UNARY_OP(tan, C_FLOAT, NO_PARAMS, tan(x), NO_INT)
UNARY_OP(asin, C_FLOAT, NO_PARAMS, asin(x), NO_INT)
UNARY_OP(acos, C_FLOAT, NO_PARAMS, acos(x), NO_INT)
UNARY_OP(atan, C_FLOAT, NO_PARAMS, atan(x), NO_INT)
UNARY_OP(sinh, C_FLOAT, NO_PARAMS, sinh(x), NO_INT)
UNARY_OP(cosh, C_FLOAT, NO_PARAMS, cosh(x), NO_INT)
UNARY_OP(asinh, C_FLOAT, NO_PARAMS, asinh(x), NO_INT)
UNARY_OP(acosh, C_FLOAT, NO_PARAMS, acosh(x), NO_INT)
UNARY_OP(atanh, C_FLOAT, NO_PARAMS, atanh(x), NO_INT)
/* Erf takes integer tensors too (opset 9+); the result is truncated back to the input type. */
UNARY_OP(erf, C_NUM, NO_PARAMS, erf(x), (int64_t)erf((double)v))

/* ---- activations ---- */

#define P_ALPHA(d) p.alpha = kiln_attr_float(c->node, "alpha", (d))
#define P_ALPHA_BETA(a, b) (P_ALPHA(a), p.beta = kiln_attr_float(c->node, "beta", (b)))

/* `|`, not `||`: one select per element instead of a branch on the sign of every value */
UNARY_OP(relu, C_FLOAT | C_SINT, NO_PARAMS, (x > 0) | isnan(x) ? x : 0, uns || v > 0 ? v : 0)
UNARY_OP(leakyrelu, C_FLOAT, P_ALPHA(0.01f), x < 0 ? p.alpha * x : x, NO_INT)
UNARY_OP(thresholdedrelu, C_FLOAT, P_ALPHA(1.0f), x > p.alpha ? x : 0, NO_INT)
UNARY_OP(elu, C_FLOAT, P_ALPHA(1.0f), x < 0 ? p.alpha * expm1(x) : x, NO_INT)
UNARY_OP(selu, C_FLOAT,
         (P_ALPHA(1.67326319217681884765625f),
          p.gamma = kiln_attr_float(c->node, "gamma", 1.05070102214813232421875f)),
         p.gamma * (x <= 0 ? p.alpha * expm1(x) : x), NO_INT)
UNARY_OP(celu, C_FLOAT, P_ALPHA(1.0f), x > 0 ? x : p.alpha * expm1(x / p.alpha), NO_INT)
UNARY_OP(hardsigmoid, C_FLOAT, P_ALPHA_BETA(0.2f, 0.5f), clamp01(p.alpha * x + p.beta), NO_INT)
UNARY_OP(hardswish, C_FLOAT, NO_PARAMS, x * clamp01(x / 6.0 + 0.5), NO_INT)
UNARY_OP(softplus, C_FLOAT, NO_PARAMS, softplus(x), NO_INT)
UNARY_OP(softsign, C_FLOAT, NO_PARAMS, x / (1.0 + fabs(x)), NO_INT)
UNARY_OP(sigmoid, C_FLOAT, NO_PARAMS, sigmoid(x), NO_INT)
UNARY_OP(tanh, C_FLOAT, NO_PARAMS, tanh(x), NO_INT)
UNARY_OP(mish, C_FLOAT, NO_PARAMS, x * tanh(softplus(x)), NO_INT)
/* Shrink accepts every numeric type; integers go through double, exact below 2^53. */
UNARY_OP(shrink, C_NUM,
         (p.alpha = kiln_attr_float(c->node, "lambd", 0.5f),
          p.beta = kiln_attr_float(c->node, "bias", 0.0f)),
         x < -p.alpha ? x + p.beta : x > p.alpha ? x - p.beta : 0,
         (double)v < -p.alpha ? (int64_t)((double)v + p.beta)
         : (double)v > p.alpha ? (int64_t)((double)v - p.beta) : 0)

/* ---- logic and tests ---- */

static kiln_code not_run(kiln_kctx *c) {
  const kiln_tensor *X;
  kiln_tensor *Y;
  kiln_code rc = unary_begin(c, C_BOOL, KILN_UNDEFINED, &X, &Y);
  if (rc) return rc;
  const uint8_t *xs = X->data;
  uint8_t *ys = Y->data;
  for (int64_t i = 0; i < X->numel; i++) ys[i] = !xs[i];
  return KILN_OK;
}

/* IsNaN / IsInf: float tensors, from opset 20 the float8 kinds too (read through double). */
static kiln_code test_begin(kiln_kctx *c, const kiln_tensor **x, kiln_tensor **y) {
  const kiln_tensor *X = kiln_in(c, 0);
  if (c->opset >= 20 && X && X->kind == KILN_KIND_TENSOR && kiln_dtype_is_float8(X->dtype)) {
    *x = X;
    *y = kiln_out(c, 0, KILN_BOOL, X->rank, X->dims);
    return *y ? KILN_OK : out_failed(c);
  }
  return unary_begin(c, C_FLOAT, KILN_BOOL, x, y);
}

static kiln_code isnan_run(kiln_kctx *c) {
  const kiln_tensor *X;
  kiln_tensor *Y;
  kiln_code rc = test_begin(c, &X, &Y);
  if (rc) return rc;
  uint8_t *ys = Y->data;
  for (int64_t i = 0; i < X->numel; i++) ys[i] = isnan(kiln_get_f64(X, i)) != 0;
  return KILN_OK;
}

static kiln_code isinf_run(kiln_kctx *c) {
  const kiln_tensor *X;
  kiln_tensor *Y;
  kiln_code rc = test_begin(c, &X, &Y);
  if (rc) return rc;
  bool neg = kiln_attr_int(c->node, "detect_negative", 1) != 0;
  bool pos = kiln_attr_int(c->node, "detect_positive", 1) != 0;
  uint8_t *ys = Y->data;
  for (int64_t i = 0; i < X->numel; i++) {
    double x = kiln_get_f64(X, i);
    ys[i] = isinf(x) && (x > 0 ? pos : neg);
  }
  return KILN_OK;
}

static kiln_code infer_bool(kiln_ictx *c) {
  kiln_infer_same(c, 0, 0);
  if (c->n_out && c->out[0] && c->out[0]->kind == KILN_T_TENSOR) c->out[0]->dtype = KILN_BOOL;
  return KILN_OK;
}

/* ---- Clip ---- */

/* One bound of Clip from opset 11 on: an optional scalar input of the input's type. */
static kiln_code clip_bound(kiln_kctx *c, size_t i, const kiln_tensor *X, bool *has, double *f,
                            int64_t *v) {
  const kiln_tensor *b = kiln_in(c, i);
  *has = false;
  if (!b || b->kind == KILN_KIND_NONE) return KILN_OK;
  if (b->kind != KILN_KIND_TENSOR || b->numel != 1)
    return kiln_kfail(c, "input %zu (%s) must be a scalar", i, i == 1 ? "min" : "max");
  if (b->dtype != X->dtype)
    return kiln_kfail(c, "input %zu is %s but the input is %s", i, kiln_dtype_name(b->dtype),
                      kiln_dtype_name(X->dtype));
  *has = true;
  *f = kiln_get_f64(b, 0);
  *v = kiln_get_i64(b, 0);
  return KILN_OK;
}

static kiln_code clip_run(kiln_kctx *c) {
  const kiln_tensor *X;
  kiln_tensor *Y;
  kiln_code rc = unary_begin(c, C_NUM, KILN_UNDEFINED, &X, &Y);
  if (rc) return rc;
  bool has_lo = false, has_hi = false;
  double lo = -INFINITY, hi = INFINITY;
  int64_t ilo = 0, ihi = 0;
  if (c->opset < 11) {
    /* min/max were attributes, defaulting to the float range */
    has_lo = has_hi = true;
    lo = kiln_attr_float(c->node, "min", -FLT_MAX);
    hi = kiln_attr_float(c->node, "max", FLT_MAX);
  } else if ((rc = clip_bound(c, 1, X, &has_lo, &lo, &ilo)) ||
             (rc = clip_bound(c, 2, X, &has_hi, &hi, &ihi))) {
    return rc;
  }
  if (!has_lo) lo = -INFINITY;
  if (!has_hi) hi = INFINITY;
  const int64_t n = X->numel;
  /* min(max(x, lo), hi): when lo > hi every value becomes hi, as the spec says; NaN stays. */
  if (X->dtype == KILN_FLOAT) {
    const float *xs = X->data;
    float *ys = Y->data;
    const float flo = (float)lo, fhi = (float)hi;
    for (int64_t i = 0; i < n; i++) {
      float v = xs[i] < flo ? flo : xs[i];
      ys[i] = v > fhi ? fhi : v;
    }
  } else if (kiln_dtype_is_float(X->dtype)) {
    for (int64_t i = 0; i < n; i++) {
      double v = kiln_get_f64(X, i);
      v = v < lo ? lo : v;
      kiln_set_f64(Y, i, v > hi ? hi : v);
    }
  } else if (c->opset < 11) {
    for (int64_t i = 0; i < n; i++) {
      double v = kiln_get_f64(X, i);
      v = v < lo ? lo : v;
      kiln_set_f64(Y, i, v > hi ? hi : v);
    }
  } else if (X->dtype == KILN_UINT64) {
    const uint64_t *xs = X->data;
    uint64_t *ys = Y->data;
    for (int64_t i = 0; i < n; i++) {
      uint64_t v = xs[i];
      if (has_lo && v < (uint64_t)ilo) v = (uint64_t)ilo;
      if (has_hi && v > (uint64_t)ihi) v = (uint64_t)ihi;
      ys[i] = v;
    }
  } else {
    /* every other integer type fits in int64 exactly */
    for (int64_t i = 0; i < n; i++) {
      int64_t v = kiln_get_i64(X, i);
      if (has_lo && v < ilo) v = ilo;
      if (has_hi && v > ihi) v = ihi;
      kiln_set_i64(Y, i, v);
    }
  }
  return KILN_OK;
}

/* ---- PRelu ---- */

static kiln_code prelu_run(kiln_kctx *c) {
  const kiln_tensor *X;
  kiln_tensor *Y;
  kiln_code rc = unary_begin(c, C_NUM, KILN_UNDEFINED, &X, &Y);
  if (rc) return rc;
  const kiln_tensor *S = kiln_in(c, 1);
  if (!S || S->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 1 (slope) must be a tensor");
  if (S->dtype != X->dtype)
    return kiln_kfail(c, "slope is %s but X is %s", kiln_dtype_name(S->dtype),
                      kiln_dtype_name(X->dtype));
  /* Before opset 7 a 1-D slope was per channel (axis 1); exporters of that era relied on it.
   * Read it as shape [C, 1, ..., 1] so that the numpy rule below applies. */
  kiln_tensor view = *S;
  if (c->opset < 7 && S->rank == 1 && X->rank >= 2 && S->numel > 1 && S->dims[0] == X->dims[1]) {
    view.rank = X->rank - 1;
    for (int d = 1; d < view.rank; d++) view.dims[d] = 1;
    S = &view;
  }
  int r;
  int64_t bd[KILN_MAX_RANK];
  bool fits = S->rank <= X->rank && kiln_broadcast_shape(X->rank, X->dims, S->rank, S->dims, &r, bd);
  for (int d = 0; fits && d < r; d++) fits = bd[d] == X->dims[d];
  if (!fits) {
    char a[200], b[200];
    return kiln_kfail(c, "slope %s cannot be broadcast to X %s", kiln_shape_str(S, b, sizeof b),
                      kiln_shape_str(X, a, sizeof a));
  }
  const int64_t n = X->numel;
  kiln_bcast bc;
  kiln_bcast_init(&bc, X->rank, X->dims, S);
  /* slope index: constant for one slope value, identity for the same shape, else computed */
  const int mode = S->numel == 1 ? 0 : S->numel == n ? 1 : 2;
#define SLOPE_INDEX(i) (mode == 0 ? 0 : mode == 1 ? (i) : kiln_bcast_index(&bc, (i)))
  if (X->dtype == KILN_FLOAT) {
    const float *xs = X->data, *ss = S->data;
    float *ys = Y->data;
    if (mode == 2 && X->rank >= 1) {
      /* slope constant along the innermost run of X (the usual [C,1,1] case): one lookup per run */
      int64_t inner = 1;
      int d = X->rank - 1;
      while (d >= 0 && bc.stride[d] == 0) inner *= X->dims[d--];
      for (int64_t i0 = 0; i0 < n; i0 += inner) {
        const float s = ss[kiln_bcast_index(&bc, i0)];
        for (int64_t i = i0; i < i0 + inner; i++) ys[i] = xs[i] < 0 ? s * xs[i] : xs[i];
      }
    } else {
      for (int64_t i = 0; i < n; i++) ys[i] = xs[i] < 0 ? ss[SLOPE_INDEX(i)] * xs[i] : xs[i];
    }
  } else if (kiln_dtype_is_float(X->dtype)) {
    for (int64_t i = 0; i < n; i++) {
      double x = kiln_get_f64(X, i);
      kiln_set_f64(Y, i, x < 0 ? kiln_get_f64(S, SLOPE_INDEX(i)) * x : x);
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      int64_t x = kiln_get_i64(X, i);
      if (!kiln_dtype_is_signed(X->dtype) || x >= 0)
        kiln_set_i64(Y, i, x);
      else
        kiln_set_i64(Y, i, (int64_t)((uint64_t)kiln_get_i64(S, SLOPE_INDEX(i)) * (uint64_t)x));
    }
  }
#undef SLOPE_INDEX
  return KILN_OK;
}

/* ys[i] = f(xs[i]): safe in place */
#define U(op, ver, fn)                                                                          \
  {.domain = "", .name = op, .since = ver, .inputs = {1, 1}, .outputs = {1, 1},               \
   .infer = kiln_infer_unary, .run = fn##_run, .flags = KILN_OPF_IN_PLACE, .flow = KILN_FLOW_SAME,      \
   .cost = kiln_cost_elementwise}

const kiln_op_schema kiln_ops_elementwise[] = {
    U("Abs", 1, abs),
    U("Neg", 1, neg),
    U("Sign", 9, sign),
    U("Exp", 1, exp),
    U("Log", 1, log),
    U("Sqrt", 1, sqrt),
    U("Reciprocal", 1, reciprocal),
    U("Floor", 1, floor),
    U("Ceil", 1, ceil),
    U("Round", 11, round),
    U("Sin", 7, sin),
    U("Cos", 7, cos),
    U("Tan", 7, tan),
    U("Asin", 7, asin),
    U("Acos", 7, acos),
    U("Atan", 7, atan),
    U("Sinh", 9, sinh),
    U("Cosh", 9, cosh),
    U("Asinh", 9, asinh),
    U("Acosh", 9, acosh),
    U("Atanh", 9, atanh),
    U("Erf", 9, erf),
    {.domain = "", .name = "Not", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = not_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "IsNaN", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_bool, .run = isnan_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "IsInf", .since = 10, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_bool, .run = isinf_run, .flow = KILN_FLOW_SAME},
    U("Relu", 1, relu),
    U("LeakyRelu", 1, leakyrelu),
    U("ThresholdedRelu", 10, thresholdedrelu),
    U("Elu", 1, elu),
    U("Selu", 1, selu),
    U("Celu", 12, celu),
    U("HardSigmoid", 1, hardsigmoid),
    U("HardSwish", 14, hardswish),
    U("Softplus", 1, softplus),
    U("Softsign", 1, softsign),
    U("Sigmoid", 1, sigmoid),
    U("Tanh", 1, tanh),
    U("Mish", 18, mish),
    U("Shrink", 9, shrink),
    {.domain = "", .name = "PRelu", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = prelu_run, .flow = KILN_FLOW_BROADCAST},
    {.domain = "", .name = "Clip", .since = 1, .inputs = {1, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = clip_run, .flow = KILN_FLOW_SAME},
    {0},
};
