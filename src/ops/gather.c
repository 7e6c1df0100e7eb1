/* Indexing operators: Gather, GatherElements, GatherND, Scatter (the deprecated alias of
 * ScatterElements), ScatterElements, ScatterND, and the data-dependent selections NonZero,
 * OneHot, Compress, ReverseSequence.
 *
 * Indices are int32 or int64; negative ones count from the end of their axis, and any index
 * outside [-n, n) fails the node with the offending value (OneHot excepted: the spec makes an
 * out-of-range index an all-off row). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define MAXR KILN_MAX_RANK

/* ---- helpers (the shape-function ones are in ops/op.h) ---- */

static kiln_code need_index_type(kiln_kctx *c, const kiln_tensor *t, const char *what) {
  if (t->dtype != KILN_INT32 && t->dtype != KILN_INT64)
    return kiln_kfail(c, "%s must be int32 or int64, got %s", what, kiln_dtype_name(t->dtype));
  return KILN_OK;
}

/* Element i of an int32/int64 index tensor, wrapped into [0, n). Fails the node when out of
 * range. */
static kiln_code index_at(kiln_kctx *c, const kiln_tensor *t, int64_t i, int64_t n, int64_t *out) {
  int64_t v = t->dtype == KILN_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
  int64_t w = v < 0 ? v + n : v;
  if (w < 0 || w >= n)
    return kiln_kfail(c, "index %lld is out of range for an axis of size %lld", (long long)v,
                      (long long)n);
  *out = w;
  return KILN_OK;
}

static void row_strides(int rank, const int64_t *dims, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= dims[d];
  }
}

static int64_t prod(const int64_t *d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= d[i];
  return p;
}

/* Odometer over a shape that also tracks the matching offset in a tensor with other strides. */
typedef struct walker {
  int rank;
  const int64_t *dims;
  int64_t idx[MAXR];
  int64_t off;
} walker;

static void walk_next(walker *w, const int64_t *stride) {
  for (int d = w->rank - 1; d >= 0; d--) {
    w->off += stride[d];
    if (++w->idx[d] < w->dims[d]) return;
    w->off -= w->idx[d] * stride[d];
    w->idx[d] = 0;
  }
}

/* ---- Gather ---- */

static kiln_code infer_gather(kiln_ictx *c) {
  int r = kiln_irank(c, 0), q = kiln_irank(c, 1);
  kiln_dtype dt = kiln_idtype(c, 0);
  if (r == 0) return kiln_ifail(c, "data must have rank >= 1");
  if (r < 0 || q < 0 || r + q - 1 > MAXR) {
    kiln_infer_tensor(c, 0, dt, r >= 0 && q >= 0 && r + q - 1 <= MAXR ? r + q - 1 : -1, NULL);
    return KILN_OK;
  }
  int64_t axis = kiln_attr_int(c->node, "axis", 0), out[MAXR];
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kiln_ifail(c, "axis is out of range for rank %d", r);
  int m = 0;
  for (int d = 0; d < axis; d++) out[m++] = c->in[0]->dims[d];
  for (int d = 0; d < q; d++) out[m++] = c->in[1]->dims[d];
  for (int d = (int)axis + 1; d < r; d++) out[m++] = c->in[0]->dims[d];
  kiln_infer_tensor(c, 0, dt, m, out);
  return KILN_OK;
}

