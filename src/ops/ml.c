/* Classical-ML operators of domain ai.onnx.ml that ONNX's conformance suite covers:
 * Binarizer (1), ArrayFeatureExtractor (1), LabelEncoder (2, 4). TreeEnsemble (5) is in
 * ml_tree.c. Semantics follow ONNX's reference (onnx/reference/ops/aionnxml). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define ML "ai.onnx.ml"

/* ---- Binarizer: y = x > threshold ? 1 : 0, x's type ---- */

static kiln_code binarizer_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (!kiln_dtype_is_float(x->dtype) && x->dtype != KILN_INT64 && x->dtype != KILN_INT32)
    return kiln_kfail(c, "X must be float, double, int64 or int32");
  const double th = kiln_attr_float(c->node, "threshold", 0.0f);
  kiln_tensor *y = kiln_out_uninit(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  for (int64_t i = 0; i < x->numel; i++) kiln_set_f64(y, i, kiln_get_f64(x, i) > th ? 1.0 : 0.0);
  return KILN_OK;
}

/* ---- ArrayFeatureExtractor: x[..., indices], the last axis; a 1-D x gives [1, k] ---- */

static void afe_dims(int rank, const int64_t *xd, int64_t k, int *yrank, int64_t *yd) {
  if (rank <= 1) {
    *yrank = 2;
    yd[0] = 1;
    yd[1] = k;
    return;
  }
  *yrank = rank;
  memcpy(yd, xd, (size_t)rank * sizeof *yd);
  yd[rank - 1] = k;
}

static kiln_code afe_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0), *y = kiln_itype(c, 1);
  if (!x || x->rank < 0 || !y || y->rank < 0) return KILN_OK;
  int64_t k = 1, yd[KILN_MAX_RANK];
  for (int d = 0; d < y->rank; d++) k = y->dims[d] < 0 || k < 0 ? -1 : k * y->dims[d];
  int yr;
  afe_dims(x->rank, x->dims, k, &yr, yd);
  kiln_infer_tensor(c, 0, x->dtype, yr, yd);
  return KILN_OK;
}

static kiln_code afe_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ix = c->in[1];
  if (ix->dtype != KILN_INT64) return kiln_kfail(c, "Y (the indices) must be int64");
  if (x->rank < 1) return kiln_kfail(c, "X must have rank 1 or more");
  const int64_t n = x->dims[x->rank - 1], k = ix->numel, rows = n ? x->numel / n : 0;
  const int64_t *idx = ix->data;
  for (int64_t j = 0; j < k; j++)
    if (idx[j] < 0 || idx[j] >= n)
      return kiln_kfail(c, "index %lld is outside the last axis of %lld", (long long)idx[j], (long long)n);
  int yr;
  int64_t yd[KILN_MAX_RANK];
  afe_dims(x->rank, x->dims, k, &yr, yd);
  kiln_tensor *y = kiln_out(c, 0, x->dtype, yr, yd);
  if (!y) return c->err->code;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < k; j++) kiln_copy_elem(y, r * k + j, x, r * n + idx[j]);
  return KILN_OK;
}

/* ---- LabelEncoder: a map from keys to values, default for the rest ---- */

typedef enum { LE_NONE, LE_STR, LE_INT, LE_FLT } le_kind;

/* One side of the map (keys or values): strings, integers or floats, from a *_strings /
 * *_int64s / *_floats attribute or (opset 4) a *_tensor. */
typedef struct le_list {
  le_kind kind;
  kiln_dtype dtype; /* the element type the values are written as */
  size_t n;
  char *const *s;
  const int64_t *i;
  const float *f;
  const kiln_tensor *t;
} le_list;

static le_kind kind_of(kiln_dtype t) {
  if (t == KILN_STRING) return LE_STR;
  if (kiln_dtype_is_float(t)) return LE_FLT;
  if (kiln_dtype_is_int(t)) return LE_INT;
  return LE_NONE;
}

