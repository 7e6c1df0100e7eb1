/* Control-flow operators: If, Loop, Scan.
 *
 * Each runs a graph attribute through kiln_subgraph_run, which binds the inputs we pass (borrowed)
 * and resolves outer-scope names through the current frame. Values the body returns are new and
 * ours: loop-carried values are handed back to the next iteration and freed when replaced. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"


/* ---- helpers ---- */

static const kiln_graph *graph_attr(const kiln_node *n, const char *name) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->kind == KILN_ATTR_GRAPH ? a->g : NULL;
}

static kiln_code errcode(const kiln_kctx *c) {
  return c->err && c->err->code ? c->err->code : KILN_ERR_RUN;
}

/* A one-element boolean (or numeric: nonzero is true) tensor. */
static kiln_code read_bool(kiln_kctx *c, const kiln_tensor *t, const char *what, bool *v) {
  if (!t || t->kind != KILN_KIND_TENSOR || t->numel != 1 || t->dtype == KILN_STRING)
    return kiln_kfail(c, "%s must be a one-element boolean tensor", what);
  *v = kiln_get_f64(t, 0) != 0;
  return KILN_OK;
}

static void free_all(kiln_tensor **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    kiln_tensor_free(v[i]);
    v[i] = NULL;
  }
}

/* Element counts before and after `axis` of a shape. */
static void split_dims(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < rank; d++) {
    if (d < axis) *outer *= dims[d];
    if (d > axis) *inner *= dims[d];
  }
}

/* x[..., idx, ...] along `axis`: a new tensor of rank x->rank - 1. */
static kiln_tensor *slice_axis(kiln_kctx *c, const kiln_tensor *x, int axis, int64_t idx) {
  int64_t dims[KILN_MAX_RANK] = {0}, outer, inner;
  for (int d = 0, k = 0; d < x->rank; d++)
    if (d != axis) dims[k++] = x->dims[d];
  split_dims(x->rank, x->dims, axis, &outer, &inner);
  kiln_tensor *t = kiln_tensor_new(x->dtype, x->rank - 1, dims, c->err);
  if (!t) return NULL;
  for (int64_t o = 0; o < outer; o++)
    kiln_copy_elems(t, o * inner, x, (o * x->dims[axis] + idx) * inner, inner);
  return t;
}