static kiln_code run_gather(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  if ((rc = need_index_type(c, ind, "indices"))) return rc;
  if (x->rank == 0) return kiln_kfail(c, "data must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), x->rank);
  if (axis < 0) return c->err->code;
  if (x->rank + ind->rank - 1 > MAXR) return kiln_kunsup(c, "output rank exceeds kiln's limit");
  int64_t out[MAXR];
  int m = 0;
  for (int d = 0; d < axis; d++) out[m++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) out[m++] = ind->dims[d];
  for (int d = axis + 1; d < x->rank; d++) out[m++] = x->dims[d];
  kiln_tensor *o = kiln_out(c, 0, x->dtype, m, out);
  if (!o) return c->err->code;
  int64_t outer = prod(x->dims, 0, axis), n = x->dims[axis], inner = prod(x->dims, axis + 1, x->rank);
  int64_t ni = ind->numel;
  for (int64_t i = 0; i < ni; i++) {
    int64_t k = 0;
    if ((rc = index_at(c, ind, i, n, &k))) return rc;
    for (int64_t b = 0; b < outer; b++) kiln_copy_elems(o, (b * ni + i) * inner, x, (b * n + k) * inner, inner);
  }
  return KILN_OK;
}

/* ---- GatherElements, Scatter, ScatterElements ---- */

static kiln_code infer_gather_elements(kiln_ictx *c) {
  int r = kiln_irank(c, 0), q = kiln_irank(c, 1);
  if (r >= 0 && q >= 0 && r != q) return kiln_ifail(c, "data and indices must have the same rank");
  const kiln_type *t = kiln_itype(c, 1);
  kiln_infer_tensor(c, 0, kiln_idtype(c, 0), q, t && q >= 0 ? t->dims : NULL);
  return KILN_OK;
}

/* Checks shared by GatherElements and ScatterElements: same rank, indices within data's shape
 * off the axis. Returns the normalised axis or -1 after failing the node. */
static int elements_axis(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *ind) {
  if (need_index_type(c, ind, "indices")) return -1;
  if (x->rank == 0 || ind->rank != x->rank) {
    kiln_kfail(c, "data and indices must have the same rank >= 1 (got %d and %d)", x->rank,
               ind->rank);
    return -1;
  }
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), x->rank);
  for (int d = 0; axis >= 0 && d < x->rank; d++)
    if (d != axis && ind->dims[d] > x->dims[d]) {
      kiln_kfail(c, "indices size %lld exceeds data size %lld on axis %d",
                 (long long)ind->dims[d], (long long)x->dims[d], d);
      return -1;
    }
  return axis;
}

static kiln_code run_gather_elements(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  int axis = elements_axis(c, x, ind);
  if (axis < 0) return c->err->code;
  kiln_tensor *o = kiln_out(c, 0, x->dtype, ind->rank, ind->dims);
  if (!o) return c->err->code;
  int64_t xs[MAXR], ws[MAXR];
  row_strides(x->rank, x->dims, xs);
  memcpy(ws, xs, sizeof ws);
  ws[axis] = 0; /* the axis coordinate comes from the index instead */
  walker w = {.rank = ind->rank, .dims = ind->dims};
  for (int64_t i = 0; i < ind->numel; i++, walk_next(&w, ws)) {
    int64_t k = 0;
    if ((rc = index_at(c, ind, i, x->dims[axis], &k))) return rc;
    kiln_copy_elem(o, i, x, w.off + k * xs[axis]);
  }
  return KILN_OK;
}

enum reduction { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static int reduction_of(kiln_kctx *c) {
  const char *r = c->opset >= 16 ? kiln_attr_str(c->node, "reduction", "none") : "none";
  if (!strcmp(r, "none")) return RED_NONE;
  if (!strcmp(r, "add")) return RED_ADD;
  if (!strcmp(r, "mul")) return RED_MUL;
  if (c->opset >= 18 && !strcmp(r, "max")) return RED_MAX;
  if (c->opset >= 18 && !strcmp(r, "min")) return RED_MIN;
  kiln_kfail(c, "unknown reduction '%s'", r);
  return -1;
}

/* o[oi] = o[oi] (reduction) u[ui]. */
static void scatter_one(kiln_tensor *o, int64_t oi, const kiln_tensor *u, int64_t ui, int red) {
  if (red == RED_NONE || o->dtype == KILN_STRING) {
    kiln_copy_elem(o, oi, u, ui);
  } else if (o->dtype == KILN_FLOAT) {
    float *a = (float *)o->data + oi, b = ((const float *)u->data)[ui];
    *a = red == RED_ADD ? *a + b : red == RED_MUL ? *a * b : red == RED_MAX ? (*a > b ? *a : b)
                                                                            : (*a < b ? *a : b);
  } else if (kiln_dtype_is_float(o->dtype)) {
    double a = kiln_get_f64(o, oi), b = kiln_get_f64(u, ui);
    kiln_set_f64(o, oi, red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b)
                                                                                         : (a < b ? a : b));
  } else if (o->dtype == KILN_UINT64) {
    uint64_t a = kiln_get_u64(o, oi), b = kiln_get_u64(u, ui);
    kiln_set_u64(o, oi, red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b)
                                                                                         : (a < b ? a : b));
  } else { /* narrower integers and bool: exact in int64, wrapped on the way back */
    int64_t a = kiln_get_i64(o, oi), b = kiln_get_i64(u, ui);
    uint64_t s = (uint64_t)a + (uint64_t)b, p = (uint64_t)a * (uint64_t)b;
    kiln_set_i64(o, oi, red == RED_ADD ? (int64_t)s : red == RED_MUL ? (int64_t)p
                        : red == RED_MAX ? (a > b ? a : b) : (a < b ? a : b));
  }
}

