/* Data-movement chains made shorter: every rewrite here removes a full copy of a tensor.
 *
 *  - Transpose(Transpose(x, p1), p2): one Transpose(x, p1∘p2), or x itself when the composed
 *    permutation is the identity.
 *  - A reshape-like node whose output has its input's shape (symbolic dims included) goes.
 *  - Chains of reshape-like nodes (Reshape, Flatten, Squeeze, Unsqueeze, and Transposes that
 *    only move size-1 dims, which keep the element order) become one Reshape of the chain's
 *    input, when the final shape is expressible as a constant target relative to that input
 *    (static dims, 0 for a dim equal to the input's at the same position, one -1); the dim
 *    flow analysis (dimflow.h) tells which symbolic dims are equal.
 *  - Slice(Slice(x)) with constant parameters: one Slice (different axes merge; the same axis
 *    composes when its length is static and steps are positive).
 *  - Concat of Slices of one x along the concat axis that are adjacent: one Slice; when they
 *    re-assemble all of x in order: x. Concat of all outputs of Split(x) on the same axis, in
 *    order: x.
 * Rewired nodes read the earlier value; what no longer has readers is removed by dead_code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/dimflow.h"
#include "opt/fuse.h"
#include "opt/graph_build.h"
#include "opt/opt.h"

#define MAXR KILN_MAX_RANK

typedef struct tctx {
  kiln_pass_ctx *ctx;
  kiln_graph *g;
  kiln_dimflow *df;
  size_t *uses;
  bool *dead;       /* per node of the graph as the pass found it */
  size_t n0;        /* nodes before the pass; nodes it adds are left for the next round */
  bool has_sub;
} tctx;

static bool taken(const tctx *t, const kiln_node *n) {
  size_t i = (size_t)(n - t->g->nodes);
  return i >= t->n0 || t->dead[i];
}

static const kiln_node *producer(const kiln_graph *g, int v) {
  int p = v >= 0 ? g->values[v].producer : -1;
  return p >= 0 ? &g->nodes[p] : NULL;
}

static bool std_op(const kiln_node *n, const char *op) { return n && !*n->domain && !strcmp(n->op_type, op); }

static bool const_ints(const kiln_graph *g, const kiln_node *n, size_t i, int64_t *out, size_t *count) {
  if (i >= n->n_in || n->in[i] < 0) return false;
  const kiln_value_info *v = &g->values[n->in[i]];
  const kiln_tensor *t = v->init;
  if (!t || v->is_input || t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype) || t->rank > 1 ||
      t->numel > MAXR)
    return false;
  for (int64_t k = 0; k < t->numel; k++) out[k] = kiln_get_i64(t, k);
  *count = (size_t)t->numel;
  return true;
}

/* Whether value v may be replaced by another in its readers (its name is not needed). */
static bool replaceable(const tctx *t, int v) {
  return !kiln_graph_is_output(t->g, v) &&
         !(t->has_sub && kiln_graph_name_used_by_subgraphs(t->g, t->g->values[v].name));
}

static void rewire(tctx *t, kiln_node *n, size_t slot, int v) {
  if (n->in[slot] >= 0) t->uses[n->in[slot]]--;
  n->in[slot] = v;
  t->uses[v]++;
}

/* Readers of `from` read `to`; the node producing `from` (index i) goes. */
static void bypass(tctx *t, size_t i, int from, int to) {
  kiln_graph_replace_uses(t->g, from, to);
  t->uses[to] += t->uses[from];
  t->uses[from] = 0;
  t->dead[i] = true;
}

static int rank_of(const tctx *t, int v) {
  int r = kiln_value_type(t->g, v)->rank;
  return r >= 0 ? r : kiln_dimflow_rank(t->df, v);
}

/* The permutation of a Transpose node (default: reversed). */
static bool perm_of(const tctx *t, const kiln_node *n, int64_t *p, int *rank) {
  size_t np;
  const int64_t *a = kiln_attr_ints(n, "perm", &np);
  int r = a ? (int)np : rank_of(t, n->in[0]);
  if (r < 0 || r > MAXR) return false;
  bool seen[MAXR] = {0};
  for (int i = 0; i < r; i++) {
    p[i] = a ? a[i] : r - 1 - i;
    if (p[i] < 0) p[i] += r;
    if (p[i] < 0 || p[i] >= r || seen[p[i]]) return false;
    seen[p[i]] = true;
  }
  *rank = r;
  return true;
}

/* ---- Transpose ∘ Transpose ---- */

