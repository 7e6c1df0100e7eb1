/* Data-moving operators: Transpose, Slice, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, and
 * Trilu (a copy of one triangle). Each output element is an input element moved, repeated or
 * padded; the one strided walk behind most of them is gather_view below.
 *
 * Shape functions state only what is certain, using constant inputs where the model has them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define MAXR KILN_MAX_RANK

/* Whether optional input i is wired to a value. */
static bool in_given(const kiln_node *n, size_t i) { return i < n->n_in && n->in[i] >= 0; }

/* ---- helpers shared by the kernels ---- */

static void row_strides(int rank, const int64_t *dims, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= dims[d];
  }
}

/* Viewing out's elements in row-major order as shape (rank, dims), set
 * out[i0..ik] = in[base + sum_d i_d * sstride[d]]: the one strided walk behind Transpose, Slice,
 * Expand and Depth/SpaceToDepth (sstride 0 broadcasts, a negative one walks backwards). */
static void gather_view(kiln_tensor *out, int rank, const int64_t *dims, const kiln_tensor *in,
                        int64_t base, const int64_t *sstride) {
  if (out->numel == 0) return;
  int64_t inner = rank ? dims[rank - 1] : 1, is = rank ? sstride[rank - 1] : 0;
  int64_t idx[MAXR] = {0}, src = base;
  size_t esz = kiln_dtype_size(out->dtype);
  for (int64_t o = 0; o < out->numel; o += inner) {
    if (is == 1) {
      kiln_copy_elems(out, o, in, src, inner);
    } else if (out->dtype == KILN_STRING) {
      for (int64_t k = 0; k < inner; k++) kiln_copy_elem(out, o + k, in, src + k * is);
    } else if (esz == 4) {
      uint32_t *d = (uint32_t *)out->data + o;
      const uint32_t *s = (const uint32_t *)in->data + src;
      for (int64_t k = 0; k < inner; k++) d[k] = s[k * is];
    } else if (esz == 8) {
      uint64_t *d = (uint64_t *)out->data + o;
      const uint64_t *s = (const uint64_t *)in->data + src;
      for (int64_t k = 0; k < inner; k++) d[k] = s[k * is];
    } else {
      for (int64_t k = 0; k < inner; k++)
        memcpy((char *)out->data + (size_t)(o + k) * esz,
               (const char *)in->data + (size_t)(src + k * is) * esz, esz);
    }
    for (int d = rank - 2; d >= 0; d--) {
      src += sstride[d];
      if (++idx[d] < dims[d]) break;
      src -= idx[d] * sstride[d];
      idx[d] = 0;
    }
  }
}

/* ---- Transpose ---- */

/* perm attribute (default: reversed axes), checked to be a permutation of 0..r-1. */
static bool transpose_perm(const kiln_node *node, int r, int *perm) {
  size_t n;
  const int64_t *p = kiln_attr_ints(node, "perm", &n);
  if (!p) {
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
    return true;
  }
  if ((int)n != r) return false;
  bool seen[MAXR] = {false};
  for (int i = 0; i < r; i++) {
    if (p[i] < 0 || p[i] >= r || seen[p[i]]) return false;
    seen[p[i]] = true;
    perm[i] = (int)p[i];
  }
  return true;
}

static kiln_code infer_transpose(kiln_ictx *c) {
  int r = kiln_irank(c, 0), perm[MAXR];
  int64_t out[MAXR];
  if (r < 0) {
    size_t n;
    const int64_t *p = kiln_attr_ints(c->node, "perm", &n);
    kiln_infer_tensor(c, 0, kiln_idtype(c, 0), p && n <= MAXR ? (int)n : -1, NULL);
    return KILN_OK;
  }
  if (!transpose_perm(c->node, r, perm))
    return kiln_ifail(c, "perm is not a permutation of the %d axes", r);
  for (int i = 0; i < r; i++) out[i] = c->in[0]->dims[perm[i]];
  kiln_infer_tensor(c, 0, kiln_idtype(c, 0), r, out);
  return KILN_OK;
}