static kiln_code run_scatter_elements(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ind = c->in[1], *u = c->in[2];
  int red = reduction_of(c);
  if (red < 0) return c->err->code;
  int axis = elements_axis(c, x, ind);
  if (axis < 0) return c->err->code;
  if (!kiln_same_shape(ind, u) || u->dtype != x->dtype)
    return kiln_kfail(c, "updates must have the indices' shape and the data's type");
  kiln_tensor *o = kiln_tensor_clone(x, c->err);
  if (!o) return c->err->code;
  kiln_set_out(c, 0, o);
  int64_t xs[MAXR], ws[MAXR];
  row_strides(x->rank, x->dims, xs);
  memcpy(ws, xs, sizeof ws);
  ws[axis] = 0;
  walker w = {.rank = ind->rank, .dims = ind->dims};
  for (int64_t i = 0; i < ind->numel; i++, walk_next(&w, ws)) {
    int64_t k = 0;
    if ((rc = index_at(c, ind, i, x->dims[axis], &k))) return rc;
    scatter_one(o, w.off + k * xs[axis], u, i, red);
  }
  return KILN_OK;
}

/* ---- GatherND, ScatterND ---- */

static kiln_code infer_gather_nd(kiln_ictx *c) {
  int r = kiln_irank(c, 0), q = kiln_irank(c, 1);
  int64_t b = c->opset >= 12 ? kiln_attr_int(c->node, "batch_dims", 0) : 0, out[MAXR];
  kiln_dtype dt = kiln_idtype(c, 0);
  if (r == 0 || q == 0) return kiln_ifail(c, "data and indices must have rank >= 1");
  if (r < 0 || q < 0 || c->in[1]->dims[q - 1] < 0) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  int64_t k = c->in[1]->dims[q - 1];
  if (b < 0 || b >= q || b >= r || k > r - b)
    return kiln_ifail(c, "batch_dims or the index depth do not fit the data's rank");
  int m = 0;
  for (int d = 0; d < q - 1; d++) out[m++] = c->in[1]->dims[d];
  for (int d = (int)(b + k); d < r; d++) out[m++] = c->in[0]->dims[d];
  kiln_infer_tensor(c, 0, dt, m, out);
  return KILN_OK;
}

/* Shared walk of GatherND/ScatterND: for every index tuple, the offset of the addressed slice in
 * data (of `slice` elements). `fn` is called with the tuple number and the data offset. */
typedef struct nd_plan {
  int64_t batches, tuples, k, slice, batch_size;
  int64_t dstride[MAXR]; /* data strides of the k indexed axes */
  int64_t ddims[MAXR];
} nd_plan;

static kiln_code nd_prepare(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *ind, int64_t b,
                            nd_plan *p) {
  kiln_code rc = need_index_type(c, ind, "indices");
  if (rc) return rc;
  int r = x->rank, q = ind->rank;
  if (r == 0 || q == 0) return kiln_kfail(c, "data and indices must have rank >= 1");
  int64_t k = ind->dims[q - 1];
  if (b < 0 || b >= q || b >= r || k > r - b)
    return kiln_kfail(c, "batch_dims %lld or index depth %lld do not fit data of rank %d",
                      (long long)b, (long long)k, r);
  for (int d = 0; d < b; d++)
    if (ind->dims[d] != x->dims[d]) return kiln_kfail(c, "batch dimensions of data and indices differ");
  int64_t xs[MAXR];
  row_strides(r, x->dims, xs);
  p->k = k;
  p->batches = prod(x->dims, 0, (int)b);
  p->tuples = prod(ind->dims, (int)b, q - 1);
  p->slice = prod(x->dims, (int)(b + k), r);
  p->batch_size = prod(x->dims, (int)b, r);
  for (int j = 0; j < k; j++) {
    p->dstride[j] = xs[b + j];
    p->ddims[j] = x->dims[b + j];
  }
  return KILN_OK;
}