static int transpose_pair(tctx *t, size_t i) {
  kiln_node *n = &t->g->nodes[i];
  const kiln_node *in = producer(t->g, n->in[0]);
  int64_t p1[MAXR], p2[MAXR], q[MAXR];
  int r1, r2;
  if (!std_op(in, "Transpose") || taken(t, in) || !perm_of(t, in, p1, &r1) ||
      !perm_of(t, n, p2, &r2) || r1 != r2)
    return 0;
  bool identity = true;
  for (int k = 0; k < r1; k++) {
    q[k] = p1[p2[k]];
    identity &= q[k] == k;
  }
  int x = in->in[0];
  if (identity && replaceable(t, n->out[0])) {
    bypass(t, i, n->out[0], x);
    return 1;
  }
  if (!identity && t->uses[n->in[0]] != 1) return 0; /* the inner copy stays anyway */
  if (kiln_node_set_ints(n, "perm", q, (size_t)r1)) return -1;
  rewire(t, n, 0, x);
  return 1;
}

/* ---- reshape-like chains ---- */

/* Whether node n keeps the element order and only changes the shape. */
static bool reshape_like(const tctx *t, const kiln_node *n) {
  if (!n || *n->domain || n->n_in < 1 || n->n_out < 1 || n->out[0] < 0) return false;
  if (!strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Flatten") ||
      !strcmp(n->op_type, "Squeeze") || !strcmp(n->op_type, "Unsqueeze"))
    return true;
  if (strcmp(n->op_type, "Transpose")) return false;
  int64_t p[MAXR];
  int r, last = -1;
  if (!perm_of(t, n, p, &r)) return false;
  /* the dims that are not statically 1 must keep their order */
  for (int k = 0; k < r; k++) {
    if (kiln_dimflow_dim(t->df, n->in[0], (int)p[k]) == 1) continue;
    if (p[k] < last) return false;
    last = (int)p[k];
  }
  return true;
}

/* Constant target turning x into the shape of value y, or false. */
static bool target_for(const tctx *t, int x, int y, int64_t *tgt, int *n) {
  int xr = kiln_dimflow_rank(t->df, x), yr = kiln_dimflow_rank(t->df, y), infer = -1;
  if (yr < 0 || xr < 0) return false;
  for (int k = 0; k < yr; k++) {
    int64_t d = kiln_dimflow_dim(t->df, y, k);
    if (d == 0) return false; /* 0 means "copy" in a target; and -1 cannot be inferred */
    if (d > 0) tgt[k] = d;
    else if (k < xr && kiln_dimflow_same(t->df, d, kiln_dimflow_dim(t->df, x, k))) tgt[k] = 0;
    else if (infer < 0) infer = k, tgt[k] = -1;
    else return false;
  }
  *n = yr;
  return true;
}

static int reshape_chain(tctx *t, size_t i) {
  kiln_graph *g = t->g;
  const kiln_node *n = &g->nodes[i];
  if (!reshape_like(t, n)) return 0;
  /* a reshape to the shape the input already has (symbolic dims included) */
  int xr = kiln_dimflow_rank(t->df, n->in[0]), same = xr >= 0 && xr == kiln_dimflow_rank(t->df, n->out[0]);
  for (int k = 0; same && k < xr; k++)
    same = kiln_dimflow_same(t->df, kiln_dimflow_dim(t->df, n->in[0], k), kiln_dimflow_dim(t->df, n->out[0], k));
  if (same && replaceable(t, n->out[0])) {
    bypass(t, i, n->out[0], n->in[0]);
    return 1;
  }
  const kiln_node *p = producer(g, n->in[0]);
  if (!reshape_like(t, p) || taken(t, p)) return 0;
  int x = p->in[0];
  for (const kiln_node *q = producer(g, x); reshape_like(t, q) && !taken(t, q); q = producer(g, x))
    x = q->in[0];
  int64_t tgt[MAXR];
  int r;
  if (!target_for(t, x, n->out[0], tgt, &r)) return 0;
  char base[400];
  snprintf(base, sizeof base, "%s", g->values[n->out[0]].name);
  int c = kiln_build_ints(g, base, "target", tgt, (size_t)r, false);
  if (c < 0) return -1;
  int ins[2] = {x, c}, out = g->nodes[i].out[0];
  char name[420];
  snprintf(name, sizeof name, "%s_reshape", base);
  /* the chain's last node is replaced by the new Reshape producing the same value */
  g->nodes[i].n_out = 0;
  if (kiln_build_node(g, "Reshape", name, ins, 2, &out, 1) < 0) return -1;
  t->uses[x]++;
  t->dead[i] = true;
  return 1;
}

/* ---- Slice chains ---- */

typedef struct slice_p {
  int n;
  int64_t start[MAXR], end[MAXR], axis[MAXR], step[MAXR];
} slice_p;