/* dst[..., idx, ...] = src along `axis`; src has dst's shape without that axis. */
static void place_axis(kiln_tensor *dst, int axis, int64_t idx, const kiln_tensor *src) {
  int64_t outer, inner;
  split_dims(dst->rank, dst->dims, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    kiln_copy_elems(dst, (o * dst->dims[axis] + idx) * inner, src, o * inner, inner);
}

/* A stack of `count` items of the body output `out_id` shaped like `item`, with the new axis at
 * `axis`. With no item (zero iterations) the body's declared type gives the element type and
 * the item shape, unknown dims becoming 0 so the result is empty either way. */
static kiln_tensor *new_stack(kiln_kctx *c, const kiln_graph *g, size_t out_id,
                              const kiln_tensor *item, int axis, int64_t count) {
  int64_t dims[KILN_MAX_RANK] = {0};
  int rank;
  kiln_dtype dt;
  if (item) {
    dt = item->dtype;
    rank = item->rank;
    memcpy(dims, item->dims, sizeof dims);
  } else {
    const kiln_type *ty = &g->values[g->outputs[out_id]].type;
    dt = ty->dtype ? ty->dtype : KILN_FLOAT;
    rank = ty->rank > 0 && ty->rank < KILN_MAX_RANK ? ty->rank : 0;
    for (int d = 0; d < rank; d++) dims[d] = ty->dims[d] >= 0 ? ty->dims[d] : 0;
  }
  if (rank + 1 > KILN_MAX_RANK) {
    kiln_kunsup(c, "scan output rank exceeds %d", KILN_MAX_RANK);
    return NULL;
  }
  if (axis < 0) axis += rank + 1;
  if (axis < 0 || axis > rank) {
    kiln_kfail(c, "scan output axis is out of range for rank %d", rank + 1);
    return NULL;
  }
  memmove(dims + axis + 1, dims + axis, (size_t)(rank - axis) * sizeof *dims);
  dims[axis] = count;
  return kiln_tensor_new(dt, rank + 1, dims, c->err);
}

static bool same_item(kiln_kctx *c, const kiln_tensor *first, const kiln_tensor *t, size_t k) {
  if (t->kind != KILN_KIND_TENSOR) {
    kiln_kfail(c, "scan output %zu is not a tensor", k);
    return false;
  }
  if (t->dtype != first->dtype || !kiln_same_shape(t, first)) {
    char a[200], b[200];
    kiln_kfail(c, "scan output %zu changes from %s to %s between iterations", k,
               kiln_shape_str(first, a, sizeof a), kiln_shape_str(t, b, sizeof b));
    return false;
  }
  return true;
}

/* ---- If ---- */

static kiln_code if_run(kiln_kctx *c) {
  bool cond = false;
  if (read_bool(c, c->in[0], "cond", &cond)) return KILN_ERR_RUN;
  const kiln_graph *g = graph_attr(c->node, cond ? "then_branch" : "else_branch");
  if (!g) return kiln_kfail(c, "missing graph attribute '%s'", cond ? "then_branch" : "else_branch");
  if (g->n_outputs != c->n_out)
    return kiln_kfail(c, "the %s branch gives %zu outputs, the node has %zu", cond ? "then" : "else",
                      g->n_outputs, c->n_out);
  kiln_tensor **res = calloc(g->n_outputs ? g->n_outputs : 1, sizeof *res);
  if (!res) return kiln_kfail(c, "out of memory");
  kiln_code rc = kiln_subgraph_run(c, g, 0, NULL, res);
  for (size_t i = 0; i < g->n_outputs; i++) {
    if (rc) kiln_tensor_free(res[i]);
    else kiln_set_out(c, i, res[i]);
  }
  free(res);
  return rc;
}

/* An output is what both branches agree on: kind, element type, and rank and dims where equal. */
static kiln_code if_infer(kiln_ictx *c) {
  const kiln_graph *a = graph_attr(c->node, "then_branch"), *b = graph_attr(c->node, "else_branch");
  if (!a || !b) return kiln_ifail(c, "needs then_branch and else_branch graphs");
  if (a->n_outputs != c->n_out || b->n_outputs != c->n_out)
    return kiln_ifail(c, "branches give %zu and %zu outputs, the node has %zu", a->n_outputs,
                      b->n_outputs, c->n_out);
  for (size_t i = 0; i < c->n_out; i++) {
    const kiln_type *x = &a->values[a->outputs[i]].type, *y = &b->values[b->outputs[i]].type;
    if (x->kind != KILN_T_TENSOR || y->kind != KILN_T_TENSOR || !x->dtype || x->dtype != y->dtype)
      continue;
    int64_t dims[KILN_MAX_RANK];
    int rank = x->rank == y->rank ? x->rank : -1;
    for (int d = 0; d < rank; d++) dims[d] = x->dims[d] == y->dims[d] ? x->dims[d] : -1;
    kiln_infer_tensor(c, i, x->dtype, rank, dims);
  }
  return KILN_OK;
}

/* ---- Loop ---- */

/* Growable list of one scan output's per-iteration values. */
typedef struct {
  kiln_tensor **v;
  size_t n, cap;
} tlist;

static kiln_code tlist_push(kiln_kctx *c, tlist *l, kiln_tensor *t) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    kiln_tensor **v = realloc(l->v, cap * sizeof *v);
    if (!v) return kiln_kfail(c, "out of memory");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = t;
  return KILN_OK;
}

/* Concatenate a scan output's values along a new first axis. */
static kiln_tensor *stack_list(kiln_kctx *c, const kiln_graph *g, size_t out_id, const tlist *l,
                               size_t k) {
  const kiln_tensor *first = l->n ? l->v[0] : NULL;
  for (size_t i = 0; i < l->n; i++)
    if (!same_item(c, first, l->v[i], k)) return NULL;
  kiln_tensor *o = new_stack(c, g, out_id, first, 0, (int64_t)l->n);
  if (!o) return NULL;
  int64_t step = first ? first->numel : 0;
  for (size_t i = 0; i < l->n; i++) kiln_copy_elems(o, (int64_t)i * step, l->v[i], 0, step);
  return o;
}