/* Data offset of tuple t (0 .. batches*tuples) of the plan. */
static kiln_code nd_offset(kiln_kctx *c, const nd_plan *p, const kiln_tensor *ind, int64_t t,
                           int64_t *off) {
  int64_t o = (t / p->tuples) * p->batch_size;
  for (int64_t j = 0; j < p->k; j++) {
    int64_t v = 0;
    kiln_code rc = index_at(c, ind, t * p->k + j, p->ddims[j], &v);
    if (rc) return rc;
    o += v * p->dstride[j];
  }
  *off = o;
  return KILN_OK;
}

static kiln_code run_gather_nd(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  int64_t b = c->opset >= 12 ? kiln_attr_int(c->node, "batch_dims", 0) : 0, out[MAXR];
  nd_plan p = {0};
  if ((rc = nd_prepare(c, x, ind, b, &p))) return rc;
  int m = 0;
  for (int d = 0; d < ind->rank - 1; d++) out[m++] = ind->dims[d];
  for (int d = (int)(b + p.k); d < x->rank; d++) out[m++] = x->dims[d];
  if (m > MAXR) return kiln_kunsup(c, "output rank exceeds kiln's limit");
  kiln_tensor *o = kiln_out(c, 0, x->dtype, m, out);
  if (!o) return c->err->code;
  for (int64_t t = 0; t < p.batches * p.tuples; t++) {
    int64_t off = 0;
    if ((rc = nd_offset(c, &p, ind, t, &off))) return rc;
    kiln_copy_elems(o, t * p.slice, x, off, p.slice);
  }
  return KILN_OK;
}

static kiln_code run_scatter_nd(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *ind = c->in[1], *u = c->in[2];
  int red = reduction_of(c);
  if (red < 0) return c->err->code;
  nd_plan p = {0};
  if ((rc = nd_prepare(c, x, ind, 0, &p))) return rc;
  /* updates: indices.shape[:-1] + data.shape[k:] */
  bool ok = u->dtype == x->dtype && u->rank == ind->rank - 1 + x->rank - (int)p.k;
  for (int d = 0; ok && d < ind->rank - 1; d++) ok = u->dims[d] == ind->dims[d];
  for (int d = (int)p.k; ok && d < x->rank; d++) ok = u->dims[ind->rank - 1 + d - p.k] == x->dims[d];
  if (!ok) return kiln_kfail(c, "updates must have shape indices.shape[:-1] + data.shape[k:]");
  kiln_tensor *o = kiln_tensor_clone(x, c->err);
  if (!o) return c->err->code;
  kiln_set_out(c, 0, o);
  for (int64_t t = 0; t < p.tuples; t++) {
    int64_t off = 0;
    if ((rc = nd_offset(c, &p, ind, t, &off))) return rc;
    if (red == RED_NONE)
      kiln_copy_elems(o, off, u, t * p.slice, p.slice);
    else
      for (int64_t e = 0; e < p.slice; e++) scatter_one(o, off + e, u, t * p.slice + e, red);
  }
  return KILN_OK;
}

/* ---- NonZero ---- */

static kiln_code infer_nonzero(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  int64_t d[2] = {r >= 1 ? r : -1, -1};
  kiln_infer_tensor(c, 0, KILN_INT64, 2, d);
  return KILN_OK;
}

static bool is_nonzero(const kiln_tensor *x, int64_t i) {
  if (x->dtype == KILN_STRING) return ((char *const *)x->data)[i][0] != 0;
  if (kiln_dtype_is_float(x->dtype)) return kiln_get_f64(x, i) != 0;
  return kiln_get_u64(x, i) != 0;
}

