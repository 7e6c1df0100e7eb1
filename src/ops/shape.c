/* Shape-manipulating operators: Reshape, Shape, Size, Flatten, Squeeze, Unsqueeze, Identity,
 * Concat, Split.
 *
 * The shape functions matter as much as the kernels: these ops are where constant shape inputs
 * (initializers) turn into static output shapes. They state only what is certain and fail only
 * on inputs that are invalid whatever the run-time values. The data-moving shape ops
 * (Transpose, Slice, Expand, Tile, Pad, ...) live in layout.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cost.h"
#include "ops/op.h"
#include "base/threadpool.h"

#define MAXR KILN_MAX_RANK

/* ---- helpers shared by the kernels (the shape-function helpers are in ops/op.h) ---- */

/* `in` with a new shape of the same element count: a copy, or nothing to copy where the
 * memory plan put the output over the input (KILN_OPF_IN_PLACE: same bytes, new dims). */
static kiln_code reshaped_copy(kiln_kctx *c, size_t oi, const kiln_tensor *in, int rank,
                               const int64_t *dims) {
  kiln_tensor *o = kiln_out_uninit(c, oi, in->dtype, rank, dims); /* copied over below */
  if (!o) return c->err->code;
  if (o->numel != in->numel)
    return kiln_kfail(c, "cannot reshape %lld elements to %lld", (long long)in->numel,
                      (long long)o->numel);
  kiln_copy_elems(o, 0, in, 0, in->numel);
  return KILN_OK;
}

/* Normalise a list of axes against `rank`; false (with msg) when out of range or repeated. */
static bool norm_axes(const int64_t *axes, size_t n, int rank, int *out, char *msg, size_t len) {
  for (size_t i = 0; i < n; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) {
      snprintf(msg, len, "axis %lld is out of range for rank %d", (long long)axes[i], rank);
      return false;
    }
    for (size_t j = 0; j < i; j++)
      if (out[j] == a) {
        snprintf(msg, len, "axis %lld is repeated", (long long)axes[i]);
        return false;
      }
    out[i] = (int)a;
  }
  return true;
}

/* ---- Reshape ---- */

/* Resolve a Reshape target. Input dims may be -1 (unknown, at load time) and rank -1; then the
 * affected output dims stay -1. Returns an error text or NULL. */
static const char *reshape_dims(int r, const int64_t *in, const int64_t *s, size_t n,
                                bool allowzero, int64_t *out) {
  int neg = -1;
  bool zero = false;
  for (size_t k = 0; k < n; k++) {
    if (s[k] < -1) return "shape entries must be >= -1";
    if (s[k] == -1) {
      if (neg >= 0) return "shape has more than one -1";
      neg = (int)k;
    }
    if (s[k] == 0) zero = true;
  }
  if (allowzero && zero && neg >= 0) return "shape has both 0 and -1 while allowzero is set";
  bool known = r >= 0;
  int64_t total = 1, prod = 1;
  for (int k = 0; k < r; k++)
    if (in[k] < 0 || !kiln_mul_ok(total, in[k], &total)) known = false;
  for (size_t k = 0; k < n; k++) {
    if (s[k] == 0 && !allowzero) {
      if (r >= 0 && (int)k >= r) return "shape copies (0) a dimension the input does not have";
      out[k] = r >= 0 ? in[k] : -1;
    } else {
      out[k] = s[k];
    }
    if ((int)k == neg) continue;
    if (out[k] < 0 || !kiln_mul_ok(prod, out[k], &prod)) known = false;
  }
  if (!known) return NULL;
  if (neg >= 0) {
    if (prod == 0 || total % prod) return "shape does not divide the input's element count";
    out[neg] = total / prod;
  } else if (prod != total) {
    return "shape's element count differs from the input's";
  }
  return NULL;
}