static kiln_code loop_run(kiln_kctx *c) {
  const kiln_graph *g = graph_attr(c->node, "body");
  if (!g) return kiln_kfail(c, "missing 'body' graph attribute");
  size_t n_carry = c->n_in - 2;
  if (g->n_inputs != 2 + n_carry || g->n_outputs < 1 + n_carry)
    return kiln_kfail(c, "body takes %zu inputs and gives %zu outputs; with %zu loop-carried "
                      "values it must take %zu and give at least %zu", g->n_inputs, g->n_outputs,
                      n_carry, 2 + n_carry, 1 + n_carry);
  size_t n_scan = g->n_outputs - 1 - n_carry;
  if (c->n_out > n_carry + n_scan)
    return kiln_kfail(c, "the node has %zu outputs, the body gives only %zu", c->n_out,
                      n_carry + n_scan);
  int64_t max_trip = INT64_MAX;
  bool cond = true, use_cond = kiln_in(c, 1) != NULL;
  const kiln_tensor *m = kiln_in(c, 0);
  if (m) {
    if (m->kind != KILN_KIND_TENSOR || m->numel != 1 || !kiln_dtype_is_int(m->dtype))
      return kiln_kfail(c, "M must be a one-element integer tensor");
    max_trip = kiln_get_i64(m, 0);
  }
  if (use_cond && read_bool(c, c->in[1], "cond", &cond)) return KILN_ERR_RUN;

  kiln_tensor *iter = kiln_tensor_new(KILN_INT64, 0, NULL, c->err);
  kiln_tensor *cond_t = kiln_tensor_new(KILN_BOOL, 0, NULL, c->err);
  const kiln_tensor **ins = calloc(2 + n_carry, sizeof *ins);
  kiln_tensor **cur = calloc(n_carry + 1, sizeof *cur); /* owned carried values, NULL = input */
  kiln_tensor **res = calloc(g->n_outputs, sizeof *res);
  tlist *scans = calloc(n_scan + 1, sizeof *scans);
  kiln_code rc = iter && cond_t && ins && cur && res && scans ? KILN_OK
                                                              : kiln_kfail(c, "out of memory");
  for (int64_t it = 0; !rc && it < max_trip && cond; it++) {
    ((int64_t *)iter->data)[0] = it;
    ((uint8_t *)cond_t->data)[0] = cond;
    ins[0] = iter;
    ins[1] = cond_t;
    for (size_t j = 0; j < n_carry; j++) ins[2 + j] = cur[j] ? cur[j] : c->in[2 + j];
    if ((rc = kiln_subgraph_run(c, g, 2 + n_carry, ins, res))) break;
    /* Without a cond input the body's condition output is ignored (a plain for loop). */
    if (use_cond && (rc = read_bool(c, res[0], "the body's condition output", &cond))) break;
    for (size_t j = 0; j < n_carry; j++) {
      kiln_tensor_free(cur[j]);
      cur[j] = res[1 + j];
      res[1 + j] = NULL;
    }
    for (size_t k = 0; k < n_scan && !rc; k++) {
      kiln_tensor *t = res[1 + n_carry + k];
      if (t->kind != KILN_KIND_TENSOR) {
        rc = kiln_kfail(c, "scan output %zu is not a tensor", k);
        break;
      }
      if (!(rc = tlist_push(c, &scans[k], t))) res[1 + n_carry + k] = NULL;
    }
    free_all(res, g->n_outputs);
  }
  for (size_t j = 0; j < n_carry && j < c->n_out && !rc; j++) {
    if (!cur[j] && !(cur[j] = kiln_tensor_clone(c->in[2 + j], c->err))) rc = errcode(c);
    if (!rc) {
      kiln_set_out(c, j, cur[j]);
      cur[j] = NULL;
    }
  }
  for (size_t k = 0; k < n_scan && n_carry + k < c->n_out && !rc; k++) {
    kiln_tensor *o = stack_list(c, g, 1 + n_carry + k, &scans[k], k);
    if (!o) rc = errcode(c);
    else kiln_set_out(c, n_carry + k, o);
  }
  for (size_t k = 0; scans && k < n_scan; k++) {
    free_all(scans[k].v, scans[k].n);
    free(scans[k].v);
  }
  free(scans);
  if (cur) free_all(cur, n_carry);
  if (res) free_all(res, g->n_outputs);
  free(cur);
  free(res);
  free(ins);
  kiln_tensor_free(iter);
  kiln_tensor_free(cond_t);
  return rc;
}

/* Carried outputs: the body output's kind and element type (the shape may change between
 * iterations). Scan outputs: the body output's type with a new leading axis. */