static bool le_read(const kiln_node *nd, const char *side, int opset, le_list *l) {
  char name[32];
  memset(l, 0, sizeof *l);
  snprintf(name, sizeof name, "%s_strings", side);
  const kiln_attr *a = kiln_node_attr(nd, name);
  if (a && a->kind == KILN_ATTR_STRINGS) {
    *l = (le_list){.kind = LE_STR, .dtype = KILN_STRING, .n = a->n, .s = a->strings};
    return true;
  }
  snprintf(name, sizeof name, "%s_int64s", side);
  if ((l->i = kiln_attr_ints(nd, name, &l->n))) {
    l->kind = LE_INT;
    l->dtype = KILN_INT64;
    return true;
  }
  snprintf(name, sizeof name, "%s_floats", side);
  if ((l->f = kiln_attr_floats(nd, name, &l->n))) {
    l->kind = LE_FLT;
    l->dtype = KILN_FLOAT;
    return true;
  }
  snprintf(name, sizeof name, "%s_tensor", side);
  a = opset >= 4 ? kiln_node_attr(nd, name) : NULL;
  if (a && a->kind == KILN_ATTR_TENSOR && a->t && kind_of(a->t->dtype) != LE_NONE) {
    *l = (le_list){.kind = kind_of(a->t->dtype), .dtype = a->t->dtype, .n = (size_t)a->t->numel, .t = a->t};
    return true;
  }
  return false;
}

static const char *le_str(const le_list *l, size_t k) {
  return l->s ? l->s[k] : ((char *const *)l->t->data)[k];
}
static int64_t le_int(const le_list *l, size_t k) { return l->i ? l->i[k] : kiln_get_i64(l->t, (int64_t)k); }
static double le_flt(const le_list *l, size_t k) { return l->f ? l->f[k] : kiln_get_f64(l->t, (int64_t)k); }

/* A key with its index into the values; a node's keys sorted for binary search. */
typedef struct le_entry {
  const char *s;
  int64_t i;
  double f;
  size_t k;
} le_entry;

/* Key order: NaN above every number and equal to NaN (opset 4 maps NaN keys). */
static int le_cmp_flt(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return a < b ? -1 : a > b;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(((const le_entry *)a)->s, ((const le_entry *)b)->s);
}
static int cmp_int(const void *a, const void *b) {
  int64_t x = ((const le_entry *)a)->i, y = ((const le_entry *)b)->i;
  return x < y ? -1 : x > y;
}
static int cmp_flt(const void *a, const void *b) {
  return le_cmp_flt(((const le_entry *)a)->f, ((const le_entry *)b)->f);
}

typedef struct le_map {
  le_list keys, vals;
  le_entry *e;
} le_map;

static bool le_sort(le_map *m) {
  m->e = kiln_calloc(m->keys.n, sizeof *m->e);
  if (!m->e) return false;
  for (size_t k = 0; k < m->keys.n; k++) {
    le_entry *e = &m->e[k];
    e->k = k;
    if (m->keys.kind == LE_STR) e->s = le_str(&m->keys, k) ? le_str(&m->keys, k) : "";
    else if (m->keys.kind == LE_INT) e->i = le_int(&m->keys, k);
    else e->f = le_flt(&m->keys, k);
  }
  qsort(m->e, m->keys.n, sizeof *m->e,
        m->keys.kind == LE_STR ? cmp_str : m->keys.kind == LE_INT ? cmp_int : cmp_flt);
  return true;
}

/* Index into the values of x[i]'s key, or -1. */
static int64_t le_find(const le_map *m, const kiln_tensor *x, int64_t i) {
  le_entry q = {0};
  if (m->keys.kind == LE_STR) {
    q.s = ((char *const *)x->data)[i];
    if (!q.s) q.s = "";
  } else if (m->keys.kind == LE_INT) {
    q.i = kiln_get_i64(x, i);
  } else {
    q.f = kiln_get_f64(x, i);
  }
  const le_entry *e = bsearch(&q, m->e, m->keys.n, sizeof *m->e,
                              m->keys.kind == LE_STR ? cmp_str : m->keys.kind == LE_INT ? cmp_int : cmp_flt);
  return e ? (int64_t)e->k : -1;
}

