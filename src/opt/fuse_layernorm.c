/* LayerNorm fusion.
 *
 * Exporters at opset < 17 have no LayerNormalization and write it out:
 *     mean = ReduceMean(x); d = Sub(x, mean); v = ReduceMean(Pow(d, 2) | Mul(d, d));
 *     y = Div(d, Sqrt(Add(v, eps))) [Mul(., gamma)] [Add(., beta)]
 * over the last axis (or last few). That is a DAG: x feeds ReduceMean and Sub, d feeds the
 * square and Div. The spine square -> ReduceMean -> Add -> Sqrt -> Div [-> Mul] [-> Add] is a
 * chain matched with pattern.h; the side edges (d from Sub, the mean from a ReduceMean of the
 * same x, the same axes on both reductions) are checked explicitly, and kfn_closed() checks that
 * no intermediate is read outside the pattern. A standard LayerNormalization node of float data
 * is taken too, so that a fused kernel runs either way.
 *
 *   -> ai.kiln::LayerNorm(X, [gamma], [beta])          epsilon, axis (-k: the last k dims)
 *   -> ai.kiln::SkipLayerNorm(A, B, [gamma], [beta])   when x = Add(A, B) is read only by the
 *      normalisation, or also elsewhere: then the fused node's second output is the sum.
 * The kernels are in src/ops/fused_norm.c. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse_norm_common.h"

static bool const_side(const kiln_graph *g, const kiln_node *n) {
  return n->n_in == 2 && (kiln_const_input(g, n, 0) != NULL) != (kiln_const_input(g, n, 1) != NULL);
}

#define SPINE {"Pow|Mul", -1, kfn_square}, {"ReduceMean", 0, kfn_keepdims}, {"Add", -1, kfn_eps_add}, \
              {"Sqrt", 0, NULL}, {"Div", 1, NULL}
static const kiln_pattern spines[] = {
    {"ln_gamma_beta", 7, {SPINE, {"Mul", -1, const_side}, {"Add", -1, const_side}}},
    {"ln_gamma", 6, {SPINE, {"Mul", -1, const_side}}},
    {"ln_beta", 6, {SPINE, {"Add", -1, const_side}}},
    {"ln", 5, {SPINE}},
};

static int const_of(const kiln_graph *g, const kiln_node *n) {
  return kiln_const_input(g, n, 0) ? n->in[0] : n->in[1];
}

static bool match_decomposed(const kiln_graph *g, size_t anchor, const size_t *uses,
                             const bool *taken, kiln_ln_match *lm) {
  for (size_t p = 0; p < sizeof spines / sizeof spines[0]; p++) {
    kiln_match sp;
    if (!kfn_pattern_match(g, &spines[p], anchor, uses, taken, &sp)) continue;
    const kiln_node *sq = &g->nodes[sp.nodes[0]], *rm2 = &g->nodes[sp.nodes[1]];
    const kiln_node *ae = &g->nodes[sp.nodes[2]], *dv = &g->nodes[sp.nodes[4]];
    int d = dv->in[0];
    if (sq->in[0] != d) return false; /* the squared value is the divided one */
    int sb = kfn_producer(g, d, "Sub", taken);
    if (sb < 0 || g->nodes[sb].n_in != 2) return false;
    int x = g->nodes[sb].in[0];
    int rm1 = kfn_producer(g, g->nodes[sb].in[1], "ReduceMean", taken);
    if (rm1 < 0 || g->nodes[rm1].in[0] != x || !kfn_keepdims(g, &g->nodes[rm1]) || !kfn_is_float(g, x))
      return false;
    const kiln_type *xt = kiln_value_type(g, x);
    int r = xt->rank, k = kfn_suffix_axes(g, &g->nodes[rm1], r);
    if (k < 1 || kfn_suffix_axes(g, rm2, r) != k) return false;
    lm->x = x;
    lm->axis = -k;
    lm->standard = false;
    lm->gamma = lm->beta = -1;
    lm->epsilon = (float)kiln_get_f64(kiln_const_input(g, ae, kiln_const_input(g, ae, 0) ? 0 : 1), 0);
    for (size_t s = 5; s < sp.n; s++) {
      const kiln_node *n = &g->nodes[sp.nodes[s]];
      int c = const_of(g, n);
      if (!kfn_const_over_last(g->values[c].init, xt, k)) return false;
      if (kiln_op_is(n, "Mul")) lm->gamma = c;
      else lm->beta = c;
    }
    lm->m = sp;
    kfn_match_add(&lm->m, (size_t)sb);
    kfn_match_add(&lm->m, (size_t)rm1);
    /* a constant (eps, 2) of higher rank than x would have raised the output's rank */
    int y = g->nodes[anchor].out[0];
    return kfn_is_float(g, y) && kiln_value_type(g, y)->rank == r && kfn_closed(g, &lm->m, uses, NULL, 0);
  }
  return false;
}