static bool slice_of(const tctx *t, const kiln_node *n, slice_p *s) {
  size_t ns, ne, na, np;
  int r = rank_of(t, n->in[0]);
  if (!std_op(n, "Slice") || n->opset < 10 || r < 0 || !const_ints(t->g, n, 1, s->start, &ns) ||
      !const_ints(t->g, n, 2, s->end, &ne) || ns != ne)
    return false;
  bool has_a = n->n_in > 3 && n->in[3] >= 0, has_s = n->n_in > 4 && n->in[4] >= 0;
  if ((has_a && (!const_ints(t->g, n, 3, s->axis, &na) || na != ns)) ||
      (has_s && (!const_ints(t->g, n, 4, s->step, &np) || np != ns)))
    return false;
  bool seen[MAXR] = {0};
  for (size_t k = 0; k < ns; k++) {
    if (!has_a) s->axis[k] = (int64_t)k;
    if (!has_s) s->step[k] = 1;
    if (s->axis[k] < 0) s->axis[k] += r;
    if (s->axis[k] < 0 || s->axis[k] >= r || seen[s->axis[k]] || !s->step[k]) return false;
    seen[s->axis[k]] = true;
  }
  s->n = (int)ns;
  return true;
}

/* Normalised [first, first + count*step) of a positive-step slice of a dim of length len. */
static void clamp_pos(int64_t len, int64_t s, int64_t e, int64_t step, int64_t *first, int64_t *count) {
  if (s < 0) s += len;
  if (e < 0) e += len;
  s = s < 0 ? 0 : s > len ? len : s;
  e = e < 0 ? 0 : e > len ? len : e;
  *first = s;
  *count = e > s ? (e - s + step - 1) / step : 0;
}

static int build_slice(tctx *t, int x, const slice_p *s, int out, const char *base) {
  kiln_graph *g = t->g;
  int ins[5] = {x, kiln_build_ints(g, base, "starts", s->start, (size_t)s->n, false),
                kiln_build_ints(g, base, "ends", s->end, (size_t)s->n, false),
                kiln_build_ints(g, base, "axes", s->axis, (size_t)s->n, false),
                kiln_build_ints(g, base, "steps", s->step, (size_t)s->n, false)};
  for (int k = 1; k < 5; k++)
    if (ins[k] < 0) return -1;
  char name[420];
  snprintf(name, sizeof name, "%s_slice", base);
  if (kiln_build_node(g, "Slice", name, ins, 5, &out, 1) < 0) return -1;
  t->uses[x]++;
  return 0;
}

static int slice_pair(tctx *t, size_t i) {
  kiln_graph *g = t->g;
  const kiln_node *n = &g->nodes[i], *p = producer(g, n->in[0]);
  slice_p a, b;
  if (!p || taken(t, p) || t->uses[n->in[0]] != 1 || !slice_of(t, n, &b) || !slice_of(t, p, &a))
    return 0;
  int x = p->in[0];
  slice_p m = a;
  for (int k = 0; k < b.n; k++) {
    int j = 0;
    while (j < m.n && m.axis[j] != b.axis[k]) j++;
    if (j == m.n) { /* a new axis */
      m.start[j] = b.start[k], m.end[j] = b.end[k], m.axis[j] = b.axis[k], m.step[j] = b.step[k];
      m.n++;
      continue;
    }
    int64_t len = kiln_dimflow_dim(t->df, x, (int)b.axis[k]), f1, c1, f2, c2;
    if (len < 0 || m.step[j] < 0 || b.step[k] < 0) return 0;
    clamp_pos(len, m.start[j], m.end[j], m.step[j], &f1, &c1);
    clamp_pos(c1, b.start[k], b.end[k], b.step[k], &f2, &c2);
    m.start[j] = f1 + f2 * m.step[j];
    m.step[j] *= b.step[k];
    m.end[j] = m.start[j] + c2 * m.step[j];
    if (c2 == 0) m.end[j] = m.start[j];
  }
  char base[400];
  snprintf(base, sizeof base, "%s", g->values[n->out[0]].name);
  int out = n->out[0];
  g->nodes[i].n_out = 0;
  t->dead[i] = true;
  return build_slice(t, x, &m, out, base) < 0 ? -1 : 1;
}

/* ---- Concat of Slices / of a Split ---- */

/* Slice node of x along only `axis` with step 1: its [start, end) normalised on length len
 * (len < 0: unknown; then start must be >= 0 and end either >= 0 or "to the end"). */
static bool axis_slice(const tctx *t, const kiln_node *n, int axis, int64_t len, int *x, int64_t *s,
                       int64_t *e) {
  slice_p p;
  if (!slice_of(t, n, &p) || p.n != 1 || p.axis[0] != axis || p.step[0] != 1) return false;
  int64_t a = p.start[0], b = p.end[0];
  if (len >= 0) {
    int64_t c;
    clamp_pos(len, a, b, 1, &a, &c);
    b = a + c;
  } else {
    if (a < 0 || b < 0) return false;
    if (b >= INT32_MAX) b = INT64_MAX;
  }
  *x = n->in[0];
  *s = a;
  *e = b;
  return true;
}

