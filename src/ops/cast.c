/* Cast and CastLike between every element type kiln stores (complex excluded).
 *
 * Numbers convert as numpy's astype does: float to integer truncates toward zero (saturating
 * instead of being undefined out of range, NaN gives 0), integer to integer wraps, anything
 * nonzero is true. float16/bfloat16 are produced by rounding the exact double value to nearest
 * even in one step. Strings parse with C's strtod rules ("NaN", "INF", "-inf", "1e-5", any
 * case), and numbers print as numpy's str() does, which is what the ONNX tests compare with:
 * the shortest digits that read back to the same value, positional for 1e-4 <= |x| < 1e16
 * (|x| compared at the source precision: float32 1e-4 is below 1e-4 and prints "1e-04").
 *
 * The 8- and 4-bit types (opsets 19, 21, 23) convert as ir/small_types.h says: to a float8 kind
 * or float4e2m1 by rounding to nearest even, `saturate` (default 1) choosing between +-max
 * and NaN/Inf for values out of range; to int4/uint4 by rounding half to even and clipping. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/small_types.h"
#include "ops/op.h"

static kiln_code out_failed(kiln_kctx *c) { return c->err && c->err->code ? c->err->code : KILN_ERR_NOMEM; }

/* ---- float16 / bfloat16 from double ---- */

/* Round |x| to a binary format with `mbits` mantissa and `ebits` exponent bits (IEEE layout,
 * round to nearest even, overflow to infinity). float16 is (10, 5), bfloat16 (7, 8). */
static uint16_t f64_to_small(double x, int mbits, int ebits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const unsigned sign = signbit(x) ? 1u << (mbits + ebits) : 0;
  const unsigned inf = ((1u << ebits) - 1) << mbits;
  if (isnan(x)) return (uint16_t)(sign | inf | (1u << (mbits - 1)));
  double a = fabs(x);
  if (isinf(a)) return (uint16_t)(sign | inf);
  if (a == 0) return (uint16_t)sign;
  int e;
  frexp(a, &e);
  int E = e - 1; /* a in [2^E, 2^(E+1)) */
  if (E < 1 - bias) {
    /* subnormal: a count of the smallest step; a carry to 2^mbits is the smallest normal */
    double q = nearbyint(ldexp(a, bias - 1 + mbits));
    return (uint16_t)(sign | (unsigned)q);
  }
  double q = nearbyint(ldexp(a, mbits - E)); /* in [2^mbits, 2^(mbits+1)] */
  if (q >= ldexp(1, mbits + 1)) {
    q = ldexp(1, mbits);
    E++;
  }
  if (E > bias) return (uint16_t)(sign | inf);
  return (uint16_t)(sign | ((unsigned)(E + bias) << mbits) | ((unsigned)q - (1u << mbits)));
}

static inline uint16_t to_f16(double x) { return f64_to_small(x, 10, 5); }
static inline uint16_t to_bf16(double x) { return f64_to_small(x, 7, 8); }

/* Float to int64, saturating; NaN gives 0. */
static inline int64_t f2i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

/* ---- numbers to text ---- */

/* Whether decimal r reads back to the value v has in type t. */
static bool same_in_type(double r, double v, kiln_dtype t) {
  switch (t) {
    case KILN_FLOAT: return (float)r == (float)v;
    case KILN_FLOAT16: return to_f16(r) == to_f16(v);
    case KILN_BFLOAT16: return to_bf16(r) == to_bf16(v);
    default: return r == v;
  }
}

