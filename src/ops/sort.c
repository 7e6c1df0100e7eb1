/* Operators built on a stable index sort: TopK, Unique, NonMaxSuppression.
 *
 * Orderings use a stable merge sort over element indices, so ties always keep the smaller
 * index first (what the ONNX reference and other runtimes produce). Floating-point NaN sorts
 * above every number and equals any other NaN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* ---- stable index sort ---- */

/* Negative when item a must come before item b. */
typedef int (*order_fn)(const void *ctx, int64_t a, int64_t b);

/* Bottom-up merge sort of idx[0..n) (tmp has room for n). Stable: equal items keep their
 * relative order. */
static void stable_sort(int64_t *idx, int64_t *tmp, int64_t n, order_fn cmp, const void *ctx) {
  int64_t *src = idx, *dst = tmp;
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = cmp(ctx, src[j], src[i]) < 0 ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    int64_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != idx) memcpy(idx, src, (size_t)n * sizeof *idx);
}

/* Total order on doubles with NaN above everything and NaN == NaN. */
static int cmp_f64(double a, double b) {
  bool na = isnan(a), nb = isnan(b);
  if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  return a < b ? -1 : a > b;
}

/* Compare elements a and b of one tensor in the natural order of its type. */
static int cmp_elem(const kiln_tensor *x, int64_t a, int64_t b) {
  switch (x->dtype) {
    case KILN_STRING: {
      char *const *s = x->data;
      int r = strcmp(s[a], s[b]);
      return r < 0 ? -1 : r > 0;
    }
    case KILN_UINT64: {
      uint64_t u = kiln_get_u64(x, a), v = kiln_get_u64(x, b);
      return u < v ? -1 : u > v;
    }
    case KILN_FLOAT: {
      const float *f = x->data;
      return cmp_f64(f[a], f[b]);
    }
    case KILN_DOUBLE: case KILN_FLOAT16: case KILN_BFLOAT16:
      return cmp_f64(kiln_get_f64(x, a), kiln_get_f64(x, b));
    default: {
      int64_t u = kiln_get_i64(x, a), v = kiln_get_i64(x, b);
      return u < v ? -1 : u > v;
    }
  }
}

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

static bool is_numeric(kiln_dtype t) { return kiln_dtype_is_float(t) || kiln_dtype_is_int(t); }

/* ---- TopK ---- */

typedef struct topk_ctx {
  const kiln_tensor *x;
  int64_t base, stride; /* element i of the slice is x[base + i*stride] */
  bool largest;
} topk_ctx;

static int topk_order(const void *vctx, int64_t a, int64_t b) {
  const topk_ctx *t = vctx;
  int r = cmp_elem(t->x, t->base + a * t->stride, t->base + b * t->stride);
  return t->largest ? -r : r;
}

/* k from the attribute (opset < 10) or the second input; -1 when not known. */
static int64_t topk_const_k(const kiln_node *n, int opset, const kiln_tensor *kt) {
  if (opset < 10) return kiln_attr_int(n, "k", -1);
  if (!kt || kt->kind != KILN_KIND_TENSOR || kt->numel != 1 || !kiln_dtype_is_int(kt->dtype))
    return -1;
  return kiln_get_i64(kt, 0);
}

static kiln_code topk_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank < 0) {
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
    kiln_infer_tensor(c, 1, KILN_INT64, -1, NULL);
    return KILN_OK;
  }
  int64_t axis = kiln_attr_int(c->node, "axis", -1);
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank)
    return kiln_ifail(c, "axis %lld is out of range for rank %d",
                      (long long)kiln_attr_int(c->node, "axis", -1), x->rank);
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  int64_t k = topk_const_k(c->node, c->opset, c->n_in > 1 ? c->cin[1] : NULL);
  if (k >= 0 && dims[axis] >= 0 && k > dims[axis])
    return kiln_ifail(c, "k = %lld exceeds the axis length %lld", (long long)k,
                      (long long)dims[axis]);
  dims[axis] = k;
  kiln_infer_tensor(c, 0, x->dtype, x->rank, dims);
  kiln_infer_tensor(c, 1, KILN_INT64, x->rank, dims);
  return KILN_OK;
}

