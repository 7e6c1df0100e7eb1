/* Shape-subgraph folding.
 *
 * Exporters compute reshape targets at run time: Shape(x) -> Gather -> Unsqueeze -> Concat ->
 * Reshape, even when most of those numbers are known at load time and the rest merely repeat
 * the input's own (symbolic) batch or sequence dims. With the dim flow analysis (dimflow.h):
 *
 *  1. Every integer scalar/vector computed from shapes whose elements are all known (Shape of
 *     a static tensor, Gather of a static dim of Shape(x) even when x's other dims are
 *     symbolic, arithmetic on those) becomes a constant; constant folding then takes whatever
 *     only depended on it.
 *  2. A Reshape (allowzero 0) whose computed target differs from a constant only in dims that
 *     copy the input's dim at the same position (-> 0) and at most one other dim (-> -1, which
 *     Reshape infers from the element count) gets that constant target.
 *  3. A shape vector feeding Reshape/Expand/ConstantOfShape that is made of constants and
 *     dims of tensors in the graph, but is not expressible as in 2, is rebuilt in its smallest
 *     form (Shape(y), or Concat of Shape/Slice(Shape) runs and constants) when that is smaller
 *     than the computation it replaces.
 * The replaced computations become dead and the dead_code pass removes them.
 *
 * Caveat: in 2, a Reshape with a -1 entry cannot infer it when another target dim is 0 at run
 * time, where the computed target could; so the form with -1 is not used when a target dim is
 * statically 0. Symbolic dims that turn out 0 at run time (an empty batch) are not guarded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/dimflow.h"
#include "opt/graph_build.h"
#include "opt/opt.h"

#define MAXR KILN_MAX_RANK

static bool is_const(const kiln_graph *g, int v) {
  return v >= 0 && g->values[v].init && !g->values[v].is_input;
}

/* 1: node i's output is a fully known integer vector: make it a constant. */
static bool fold_known(kiln_graph *g, const kiln_dimflow *df, size_t i, bool *dead) {
  kiln_node *n = &g->nodes[i];
  if (*n->domain || n->n_out != 1 || n->out[0] < 0 || !strcmp(n->op_type, "Constant")) return false;
  int v = n->out[0];
  kiln_dimelem e[MAXR];
  bool scalar;
  int vn = kiln_dimflow_vec(df, v, e, &scalar);
  if (vn < 0 || g->values[v].init || kiln_graph_is_output(g, v)) return false;
  for (int k = 0; k < vn; k++)
    if (e[k].kind != KILN_ELEM_CONST) return false;
  kiln_dtype dt = g->values[v].type.dtype;
  if (dt != KILN_INT64 && dt != KILN_INT32) return false;
  int64_t len = vn;
  kiln_tensor *t = kiln_tensor_new(dt, scalar ? 0 : 1, &len, NULL);
  if (!t) return false;
  for (int k = 0; k < vn; k++) kiln_set_i64(t, k, e[k].val);
  g->values[v].init = t;
  dead[i] = true;
  return true;
}

/* 2: the constant form of Reshape node n's target, with 0 (copy) and -1 (infer). */
static bool const_target(const kiln_graph *g, const kiln_dimflow *df, const kiln_node *n,
                         const kiln_dimelem *e, int vn, int64_t *tgt) {
  bool allowzero = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0);
  int x = n->in[0], xr = kiln_dimflow_rank(df, x), infer = -1;
  bool zero_dim = false;
  (void)g;
  for (int k = 0; k < vn; k++) {
    int64_t v = e[k].val;
    if (e[k].kind == KILN_ELEM_CONST) {
      if (v < -1) return false;
      if (v == -1) {
        if (infer >= 0) return false;
        infer = k;
      } else if (v == 0) {
        zero_dim |= allowzero || (k < xr && kiln_dimflow_dim(df, x, k) == 0) || k >= xr;
      }
      tgt[k] = v;
    } else if (e[k].kind == KILN_ELEM_SYM && !allowzero && k < xr &&
               kiln_dimflow_same(df, v, kiln_dimflow_dim(df, x, k))) {
      tgt[k] = 0;
    } else {
      if (infer >= 0) return false;
      infer = k;
      tgt[k] = -1;
    }
  }
  return !(infer >= 0 && zero_dim);
}

/* 3: the shape vector as runs: constants, or dims [j0, j1) of a value. */
typedef struct run {
  int src;            /* -1: constants */
  int j0, j1;         /* src dims, or element range for constants */
} run;

/* Whether element e is dim j of value s. */
static bool elem_is_dim(const kiln_dimflow *df, kiln_dimelem e, int s, int j) {
  if (j < 0 || j >= kiln_dimflow_rank(df, s)) return false;
  if (e.kind == KILN_ELEM_SYM && e.src == s && e.dim == j) return true;
  int64_t d = kiln_dimflow_dim(df, s, j);
  if (e.kind == KILN_ELEM_CONST) return e.val >= 0 && d == e.val;
  return e.kind == KILN_ELEM_SYM && kiln_dimflow_same(df, e.val, d);
}