/* Writes value k of l (k < 0: the default) into y[i]. */
static bool le_put(kiln_kctx *c, kiln_tensor *y, int64_t i, const le_list *l, int64_t k) {
  if (l->kind == LE_STR) {
    const char *def = kiln_attr_str(c->node, "default_string", "_Unused");
    const kiln_attr *dt = kiln_node_attr(c->node, "default_tensor");
    if (k < 0 && dt && dt->t && dt->t->dtype == KILN_STRING && dt->t->numel > 0)
      def = ((char *const *)dt->t->data)[0];
    char *s = kiln_strdup(k < 0 ? def : le_str(l, (size_t)k));
    if (!s) return false;
    char **out = y->data;
    free(out[i]);
    out[i] = s;
    return true;
  }
  if (k >= 0) {
    if (l->kind == LE_INT) kiln_set_i64(y, i, le_int(l, (size_t)k));
    else kiln_set_f64(y, i, le_flt(l, (size_t)k));
    return true;
  }
  const kiln_attr *dt = kiln_node_attr(c->node, "default_tensor");
  if (dt && dt->t && dt->t->numel > 0 && kind_of(dt->t->dtype) == l->kind && l->kind != LE_STR)
    kiln_set_f64(y, i, kiln_get_f64(dt->t, 0));
  else if (l->kind == LE_INT)
    kiln_set_i64(y, i, kiln_attr_int(c->node, "default_int64", -1));
  else
    kiln_set_f64(y, i, kiln_attr_float(c->node, "default_float", -0.0f));
  return true;
}

static kiln_code le_infer(kiln_ictx *c) {
  le_list v;
  const kiln_type *x = kiln_itype(c, 0);
  if (!le_read(c->node, "values", c->opset, &v)) return kiln_ifail(c, "no values_* attribute");
  kiln_infer_tensor(c, 0, v.dtype, x ? x->rank : -1, x && x->rank >= 0 ? x->dims : NULL);
  return KILN_OK;
}

static kiln_code le_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  le_map m;
  if (!le_read(c->node, "keys", c->opset, &m.keys) || !le_read(c->node, "values", c->opset, &m.vals))
    return kiln_kfail(c, "LabelEncoder needs one keys_* and one values_* attribute");
  if (m.keys.n != m.vals.n)
    return kiln_kfail(c, "%zu keys but %zu values", m.keys.n, m.vals.n);
  if (kind_of(x->dtype) != m.keys.kind)
    return kiln_kfail(c, "X is %s, which the keys' type does not match", kiln_dtype_name(x->dtype));
  if (!le_sort(&m)) return kiln_kfail(c, "out of memory");
  kiln_tensor *y = kiln_out(c, 0, m.vals.dtype, x->rank, x->dims);
  for (int64_t i = 0; y && i < x->numel; i++)
    if (!le_put(c, y, i, &m.vals, le_find(&m, x, i))) {
      free(m.e);
      return kiln_kfail(c, "out of memory");
    }
  free(m.e);
  return y ? KILN_OK : c->err->code;
}

const kiln_op_schema kiln_ops_ml[] = {
    {.domain = ML, .name = "Binarizer", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = binarizer_run, .flags = KILN_OPF_IN_PLACE, .flow = KILN_FLOW_SAME},
    {.domain = ML, .name = "ArrayFeatureExtractor", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = afe_infer, .run = afe_run},
    {.domain = ML, .name = "LabelEncoder", .since = 2, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = le_infer, .run = le_run, .flow = KILN_FLOW_SAME},
    {0},
};