static kiln_code loop_infer(kiln_ictx *c) {
  const kiln_graph *g = graph_attr(c->node, "body");
  if (!g) return kiln_ifail(c, "missing 'body' graph attribute");
  if (c->n_in < 2) return kiln_ifail(c, "needs at least the M and cond inputs (may be empty)");
  size_t n_carry = c->n_in - 2;
  if (g->n_inputs != 2 + n_carry || g->n_outputs < 1 + n_carry ||
      c->n_out > g->n_outputs - 1)
    return kiln_ifail(c, "body takes %zu inputs and gives %zu outputs, which does not fit %zu "
                      "loop-carried values and %zu node outputs", g->n_inputs, g->n_outputs,
                      n_carry, c->n_out);
  for (size_t i = 0; i < c->n_out; i++) {
    const kiln_type *t = &g->values[g->outputs[1 + i]].type;
    if (t->kind == KILN_T_SEQUENCE && i < n_carry && t->dtype) {
      kiln_type *o = c->out[i];
      kiln_type_clear(o);
      o->kind = KILN_T_SEQUENCE;
      o->inner = t->inner;
      o->dtype = t->dtype;
      o->rank = -1;
    }
    if (t->kind != KILN_T_TENSOR || !t->dtype) continue;
    if (i < n_carry) {
      kiln_infer_tensor(c, i, t->dtype, -1, NULL);
    } else if (t->rank >= 0 && t->rank < KILN_MAX_RANK) {
      int64_t dims[KILN_MAX_RANK];
      dims[0] = -1;
      for (int d = 0; d < t->rank; d++) dims[d + 1] = t->sym[d] ? -1 : t->dims[d];
      kiln_infer_tensor(c, i, t->dtype, t->rank + 1, dims);
    } else {
      kiln_infer_tensor(c, i, t->dtype, -1, NULL);
    }
  }
  return KILN_OK;
}

/* ---- Scan ---- */

typedef struct {
  size_t n_state, n_in, n_out; /* state variables, scan inputs, scan outputs */
  const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs; /* NULL: all 0 */
  size_t n_in_axes, n_in_dirs, n_out_axes, n_out_dirs;
} scan_spec;

static int64_t pick(const int64_t *v, size_t n, size_t i) { return v && i < n ? v[i] : 0; }

/* One scan of `len` steps: states (n_state) and xs (n_in, scanned along in_axes) feed the body;
 * final receives the last states, ys the stacked scan outputs (all new). */
static kiln_code scan_core(kiln_kctx *c, const kiln_graph *g, const scan_spec *sp,
                           const kiln_tensor *const *states, const kiln_tensor *const *xs,
                           const int *axes, int64_t len, kiln_tensor **final, kiln_tensor **ys) {
  size_t ns = sp->n_state, nx = sp->n_in, nk = sp->n_out;
  const kiln_tensor **ins = calloc(ns + nx + 1, sizeof *ins);
  kiln_tensor **cur = calloc(ns + 1, sizeof *cur), **sl = calloc(nx + 1, sizeof *sl);
  kiln_tensor **res = calloc(ns + nk + 1, sizeof *res);
  kiln_code rc = ins && cur && sl && res ? KILN_OK : kiln_kfail(c, "out of memory");
  for (size_t k = 0; k < nk; k++) ys[k] = NULL;
  for (int64_t t = 0; t < len && !rc; t++) {
    for (size_t j = 0; j < ns; j++) ins[j] = cur[j] ? cur[j] : states[j];
    for (size_t m = 0; m < nx && !rc; m++) {
      int64_t idx = pick(sp->in_dirs, sp->n_in_dirs, m) ? len - 1 - t : t;
      if (!(sl[m] = slice_axis(c, xs[m], axes[m], idx))) rc = errcode(c);
      ins[ns + m] = sl[m];
    }
    if (!rc) rc = kiln_subgraph_run(c, g, ns + nx, ins, res);
    free_all(sl, nx);
    if (rc) break;
    for (size_t j = 0; j < ns; j++) {
      kiln_tensor_free(cur[j]);
      cur[j] = res[j];
      res[j] = NULL;
    }
    for (size_t k = 0; k < nk && !rc; k++) {
      const kiln_tensor *y = res[ns + k];
      int axis = (int)pick(sp->out_axes, sp->n_out_axes, k);
      if (t == 0) {
        if (y->kind != KILN_KIND_TENSOR) rc = kiln_kfail(c, "scan output %zu is not a tensor", k);
        else if (!(ys[k] = new_stack(c, g, ns + k, y, axis, len))) rc = errcode(c);
        if (rc) break;
      } else {
        /* the first output of this kind fixed the item shape; compare against it */
        if (y->kind != KILN_KIND_TENSOR || y->dtype != ys[k]->dtype ||
            y->rank + 1 != ys[k]->rank) {
          rc = kiln_kfail(c, "scan output %zu changes type or rank between iterations", k);
          break;
        }
      }
      int a = axis < 0 ? axis + ys[k]->rank : axis;
      for (int d = 0, q = 0; d < ys[k]->rank; d++)
        if (d != a && ys[k]->dims[d] != y->dims[q++]) {
          rc = kiln_kfail(c, "scan output %zu changes shape between iterations", k);
          break;
        }
      if (rc) break;
      int64_t idx = pick(sp->out_dirs, sp->n_out_dirs, k) ? len - 1 - t : t;
      place_axis(ys[k], a, idx, y);
    }
    free_all(res, ns + nk);
  }
  for (size_t k = 0; k < nk && !rc && len == 0; k++)
    if (!(ys[k] = new_stack(c, g, ns + k, NULL, (int)pick(sp->out_axes, sp->n_out_axes, k), 0)))
      rc = errcode(c);
  for (size_t j = 0; j < ns && !rc; j++) {
    if (!cur[j] && !(cur[j] = kiln_tensor_clone(states[j], c->err))) rc = errcode(c);
    final[j] = cur[j];
    cur[j] = NULL;
  }
  if (rc) {
    free_all(ys, nk);
    if (cur) free_all(cur, ns);
  }
  if (res) free_all(res, ns + nk);
  free(ins);
  free(cur);
  free(sl);
  free(res);
  return rc;
}