/* Split e into runs; false when an element is unknown. Returns the node count of the
 * smallest rebuild in *cost. */
static bool plan_runs(const kiln_dimflow *df, const kiln_dimelem *e, int vn, int opset, run *runs,
                      int *n_runs, int *cost) {
  int nr = 0;
  for (int k = 0; k < vn;) {
    int s, j0, start;
    if (e[k].kind == KILN_ELEM_UNKNOWN) return false;
    if (e[k].kind == KILN_ELEM_CONST) {
      int m = k;
      while (m < vn && e[m].kind == KILN_ELEM_CONST) m++;
      int b = m;
      /* constants right before a dim of s may be s's preceding (static) dims: one run */
      if (m < vn && e[m].kind == KILN_ELEM_SYM && e[m].src >= 0)
        while (b > k && elem_is_dim(df, e[b - 1], e[m].src, e[m].dim - (m - b) - 1)) b--;
      if (b > k) runs[nr++] = (run){-1, k, b};
      if (b == m) {
        k = m;
        continue;
      }
      s = e[m].src;
      j0 = e[m].dim - (m - b);
      start = b;
    } else {
      s = e[k].src;
      j0 = e[k].dim;
      start = k;
      if (s < 0) return false;
    }
    int m = start;
    while (m < vn && elem_is_dim(df, e[m], s, j0 + (m - start))) m++;
    runs[nr++] = (run){s, j0, j0 + (m - start)};
    k = m;
  }
  int c = nr > 1 ? 1 : 0; /* the Concat */
  for (int r = 0; r < nr; r++) {
    if (runs[r].src < 0) continue;
    bool whole = runs[r].j0 == 0 && runs[r].j1 == kiln_dimflow_rank(df, runs[r].src);
    c += whole || opset >= 15 ? 1 : 2;
  }
  *n_runs = nr;
  *cost = c;
  return true;
}

/* Nodes computing value v that only serve shape vectors (the cone a rebuild replaces). */
static int cone_cost(const kiln_graph *g, const kiln_dimflow *df, int v, bool *seen) {
  if (v < 0 || is_const(g, v)) return 0;
  int p = g->values[v].producer;
  kiln_dimelem e[MAXR];
  bool scalar;
  if (p < 0 || kiln_dimflow_vec(df, v, e, &scalar) < 0 || seen[p]) return 0; /* (new nodes: new values) */
  seen[p] = true;
  const kiln_node *n = &g->nodes[p];
  int c = 1;
  if (!strcmp(n->op_type, "Shape")) return c;
  for (size_t k = 0; k < n->n_in; k++) c += cone_cost(g, df, n->in[k], seen);
  return c;
}

/* An existing Shape(s) node's output reading all of s. */
static int find_shape_of(const kiln_graph *g, int s, const bool *dead, size_t n_dead) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if ((i >= n_dead || !dead[i]) && !*n->domain && !strcmp(n->op_type, "Shape") && n->in[0] == s && n->out[0] >= 0 &&
        !kiln_node_attr(n, "start") && !kiln_node_attr(n, "end"))
      return n->out[0];
  }
  return -1;
}

/* Build the runs as a value; -1 on allocation failure. */
static int build_runs(kiln_graph *g, const kiln_dimflow *df, const kiln_dimelem *e, const run *runs, int nr, int opset,
                      const char *base, const bool *dead, size_t n_dead) {
  int parts[MAXR];
  for (int r = 0; r < nr; r++) {
    const run *u = &runs[r];
    if (u->src < 0) {
      int64_t v[MAXR];
      for (int k = u->j0; k < u->j1; k++) v[k - u->j0] = e[k].val;
      parts[r] = kiln_build_ints(g, base, "dims", v, (size_t)(u->j1 - u->j0), false);
      if (parts[r] < 0) return -1;
      continue;
    }
    int rank = kiln_dimflow_rank(df, u->src);
    bool whole = u->j0 == 0 && u->j1 == rank;
    int sh = whole ? find_shape_of(g, u->src, dead, n_dead) : -1;
    if (sh < 0) {
      char name[600];
      snprintf(name, sizeof name, "%s_shape%d", base, r);
      int out = kiln_build_value(g, base, "shape");
      int k = out < 0 ? -1 : kiln_build_node(g, "Shape", name, &u->src, 1, &out, 1);
      if (k < 0) return -1;
      if (!whole && opset >= 15) {
        kiln_node *n = &g->nodes[k];
        n->attrs = kiln_calloc(2, sizeof *n->attrs);
        if (!n->attrs) return -1;
        const char *names[2] = {"start", "end"};
        int64_t vals[2] = {u->j0, u->j1};
        for (int a = 0; a < 2; a++) {
          n->attrs[a].name = kiln_strdup(names[a]);
          n->attrs[a].kind = KILN_ATTR_INT;
          n->attrs[a].i = vals[a];
          n->attrs[a].tp.rank = -1;
          if (!n->attrs[a].name) return -1;
          n->n_attrs++;
        }
      } else if (!whole) {
        int64_t st = u->j0, en = u->j1, ax = 0;
        int ins[4] = {out, kiln_build_ints(g, base, "start", &st, 1, false),
                      kiln_build_ints(g, base, "end", &en, 1, false),
                      kiln_build_ints(g, base, "axis", &ax, 1, false)};
        int sl = kiln_build_value(g, base, "dims");
        snprintf(name, sizeof name, "%s_slice%d", base, r);
        if (ins[1] < 0 || ins[2] < 0 || ins[3] < 0 || sl < 0 ||
            kiln_build_node(g, "Slice", name, ins, 4, &sl, 1) < 0)
          return -1;
        out = sl;
      }
      sh = out;
    }
    parts[r] = sh;
  }
  if (nr == 1) return parts[0];
  char name[600];
  snprintf(name, sizeof name, "%s_concat", base);
  int out = kiln_build_value(g, base, "target");
  if (out < 0) return -1;
  int k = kiln_build_node(g, "Concat", name, parts, (size_t)nr, &out, 1);
  if (k < 0) return -1;
  kiln_node *n = &g->nodes[k];
  n->attrs = kiln_calloc(1, sizeof *n->attrs);
  if (!n->attrs || !(n->attrs[0].name = kiln_strdup("axis"))) return -1;
  n->attrs[0].kind = KILN_ATTR_INT;
  n->attrs[0].tp.rank = -1;
  n->n_attrs = 1;
  return out;
}