static kiln_code infer_reshape(kiln_ictx *c) {
  int64_t s[MAXR], out[MAXR];
  size_t n;
  kiln_dtype dt = kiln_idtype(c, 0);
  if (!kiln_iconst_ints(c, 1, s, MAXR, &n)) {
    int64_t len = kiln_ilist_len(c, 1);
    kiln_infer_tensor(c, 0, dt, len >= 0 && len <= MAXR ? (int)len : -1, NULL);
    return KILN_OK;
  }
  const kiln_type *x = kiln_itype(c, 0);
  bool allowzero = c->opset >= 14 && kiln_attr_int(c->node, "allowzero", 0);
  const char *e = reshape_dims(kiln_irank(c, 0), x ? x->dims : NULL, s, n, allowzero, out);
  if (e) return kiln_ifail(c, "%s", e);
  kiln_infer_tensor(c, 0, dt, (int)n, out);
  return KILN_OK;
}

static kiln_code run_reshape(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t s[MAXR], out[MAXR];
  size_t n;
  if ((rc = kiln_read_ints(c, c->in[1], s, MAXR, &n))) return rc;
  bool allowzero = c->opset >= 14 && kiln_attr_int(c->node, "allowzero", 0);
  const char *e = reshape_dims(x->rank, x->dims, s, n, allowzero, out);
  if (e) return kiln_kfail(c, "%s", e);
  return reshaped_copy(c, 0, x, (int)n, out);
}

/* ---- Shape, Size ---- */

/* Shape's [start, end) window (opset 15) clamped to [0, rank]. */
static void shape_window(const kiln_node *n, int opset, int rank, int *start, int *end) {
  int64_t s = 0, e = rank;
  if (opset >= 15) {
    s = kiln_attr_int(n, "start", 0);
    e = kiln_attr_int(n, "end", rank);
  }
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  s = s < 0 ? 0 : s > rank ? rank : s;
  e = e < 0 ? 0 : e > rank ? rank : e;
  *start = (int)s;
  *end = (int)(e > s ? e : s);
}

static kiln_code infer_shape(kiln_ictx *c) {
  int r = kiln_irank(c, 0), s, e;
  int64_t len = -1;
  if (r >= 0) {
    shape_window(c->node, c->opset, r, &s, &e);
    len = e - s;
  }
  kiln_infer_tensor(c, 0, KILN_INT64, 1, &len);
  return KILN_OK;
}

static kiln_code run_shape(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int s, e;
  shape_window(c->node, c->opset, x->rank, &s, &e);
  int64_t len = e - s;
  kiln_tensor *o = kiln_out(c, 0, KILN_INT64, 1, &len);
  if (!o) return c->err->code;
  for (int i = s; i < e; i++) ((int64_t *)o->data)[i - s] = x->dims[i];
  return KILN_OK;
}

static kiln_code infer_size(kiln_ictx *c) {
  kiln_infer_tensor(c, 0, KILN_INT64, 0, NULL);
  return KILN_OK;
}

static kiln_code run_size(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  kiln_tensor *o = kiln_out(c, 0, KILN_INT64, 0, NULL);
  if (!o) return c->err->code;
  *(int64_t *)o->data = c->in[0]->numel;
  return KILN_OK;
}

/* ---- Flatten ---- */

/* Flatten's output [prod(dims[:axis]), prod(dims[axis:])]; unknown (-1) dims propagate. */
static bool flatten_dims(int r, const int64_t *dims, int64_t axis, int64_t *out) {
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) return false;
  out[0] = out[1] = 1;
  for (int k = 0; k < r; k++) {
    int64_t *o = &out[k < axis ? 0 : 1];
    if (*o < 0) continue;
    if (dims[k] < 0 || !kiln_mul_ok(*o, dims[k], o)) *o = -1;
  }
  return true;
}

static kiln_code infer_flatten(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  int64_t out[2] = {-1, -1};
  if (r >= 0 && !flatten_dims(r, c->in[0]->dims, kiln_attr_int(c->node, "axis", 1), out))
    return kiln_ifail(c, "axis is out of range for rank %d", r);
  kiln_infer_tensor(c, 0, kiln_idtype(c, 0), 2, out);
  return KILN_OK;
}

static kiln_code run_flatten(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t out[2];
  if (!flatten_dims(x->rank, x->dims, kiln_attr_int(c->node, "axis", 1), out))
    return kiln_kfail(c, "axis is out of range for rank %d", x->rank);
  return reshaped_copy(c, 0, x, 2, out);
}