static kiln_code scan_spec_read(kiln_kctx *c, const kiln_graph *g, size_t n_vals, scan_spec *sp) {
  const kiln_node *n = c->node;
  int64_t m = kiln_attr_int(n, "num_scan_inputs", -1);
  if (m < 1 || (size_t)m > n_vals)
    return kiln_kfail(c, "num_scan_inputs %lld does not fit %zu inputs", (long long)m, n_vals);
  sp->n_in = (size_t)m;
  sp->n_state = n_vals - sp->n_in;
  if (g->n_inputs != n_vals || g->n_outputs < sp->n_state)
    return kiln_kfail(c, "body takes %zu inputs and gives %zu outputs; expected %zu inputs and at "
                      "least %zu outputs", g->n_inputs, g->n_outputs, n_vals, sp->n_state);
  sp->n_out = g->n_outputs - sp->n_state;
  if (c->n_out > g->n_outputs)
    return kiln_kfail(c, "the node has %zu outputs, the body gives %zu", c->n_out, g->n_outputs);
  if (c->opset < 9) {
    sp->in_dirs = kiln_attr_ints(n, "directions", &sp->n_in_dirs);
  } else {
    sp->in_axes = kiln_attr_ints(n, "scan_input_axes", &sp->n_in_axes);
    sp->in_dirs = kiln_attr_ints(n, "scan_input_directions", &sp->n_in_dirs);
    sp->out_axes = kiln_attr_ints(n, "scan_output_axes", &sp->n_out_axes);
    sp->out_dirs = kiln_attr_ints(n, "scan_output_directions", &sp->n_out_dirs);
  }
  if ((sp->in_axes && sp->n_in_axes != sp->n_in) || (sp->in_dirs && sp->n_in_dirs != sp->n_in) ||
      (sp->out_axes && sp->n_out_axes != sp->n_out) || (sp->out_dirs && sp->n_out_dirs != sp->n_out))
    return kiln_kfail(c, "scan axes/directions attributes do not match the number of scan "
                      "inputs (%zu) or outputs (%zu)", sp->n_in, sp->n_out);
  return KILN_OK;
}