static kiln_code run_transpose(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int perm[MAXR];
  int64_t out[MAXR], istride[MAXR], sstride[MAXR];
  if (!transpose_perm(c->node, x->rank, perm))
    return kiln_kfail(c, "perm is not a permutation of the %d axes", x->rank);
  row_strides(x->rank, x->dims, istride);
  for (int i = 0; i < x->rank; i++) {
    out[i] = x->dims[perm[i]];
    sstride[i] = istride[perm[i]];
  }
  kiln_tensor *o = kiln_out_uninit(c, 0, x->dtype, x->rank, out); /* gather_view writes it all */
  if (!o) return c->err->code;
  /* A perm that only moves axes of size 1 (e.g. (1, S, E) -> (S, 1, E)) keeps the memory
   * order: one copy instead of one per row. */
  int last = -1;
  bool same_order = true;
  for (int i = 0; i < x->rank; i++) {
    if (out[i] == 1) continue;
    same_order &= perm[i] > last;
    last = perm[i];
  }
  if (same_order && o->numel) kiln_copy_elems(o, 0, x, 0, x->numel);
  else gather_view(o, o->rank, o->dims, x, 0, sstride);
  return KILN_OK;
}

/* ---- Slice ---- */

typedef struct slice_spec {
  size_t n;
  int64_t starts[MAXR], ends[MAXR], axes[MAXR], steps[MAXR];
} slice_spec;

/* Fill `sp` from attributes (opset < 10) or from the given input tensors (NULL = omitted). */
static const char *slice_spec_read(slice_spec *sp, const kiln_node *node, int opset,
                                   const kiln_tensor *const *t) {
  size_t n[4] = {0, 0, 0, 0};
  int64_t *dst[4] = {sp->starts, sp->ends, sp->axes, sp->steps};
  bool have[4] = {false, false, false, false};
  if (opset < 10) {
    static const char *names[3] = {"starts", "ends", "axes"};
    for (int k = 0; k < 3; k++) {
      const int64_t *a = kiln_attr_ints(node, names[k], &n[k]);
      if (n[k] > MAXR) return "slice lists are too long";
      if (a) memcpy(dst[k], a, n[k] * sizeof *a), have[k] = true;
    }
    if (!have[0] || !have[1]) return "starts and ends are required";
  } else {
    for (int k = 0; k < 4; k++) {
      if (!t[k]) continue;
      if (t[k]->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t[k]->dtype) || t[k]->rank != 1)
        return "starts, ends, axes and steps must be 1-D integer tensors";
      if (t[k]->numel > MAXR) return "slice lists are too long";
      n[k] = (size_t)t[k]->numel;
      for (size_t i = 0; i < n[k]; i++) dst[k][i] = kiln_get_i64(t[k], (int64_t)i);
      have[k] = true;
    }
  }
  sp->n = n[0];
  if (n[1] != n[0] || (have[2] && n[2] != n[0]) || (have[3] && n[3] != n[0]))
    return "starts, ends, axes and steps differ in length";
  for (size_t i = 0; i < sp->n; i++) {
    if (!have[2]) sp->axes[i] = (int64_t)i;
    if (!have[3]) sp->steps[i] = 1;
    if (sp->steps[i] == 0) return "steps must not be 0";
  }
  return NULL;
}

/* Apply `sp` to a shape: per axis the first index, step and count. dims may hold -1 (unknown);
 * then the count is -1. Returns an error text or NULL. */
static const char *slice_apply(const slice_spec *sp, int r, const int64_t *dims, int64_t *first,
                               int64_t *step, int64_t *count) {
  for (int d = 0; d < r; d++) first[d] = 0, step[d] = 1, count[d] = dims[d];
  bool seen[MAXR] = {false};
  for (size_t i = 0; i < sp->n; i++) {
    int64_t a = sp->axes[i] < 0 ? sp->axes[i] + r : sp->axes[i];
    if (a < 0 || a >= r) return "an axis is out of range";
    if (seen[a]) return "an axis is repeated";
    seen[a] = true;
    int64_t dim = dims[a], s = sp->starts[i], e = sp->ends[i], st = sp->steps[i];
    step[a] = st;
    if (dim < 0) {
      count[a] = -1;
      continue;
    }
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (st > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      count[a] = e > s ? (e - s - 1) / st + 1 : 0;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      uint64_t ust = (uint64_t)0 - (uint64_t)st;
      count[a] = s > e ? (int64_t)((uint64_t)(s - e - 1) / ust) + 1 : 0;
    }
    first[a] = s;
  }
  return NULL;
}