/* ---- Squeeze, Unsqueeze ---- */

/* The axes of (Un)Squeeze: an attribute before opset 13, the optional input 1 after.
 * Returns 1 when known (n may be 0 = absent), 0 when not known at load time, -1 too long. */
static int axes_of(const kiln_node *node, int opset, const kiln_tensor *t, int64_t *axes,
                   size_t *n, bool *given) {
  *n = 0;
  *given = false;
  if (opset < 13) {
    const int64_t *a = kiln_attr_ints(node, "axes", n);
    if (*n > MAXR) return -1;
    if (a) memcpy(axes, a, *n * sizeof *a);
    *given = a != NULL;
    return 1;
  }
  if (node->n_in < 2 || node->in[1] < 0) return 1;
  *given = true;
  if (!t) return 0;
  if (t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype)) return -1;
  if (t->numel > MAXR) return -1;
  for (int64_t k = 0; k < t->numel; k++) axes[k] = kiln_get_i64(t, k);
  *n = (size_t)t->numel;
  return 1;
}

static kiln_code infer_squeeze(kiln_ictx *c) {
  int64_t axes[MAXR], out[MAXR];
  size_t n;
  bool given;
  int r = kiln_irank(c, 0), ax[MAXR];
  kiln_dtype dt = kiln_idtype(c, 0);
  int k = axes_of(c->node, c->opset, c->n_in > 1 ? c->cin[1] : NULL, axes, &n, &given);
  if (k < 0) return kiln_ifail(c, "axes must be a short list of integers");
  if (r < 0 || k == 0) {
    int64_t len = k == 0 ? kiln_ilist_len(c, 1) : -1;
    kiln_infer_tensor(c, 0, dt, r >= 0 && len >= 0 && len <= r ? r - (int)len : -1, NULL);
    return KILN_OK;
  }
  const int64_t *d = c->in[0]->dims;
  bool drop[MAXR] = {false};
  if (given) {
    char msg[120];
    if (!norm_axes(axes, n, r, ax, msg, sizeof msg)) return kiln_ifail(c, "%s", msg);
    for (size_t i = 0; i < n; i++) {
      if (d[ax[i]] >= 0 && d[ax[i]] != 1)
        return kiln_ifail(c, "cannot squeeze axis %d of size %lld", ax[i], (long long)d[ax[i]]);
      drop[ax[i]] = true;
    }
  } else {
    for (int i = 0; i < r; i++) {
      if (d[i] < 0) { /* might be 1: the rank is unknown */
        kiln_infer_tensor(c, 0, dt, -1, NULL);
        return KILN_OK;
      }
      drop[i] = d[i] == 1;
    }
  }
  int m = 0;
  for (int i = 0; i < r; i++)
    if (!drop[i]) out[m++] = d[i];
  kiln_infer_tensor(c, 0, dt, m, out);
  return KILN_OK;
}

static kiln_code run_squeeze(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t axes[MAXR], out[MAXR];
  size_t n;
  bool given, drop[MAXR] = {false};
  int ax[MAXR];
  if (axes_of(c->node, c->opset, kiln_in(c, 1), axes, &n, &given) != 1)
    return kiln_kfail(c, "axes must be a short list of integers");
  if (given) {
    char msg[120];
    if (!norm_axes(axes, n, x->rank, ax, msg, sizeof msg)) return kiln_kfail(c, "%s", msg);
    for (size_t i = 0; i < n; i++) {
      if (x->dims[ax[i]] != 1)
        return kiln_kfail(c, "cannot squeeze axis %d of size %lld", ax[i],
                          (long long)x->dims[ax[i]]);
      drop[ax[i]] = true;
    }
  } else {
    for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
  }
  int m = 0;
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) out[m++] = x->dims[i];
  return reshaped_copy(c, 0, x, m, out);
}

