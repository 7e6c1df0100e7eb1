/* Generators: ConstantOfShape, EyeLike, Range — tensors made from a shape, a diagonal or an
 * arithmetic progression rather than from input data.
 *
 * Shape functions state only what is certain, using constant inputs where the model has them. */
#include <math.h>

#include "ops/op.h"

#define MAXR KILN_MAX_RANK

static const kiln_tensor *cos_value(const kiln_node *n) {
  const kiln_attr *a = kiln_node_attr(n, "value");
  return a && a->kind == KILN_ATTR_TENSOR ? a->t : NULL;
}

static kiln_code infer_cos(kiln_ictx *c) {
  const kiln_tensor *v = cos_value(c->node);
  kiln_dtype dt = v ? v->dtype : KILN_FLOAT;
  int64_t s[MAXR];
  size_t n;
  if (v && (v->kind != KILN_KIND_TENSOR || v->numel != 1))
    return kiln_ifail(c, "value must hold exactly one element");
  if (kiln_iconst_ints(c, 0, s, MAXR, &n)) {
    for (size_t i = 0; i < n; i++)
      if (s[i] < 0) return kiln_ifail(c, "shape has a negative dimension");
    kiln_infer_tensor(c, 0, dt, (int)n, s);
  } else {
    int64_t len = kiln_ilist_len(c, 0);
    kiln_infer_tensor(c, 0, dt, len >= 0 && len <= MAXR ? (int)len : -1, NULL);
  }
  return KILN_OK;
}

static kiln_code run_cos(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *v = cos_value(c->node);
  int64_t s[MAXR];
  size_t n;
  if (v && (v->kind != KILN_KIND_TENSOR || v->numel != 1))
    return kiln_kfail(c, "value must hold exactly one element");
  if ((rc = kiln_read_ints(c, c->in[0], s, MAXR, &n))) return rc;
  for (size_t i = 0; i < n; i++)
    if (s[i] < 0) return kiln_kfail(c, "shape has a negative dimension");
  kiln_tensor *o = kiln_out(c, 0, v ? v->dtype : KILN_FLOAT, (int)n, s);
  if (!o) return c->err->code;
  if (v)
    for (int64_t i = 0; i < o->numel; i++) kiln_copy_elem(o, i, v, 0);
  return KILN_OK;
}

static kiln_code infer_eyelike(kiln_ictx *c) {
  const kiln_type *t = kiln_itype(c, 0);
  kiln_dtype dt = (kiln_dtype)kiln_attr_int(c->node, "dtype", kiln_idtype(c, 0));
  if (t && t->rank >= 0 && t->rank != 2) return kiln_ifail(c, "input must be 2-D");
  kiln_infer_tensor(c, 0, dt, 2, t && t->rank == 2 ? t->dims : NULL);
  return KILN_OK;
}

static kiln_code run_eyelike(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  kiln_dtype dt = (kiln_dtype)kiln_attr_int(c->node, "dtype", x->dtype);
  int64_t k = kiln_attr_int(c->node, "k", 0);
  if (x->rank != 2) return kiln_kfail(c, "input must be 2-D, got rank %d", x->rank);
  if (dt == KILN_STRING || !kiln_dtype_size(dt)) return kiln_kfail(c, "unsupported dtype");
  kiln_tensor *o = kiln_out(c, 0, dt, 2, x->dims);
  if (!o) return c->err->code;
  for (int64_t i = 0; i < x->dims[0]; i++) {
    int64_t j = i + k;
    if (j >= 0 && j < x->dims[1]) kiln_set_f64(o, i * x->dims[1] + j, 1.0);
  }
  return KILN_OK;
}

/* Range's element count max(ceil((limit - start) / delta), 0), or -1 when delta is zero or the
 * count absurd. Integers are counted exactly (no overflow, no rounding). */
static int64_t range_count(const kiln_tensor *s, const kiln_tensor *l, const kiln_tensor *d) {
  if (kiln_dtype_is_float(s->dtype)) {
    double a = kiln_get_f64(s, 0), b = kiln_get_f64(l, 0), st = kiln_get_f64(d, 0);
    if (st == 0 || a != a || b != b || st != st) return -1;
    double n = ceil((b - a) / st);
    return n <= 0 ? 0 : n > 9e15 ? -1 : (int64_t)n;
  }
  int64_t a = kiln_get_i64(s, 0), b = kiln_get_i64(l, 0), st = kiln_get_i64(d, 0);
  if (st == 0) return -1;
  if (b > a ? st < 0 : b < a ? st > 0 : true) return 0; /* empty or the wrong direction */
  uint64_t diff = b > a ? (uint64_t)b - (uint64_t)a : (uint64_t)a - (uint64_t)b;
  uint64_t ust = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st, q = (diff - 1) / ust + 1;
  return q > ((uint64_t)1 << 48) ? -1 : (int64_t)q;
}

static bool range_ok(const kiln_tensor *s, const kiln_tensor *l, const kiln_tensor *d) {
  return s->numel == 1 && l->numel == 1 && d->numel == 1 && s->dtype == l->dtype &&
         s->dtype == d->dtype && (kiln_dtype_is_float(s->dtype) || kiln_dtype_is_int(s->dtype));
}

static kiln_code infer_range(kiln_ictx *c) {
  const kiln_tensor *s = c->cin[0], *l = c->cin[1], *d = c->cin[2];
  int64_t n = -1;
  if (s && l && d && s->kind == KILN_KIND_TENSOR && l->kind == KILN_KIND_TENSOR &&
      d->kind == KILN_KIND_TENSOR) {
    if (!range_ok(s, l, d)) return kiln_ifail(c, "start, limit and delta must be scalars of one type");
    if ((n = range_count(s, l, d)) < 0) return kiln_ifail(c, "delta is zero or the range too long");
  }
  kiln_infer_tensor(c, 0, kiln_idtype(c, 0), 1, &n);
  return KILN_OK;
}

static kiln_code run_range(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *s = c->in[0], *l = c->in[1], *d = c->in[2];
  if (!range_ok(s, l, d)) return kiln_kfail(c, "start, limit and delta must be scalars of one type");
  int64_t n = range_count(s, l, d);
  if (n < 0) return kiln_kfail(c, "delta is zero or the range is too long");
  kiln_tensor *o = kiln_out(c, 0, s->dtype, 1, &n);
  if (!o) return c->err->code;
  if (kiln_dtype_is_float(s->dtype)) {
    double a = kiln_get_f64(s, 0), st = kiln_get_f64(d, 0);
    for (int64_t i = 0; i < n; i++) kiln_set_f64(o, i, a + (double)i * st);
  } else {
    int64_t a = kiln_get_i64(s, 0), st = kiln_get_i64(d, 0);
    for (int64_t i = 0; i < n; i++) kiln_set_i64(o, i, (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)st));
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_generate[] = {
    {.domain = "", .name = "ConstantOfShape", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_cos, .run = run_cos, .flow = KILN_FLOW_CONSTANT_OF_SHAPE},
    {.domain = "", .name = "EyeLike", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_eyelike, .run = run_eyelike},
    {.domain = "", .name = "Range", .since = 11, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = infer_range, .run = run_range},
    {0},
};