static kiln_code infer_slice(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  const kiln_tensor *t[4] = {NULL, NULL, NULL, NULL};
  bool known = r >= 0;
  for (size_t k = 0; c->opset >= 10 && k < 4; k++) {
    bool present = k + 1 < c->n_in && c->node->in[k + 1] >= 0;
    t[k] = present ? c->cin[k + 1] : NULL;
    if (present && !t[k]) known = false;
  }
  if (!known) {
    kiln_infer_tensor(c, 0, dt, r, NULL);
    return KILN_OK;
  }
  slice_spec sp;
  int64_t first[MAXR], step[MAXR], count[MAXR];
  const char *e = slice_spec_read(&sp, c->node, c->opset, t);
  if (!e) e = slice_apply(&sp, r, c->in[0]->dims, first, step, count);
  if (e) return kiln_ifail(c, "%s", e);
  kiln_infer_tensor(c, 0, dt, r, count);
  return KILN_OK;
}

static kiln_code run_slice(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, c->opset < 10 ? 1 : 3);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  const kiln_tensor *t[4] = {kiln_in(c, 1), kiln_in(c, 2), kiln_in(c, 3), kiln_in(c, 4)};
  slice_spec sp;
  int64_t first[MAXR], step[MAXR], count[MAXR], istride[MAXR], sstride[MAXR], base = 0;
  const char *e = slice_spec_read(&sp, c->node, c->opset, t);
  if (!e) e = slice_apply(&sp, x->rank, x->dims, first, step, count);
  if (e) return kiln_kfail(c, "%s", e);
  row_strides(x->rank, x->dims, istride);
  for (int d = 0; d < x->rank; d++) {
    base += first[d] * istride[d];
    sstride[d] = step[d] * istride[d];
  }
  kiln_tensor *o = kiln_out_uninit(c, 0, x->dtype, x->rank, count); /* gather_view writes it all */
  if (!o) return c->err->code;
  gather_view(o, o->rank, o->dims, x, base, sstride);
  return KILN_OK;
}

/* ---- Expand, Tile ---- */

/* Broadcast input dims (-1 = unknown) with a target shape. Returns false when incompatible. */
static bool expand_dims(int r, const int64_t *d, const int64_t *s, int n, int *orank,
                        int64_t *out) {
  int m = r > n ? r : n;
  if (m > MAXR) return false;
  for (int i = 0; i < m; i++) {
    int64_t a = i < m - r ? 1 : d[i - (m - r)], b = i < m - n ? 1 : s[i - (m - n)];
    if (b < 0) return false;
    if (b == 1 || a == b)
      out[i] = a;
    else if (a == 1 || a < 0)
      out[i] = b;
    else
      return false;
  }
  *orank = m;
  return true;
}

static kiln_code infer_expand(kiln_ictx *c) {
  int r = kiln_irank(c, 0), orank;
  kiln_dtype dt = kiln_idtype(c, 0);
  int64_t s[MAXR], out[MAXR];
  size_t n;
  if (!kiln_iconst_ints(c, 1, s, MAXR, &n)) {
    int64_t len = kiln_ilist_len(c, 1);
    kiln_infer_tensor(c, 0, dt, r >= 0 && len >= 0 && len <= MAXR ? (r > len ? r : (int)len) : -1,
                      NULL);
    return KILN_OK;
  }
  if (r < 0) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  if (!expand_dims(r, c->in[0]->dims, s, (int)n, &orank, out))
    return kiln_ifail(c, "input shape cannot be broadcast to the given shape");
  kiln_infer_tensor(c, 0, dt, orank, out);
  return KILN_OK;
}

static kiln_code run_expand(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t s[MAXR], out[MAXR];
  size_t n;
  int orank;
  if ((rc = kiln_read_ints(c, c->in[1], s, MAXR, &n))) return rc;
  if (!expand_dims(x->rank, x->dims, s, (int)n, &orank, out))
    return kiln_kfail(c, "input shape cannot be broadcast to the given shape");
  kiln_tensor *o = kiln_out(c, 0, x->dtype, orank, out);
  if (!o) return c->err->code;
  kiln_bcast b;
  kiln_bcast_init(&b, orank, out, x);
  gather_view(o, o->rank, o->dims, x, 0, b.stride);
  return KILN_OK;
}