/* Opset 9+: no batch axis; scan inputs are scanned along scan_input_axes. */
static kiln_code scan9_run(kiln_kctx *c, const kiln_graph *g) {
  scan_spec sp = {0};
  if (scan_spec_read(c, g, c->n_in, &sp)) return KILN_ERR_RUN;
  int axes[KILN_MAX_RANK * 8];
  if (sp.n_in > sizeof axes / sizeof axes[0]) return kiln_kunsup(c, "too many scan inputs");
  int64_t len = -1;
  for (size_t m = 0; m < sp.n_in; m++) {
    const kiln_tensor *x = c->in[sp.n_state + m];
    if (!x || x->kind != KILN_KIND_TENSOR || x->rank < 1)
      return kiln_kfail(c, "scan input %zu must be a tensor of rank >= 1", m);
    if ((axes[m] = kiln_axis(c, pick(sp.in_axes, sp.n_in_axes, m), x->rank)) < 0)
      return KILN_ERR_RUN;
    int64_t l = x->dims[axes[m]];
    if (len >= 0 && l != len)
      return kiln_kfail(c, "scan inputs have different lengths (%lld and %lld)", (long long)len,
                        (long long)l);
    len = l;
  }
  for (size_t j = 0; j < sp.n_state; j++)
    if (!c->in[j]) return kiln_kfail(c, "state input %zu is missing", j);
  kiln_tensor **outs = calloc(sp.n_state + sp.n_out + 1, sizeof *outs);
  if (!outs) return kiln_kfail(c, "out of memory");
  kiln_code rc = scan_core(c, g, &sp, c->in, c->in + sp.n_state, axes, len, outs,
                           outs + sp.n_state);
  for (size_t i = 0; i < sp.n_state + sp.n_out; i++) {
    if (!rc && i < c->n_out) kiln_set_out(c, i, outs[i]);
    else kiln_tensor_free(outs[i]);
  }
  free(outs);
  return rc;
}

/* Opset 8: every input has a leading batch axis, scan inputs are [batch, seq, ...], and the
 * optional first input sequence_lens limits each batch item's steps; outputs past it are 0. */
static kiln_code scan8_run(kiln_kctx *c, const kiln_graph *g) {
  scan_spec sp = {0};
  if (c->n_in < 2) return kiln_kfail(c, "needs sequence_lens (may be empty) and at least one input");
  if (scan_spec_read(c, g, c->n_in - 1, &sp)) return KILN_ERR_RUN;
  const kiln_tensor *const *vals = c->in + 1, *lens = c->in[0];
  int64_t batch = -1, maxlen = -1;
  for (size_t i = 0; i < sp.n_state + sp.n_in; i++) {
    const kiln_tensor *x = vals[i];
    int need = i < sp.n_state ? 1 : 2;
    if (!x || x->kind != KILN_KIND_TENSOR || x->rank < need)
      return kiln_kfail(c, "input %zu must be a tensor of rank >= %d", i + 1, need);
    if (batch >= 0 && x->dims[0] != batch)
      return kiln_kfail(c, "inputs disagree on the batch size (%lld and %lld)", (long long)batch,
                        (long long)x->dims[0]);
    batch = x->dims[0];
    if (i >= sp.n_state) {
      if (maxlen >= 0 && x->dims[1] != maxlen)
        return kiln_kfail(c, "scan inputs have different lengths");
      maxlen = x->dims[1];
    }
  }
  if (lens && (lens->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(lens->dtype) ||
               lens->numel != batch))
    return kiln_kfail(c, "sequence_lens must hold one integer per batch item (%lld)",
                      (long long)batch);
  size_t nv = sp.n_state + sp.n_in, nr = sp.n_state + sp.n_out;
  kiln_tensor **sl = calloc(nv + 1, sizeof *sl), **res = calloc(nr + 1, sizeof *res);
  kiln_tensor **outs = calloc(nr + 1, sizeof *outs);
  int *zero = calloc(sp.n_in + 1, sizeof *zero);
  kiln_code rc = sl && res && outs && zero ? KILN_OK : kiln_kfail(c, "out of memory");
  for (int64_t b = 0; b < batch && !rc; b++) {
    int64_t len = lens ? kiln_get_i64(lens, b) : maxlen;
    if (len < 0 || len > maxlen) {
      rc = kiln_kfail(c, "sequence_lens[%lld] = %lld is out of range [0, %lld]", (long long)b,
                      (long long)len, (long long)maxlen);
      break;
    }
    for (size_t i = 0; i < nv && !rc; i++)
      if (!(sl[i] = slice_axis(c, vals[i], 0, b))) rc = errcode(c);
    if (!rc)
      rc = scan_core(c, g, &sp, (const kiln_tensor *const *)sl,
                     (const kiln_tensor *const *)sl + sp.n_state, zero, len, res, res + sp.n_state);
    free_all(sl, nv);
    for (size_t i = 0; i < nr && !rc; i++) {
      /* scan outputs come back [len, ...]; the batch output is [batch, maxlen, ...] */
      int64_t dims[KILN_MAX_RANK];
      if (res[i]->kind != KILN_KIND_TENSOR || res[i]->rank + 1 > KILN_MAX_RANK) {
        rc = kiln_kfail(c, "output %zu is not a tensor of supported rank", i);
        break;
      }
      dims[0] = batch;
      memcpy(dims + 1, res[i]->dims, (size_t)res[i]->rank * sizeof *dims);
      if (i >= sp.n_state) dims[1] = maxlen;
      if (!outs[i] && !(outs[i] = kiln_tensor_new(res[i]->dtype, res[i]->rank + 1, dims, c->err))) {
        rc = errcode(c);
        break;
      }
      bool ok = outs[i]->dtype == res[i]->dtype;
      for (int d = 1; d < outs[i]->rank && ok; d++) ok = dims[d] == outs[i]->dims[d];
      if (!ok) {
        rc = kiln_kfail(c, "output %zu differs in type or shape between batch items", i);
        break;
      }
      /* batch item b is one contiguous block; shorter scans leave zeros at the end */
      int64_t block = outs[i]->numel / batch;
      kiln_copy_elems(outs[i], b * block, res[i], 0, res[i]->numel);
    }
    free_all(res, nr);
  }
  if (!rc && batch == 0) rc = kiln_kunsup(c, "a batch of 0 items");
  for (size_t i = 0; outs && i < nr; i++) {
    if (!rc && i < c->n_out) kiln_set_out(c, i, outs[i]);
    else kiln_tensor_free(outs[i]);
  }
  free(sl);
  free(res);
  free(outs);
  free(zero);
  return rc;
}