static bool match_standard(const kiln_graph *g, size_t anchor, const size_t *uses, kiln_ln_match *lm) {
  const kiln_node *n = &g->nodes[anchor];
  if (!kiln_op_is(n, "LayerNormalization") || n->n_in < 2 || !kfn_is_float(g, n->in[0]) ||
      kiln_attr_int(n, "stash_type", 1) != 1)
    return false;
  const kiln_type *xt = kiln_value_type(g, n->in[0]);
  int64_t axis = kiln_attr_int(n, "axis", -1);
  if (axis < 0) axis += xt->rank;
  if (axis < 0 || axis >= xt->rank) return false;
  int k = xt->rank - (int)axis;
  if (!kfn_const_over_last(kiln_const_input(g, n, 1), xt, k)) return false;
  bool has_b = n->n_in > 2 && n->in[2] >= 0;
  if (has_b && !kfn_const_over_last(kiln_const_input(g, n, 2), xt, k)) return false;
  lm->x = n->in[0];
  lm->gamma = n->in[1];
  lm->beta = has_b ? n->in[2] : -1;
  lm->epsilon = kiln_attr_float(n, "epsilon", 1e-5f);
  lm->axis = -k;
  lm->standard = true;
  lm->m.n = 1;
  lm->m.nodes[0] = anchor;
  return kfn_closed(g, &lm->m, uses, NULL, 0); /* Mean / InvStdDev outputs unused */
}

bool kiln_match_layernorm(const kiln_graph *g, size_t anchor, const size_t *uses,
                          const bool *taken, kiln_ln_match *lm) {
  if (taken && taken[anchor]) return false;
  return match_standard(g, anchor, uses, lm) || match_decomposed(g, anchor, uses, taken, lm);
}

/* An addend of a residual Add: float32, over the normalised dims in full or not at all as far
 * as its static type tells (the kernel checks at run time and falls back on anything else). */
static bool skip_operand(const kiln_graph *g, int v, const kiln_type *xt, int k) {
  if (!kfn_is_float(g, v)) return false;
  const kiln_type *t = kiln_value_type(g, v);
  bool full = true, one = true;
  for (int d = 1; d <= k; d++) {
    int64_t td = t->rank >= d ? t->dims[t->rank - d] : 1, xd = xt->dims[xt->rank - d];
    full &= td < 0 || xd < 0 || td == xd;
    one &= td == 1;
  }
  return full || one;
}

static kiln_code set_attrs(kiln_node *f, const kiln_ln_match *lm) {
  kiln_code rc = kiln_node_set_float(f, "epsilon", lm->epsilon);
  return rc ? rc : kiln_node_set_int(f, "axis", lm->axis);
}

kiln_code kiln_pass_fuse_layernorm(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  size_t *uses = s.uses;
  size_t n0 = g->n_nodes;
  /* Anchors from the last node back, so a chain is seen from its end. */
  for (size_t i = n0; !rc && i-- > 0;) {
    kiln_ln_match lm;
    if (s.dead[i] || !kiln_match_layernorm(g, i, uses, s.dead, &lm)) continue;
    int k = -lm.axis, sum = -1;
    const kiln_type *xt = kiln_value_type(g, lm.x);
    int add = kfn_producer(g, lm.x, "Add", s.dead);
    int in[4] = {lm.x, lm.gamma, lm.beta, -1};
    const char *op = "LayerNorm";
    size_t n_in = 3;
    kiln_ln_match prev;
    /* an Add that ends another normalisation (its beta) is that one's, not a residual */
    if (add >= 0 && !kiln_match_layernorm(g, (size_t)add, uses, s.dead, &prev)) {
      const kiln_node *a = &g->nodes[add];
      kiln_match with = lm.m;
      if (a->n_in == 2 && skip_operand(g, a->in[0], xt, k) && skip_operand(g, a->in[1], xt, k) &&
          kfn_match_add(&with, (size_t)add)) {
        /* the sum read outside the normalisation becomes the fused node's second output */
        if (uses[lm.x] != kfn_reads(g, &lm.m, lm.x)) sum = lm.x;
        if (kfn_closed(g, &with, uses, &sum, sum >= 0)) {
          lm.m = with;
          op = "SkipLayerNorm";
          n_in = 4;
          in[0] = a->in[0];
          in[1] = a->in[1];
          in[2] = lm.gamma;
          in[3] = lm.beta;
        } else {
          sum = -1;
        }
      }
    }
    while (n_in > 1 && in[n_in - 1] < 0) n_in--; /* no trailing omitted inputs */
    int f = kfn_fuse(ctx, g, &lm.m, op, in, n_in, &sum, sum >= 0, &s);
    if (f < 0) {
      rc = kiln_fuse_failed(ctx);
      break;
    }
    if (set_attrs(&g->nodes[f], &lm)) rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    (*count)++;
  }
  return kiln_fuse_scan_end(&s, g, rc);
}