static kiln_code topk_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !is_numeric(x->dtype)) return kiln_kfail(c, "X must be a numeric tensor");
  if (x->rank < 1) return kiln_kfail(c, "X must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -1), x->rank);
  if (axis < 0) return KILN_ERR_RUN;
  int64_t k;
  if (c->opset < 10) {
    k = kiln_attr_int(c->node, "k", -1);
  } else {
    const kiln_tensor *kt = kiln_in(c, 1);
    if (!is_tensor(kt) || kt->numel != 1 || !kiln_dtype_is_int(kt->dtype))
      return kiln_kfail(c, "K must be a one-element integer tensor");
    k = kiln_get_i64(kt, 0);
  }
  int64_t len = x->dims[axis];
  if (k < 0 || k > len)
    return kiln_kfail(c, "k = %lld is outside [0, %lld] (the axis length)", (long long)k,
                      (long long)len);
  bool largest = c->opset < 11 || kiln_attr_int(c->node, "largest", 1) != 0;
  /* sorted=0 leaves the order unspecified: sorted output is a valid answer. */

  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = k;
  kiln_tensor *v = kiln_out(c, 0, x->dtype, x->rank, dims);
  if (!v) return KILN_ERR_NOMEM;
  kiln_tensor *ix = kiln_out(c, 1, KILN_INT64, x->rank, dims);
  if (!ix) return KILN_ERR_NOMEM;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  if (k == 0 || outer == 0 || inner == 0) return KILN_OK;

  int64_t *idx = malloc((size_t)len * 2 * sizeof *idx);
  if (!idx) return kiln_kfail(c, "out of memory");
  int64_t *out_i = ix->data;
  size_t esz = kiln_dtype_size(x->dtype);
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t in = 0; in < inner; in++) {
      topk_ctx t = {x, o * len * inner + in, inner, largest};
      for (int64_t i = 0; i < len; i++) idx[i] = i;
      stable_sort(idx, idx + len, len, topk_order, &t);
      for (int64_t j = 0; j < k; j++) {
        int64_t di = (o * k + j) * inner + in;
        memcpy((char *)v->data + (size_t)di * esz,
               (const char *)x->data + (size_t)(t.base + idx[j] * inner) * esz, esz);
        out_i[di] = idx[j];
      }
    }
  }
  free(idx);
  return KILN_OK;
}

/* ---- Unique ---- */

/* The input seen as n slices of m elements; slice s, element e lives at
 * x[((e / inner) * n + s) * inner + e % inner]. Without an axis: inner = 1, m = 1. */
typedef struct uniq_ctx {
  const kiln_tensor *x;
  int64_t n, m, inner;
} uniq_ctx;

static int64_t uniq_at(const uniq_ctx *u, int64_t s, int64_t e) {
  return ((e / u->inner) * u->n + s) * u->inner + e % u->inner;
}

/* Slices compare lexicographically, as numpy.unique(axis=...) orders them. */
static int uniq_order(const void *vctx, int64_t a, int64_t b) {
  const uniq_ctx *u = vctx;
  for (int64_t e = 0; e < u->m; e++) {
    int r = cmp_elem(u->x, uniq_at(u, a, e), uniq_at(u, b, e));
    if (r) return r;
  }
  return 0;
}

/* Unsorted output lists unique slices by first occurrence. */
static int first_order(const void *vctx, int64_t a, int64_t b) {
  const int64_t *first = vctx;
  return first[a] < first[b] ? -1 : first[a] > first[b];
}