static kiln_code run_nonzero(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int r = x->rank ? x->rank : 1; /* a scalar reads as a 1-element vector, as numpy does */
  int64_t dims1[1] = {1}, n = 0, stride[MAXR];
  const int64_t *dims = x->rank ? x->dims : dims1;
  for (int64_t i = 0; i < x->numel; i++) n += is_nonzero(x, i);
  int64_t od[2] = {r, n};
  kiln_tensor *o = kiln_out(c, 0, KILN_INT64, 2, od);
  if (!o) return c->err->code;
  row_strides(r, dims, stride);
  int64_t *out = o->data, j = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    if (!is_nonzero(x, i)) continue;
    for (int d = 0; d < r; d++) out[d * n + j] = (i / stride[d]) % dims[d];
    j++;
  }
  return KILN_OK;
}

/* ---- OneHot ---- */

static kiln_code infer_onehot(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 2);
  if (r < 0 || r + 1 > MAXR) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  int64_t axis = kiln_attr_int(c->node, "axis", -1), out[MAXR], depth = -1;
  if (axis < 0) axis += r + 1;
  if (axis < 0 || axis > r) return kiln_ifail(c, "axis is out of range for output rank %d", r + 1);
  const kiln_tensor *dv = c->cin[1];
  if (dv && dv->kind == KILN_KIND_TENSOR && dv->numel == 1 && dv->dtype != KILN_STRING) {
    depth = kiln_get_i64(dv, 0);
    if (depth < 1) return kiln_ifail(c, "depth must be positive");
  }
  for (int d = 0, m = 0; d <= r; d++) out[d] = d == axis ? depth : c->in[0]->dims[m++];
  kiln_infer_tensor(c, 0, dt, r + 1, out);
  return KILN_OK;
}

static kiln_code run_onehot(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *ind = c->in[0], *dv = c->in[1], *val = c->in[2];
  if (dv->numel != 1 || dv->dtype == KILN_STRING) return kiln_kfail(c, "depth must be one number");
  if (val->numel != 2) return kiln_kfail(c, "values must hold [off_value, on_value]");
  if (ind->dtype == KILN_STRING) return kiln_kfail(c, "indices must be numeric");
  int64_t depth = kiln_get_i64(dv, 0);
  if (depth < 1) return kiln_kfail(c, "depth must be positive, got %lld", (long long)depth);
  int r = ind->rank;
  if (r + 1 > MAXR) return kiln_kunsup(c, "output rank exceeds kiln's limit");
  int64_t axis = kiln_attr_int(c->node, "axis", -1), out[MAXR];
  if (axis < 0) axis += r + 1;
  if (axis < 0 || axis > r) return kiln_kfail(c, "axis is out of range for output rank %d", r + 1);
  for (int d = 0, m = 0; d <= r; d++) out[d] = d == axis ? depth : ind->dims[m++];
  kiln_tensor *o = kiln_out(c, 0, val->dtype, r + 1, out);
  if (!o) return c->err->code;
  for (int64_t i = 0; i < o->numel; i++) kiln_copy_elem(o, i, val, 0);
  int64_t inner = prod(ind->dims, (int)axis, r), outer = prod(ind->dims, 0, (int)axis);
  for (int64_t b = 0; b < outer; b++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t k = kiln_get_i64(ind, b * inner + i); /* float indices truncate, as the spec casts */
      if (k < 0 && c->opset >= 11) k += depth;
      if (k >= 0 && k < depth) kiln_copy_elem(o, (b * depth + k) * inner + i, val, 1);
    }
  return KILN_OK;
}

/* ---- Compress ---- */

static kiln_code infer_compress(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  const kiln_attr *a = kiln_node_attr(c->node, "axis");
  if (!a) {
    kiln_infer_tensor(c, 0, dt, 1, NULL);
    return KILN_OK;
  }
  if (r < 0) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  int64_t axis = a->i < 0 ? a->i + r : a->i, out[MAXR];
  if (axis < 0 || axis >= r) return kiln_ifail(c, "axis is out of range for rank %d", r);
  memcpy(out, c->in[0]->dims, sizeof out);
  out[axis] = -1;
  kiln_infer_tensor(c, 0, dt, r, out);
  return KILN_OK;
}