static kiln_code infer_tile(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  int64_t rep[MAXR], out[MAXR];
  size_t n;
  if (r < 0 || !kiln_iconst_ints(c, 1, rep, MAXR, &n)) {
    kiln_infer_tensor(c, 0, dt, r, NULL);
    return KILN_OK;
  }
  if ((int)n != r) return kiln_ifail(c, "repeats has %zu entries for rank %d", n, r);
  for (int d = 0; d < r; d++) {
    if (rep[d] < 0) return kiln_ifail(c, "repeats must be non-negative");
    int64_t v = c->in[0]->dims[d];
    out[d] = rep[d] == 0 ? 0 : v < 0 || !kiln_mul_ok(v, rep[d], &v) ? -1 : v;
  }
  kiln_infer_tensor(c, 0, dt, r, out);
  return KILN_OK;
}

/* Tile's output block of axis d at offset ob from the input block at ib: the input's slices
 * (each filled the same way one axis down), then copies of them, doubling, so that a large
 * output is written by a few long copies whatever the shape (recursion depth: the rank). */
static void tile_block(kiln_tensor *o, int64_t ob, const kiln_tensor *x, int64_t ib, int d, const int64_t *out,
                       const int64_t *bout, const int64_t *istride) {
  int64_t n = x->dims[d], sub = bout[d + 1];
  if (d == x->rank - 1)
    kiln_copy_elems(o, ob, x, ib, n);
  else
    for (int64_t i = 0; i < n; i++) tile_block(o, ob + i * sub, x, ib + i * istride[d], d + 1, out, bout, istride);
  for (int64_t have = n * sub, want = out[d] * sub; have < want;) {
    int64_t m = have < want - have ? have : want - have;
    kiln_copy_elems(o, ob + have, o, ob, m);
    have += m;
  }
}

static kiln_code run_tile(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int r = x->rank;
  int64_t rep[MAXR], out[MAXR], istride[MAXR];
  size_t n;
  if ((rc = kiln_read_ints(c, c->in[1], rep, MAXR, &n))) return rc;
  if ((int)n != r) return kiln_kfail(c, "repeats has %zu entries for rank %d", n, r);
  for (int d = 0; d < r; d++) {
    if (rep[d] < 0) return kiln_kfail(c, "repeats must be non-negative");
    if (!kiln_mul_ok(x->dims[d], rep[d], &out[d])) return kiln_kfail(c, "output is too large");
  }
  kiln_tensor *o = kiln_out(c, 0, x->dtype, r, out);
  if (!o) return c->err->code;
  if (o->numel == 0) return KILN_OK;
  if (r == 0) return kiln_copy_elems(o, 0, x, 0, 1), KILN_OK;
  row_strides(r, x->dims, istride);
  int64_t bout[MAXR + 1];
  bout[r] = 1;
  for (int d = r - 1; d >= 0; d--) bout[d] = bout[d + 1] * out[d];
  tile_block(o, 0, x, 0, 0, out, bout, istride);
  return KILN_OK;
}

/* ---- Pad ---- */

enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

static int pad_mode_of(const kiln_node *n) {
  const char *m = kiln_attr_str(n, "mode", "constant");
  if (!strcmp(m, "constant")) return PAD_CONSTANT;
  if (!strcmp(m, "reflect")) return PAD_REFLECT;
  if (!strcmp(m, "edge")) return PAD_EDGE;
  if (!strcmp(m, "wrap")) return PAD_WRAP;
  return -1;
}

/* Per-axis begin/end pads for a rank-r input: from the `pads` attribute (opset < 11) or the pads
 * input, spread over `axes` (opset 18) when given. Returns an error text or NULL. */
static const char *pad_amounts(int r, const int64_t *pads, size_t np, const int64_t *axes,
                               size_t na, bool have_axes, int64_t *begin, int64_t *end) {
  size_t n = have_axes ? na : (size_t)r;
  if (np != 2 * n) return "pads must hold two entries per padded axis";
  for (int d = 0; d < r; d++) begin[d] = end[d] = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t a = have_axes ? (axes[i] < 0 ? axes[i] + r : axes[i]) : (int64_t)i;
    if (a < 0 || a >= r) return "an axis is out of range";
    begin[a] = pads[i];
    end[a] = pads[i + n];
  }
  return NULL;
}

