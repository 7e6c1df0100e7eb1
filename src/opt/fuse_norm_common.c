/* Helpers shared by fuse_layernorm.c, fuse_gelu.c and fuse_embedding.c (see the header). */
#include "opt/fuse_norm_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static bool free_node(const bool *taken, int p) { return p >= 0 && !(taken && taken[p]); }

int kfn_producer(const kiln_graph *g, int v, const char *ops, const bool *taken) {
  if (v < 0) return -1;
  int p = g->values[v].producer;
  /* a node claimed by an earlier rewrite of this pass is an empty husk: test `taken` first */
  if (p < 0 || (size_t)p >= g->n_nodes || !free_node(taken, p)) return -1;
  const kiln_node *n = &g->nodes[p];
  return n->n_out > 0 && n->out[0] == v && kiln_op_is(n, ops) ? p : -1;
}

bool kfn_is_kiln(const kiln_node *n, const char *op) {
  return n->domain && n->op_type && !strcmp(n->domain, KILN_FUSED_DOMAIN) && !strcmp(n->op_type, op);
}

int kfn_kiln_producer(const kiln_graph *g, int v, const char *op, const bool *taken) {
  if (v < 0) return -1;
  int p = g->values[v].producer;
  if (p < 0 || (size_t)p >= g->n_nodes || !free_node(taken, p)) return -1;
  const kiln_node *n = &g->nodes[p];
  return n->n_out > 0 && n->out[0] == v && kfn_is_kiln(n, op) ? p : -1;
}

int kfn_other(const kiln_node *n, int v) {
  if (n->n_in != 2) return -1;
  if (n->in[0] == v) return n->in[1];
  if (n->in[1] == v) return n->in[0];
  return -1;
}

bool kfn_scalar_is(const kiln_graph *g, const kiln_node *n, size_t i, double want, double rtol) {
  double v;
  return kiln_const_scalar(g, n, i, &v) && fabs(v - want) <= rtol * fabs(want);
}

int kfn_scalar_side(const kiln_graph *g, const kiln_node *n, double want, double rtol) {
  if (n->n_in != 2) return -1;
  if (kfn_scalar_is(g, n, 1, want, rtol) && !kiln_const_input(g, n, 0)) return 0;
  if (kfn_scalar_is(g, n, 0, want, rtol) && !kiln_const_input(g, n, 1)) return 1;
  return -1;
}

bool kfn_is_float(const kiln_graph *g, int v) {
  if (v < 0) return false;
  const kiln_type *t = kiln_value_type(g, v);
  return t->kind == KILN_T_TENSOR && t->dtype == KILN_FLOAT && t->rank >= 0;
}

bool kfn_const_over_last(const kiln_tensor *t, const kiln_type *ty, int k) {
  if (!t || t->dtype != KILN_FLOAT || t->kind != KILN_KIND_TENSOR || ty->rank < k || k < 1 ||
      t->rank > ty->rank)
    return false;
  int64_t n = 1;
  for (int d = 0; d < k; d++) {
    int64_t dim = ty->dims[ty->rank - 1 - d];
    if (dim <= 0) return false;
    n *= dim;
  }
  if (t->numel != n) return false;
  for (int d = 0; d < t->rank; d++) {
    int64_t td = t->dims[t->rank - 1 - d];
    if (d < k ? td != ty->dims[ty->rank - 1 - d] : td != 1) return false;
  }
  return true;
}

bool kfn_pattern_match(const kiln_graph *g, const kiln_pattern *p, size_t anchor,
                       const size_t *uses, const bool *taken, kiln_match *m) {
  return kiln_pattern_match(g, p, anchor, uses, taken, m); /* backtracks over inputs */
}

bool kfn_match_add(kiln_match *m, size_t i) {
  size_t at = 0;
  while (at < m->n && m->nodes[at] < i) at++;
  if (at < m->n && m->nodes[at] == i) return true;
  if (m->n >= KILN_PAT_MAX) return false;
  memmove(&m->nodes[at + 1], &m->nodes[at], (m->n - at) * sizeof m->nodes[0]);
  m->nodes[at] = i;
  m->n++;
  return true;
}

size_t kfn_reads(const kiln_graph *g, const kiln_match *m, int v) {
  size_t r = 0;
  for (size_t s = 0; s < m->n; s++) {
    const kiln_node *n = &g->nodes[m->nodes[s]];
    for (size_t k = 0; k < n->n_in; k++) r += n->in[k] == v;
  }
  return r;
}