/* Unsqueeze's output dims; the axes refer to the output's rank r + n. */
static bool unsqueeze_dims(int r, const int64_t *d, const int64_t *axes, size_t n, int64_t *out,
                           char *msg, size_t len) {
  int ax[MAXR], orank = r + (int)n;
  if (orank > MAXR) {
    snprintf(msg, len, "output rank %d exceeds kiln's limit of %d", orank, MAXR);
    return false;
  }
  if (!norm_axes(axes, n, orank, ax, msg, len)) return false;
  bool ins[MAXR] = {false};
  for (size_t i = 0; i < n; i++) ins[ax[i]] = true;
  for (int i = 0, k = 0; i < orank; i++) out[i] = ins[i] ? 1 : d[k++];
  return true;
}

static kiln_code infer_unsqueeze(kiln_ictx *c) {
  int64_t axes[MAXR], out[MAXR];
  size_t n;
  bool given;
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  int k = axes_of(c->node, c->opset, c->n_in > 1 ? c->cin[1] : NULL, axes, &n, &given);
  if (k < 0) return kiln_ifail(c, "axes must be a short list of integers");
  if (k == 1 && !given) return kiln_ifail(c, "axes are required");
  if (r < 0 || k == 0) {
    int64_t len = k == 0 ? kiln_ilist_len(c, 1) : (int64_t)n;
    kiln_infer_tensor(c, 0, dt, r >= 0 && len >= 0 && r + len <= MAXR ? r + (int)len : -1, NULL);
    return KILN_OK;
  }
  char msg[120];
  if (!unsqueeze_dims(r, c->in[0]->dims, axes, n, out, msg, sizeof msg))
    return kiln_ifail(c, "%s", msg);
  kiln_infer_tensor(c, 0, dt, r + (int)n, out);
  return KILN_OK;
}