/* Reads pads (and axes) from attributes or from tensors pt/at (NULL = not given / not known). */
static const char *pad_read(const kiln_node *node, int opset, int r, const kiln_tensor *pt,
                            const kiln_tensor *at, int64_t *begin, int64_t *end) {
  int64_t pads[2 * MAXR], axes[MAXR];
  size_t np = 0, na = 0;
  if (opset < 11) {
    const int64_t *p = kiln_attr_ints(node, "pads", &np);
    if (!p) return "pads are required";
    if (np > 2 * MAXR) return "pads has too many entries";
    memcpy(pads, p, np * sizeof *p);
  } else {
    if (!pt || pt->kind != KILN_KIND_TENSOR) return "pads (input 1) is required from opset 11";
    if (!kiln_dtype_is_int(pt->dtype) || pt->numel > 2 * MAXR || pt->rank > 1)
      return "pads must be a short 1-D integer tensor";
    np = (size_t)pt->numel;
    for (size_t i = 0; i < np; i++) pads[i] = kiln_get_i64(pt, (int64_t)i);
    if (at) {
      if (!kiln_dtype_is_int(at->dtype) || at->numel > MAXR || at->rank > 1)
        return "axes must be a short 1-D integer tensor";
      na = (size_t)at->numel;
      for (size_t i = 0; i < na; i++) axes[i] = kiln_get_i64(at, (int64_t)i);
    }
  }
  return pad_amounts(r, pads, np, axes, na, at != NULL, begin, end);
}

static kiln_code infer_pad(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  kiln_dtype dt = kiln_idtype(c, 0);
  int64_t begin[MAXR], end[MAXR], out[MAXR];
  bool axes_given = c->opset >= 18 && in_given(c->node, 3);
  const kiln_tensor *pt = c->n_in > 1 ? c->cin[1] : NULL, *at = axes_given ? c->cin[3] : NULL;
  if (pad_mode_of(c->node) < 0) return kiln_ifail(c, "unknown mode");
  if (r < 0 || (c->opset >= 11 && (!pt || (axes_given && !at)))) {
    kiln_infer_tensor(c, 0, dt, r, NULL);
    return KILN_OK;
  }
  const char *e = pad_read(c->node, c->opset, r, pt, at, begin, end);
  if (e) return kiln_ifail(c, "%s", e);
  for (int d = 0; d < r; d++) {
    int64_t v = c->in[0]->dims[d];
    out[d] = v < 0 ? -1 : v + begin[d] + end[d];
    if (v >= 0 && out[d] < 0) return kiln_ifail(c, "pads remove more than axis %d holds", d);
  }
  kiln_infer_tensor(c, 0, dt, r, out);
  return KILN_OK;
}

/* Source index along one axis of length n for padded coordinate i (already shifted by the begin
 * pad), or -1 for the constant value. */
static int64_t pad_source(int mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PAD_EDGE: return i < 0 ? 0 : n - 1;
    case PAD_WRAP: return ((i % n) + n) % n;
    case PAD_REFLECT: {
      if (n == 1) return 0;
      int64_t p = 2 * (n - 1), j = ((i % p) + p) % p;
      return j < n ? j : p - j;
    }
    default: return -1;
  }
}