static kiln_code run_compress(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *cond = c->in[1];
  if (cond->rank != 1) return kiln_kfail(c, "condition must be 1-D");
  const kiln_attr *a = kiln_node_attr(c->node, "axis");
  int axis = -1;
  int64_t len = x->numel, outer = 1, inner = 1, out[MAXR];
  if (a) {
    if ((axis = kiln_axis(c, a->i, x->rank)) < 0) return c->err->code;
    len = x->dims[axis];
    outer = prod(x->dims, 0, axis);
    inner = prod(x->dims, axis + 1, x->rank);
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < cond->numel; i++) {
    if (!kiln_get_i64(cond, i)) continue;
    if (i >= len) return kiln_kfail(c, "condition selects index %lld past the axis length %lld",
                                    (long long)i, (long long)len);
    kept++;
  }
  if (a) {
    memcpy(out, x->dims, sizeof out);
    out[axis] = kept;
  } else {
    out[0] = kept;
  }
  kiln_tensor *o = kiln_out(c, 0, x->dtype, a ? x->rank : 1, out);
  if (!o) return c->err->code;
  for (int64_t b = 0; b < outer; b++)
    for (int64_t i = 0, j = 0; i < cond->numel && i < len; i++)
      if (kiln_get_i64(cond, i))
        kiln_copy_elems(o, (b * kept + j++) * inner, x, (b * len + i) * inner, inner);
  return KILN_OK;
}

/* ---- ReverseSequence ---- */

static kiln_code infer_revseq(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  if (r >= 0 && r < 2) return kiln_ifail(c, "input must have rank >= 2");
  kiln_infer_same(c, 0, 0);
  return KILN_OK;
}

static kiln_code run_revseq(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *lens = c->in[1];
  int64_t ta = kiln_attr_int(c->node, "time_axis", 0), ba = kiln_attr_int(c->node, "batch_axis", 1);
  if (x->rank < 2) return kiln_kfail(c, "input must have rank >= 2");
  if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
    return kiln_kfail(c, "time_axis and batch_axis must be 0 and 1 in some order");
  if (!kiln_dtype_is_int(lens->dtype) || lens->rank != 1 || lens->numel != x->dims[ba])
    return kiln_kfail(c, "sequence_lens must be an integer vector of the batch size");
  kiln_tensor *o = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!o) return c->err->code;
  int64_t inner = prod(x->dims, 2, x->rank), steps = x->dims[ta], batch = x->dims[ba];
  int64_t st = (ta == 0 ? x->dims[1] : 1) * inner, sb = (ba == 0 ? x->dims[1] : 1) * inner;
  for (int64_t b = 0; b < batch; b++) {
    int64_t n = kiln_get_i64(lens, b);
    if (n < 0 || n > steps)
      return kiln_kfail(c, "sequence length %lld is outside [0, %lld]", (long long)n,
                        (long long)steps);
    for (int64_t t = 0; t < steps; t++) {
      int64_t src = t < n ? n - 1 - t : t;
      kiln_copy_elems(o, b * sb + t * st, x, b * sb + src * st, inner);
    }
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_gather[] = {
    {.domain = "", .name = "Gather", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_gather, .run = run_gather, .flow = KILN_FLOW_GATHER},
    {.domain = "", .name = "GatherElements", .since = 11, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_gather_elements, .run = run_gather_elements},
    {.domain = "", .name = "GatherND", .since = 11, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_gather_nd, .run = run_gather_nd},
    {.domain = "", .name = "Scatter", .since = 9, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_scatter_elements},
    {.domain = "", .name = "ScatterElements", .since = 11, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_scatter_elements},
    {.domain = "", .name = "ScatterND", .since = 11, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_scatter_nd},
    {.domain = "", .name = "NonZero", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_nonzero, .run = run_nonzero},
    {.domain = "", .name = "OneHot", .since = 9, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = infer_onehot, .run = run_onehot},
    {.domain = "", .name = "Compress", .since = 9, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_compress, .run = run_compress},
    {.domain = "", .name = "ReverseSequence", .since = 10, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_revseq, .run = run_revseq},
    {0},
};