static kiln_code run_unsqueeze(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t axes[MAXR], out[MAXR];
  size_t n;
  bool given;
  if (axes_of(c->node, c->opset, kiln_in(c, 1), axes, &n, &given) != 1)
    return kiln_kfail(c, "axes must be a short list of integers");
  if (!given) return kiln_kfail(c, "axes are required");
  char msg[120];
  if (!unsqueeze_dims(x->rank, x->dims, axes, n, out, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  return reshaped_copy(c, 0, x, x->rank + (int)n, out);
}

/* ---- Identity: tensors, sequences and optionals alike ---- */

static kiln_code run_identity(kiln_kctx *c) {
  if (!c->in[0]) return kiln_kfail(c, "input 0 is required");
  kiln_tensor *v = kiln_tensor_clone(c->in[0], c->err);
  if (!v) return c->err->code;
  kiln_set_out(c, 0, v);
  return KILN_OK;
}

/* ---- Concat ---- */

static kiln_code infer_concat(kiln_ictx *c) {
  int r = -1;
  kiln_dtype dt = KILN_UNDEFINED;
  for (size_t i = 0; i < c->n_in; i++) {
    if (!dt) dt = kiln_idtype(c, i);
    int ri = kiln_irank(c, i);
    if (ri < 0) continue;
    if (r >= 0 && ri != r) return kiln_ifail(c, "inputs have ranks %d and %d", r, ri);
    r = ri;
  }
  if (r < 0) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  int64_t axis = kiln_attr_int(c->node, "axis", 0), out[MAXR];
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kiln_ifail(c, "axis is out of range for rank %d", r);
  for (int d = 0; d < r; d++) out[d] = d == axis ? 0 : -1;
  for (size_t i = 0; i < c->n_in; i++) {
    const kiln_type *t = kiln_itype(c, i);
    if (!t || t->rank < 0) {
      out[axis] = -1;
      continue;
    }
    for (int d = 0; d < r; d++) {
      int64_t v = t->dims[d];
      if (d == axis) {
        if (out[d] >= 0) out[d] = v >= 0 ? out[d] + v : -1;
      } else if (v >= 0) {
        if (out[d] >= 0 && out[d] != v)
          return kiln_ifail(c, "input %zu has size %lld on axis %d, others %lld", i, (long long)v,
                            d, (long long)out[d]);
        out[d] = v;
      }
    }
  }
  kiln_infer_tensor(c, 0, dt, r, out);
  return KILN_OK;
}

/* ---- Concat ---- */

/* The output of a Concat is the inputs' rows (per index of the axes before `axis`) one after
 * another, so a range of output bytes maps to a few contiguous input pieces. */
typedef struct concat_job {
  kiln_tensor *o;
  const kiln_tensor *const *in;
  size_t n_in;
  const int64_t *off; /* n_in + 1 byte offsets of each input's piece in one output row */
  int64_t total;      /* output bytes */
  int64_t per;        /* bytes per task */
} concat_job;

/* Task k copies the output bytes [k per, (k + 1) per), per a whole number of cache lines so
 * that threads never write the same line. */
static void concat_task(void *ctx, size_t begin, size_t end, int thread) {
  const concat_job *j = ctx;
  (void)thread;
  int64_t orow = j->off[j->n_in];
  for (size_t k = begin; k < end; k++) {
    int64_t lo = (int64_t)k * j->per, hi = lo + j->per < j->total ? lo + j->per : j->total;
    while (lo < hi) {
      int64_t b = lo / orow, r = lo - b * orow;
      size_t i = 0;
      while (j->off[i + 1] <= r) i++;
      int64_t row = j->off[i + 1] - j->off[i], n = b * orow + j->off[i + 1];
      n = (n < hi ? n : hi) - lo;
      char *dst = (char *)j->o->data + lo;
      const char *src = (const char *)j->in[i]->data + b * row + (r - j->off[i]);
      if (dst != src) memcpy(dst, src, (size_t)n); /* equal: the memory plan put it in place */
      lo += n;
    }
  }
}

/* Bytes of output from which Concat's copy is split over the pool; below, one thread copies.
 * One thread copies ~30 GB/s, so 512 KiB take ~17 us: a second thread saves more than the
 * microseconds of waking and joining it (SqueezeNet's 13x13 concats, 260-350 KiB, measured no
 * faster on two threads; its 27x27 and 55x55 ones, 0.75 and 1.5 MiB, about 1.7x). */
enum { CONCAT_PAR_MIN = 1 << 19, CONCAT_TASK_MIN = 1 << 16 };

/* Concat of non-string tensors along `axis`: `outer` output rows, to which each input adds
 * its axis size times `inner_bytes`. One task per thread (the output bytes in equal parts). */
static kiln_code concat_bytes(kiln_kctx *c, kiln_tensor *o, int axis, int64_t outer,
                              int64_t inner_bytes) {
  int64_t stack[17], *off = c->n_in < 17 ? stack : malloc(sizeof(int64_t) * (c->n_in + 1));
  if (!off) return kiln_kfail(c, "out of memory");
  off[0] = 0;
  for (size_t i = 0; i < c->n_in; i++) off[i + 1] = off[i] + c->in[i]->dims[axis] * inner_bytes;
  concat_job j = {o, (const kiln_tensor *const *)c->in, c->n_in, off, outer * off[c->n_in], 0};
  kiln_threadpool *pool = j.total >= CONCAT_PAR_MIN ? kiln_kpool(c) : NULL;
  int64_t tasks = kiln_threadpool_size(pool), most = j.total / CONCAT_TASK_MIN;
  if (tasks > most) tasks = most > 1 ? most : 1;
  j.per = ((j.total + tasks - 1) / tasks + 63) & ~(int64_t)63;
  tasks = j.per ? (j.total + j.per - 1) / j.per : 0;
  kiln_parallel_for(tasks > 1 ? pool : NULL, (size_t)tasks, concat_task, &j, 0);
  if (off != stack) free(off);
  return KILN_OK;
}

static kiln_code run_concat(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, c->n_in);
  if (rc) return rc;
  const kiln_tensor *x0 = c->in[0];
  int r = x0->rank;
  if (r == 0) return kiln_kfail(c, "cannot concatenate scalars");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), r);
  if (axis < 0) return c->err->code;
  int64_t out[MAXR];
  memcpy(out, x0->dims, sizeof out);
  out[axis] = 0;
  for (size_t i = 0; i < c->n_in; i++) {
    const kiln_tensor *t = c->in[i];
    if (t->rank != r || t->dtype != x0->dtype)
      return kiln_kfail(c, "input %zu's type or rank differs from input 0's", i);
    for (int d = 0; d < r; d++)
      if (d != axis && t->dims[d] != x0->dims[d])
        return kiln_kfail(c, "input %zu has size %lld on axis %d, input 0 has %lld", i,
                          (long long)t->dims[d], d, (long long)x0->dims[d]);
    out[axis] += t->dims[axis];
  }
  kiln_tensor *o = kiln_out_uninit(c, 0, x0->dtype, r, out); /* the inputs cover every element */
  if (!o) return c->err->code;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= out[d];
  for (int d = axis + 1; d < r; d++) inner *= out[d];
  if (o->dtype == KILN_STRING) {
    int64_t orow = out[axis] * inner, off = 0;
    for (size_t i = 0; i < c->n_in; i++) {
      int64_t row = c->in[i]->dims[axis] * inner;
      for (int64_t b = 0; b < outer; b++) kiln_copy_elems(o, b * orow + off, c->in[i], b * row, row);
      off += row;
    }
    return KILN_OK;
  }
  return concat_bytes(c, o, axis, outer, inner * (int64_t)kiln_dtype_size(o->dtype));
}