static kiln_code unique_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  const kiln_attr *ax = kiln_node_attr(c->node, "axis");
  int64_t unknown = -1;
  if (!ax) {
    kiln_infer_tensor(c, 0, x->dtype, 1, &unknown);
    int64_t n = x->rank >= 0 ? 1 : -1;
    for (int d = 0; d < x->rank && n >= 0; d++) n = x->dims[d] < 0 ? -1 : n * x->dims[d];
    kiln_infer_tensor(c, 2, KILN_INT64, 1, &n);
  } else if (x->rank >= 0) {
    int64_t a = ax->i < 0 ? ax->i + x->rank : ax->i;
    if (a < 0 || a >= x->rank)
      return kiln_ifail(c, "axis %lld is out of range for rank %d", (long long)ax->i, x->rank);
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[a] = -1;
    kiln_infer_tensor(c, 0, x->dtype, x->rank, dims);
    kiln_infer_tensor(c, 2, KILN_INT64, 1, &x->dims[a]);
  } else {
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
    kiln_infer_tensor(c, 2, KILN_INT64, 1, &unknown);
  }
  kiln_infer_tensor(c, 1, KILN_INT64, 1, &unknown);
  kiln_infer_tensor(c, 3, KILN_INT64, 1, &unknown);
  return KILN_OK;
}

static kiln_code unique_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x)) return kiln_kfail(c, "X must be a tensor");
  const kiln_attr *ax = kiln_node_attr(c->node, "axis");
  bool sorted = kiln_attr_int(c->node, "sorted", 1) != 0;
  uniq_ctx u = {x, x->numel, 1, 1};
  int axis = -1;
  if (ax) {
    if (x->rank < 1) return kiln_kfail(c, "axis given but X is a scalar");
    if ((axis = kiln_axis(c, ax->i, x->rank)) < 0) return KILN_ERR_RUN;
    u.n = x->dims[axis];
    u.inner = 1;
    for (int d = axis + 1; d < x->rank; d++) u.inner *= x->dims[d];
    u.m = u.n ? x->numel / u.n : 0;
  }
  int64_t n = u.n;
  int64_t *buf = malloc(((size_t)n * 5 + 1) * sizeof *buf);
  if (!buf) return kiln_kfail(c, "out of memory");
  int64_t *order = buf, *tmp = buf + n, *inverse = buf + 2 * n, *first = buf + 3 * n,
          *count = buf + 4 * n;
  for (int64_t i = 0; i < n; i++) order[i] = i;
  stable_sort(order, tmp, n, uniq_order, &u);
  /* Walk the sorted slices: each run of equal slices is one group; its first member (the
   * sort is stable) is the first occurrence. */
  int64_t groups = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || uniq_order(&u, order[i - 1], order[i]) != 0) {
      first[groups] = order[i];
      count[groups] = 0;
      groups++;
    }
    inverse[order[i]] = groups - 1;
    count[groups - 1]++;
  }
  /* Output position of each group: sorted order, or order of first occurrence. */
  int64_t *gorder = tmp; /* group ids in output order */
  for (int64_t g = 0; g < groups; g++) gorder[g] = g;
  if (!sorted) stable_sort(gorder, order, groups, first_order, first);
  int64_t *pos = order; /* group id -> output position (order[] no longer needed) */
  for (int64_t p = 0; p < groups; p++) pos[gorder[p]] = p;

  kiln_code rc = KILN_ERR_NOMEM;
  int64_t dims[KILN_MAX_RANK];
  kiln_tensor *y;
  if (ax) {
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = groups;
    y = kiln_out(c, 0, x->dtype, x->rank, dims);
  } else {
    y = kiln_out(c, 0, x->dtype, 1, &groups);
  }
  if (!y) goto done;
  uniq_ctx uy = {y, groups, u.m, u.inner};
  for (int64_t p = 0; p < groups; p++)
    for (int64_t e = 0; e < u.m; e++)
      kiln_copy_elem(y, uniq_at(&uy, p, e), x, uniq_at(&u, first[gorder[p]], e));
  if (kiln_out_used(c, 1)) {
    kiln_tensor *t = kiln_out(c, 1, KILN_INT64, 1, &groups);
    if (!t) goto done;
    for (int64_t p = 0; p < groups; p++) ((int64_t *)t->data)[p] = first[gorder[p]];
  }
  if (kiln_out_used(c, 2)) {
    kiln_tensor *t = kiln_out(c, 2, KILN_INT64, 1, &n);
    if (!t) goto done;
    for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] = pos[inverse[i]];
  }
  if (kiln_out_used(c, 3)) {
    kiln_tensor *t = kiln_out(c, 3, KILN_INT64, 1, &groups);
    if (!t) goto done;
    for (int64_t p = 0; p < groups; p++) ((int64_t *)t->data)[p] = count[gorder[p]];
  }
  rc = KILN_OK;