static int concat_slices(tctx *t, size_t i) {
  kiln_graph *g = t->g;
  const kiln_node *n = &g->nodes[i];
  int r = rank_of(t, n->out[0]);
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (r < 0 || n->n_in < 2) return 0;
  if (axis < 0) axis += r;
  /* Split(x) re-assembled */
  const kiln_node *sp = producer(g, n->in[0]);
  if (std_op(sp, "Split") && sp->n_out == n->n_in && !taken(t, sp)) {
    int64_t sa = kiln_attr_int(sp, "axis", 0);
    bool all = (sa < 0 ? sa + r : sa) == axis;
    for (size_t k = 0; k < n->n_in && all; k++) all = n->in[k] == sp->out[k];
    if (all && replaceable(t, n->out[0])) {
      bypass(t, i, n->out[0], sp->in[0]);
      return 1;
    }
  }
  /* adjacent slices of one x */
  int x0 = -1;
  int64_t len = -1, s0 = 0, e0 = 0;
  for (size_t k = 0; k < n->n_in; k++) {
    const kiln_node *p = producer(g, n->in[k]);
    int x;
    int64_t s, e;
    if (!p || taken(t, p) || !std_op(p, "Slice")) return 0;
    if (k == 0) len = kiln_dimflow_dim(t->df, p->in[0], (int)axis);
    if (!axis_slice(t, p, (int)axis, len >= 0 ? len : -1, &x, &s, &e)) return 0;
    if (k == 0) x0 = x, s0 = s, e0 = e;
    else if (x != x0 || s != e0 || e0 == INT64_MAX) return 0;
    else e0 = e;
  }
  if (len >= 0 && e0 >= len) e0 = INT64_MAX;
  if (s0 == 0 && e0 == INT64_MAX && replaceable(t, n->out[0])) {
    bypass(t, i, n->out[0], x0);
    return 1;
  }
  for (size_t k = 0; k < n->n_in; k++)
    if (t->uses[n->in[k]] != 1) return 0; /* the slices stay: nothing saved */
  slice_p m = {.n = 1, .start = {s0}, .end = {e0}, .axis = {axis}, .step = {1}};
  char base[400];
  snprintf(base, sizeof base, "%s", g->values[n->out[0]].name);
  int out = n->out[0];
  g->nodes[i].n_out = 0;
  t->dead[i] = true;
  return build_slice(t, x0, &m, out, base) < 0 ? -1 : 1;
}

kiln_code kiln_pass_fuse_transpose(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  size_t n0 = g->n_nodes, done = 0;
  tctx t = {ctx, g, kiln_dimflow_new(g), kiln_graph_use_counts(g), kiln_calloc(n0 + 1, sizeof(bool)), n0, false};
  int rc = t.df && t.uses && t.dead ? 0 : -1;
  for (size_t i = 0; i < n0; i++)
    for (size_t a = 0; a < g->nodes[i].n_attrs; a++) t.has_sub |= g->nodes[i].attrs[a].g || g->nodes[i].attrs[a].graphs;
  for (size_t i = 0; i < n0 && rc >= 0; i++) {
    const kiln_node *n = &g->nodes[i];
    if (t.dead[i] || *n->domain || n->n_out < 1 || n->out[0] < 0 || n->n_in < 1 || n->in[0] < 0) continue;
    if (!strcmp(n->op_type, "Transpose")) rc = transpose_pair(&t, i);
    if (rc == 0 && !t.dead[i]) rc = reshape_chain(&t, i);
    if (rc == 0 && !t.dead[i] && !strcmp(g->nodes[i].op_type, "Slice")) rc = slice_pair(&t, i);
    if (rc == 0 && !t.dead[i] && !strcmp(g->nodes[i].op_type, "Concat")) rc = concat_slices(&t, i);
    if (rc > 0) done++, rc = 0;
  }
  if (rc >= 0 && done) {
    bool *d = realloc(t.dead, (g->n_nodes + 1) * sizeof *d);
    if (!d) rc = -1;
    else {
      t.dead = d;
      for (size_t i = n0; i < g->n_nodes; i++) t.dead[i] = false;
      kiln_graph_remove_nodes(g, t.dead);
    }
  }
  kiln_dimflow_free(t.df);
  free(t.uses);
  free(t.dead);
  if (rc < 0) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory simplifying data movement");
  *count += done;
  return KILN_OK;
}