static kiln_code run_pad(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, c->opset < 11 ? 1 : 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *cv = c->opset >= 11 ? kiln_in(c, 2) : NULL;
  int r = x->rank, mode = pad_mode_of(c->node);
  int64_t begin[MAXR], end[MAXR], out[MAXR], istride[MAXR], total = 0;
  if (mode < 0) return kiln_kfail(c, "unknown mode '%s'", kiln_attr_str(c->node, "mode", ""));
  const char *e = pad_read(c->node, c->opset, r, kiln_in(c, 1),
                           c->opset >= 18 ? kiln_in(c, 3) : NULL, begin, end);
  if (e) return kiln_kfail(c, "%s", e);
  if (cv && (cv->dtype != x->dtype || cv->numel != 1))
    return kiln_kfail(c, "constant_value must be one element of the input's type");
  for (int d = 0; d < r; d++) {
    out[d] = x->dims[d] + begin[d] + end[d];
    if (out[d] < 0) return kiln_kfail(c, "pads remove more than axis %d holds", d);
    if (mode != PAD_CONSTANT && x->dims[d] == 0 && out[d] > 0)
      return kiln_kfail(c, "cannot pad empty axis %d in this mode", d);
    total += out[d];
  }
  kiln_tensor *o = kiln_out(c, 0, x->dtype, r, out);
  if (!o) return c->err->code;
  if (o->numel == 0) return KILN_OK;
  /* map[d][i]: source index along axis d for output index i, or -1 (constant) */
  int64_t *buf = malloc((size_t)(total + 1) * sizeof *buf), *map[MAXR];
  if (!buf) return kiln_kfail(c, "out of memory");
  for (int64_t d = 0, off = 0; d < r; off += out[d], d++) {
    map[d] = buf + off;
    for (int64_t i = 0; i < out[d]; i++) map[d][i] = pad_source(mode, i - begin[d], x->dims[d]);
  }
  row_strides(r, x->dims, istride);
  double fill = cv ? 0 : kiln_attr_float(c->node, "value", 0.0f);
  int64_t idx[MAXR] = {0}, inner = r ? out[r - 1] : 1;
  for (int64_t o0 = 0; o0 < o->numel; o0 += inner) {
    int64_t src = 0;
    bool outside = false;
    for (int d = 0; d < r - 1; d++) {
      if (map[d][idx[d]] < 0) outside = true;
      src += map[d][idx[d]] * istride[d];
    }
    for (int64_t k = 0; k < inner; k++) {
      int64_t s = r ? map[r - 1][k] : 0;
      if (!outside && s >= 0)
        kiln_copy_elem(o, o0 + k, x, src + s);
      else if (cv)
        kiln_copy_elem(o, o0 + k, cv, 0);
      else if (fill != 0)
        kiln_set_f64(o, o0 + k, fill);
    }
    for (int d = r - 2; d >= 0; d--) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  free(buf);
  return KILN_OK;
}

/* ---- DepthToSpace, SpaceToDepth: fixed 6-D transposes ---- */

static kiln_code infer_d2s(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  int64_t b = kiln_attr_int(c->node, "blocksize", 0), out[4];
  bool d2s = !strcmp(c->node->op_type, "DepthToSpace");
  if (b <= 0 || b > 1 << 20) return kiln_ifail(c, "blocksize must be positive");
  if (r >= 0 && r != 4) return kiln_ifail(c, "input must be 4-D, got rank %d", r);
  if (r < 0) {
    kiln_infer_tensor(c, 0, kiln_idtype(c, 0), 4, NULL);
    return KILN_OK;
  }
  const int64_t *d = c->in[0]->dims;
  out[0] = d[0];
  if (d2s) {
    if (d[1] >= 0 && d[1] % (b * b)) return kiln_ifail(c, "channels must divide by blocksize^2");
    out[1] = d[1] < 0 ? -1 : d[1] / (b * b);
    out[2] = d[2] < 0 ? -1 : d[2] * b;
    out[3] = d[3] < 0 ? -1 : d[3] * b;
  } else {
    if ((d[2] >= 0 && d[2] % b) || (d[3] >= 0 && d[3] % b))
      return kiln_ifail(c, "height and width must divide by blocksize");
    out[1] = d[1] < 0 ? -1 : d[1] * b * b;
    out[2] = d[2] < 0 ? -1 : d[2] / b;
    out[3] = d[3] < 0 ? -1 : d[3] / b;
  }
  kiln_infer_tensor(c, 0, kiln_idtype(c, 0), 4, out);
  return KILN_OK;
}

static kiln_code run_d2s(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t b = kiln_attr_int(c->node, "blocksize", 0), out[4], in6[6], s6[6], o6[6], ss[6];
  bool d2s = !strcmp(c->node->op_type, "DepthToSpace");
  bool crd = d2s && c->opset >= 11 && !strcmp(kiln_attr_str(c->node, "mode", "DCR"), "CRD");
  if (b <= 0 || b > 1 << 20) return kiln_kfail(c, "blocksize must be positive");
  if (x->rank != 4) return kiln_kfail(c, "input must be 4-D, got rank %d", x->rank);
  int64_t n = x->dims[0], ch = x->dims[1], h = x->dims[2], w = x->dims[3];
  if (d2s) {
    if (ch % (b * b)) return kiln_kfail(c, "channels must divide by blocksize^2");
    int64_t cc = ch / (b * b);
    out[0] = n, out[1] = cc, out[2] = h * b, out[3] = w * b;
    /* output viewed as [N, C', H, b, W, b]; input as DCR [N, b, b, C', H, W] or
     * CRD [N, C', b, b, H, W] */
    int64_t o[6] = {n, cc, h, b, w, b};
    memcpy(o6, o, sizeof o);
    int64_t dcr[6] = {n, b, b, cc, h, w}, crdv[6] = {n, cc, b, b, h, w};
    memcpy(in6, crd ? crdv : dcr, sizeof in6);
    row_strides(6, in6, s6);
    static const int p_dcr[6] = {0, 3, 4, 1, 5, 2}, p_crd[6] = {0, 1, 4, 2, 5, 3};
    for (int i = 0; i < 6; i++) ss[i] = s6[crd ? p_crd[i] : p_dcr[i]];
  } else {
    if (h % b || w % b) return kiln_kfail(c, "height and width must divide by blocksize");
    out[0] = n, out[1] = ch * b * b, out[2] = h / b, out[3] = w / b;
    /* output viewed as [N, b, b, C, H', W']; input as [N, C, H', b, W', b] */
    int64_t o[6] = {n, b, b, ch, h / b, w / b}, i6[6] = {n, ch, h / b, b, w / b, b};
    memcpy(o6, o, sizeof o);
    row_strides(6, i6, s6);
    static const int p[6] = {0, 3, 5, 1, 2, 4};
    for (int i = 0; i < 6; i++) ss[i] = s6[p[i]];
  }
  kiln_tensor *t = kiln_out(c, 0, x->dtype, 4, out);
  if (!t) return c->err->code;
  gather_view(t, 6, o6, x, 0, ss);
  return KILN_OK;
}

/* ---- Trilu ---- */

static kiln_code infer_trilu(kiln_ictx *c) {
  int r = kiln_irank(c, 0);
  if (r >= 0 && r < 2) return kiln_ifail(c, "input must have rank >= 2, got %d", r);
  kiln_infer_same(c, 0, 0);
  return KILN_OK;
}

static kiln_code run_trilu(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  int64_t k = 0;
  if (kiln_in(c, 1) && (rc = kiln_scalar_int(c, c->in[1], "k", &k))) return rc;
  if (x->rank < 2) return kiln_kfail(c, "input must have rank >= 2, got %d", x->rank);
  bool upper = kiln_attr_int(c->node, "upper", 1) != 0;
  kiln_tensor *o = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!o) return c->err->code;
  int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
  if (k > cols) k = cols + 1; /* keeps the column bounds below in range */
  if (k < -rows) k = -rows - 1;
  for (int64_t m = 0; m * rows * cols < x->numel; m++)
    for (int64_t i = 0; i < rows; i++) {
      /* upper keeps columns j >= i + k; lower keeps j <= i + k */
      int64_t lo = upper ? i + k : 0, hi = upper ? cols : i + k + 1;
      lo = lo < 0 ? 0 : lo;
      hi = hi > cols ? cols : hi;
      int64_t row = (m * rows + i) * cols;
      kiln_copy_elems(o, row + lo, x, row + lo, hi - lo);
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_layout[] = {
    {.domain = "", .name = "Transpose", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_transpose, .run = run_transpose, .flow = KILN_FLOW_TRANSPOSE},
    {.domain = "", .name = "Slice", .since = 1, .inputs = {1, 5}, .outputs = {1, 1},
     .infer = infer_slice, .run = run_slice, .flow = KILN_FLOW_SLICE},
    {.domain = "", .name = "Expand", .since = 8, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_expand, .run = run_expand, .flow = KILN_FLOW_EXPAND},
    {.domain = "", .name = "Tile", .since = 6, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_tile, .run = run_tile},
    {.domain = "", .name = "Pad", .since = 2, .inputs = {1, 4}, .outputs = {1, 1},
     .infer = infer_pad, .run = run_pad, .flow = KILN_FLOW_BATCH},
    {.domain = "", .name = "DepthToSpace", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_d2s, .run = run_d2s},
    {.domain = "", .name = "SpaceToDepth", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_d2s, .run = run_d2s},
    {.domain = "", .name = "Trilu", .since = 14, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = infer_trilu, .run = run_trilu, .flow = KILN_FLOW_SAME},
    {0},
};