done:
  free(buf);
  return rc;
}

/* ---- NonMaxSuppression ---- */

typedef struct nms_box {
  double y1, x1, y2, x2, area;
} nms_box;

static nms_box nms_load(const kiln_tensor *b, int64_t at, bool center) {
  double v[4];
  for (int i = 0; i < 4; i++) v[i] = kiln_get_f64(b, at + i);
  nms_box r;
  if (center) { /* [x_center, y_center, width, height] */
    r.x1 = v[0] - v[2] / 2;
    r.x2 = v[0] + v[2] / 2;
    r.y1 = v[1] - v[3] / 2;
    r.y2 = v[1] + v[3] / 2;
  } else { /* [y1, x1, y2, x2], any diagonal pair of corners */
    r.y1 = fmin(v[0], v[2]);
    r.y2 = fmax(v[0], v[2]);
    r.x1 = fmin(v[1], v[3]);
    r.x2 = fmax(v[1], v[3]);
  }
  r.area = (r.y2 - r.y1) * (r.x2 - r.x1);
  return r;
}

static double nms_iou(const nms_box *a, const nms_box *b) {
  if (a->area <= 0 || b->area <= 0) return 0;
  double h = fmin(a->y2, b->y2) - fmax(a->y1, b->y1);
  double w = fmin(a->x2, b->x2) - fmax(a->x1, b->x1);
  if (h <= 0 || w <= 0) return 0;
  double inter = h * w, uni = a->area + b->area - inter;
  return uni > 0 ? inter / uni : 0;
}

typedef struct nms_ctx {
  const kiln_tensor *scores;
  int64_t base;
} nms_ctx;

static int nms_order(const void *vctx, int64_t a, int64_t b) {
  const nms_ctx *t = vctx;
  return -cmp_f64(kiln_get_f64(t->scores, t->base + a), kiln_get_f64(t->scores, t->base + b));
}

static kiln_code nms_infer(kiln_ictx *c) {
  int64_t dims[2] = {-1, 3};
  kiln_infer_tensor(c, 0, KILN_INT64, 2, dims);
  return KILN_OK;
}

/* Optional scalar input (shape [] or [1]); false when omitted. */
static bool scalar_in(kiln_kctx *c, size_t i, double *v, kiln_code *rc) {
  const kiln_tensor *t = kiln_in(c, i);
  *rc = KILN_OK;
  if (!t || t->kind == KILN_KIND_NONE) return false;
  if (t->kind != KILN_KIND_TENSOR || t->numel != 1 || !is_numeric(t->dtype)) {
    *rc = kiln_kfail(c, "input %zu must be a one-element numeric tensor", i);
    return false;
  }
  *v = kiln_dtype_is_float(t->dtype) ? kiln_get_f64(t, 0) : (double)kiln_get_i64(t, 0);
  return true;
}