/* ---- Split ---- */

/* Sizes of the n outputs along an axis of length dim: from `split` when given, else equal parts
 * (opset 18: num_outputs, the last part may be smaller). Returns an error text or NULL. */
static const char *split_sizes(int64_t dim, const int64_t *split, size_t ns, size_t n, int opset,
                               int64_t *sizes) {
  if (split) {
    if (ns != n) return "split has a different length than the number of outputs";
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
      if (split[i] < 0) return "split sizes must be non-negative";
      sum += sizes[i] = split[i];
    }
    return dim >= 0 && sum != dim ? "split sizes do not add up to the axis length" : NULL;
  }
  if (dim < 0) {
    for (size_t i = 0; i < n; i++) sizes[i] = -1;
    return NULL;
  }
  if (opset >= 18) { /* ceil-sized parts, the last one takes the rest */
    int64_t part = (dim + (int64_t)n - 1) / (int64_t)n, left = dim;
    for (size_t i = 0; i < n; i++) {
      sizes[i] = part < left ? part : left;
      left -= sizes[i];
    }
    return NULL;
  }
  if (dim % (int64_t)n) return "axis length is not divisible by the number of outputs";
  for (size_t i = 0; i < n; i++) sizes[i] = dim / (int64_t)n;
  return NULL;
}

/* The split sizes given to the node, malloc'd into *out (NULL when none are given): the
 * attribute before opset 13, input 1 (value t, NULL when not known) from 13.
 * Returns 1 when known, 0 when given but not known at load time, -1 when invalid. */
static int split_list(const kiln_node *node, int opset, const kiln_tensor *t, int64_t **out,
                      size_t *n) {
  *out = NULL;
  *n = 0;
  if (opset < 13) {
    const int64_t *a = kiln_attr_ints(node, "split", n);
    if (!a) return 1;
    if (!(*out = malloc(*n * sizeof **out + 1))) return -1;
    memcpy(*out, a, *n * sizeof *a);
    return 1;
  }
  if (node->n_in < 2 || node->in[1] < 0) return 1;
  if (!t) return 0;
  if (t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype) || t->rank > 1) return -1;
  if (!(*out = malloc((size_t)t->numel * sizeof **out + 1))) return -1;
  *n = (size_t)t->numel;
  for (size_t k = 0; k < *n; k++) (*out)[k] = kiln_get_i64(t, (int64_t)k);
  return 1;
}