static void format_float(double v, kiln_dtype t, char *out, size_t cap) {
  if (isnan(v)) {
    snprintf(out, cap, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(out, cap, v < 0 ? "-inf" : "inf");
    return;
  }
  if (v == 0) {
    snprintf(out, cap, signbit(v) ? "-0.0" : "0.0");
    return;
  }
  /* shortest round-tripping digits, from "%.Ne" of increasing N */
  char buf[64];
  for (int prec = 0; prec < 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec, v);
    if (same_in_type(strtod(buf, NULL), v, t)) break;
  }
  const char *p = buf;
  bool neg = *p == '-';
  if (neg) p++;
  char digits[32];
  size_t nd = 0;
  for (; *p && *p != 'e'; p++)
    if (isdigit((unsigned char)*p) && nd < sizeof digits - 1) digits[nd++] = *p;
  int exp10 = *p == 'e' ? atoi(p + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  size_t o = 0;
#define PUT(ch) (o + 1 < cap ? (void)(out[o++] = (ch)) : (void)0)
  if (neg) PUT('-');
  if (fabs(v) >= 1e-4 && fabs(v) < 1e16) { /* numpy decides on the value, not the digits */
    if (exp10 < 0) {
      PUT('0');
      PUT('.');
      for (int k = -1; k > exp10; k--) PUT('0');
      for (size_t k = 0; k < nd; k++) PUT(digits[k]);
    } else {
      for (int k = 0; k <= exp10; k++) PUT((size_t)k < nd ? digits[k] : '0');
      PUT('.');
      if ((size_t)exp10 + 1 >= nd) PUT('0');
      for (size_t k = (size_t)exp10 + 1; k < nd; k++) PUT(digits[k]);
    }
    out[o] = 0;
  } else {
    PUT(digits[0]);
    if (nd > 1) PUT('.');
    for (size_t k = 1; k < nd; k++) PUT(digits[k]);
    out[o] = 0;
    snprintf(out + o, cap - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
  }
#undef PUT
}

/* ---- text to numbers ---- */

static bool blank_tail(const char *end) {
  while (isspace((unsigned char)*end)) end++;
  return *end == 0;
}

static bool parse_f64(const char *s, double *v) {
  char *end;
  *v = strtod(s, &end);
  return end != s && blank_tail(end);
}

static bool parse_f32(const char *s, float *v) {
  char *end;
  *v = strtof(s, &end); /* parsed straight to float: no double rounding */
  return end != s && blank_tail(end);
}

static bool ieq(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
  return *a == *b;
}

/* Parse string element i of X into element i of Y (a numeric or bool tensor). */
static kiln_code parse_elem(kiln_kctx *c, const char *s, kiln_tensor *Y, int64_t i) {
  const kiln_dtype t = Y->dtype;
  double d;
  char *end;
  if (t == KILN_FLOAT) {
    if (parse_f32(s, &((float *)Y->data)[i])) return KILN_OK;
  } else if (kiln_dtype_is_float(t)) {
    if (parse_f64(s, &d)) {
      if (t == KILN_DOUBLE) ((double *)Y->data)[i] = d;
      else ((uint16_t *)Y->data)[i] = t == KILN_FLOAT16 ? to_f16(d) : to_bf16(d);
      return KILN_OK;
    }
  } else {
    if (t == KILN_BOOL && (ieq(s, "true") || ieq(s, "false"))) {
      ((uint8_t *)Y->data)[i] = ieq(s, "true");
      return KILN_OK;
    }
    errno = 0;
    if (t == KILN_UINT64) {
      unsigned long long u = strtoull(s, &end, 10);
      if (end != s && blank_tail(end) && errno == 0) {
        ((uint64_t *)Y->data)[i] = u;
        return KILN_OK;
      }
    } else {
      long long v = strtoll(s, &end, 10);
      if (end != s && blank_tail(end) && errno == 0) {
        kiln_set_i64(Y, i, v);
        return KILN_OK;
      }
    }
    if (parse_f64(s, &d)) { /* "2.5" or "1e3" as an integer: truncate like a float cast */
      if (t == KILN_BOOL) ((uint8_t *)Y->data)[i] = d != 0;
      else kiln_set_f64(Y, i, d);
      return KILN_OK;
    }
  }
  return kiln_kfail(c, "cannot read string element %lld \"%.60s\" as %s", (long long)i, s,
                    kiln_dtype_name(t));
}

/* ---- the conversion ---- */

/* Typed loops for the conversions models use most. Returns false when (from, to) is not one. */
static bool cast_fast(const kiln_tensor *X, kiln_tensor *Y) {
  const int64_t n = X->numel;
#define LOOP(ST, DT, EXPR)                     \
  do {                                         \
    const ST *xs = X->data;                    \
    DT *ys = Y->data;                          \
    for (int64_t i = 0; i < n; i++) {          \
      const ST x = xs[i];                      \
      ys[i] = (EXPR);                          \
    }                                          \
    return true;                               \
  } while (0)
#define PAIR(a, b) ((a) * 32 + (b))
  switch (PAIR(X->dtype, Y->dtype)) {
    case PAIR(KILN_FLOAT, KILN_DOUBLE): LOOP(float, double, x);
    case PAIR(KILN_DOUBLE, KILN_FLOAT): LOOP(double, float, (float)x);
    case PAIR(KILN_FLOAT, KILN_INT64): LOOP(float, int64_t, f2i64(x));
    case PAIR(KILN_FLOAT, KILN_INT32): LOOP(float, int32_t, (int32_t)f2i64(x));
    case PAIR(KILN_DOUBLE, KILN_INT64): LOOP(double, int64_t, f2i64(x));
    case PAIR(KILN_INT64, KILN_FLOAT): LOOP(int64_t, float, (float)x);
    case PAIR(KILN_INT32, KILN_FLOAT): LOOP(int32_t, float, (float)x);
    case PAIR(KILN_INT64, KILN_DOUBLE): LOOP(int64_t, double, (double)x);
    case PAIR(KILN_INT64, KILN_INT32): LOOP(int64_t, int32_t, (int32_t)x);
    case PAIR(KILN_INT32, KILN_INT64): LOOP(int32_t, int64_t, x);
    case PAIR(KILN_UINT8, KILN_FLOAT): LOOP(uint8_t, float, x);
    case PAIR(KILN_BOOL, KILN_FLOAT): LOOP(uint8_t, float, x ? 1.0f : 0.0f);
    case PAIR(KILN_BOOL, KILN_INT64): LOOP(uint8_t, int64_t, x != 0);
    case PAIR(KILN_FLOAT, KILN_BOOL): LOOP(float, uint8_t, x != 0);
    case PAIR(KILN_INT64, KILN_BOOL): LOOP(int64_t, uint8_t, x != 0);
    case PAIR(KILN_FLOAT, KILN_FLOAT16): LOOP(float, uint16_t, to_f16(x));
    case PAIR(KILN_FLOAT16, KILN_FLOAT): LOOP(uint16_t, float, kiln_f16_to_f32(x));
    default: return false;
  }
#undef PAIR
#undef LOOP
}

/* Write a double into element i of a numeric tensor. */
static void put_f64(kiln_tensor *Y, int64_t i, double d, bool saturate) {
  if (kiln_dtype_is_small_float(Y->dtype)) {
    ((uint8_t *)Y->data)[i] = kiln_small_from_f64(Y->dtype, d, saturate);
    return;
  }
  switch (Y->dtype) {
    case KILN_FLOAT16: ((uint16_t *)Y->data)[i] = to_f16(d); break;
    case KILN_BFLOAT16: ((uint16_t *)Y->data)[i] = to_bf16(d); break;
    case KILN_BOOL: ((uint8_t *)Y->data)[i] = d != 0; break; /* NaN is true, as in numpy */
    default: kiln_set_f64(Y, i, d);
  }
}

static kiln_code cast_value(kiln_kctx *c, const kiln_tensor *X, kiln_dtype to, bool saturate) {
  if (to == KILN_COMPLEX64 || to == KILN_COMPLEX128)
    return kiln_kunsup(c, "casting to %s is not supported", kiln_dtype_name(to));
  if (to <= KILN_UNDEFINED || to > KILN_DTYPE_LAST)
    return kiln_kfail(c, "target type %d is not an ONNX element type", (int)to);
  if (!X || X->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 0 must be a tensor");
  if (X->dtype == KILN_COMPLEX64 || X->dtype == KILN_COMPLEX128 || !kiln_dtype_size(X->dtype))
    return kiln_kunsup(c, "casting from %s is not supported", kiln_dtype_name(X->dtype));
  kiln_tensor *Y = kiln_out(c, 0, to, X->rank, X->dims);
  if (!Y) return out_failed(c);
  const int64_t n = X->numel;
  const kiln_dtype from = X->dtype;
  if (from == to) {
    if (to == KILN_STRING)
      for (int64_t i = 0; i < n; i++) kiln_copy_elem(Y, i, X, i);
    else if (n)
      memcpy(Y->data, X->data, X->nbytes);
    return KILN_OK;
  }
  if (from == KILN_STRING) {
    char *const *s = X->data;
    for (int64_t i = 0; i < n; i++) {
      kiln_code rc = parse_elem(c, s[i] ? s[i] : "", Y, i);
      if (rc) return rc;
    }
    return KILN_OK;
  }
  if (to == KILN_STRING) {
    char **d = Y->data;
    for (int64_t i = 0; i < n; i++) {
      char buf[64];
      if (kiln_dtype_is_float(from) || kiln_dtype_is_small_float(from))
        format_float(kiln_get_f64(X, i), from, buf, sizeof buf);
      else if (from == KILN_BOOL)
        snprintf(buf, sizeof buf, "%s", kiln_get_i64(X, i) ? "True" : "False");
      else if (from == KILN_UINT64)
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)kiln_get_u64(X, i));
      else
        snprintf(buf, sizeof buf, "%lld", (long long)kiln_get_i64(X, i));
      char *dup = kiln_strdup(buf);
      if (!dup) return kiln_kfail(c, "out of memory");
      free(d[i]);
      d[i] = dup;
    }
    return KILN_OK;
  }
  if (cast_fast(X, Y)) return KILN_OK;
  const bool to_float = kiln_dtype_is_float(to) || kiln_dtype_is_small_float(to);
  const bool from_float = kiln_dtype_is_float(from) || kiln_dtype_is_small_float(from);
  for (int64_t i = 0; i < n; i++) {
    if (from_float) {
      put_f64(Y, i, kiln_get_f64(X, i), saturate);
    } else if (from == KILN_UINT64) {
      uint64_t u = kiln_get_u64(X, i);
      if (to_float) put_f64(Y, i, (double)u, saturate);
      else kiln_set_u64(Y, i, u);
    } else {
      /* integers and bool fit int64; to float they round once (double is exact below 2^53) */
      int64_t v = kiln_get_i64(X, i);
      if (to == KILN_FLOAT) ((float *)Y->data)[i] = (float)v;
      else if (to_float) put_f64(Y, i, (double)v, saturate);
      else kiln_set_i64(Y, i, v);
    }
  }
  return KILN_OK;
}

/* The `to` attribute: an int since opset 6, a type name ("FLOAT") in opset 1. */
static kiln_dtype cast_target(const kiln_node *node) {
  const kiln_attr *a = kiln_node_attr(node, "to");
  if (!a) return KILN_UNDEFINED;
  if (a->kind == KILN_ATTR_STRING) {
    static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16",
                                        "INT32", "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE",
                                        "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
                                        "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                        "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
    for (int t = 1; t < (int)(sizeof names / sizeof names[0]); t++)
      if (a->s && ieq(a->s, names[t])) return (kiln_dtype)t;
    return KILN_UNDEFINED;
  }
  return a->i > 0 && a->i <= KILN_DTYPE_LAST ? (kiln_dtype)a->i : KILN_UNDEFINED;
}

static kiln_code cast_run(kiln_kctx *c) {
  kiln_dtype to = cast_target(c->node);
  if (!to) return kiln_kfail(c, "attribute 'to' is missing or not an element type");
  return cast_value(c, kiln_in(c, 0), to, kiln_attr_int(c->node, "saturate", 1) != 0);
}

static kiln_code castlike_run(kiln_kctx *c) {
  const kiln_tensor *T = kiln_in(c, 1);
  if (!T || T->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 1 must be a tensor");
  return cast_value(c, kiln_in(c, 0), T->dtype, kiln_attr_int(c->node, "saturate", 1) != 0);
}

/* Output 0: input 0's shape with element type `to`. */
static void infer_as(kiln_ictx *c, kiln_dtype to) {
  const kiln_type *x = c->in[0];
  if (x && x->kind == KILN_T_TENSOR) {
    kiln_infer_same(c, 0, 0);
    c->out[0]->dtype = to;
  } else {
    kiln_infer_tensor(c, 0, to, -1, NULL);
  }
}

static kiln_code infer_cast(kiln_ictx *c) {
  kiln_dtype to = cast_target(c->node);
  if (!to) return kiln_ifail(c, "attribute 'to' is missing or not an element type");
  infer_as(c, to);
  return KILN_OK;
}

static kiln_code infer_castlike(kiln_ictx *c) {
  const kiln_type *t = c->in[1];
  if (t && t->kind == KILN_T_TENSOR && t->dtype) infer_as(c, t->dtype);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_cast[] = {
    {.domain = "", .name = "Cast", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_cast, .run = cast_run, .flow = KILN_FLOW_COPY},
    {.domain = "", .name = "CastLike", .since = 15, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_castlike, .run = castlike_run, .flow = KILN_FLOW_SAME},
    {0},
};