static kiln_code nms_run(kiln_kctx *c) {
  const kiln_tensor *boxes = kiln_in(c, 0), *scores = kiln_in(c, 1);
  if (!is_tensor(boxes) || !is_tensor(scores) || !kiln_dtype_is_float(boxes->dtype) ||
      !kiln_dtype_is_float(scores->dtype))
    return kiln_kfail(c, "boxes and scores must be float tensors");
  if (boxes->rank != 3 || boxes->dims[2] != 4)
    return kiln_kfail(c, "boxes must have shape [batch, boxes, 4]");
  if (scores->rank != 3 || scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
    return kiln_kfail(c, "scores must have shape [batch, classes, boxes] matching boxes");
  kiln_code rc;
  double v;
  int64_t max_out = 0;
  if (scalar_in(c, 2, &v, &rc)) max_out = (int64_t)v;
  if (rc) return rc;
  double iou_thr = 0, score_thr = 0;
  if (scalar_in(c, 3, &v, &rc)) iou_thr = v;
  if (rc) return rc;
  bool has_score_thr = scalar_in(c, 4, &score_thr, &rc);
  if (rc) return rc;
  bool center = kiln_attr_int(c->node, "center_point_box", 0) != 0;
  int64_t nb = boxes->dims[0], nc = scores->dims[1], n = boxes->dims[1];
  if (max_out > n) max_out = n;
  if (max_out < 0) max_out = 0;

  int64_t *cand = malloc(((size_t)n * 3 + 1) * sizeof *cand);
  nms_box *box = malloc(((size_t)n + 1) * sizeof *box);
  int64_t cap = 64, count = 0;
  int64_t *sel = malloc((size_t)cap * 3 * sizeof *sel);
  rc = KILN_OK;
  if (!cand || !box || !sel) {
    rc = kiln_kfail(c, "out of memory");
    goto done;
  }
  int64_t *tmp = cand + n, *picked = cand + 2 * n;
  for (int64_t b = 0; b < nb; b++) {
    for (int64_t i = 0; i < n; i++) box[i] = nms_load(boxes, (b * n + i) * 4, center);
    for (int64_t k = 0; k < nc && max_out > 0; k++) {
      nms_ctx t = {scores, (b * nc + k) * n};
      int64_t m = 0;
      for (int64_t i = 0; i < n; i++)
        if (!has_score_thr || kiln_get_f64(scores, t.base + i) > score_thr) cand[m++] = i;
      stable_sort(cand, tmp, m, nms_order, &t);
      int64_t np = 0;
      for (int64_t j = 0; j < m && np < max_out; j++) {
        bool keep = true;
        for (int64_t q = 0; q < np && keep; q++)
          if (nms_iou(&box[cand[j]], &box[picked[q]]) > iou_thr) keep = false;
        if (!keep) continue;
        picked[np++] = cand[j];
        if (count == cap) {
          int64_t *g = realloc(sel, (size_t)cap * 6 * sizeof *sel);
          if (!g) {
            rc = kiln_kfail(c, "out of memory");
            goto done;
          }
          sel = g;
          cap *= 2;
        }
        sel[count * 3] = b;
        sel[count * 3 + 1] = k;
        sel[count * 3 + 2] = cand[j];
        count++;
      }
    }
  }
  int64_t dims[2] = {count, 3};
  kiln_tensor *y = kiln_out(c, 0, KILN_INT64, 2, dims);
  if (!y) {
    rc = KILN_ERR_NOMEM;
    goto done;
  }
  if (count) memcpy(y->data, sel, (size_t)count * 3 * sizeof *sel);
done:
  free(cand);
  free(box);
  free(sel);
  return rc;
}

const kiln_op_schema kiln_ops_sort[] = {
    {.domain = "", .name = "TopK", .since = 1, .inputs = {1, 1}, .outputs = {2, 2},
     .infer = topk_infer, .run = topk_run},
    {.domain = "", .name = "TopK", .since = 10, .inputs = {2, 2}, .outputs = {2, 2},
     .infer = topk_infer, .run = topk_run},
    {.domain = "", .name = "Unique", .since = 11, .inputs = {1, 1}, .outputs = {1, 4},
     .infer = unique_infer, .run = unique_run},
    {.domain = "", .name = "NonMaxSuppression", .since = 10, .inputs = {2, 5}, .outputs = {1, 1},
     .infer = nms_infer, .run = nms_run},
    {0},
};