static kiln_code infer_split(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  bool has_split = c->opset >= 13 && c->n_in > 1 && c->node->in[1] >= 0;
  if (c->opset >= 18 && !has_split &&
      kiln_attr_int(c->node, "num_outputs", 0) != (int64_t)c->n_out)
    return kiln_ifail(c, "num_outputs does not match the node's %zu outputs", c->n_out);
  for (size_t i = 0; i < c->n_out; i++) kiln_infer_tensor(c, i, dt, r, NULL);
  if (r < 0) return KILN_OK;
  int64_t axis = kiln_attr_int(c->node, "axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kiln_ifail(c, "axis is out of range for rank %d", r);
  int64_t *split, *sizes;
  size_t ns;
  int k = split_list(c->node, c->opset, c->n_in > 1 ? c->cin[1] : NULL, &split, &ns);
  if (k < 0) return kiln_ifail(c, "split must be a 1-D integer tensor");
  if (k == 0 || !(sizes = malloc(c->n_out * sizeof *sizes))) {
    free(split);
    return KILN_OK;
  }
  const kiln_type *x = c->in[0];
  kiln_code rc = KILN_OK;
  const char *e = split_sizes(x->dims[axis], split, ns, c->n_out, c->opset, sizes);
  if (e) rc = kiln_ifail(c, "%s", e);
  for (size_t i = 0; !rc && i < c->n_out; i++) {
    int64_t d[MAXR];
    memcpy(d, x->dims, sizeof d);
    d[axis] = sizes[i];
    kiln_infer_tensor(c, i, dt, r, d);
  }
  free(split);
  free(sizes);
  return rc;
}

static kiln_code run_split(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (x->rank == 0) return kiln_kfail(c, "cannot split a scalar");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), x->rank);
  if (axis < 0) return c->err->code;
  size_t n = c->n_out, ns;
  int64_t *split, *sizes;
  if (split_list(c->node, c->opset, kiln_in(c, 1), &split, &ns) != 1)
    return kiln_kfail(c, "split must be a 1-D integer tensor");
  if (!(sizes = malloc(n * sizeof *sizes))) {
    free(split);
    return kiln_kfail(c, "out of memory");
  }
  const char *e = split_sizes(x->dims[axis], split, ns, n, c->opset, sizes);
  if (e) rc = kiln_kfail(c, "%s", e);
  int64_t outer = 1, inner = 1, off = 0;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  int64_t irow = x->dims[axis] * inner;
  for (size_t i = 0; !rc && i < n; i++) {
    int64_t d[MAXR];
    memcpy(d, x->dims, sizeof d);
    d[axis] = sizes[i];
    kiln_tensor *o = kiln_out(c, i, x->dtype, x->rank, d);
    if (!o) {
      rc = c->err->code;
      break;
    }
    int64_t row = sizes[i] * inner;
    for (int64_t b = 0; b < outer; b++) kiln_copy_elems(o, b * row, x, b * irow + off, row);
    off += row;
  }
  free(split);
  free(sizes);
  return rc;
}

const kiln_op_schema kiln_ops_shape[] = {
    {.domain = "", .name = "Reshape", .since = 5, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_reshape, .run = run_reshape, .flow = KILN_FLOW_RESHAPE, .cost = kiln_cost_view,
     .flags = KILN_OPF_IN_PLACE},
    {.domain = "", .name = "Shape", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_shape, .run = run_shape, .flow = KILN_FLOW_SHAPE},
    {.domain = "", .name = "Size", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_size, .run = run_size, .flow = KILN_FLOW_SIZE},
    {.domain = "", .name = "Flatten", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_flatten, .run = run_flatten, .flow = KILN_FLOW_FLATTEN, .cost = kiln_cost_view,
     .flags = KILN_OPF_IN_PLACE},
    {.domain = "", .name = "Squeeze", .since = 1, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = infer_squeeze, .run = run_squeeze, .flow = KILN_FLOW_SQUEEZE, .cost = kiln_cost_view,
     .flags = KILN_OPF_IN_PLACE},
    {.domain = "", .name = "Unsqueeze", .since = 1, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = infer_unsqueeze, .run = run_unsqueeze, .flow = KILN_FLOW_UNSQUEEZE, .cost = kiln_cost_view,
     .flags = KILN_OPF_IN_PLACE},
    {.domain = "", .name = "Identity", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = run_identity, .flow = KILN_FLOW_COPY, .cost = kiln_cost_view},
    {.domain = "", .name = "Concat", .since = 1, .inputs = {1, KILN_VARIADIC}, .outputs = {1, 1},
     .infer = infer_concat, .run = run_concat, .flow = KILN_FLOW_CONCAT, .flags = KILN_OPF_CONCAT},
    {.domain = "", .name = "Split", .since = 1, .inputs = {1, 2}, .outputs = {1, KILN_VARIADIC},
     .infer = infer_split, .run = run_split, .flow = KILN_FLOW_SPLIT},
    {0},
};