/* 2 and 3 for input `slot` of node i. Returns 1 when rewritten, 0 when not, -1 on OOM. */
static int rewrite_target(kiln_graph *g, const kiln_dimflow *df, size_t i, size_t slot, bool *dead,
                          size_t n_dead, bool *seen) {
  kiln_node *n = &g->nodes[i];
  int t = slot < n->n_in ? n->in[slot] : -1;
  if (t < 0 || is_const(g, t) || g->values[t].type.kind != KILN_T_TENSOR) return 0;
  kiln_dimelem e[MAXR];
  bool scalar;
  int vn = kiln_dimflow_vec(df, t, e, &scalar);
  if (vn < 0 || scalar) return 0;
  char base[400];
  snprintf(base, sizeof base, "%s", g->values[n->out[0] >= 0 ? n->out[0] : t].name);
  int64_t tgt[MAXR];
  if (!strcmp(n->op_type, "Reshape") && const_target(g, df, n, e, vn, tgt)) {
    int c = kiln_build_ints(g, base, "target", tgt, (size_t)vn, false);
    if (c < 0) return -1;
    g->nodes[i].in[slot] = c;
    return 1;
  }
  run runs[MAXR];
  int nr, cost;
  if (!plan_runs(df, e, vn, n->opset, runs, &nr, &cost)) return 0;
  memset(seen, 0, n_dead * sizeof *seen);
  if (cost >= cone_cost(g, df, t, seen)) return 0;
  int opset = n->opset; /* the default domain's version, the same for all its nodes */
  int v = build_runs(g, df, e, runs, nr, opset, base, dead, n_dead);
  if (v < 0) return -1;
  g->nodes[i].in[slot] = v;
  return 1;
}

kiln_code kiln_pass_fold_shapes(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_dimflow *df = kiln_dimflow_new(g);
  size_t n0 = g->n_nodes;
  bool *dead = kiln_calloc(n0 + 1, sizeof *dead), *seen = kiln_calloc(n0 + 1, sizeof *seen);
  if (!df || !dead || !seen) {
    kiln_dimflow_free(df);
    free(dead);
    free(seen);
    return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  }
  size_t done = 0;
  int rc = 0;
  for (size_t i = 0; i < n0; i++) done += fold_known(g, df, i, dead);
  for (size_t i = 0; i < n0 && rc >= 0; i++) {
    const kiln_node *n = &g->nodes[i];
    if (dead[i] || *n->domain || n->n_out < 1) continue;
    size_t slot = !strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Expand") ? 1
                  : !strcmp(n->op_type, "ConstantOfShape")                         ? 0
                                                                                   : SIZE_MAX;
    if (slot == SIZE_MAX) continue;
    rc = rewrite_target(g, df, i, slot, dead, n0, seen);
    if (rc > 0) done++;
  }
  kiln_dimflow_free(df);
  free(seen);
  if (rc >= 0) {
    /* new nodes (appended) are alive */
    bool *d = realloc(dead, (g->n_nodes + 1) * sizeof *d);
    if (!d) rc = -1;
    else {
      dead = d;
      for (size_t i = n0; i < g->n_nodes; i++) dead[i] = false;
      kiln_graph_remove_nodes(g, dead);
    }
  }
  free(dead);
  if (rc < 0) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory folding shapes");
  *count += done;
  return KILN_OK;
}