bool kfn_closed(const kiln_graph *g, const kiln_match *m, const size_t *uses, const int *keep,
                size_t n_keep) {
  size_t anchor = m->nodes[m->n - 1];
  for (size_t s = 0; s < m->n; s++) {
    const kiln_node *n = &g->nodes[m->nodes[s]];
    for (size_t o = 0; o < n->n_out; o++) {
      int v = n->out[o];
      if (v < 0 || (m->nodes[s] == anchor && o == 0)) continue;
      bool kept = false;
      for (size_t k = 0; k < n_keep; k++) kept |= keep[k] == v;
      if (!kept && uses[v] != kfn_reads(g, m, v)) return false;
    }
  }
  return true;
}

int kfn_fuse(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
             const int *inputs, size_t n_inputs, const int *extra, size_t n_extra, kiln_fuse_scan *s) {
  int k = kiln_fuse_chain(ctx, g, m, op_type, inputs, n_inputs, s->dead);
  if (k < 0 || kiln_fuse_scan_grow(ctx, g, s)) return -1;
  kiln_node *f = &g->nodes[k];
  const kiln_attr *a = kiln_node_attr(f, "original");
  kiln_graph *sub = a ? a->g : NULL;
  if (!sub || f->n_out < 1 || f->out[0] < 0 || sub->n_outputs < 1)
    return kiln_fail(ctx->err, KILN_ERR_RUN, "fused %s has no output", op_type), -1;
  /* Only the first output of the anchor carries on (the others were checked unused). */
  int *fo = realloc(f->out, (1 + n_extra) * sizeof *fo);
  int *so = realloc(sub->outputs, (1 + n_extra) * sizeof *so);
  if (fo) f->out = fo;
  if (so) sub->outputs = so;
  if (!fo || !so) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory"), -1;
  f->n_out = sub->n_outputs = 1;
  for (size_t i = 0; i < n_extra; i++) {
    int sid = kiln_graph_find(sub, g->values[extra[i]].name);
    if (sid < 0) return kiln_fail(ctx->err, KILN_ERR_RUN, "fused %s: extra output not in the chain", op_type), -1;
    f->out[f->n_out++] = extra[i];
    sub->outputs[sub->n_outputs++] = sid;
  }
  return k;
}

/* ---- the normalisations' pieces (fuse_layernorm.c, fuse_rmsnorm.c) ---- */

bool kfn_keepdims(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return kiln_attr_int(n, "keepdims", 1) == 1 && kiln_attr_int(n, "noop_with_empty_axes", 0) == 0;
}

bool kfn_square(const kiln_graph *g, const kiln_node *n) {
  if (kiln_op_is(n, "Pow")) return n->n_in == 2 && kfn_scalar_is(g, n, 1, 2.0, 0.0);
  return n->n_in == 2 && n->in[0] == n->in[1];
}

bool kfn_eps_add(const kiln_graph *g, const kiln_node *n) {
  for (size_t i = 0; i < 2 && n->n_in == 2; i++) {
    const kiln_tensor *t = kiln_const_input(g, n, i);
    if (t && t->numel == 1 && t->dtype == KILN_FLOAT && !kiln_const_input(g, n, 1 - i)) return true;
  }
  return false;
}

/* The reduced axes of a ReduceMean as "the last k dims of a rank-r value": k, or 0 when they
 * are not such a suffix (or not constant). */
int kfn_suffix_axes(const kiln_graph *g, const kiln_node *n, int r) {
  int64_t axes[KILN_MAX_RANK];
  size_t na = 0;
  if (n->opset >= 18) {
    if (n->n_in >= 2 && n->in[1] >= 0) {
      const kiln_tensor *t = kiln_const_input(g, n, 1);
      if (!t || !kiln_dtype_is_int(t->dtype) || t->numel > KILN_MAX_RANK) return 0;
      for (int64_t i = 0; i < t->numel; i++) axes[na++] = kiln_get_i64(t, i);
    }
  } else {
    size_t cnt = 0;
    const int64_t *a = kiln_attr_ints(n, "axes", &cnt);
    if (cnt > KILN_MAX_RANK) return 0;
    for (size_t i = 0; i < cnt; i++) axes[na++] = a[i];
  }
  if (na == 0) return r; /* no axes: everything (noop_with_empty_axes was refused above) */
  bool seen[KILN_MAX_RANK] = {false};
  int lo = r;
  for (size_t i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || seen[a]) return 0;
    seen[a] = true;
    if (a < lo) lo = (int)a;
  }
  return (size_t)(r - lo) == na ? r - lo : 0; /* distinct axes from lo to r-1: a suffix */
}