static kiln_code scan_run(kiln_kctx *c) {
  const kiln_graph *g = graph_attr(c->node, "body");
  if (!g) return kiln_kfail(c, "missing 'body' graph attribute");
  return c->opset < 9 ? scan8_run(c, g) : scan9_run(c, g);
}

/* Final states keep the body output's element type; scan outputs gain one axis (opset 9+) or two
 * (opset 8: batch and sequence). Shapes are left to run time. */
static kiln_code scan_infer(kiln_ictx *c) {
  const kiln_graph *g = graph_attr(c->node, "body");
  if (!g) return kiln_ifail(c, "missing 'body' graph attribute");
  int64_t m = kiln_attr_int(c->node, "num_scan_inputs", -1);
  size_t n_vals = c->opset < 9 ? (c->n_in ? c->n_in - 1 : 0) : c->n_in;
  if (m < 1 || (size_t)m > n_vals) return kiln_ifail(c, "num_scan_inputs %lld does not fit %zu inputs",
                                                      (long long)m, n_vals);
  size_t n_state = n_vals - (size_t)m;
  if (g->n_inputs != n_vals || g->n_outputs < n_state || c->n_out > g->n_outputs)
    return kiln_ifail(c, "body takes %zu inputs and gives %zu outputs, which does not fit the node",
                      g->n_inputs, g->n_outputs);
  for (size_t i = 0; i < c->n_out; i++) {
    const kiln_type *t = &g->values[g->outputs[i]].type;
    if (t->kind != KILN_T_TENSOR || !t->dtype) continue;
    int extra = c->opset < 9 ? (i < n_state ? 1 : 2) : (i < n_state ? 0 : 1);
    int rank = t->rank >= 0 && t->rank + extra <= KILN_MAX_RANK ? t->rank + extra : -1;
    kiln_infer_tensor(c, i, t->dtype, rank, NULL);
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_control[] = {
    {.domain = "", .name = "If", .since = 1, .inputs = {1, 1}, .outputs = {0, KILN_VARIADIC},
     .infer = if_infer, .run = if_run},
    {.domain = "", .name = "Loop", .since = 1, .inputs = {2, KILN_VARIADIC}, .outputs = {0, KILN_VARIADIC},
     .infer = loop_infer, .run = loop_run, .flags = KILN_OPF_LEADING_OPTIONAL},
    {.domain = "", .name = "Scan", .since = 8, .inputs = {1, KILN_VARIADIC}, .outputs = {1, KILN_VARIADIC},
     .infer = scan_infer, .run = scan_run, .flags = KILN_OPF_LEADING_OPTIONAL},
    {0},
};
