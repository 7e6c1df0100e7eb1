/* RMSNorm fusion.
 *
 * Before opset 23 (RMSNormalization), exporters write the root-mean-square normalisation of
 * LLaMA-style models out:
 *     y = x / Sqrt(Add(ReduceMean(Pow(x, 2) | Mul(x, x)), eps))          [Mul(., gamma)]
 *     y = Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps))))    [Mul(., gamma)]
 * over the last axis (or last few). x feeds the square and the Div / Mul: the spine is matched
 * with pattern.h and that side edge checked here; kfn_closed() checks that no intermediate is
 * read outside the pattern. (The same spine with x = Sub(x0, mean) is a LayerNorm, which
 * fuse_layernorm, running before, has taken.)
 *
 *   -> ai.kiln::RMSNorm(X, [gamma])          epsilon, axis (-k: the last k dims)
 * The kernel is the RMSNormalization one (src/ops/rms_norm.c). */
#include <stdlib.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse_norm_common.h"

static bool const_side(const kiln_graph *g, const kiln_node *n) {
  return n->n_in == 2 && (kiln_const_input(g, n, 0) != NULL) != (kiln_const_input(g, n, 1) != NULL);
}
static bool binary(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return n->n_in == 2;
}

#define STATS {"Pow|Mul", -1, kfn_square}, {"ReduceMean", 0, kfn_keepdims}, {"Add", -1, kfn_eps_add}, {"Sqrt", 0, NULL}
static const kiln_pattern spines[] = {
    {"rms_div_gamma", 6, {STATS, {"Div", 1, NULL}, {"Mul", -1, const_side}}},
    {"rms_recip_gamma", 7, {STATS, {"Reciprocal", 0, NULL}, {"Mul", -1, binary}, {"Mul", -1, const_side}}},
    {"rms_div", 5, {STATS, {"Div", 1, NULL}}},
    {"rms_recip", 6, {STATS, {"Reciprocal", 0, NULL}, {"Mul", -1, binary}}},
};

typedef struct rms_match {
  kiln_match m;
  int x, gamma;
  int axis;
  float epsilon;
} rms_match;

static bool match_rms(const kiln_graph *g, size_t anchor, const size_t *uses, const bool *taken, rms_match *rm) {
  for (size_t p = 0; p < sizeof spines / sizeof spines[0]; p++) {
    kiln_match sp;
    if (!kfn_pattern_match(g, &spines[p], anchor, uses, taken, &sp)) continue;
    const kiln_node *sq = &g->nodes[sp.nodes[0]], *mean = &g->nodes[sp.nodes[1]], *ae = &g->nodes[sp.nodes[2]];
    const kiln_node *apply = &g->nodes[sp.nodes[4]];
    int x = sq->in[0];
    bool recip = kiln_op_is(apply, "Reciprocal");
    if (recip) apply = &g->nodes[sp.nodes[5]];
    int other = recip ? kfn_other(apply, g->nodes[sp.nodes[4]].out[0]) : apply->in[0];
    if (other != x || !kfn_is_float(g, x) || kfn_producer(g, x, "Sub", taken) >= 0) continue;
    const kiln_type *xt = kiln_value_type(g, x);
    int k = kfn_suffix_axes(g, mean, xt->rank);
    if (k < 1) continue;
    size_t last = recip ? 6 : 5;
    rm->gamma = -1;
    if (sp.n > last) {
      const kiln_node *mg = &g->nodes[sp.nodes[last]];
      int c = kiln_const_input(g, mg, 0) ? mg->in[0] : mg->in[1];
      if (!kfn_const_over_last(g->values[c].init, xt, k)) continue;
      rm->gamma = c;
    }
    int y = g->nodes[anchor].out[0];
    if (!kfn_is_float(g, y) || kiln_value_type(g, y)->rank != xt->rank || !kfn_closed(g, &sp, uses, NULL, 0)) continue;
    rm->m = sp;
    rm->x = x;
    rm->axis = -k;
    rm->epsilon = (float)kiln_get_f64(kiln_const_input(g, ae, kiln_const_input(g, ae, 0) ? 0 : 1), 0);
    return true;
  }
  return false;
}

kiln_code kiln_pass_fuse_rmsnorm(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  size_t *uses = s.uses;
  size_t n0 = g->n_nodes;
  for (size_t i = n0; !rc && i-- > 0;) {
    rms_match rm;
    if (s.dead[i] || !match_rms(g, i, uses, s.dead, &rm)) continue;
    int in[2] = {rm.x, rm.gamma};
    int f = kfn_fuse(ctx, g, &rm.m, "RMSNorm", in, rm.gamma >= 0 ? 2 : 1, NULL, 0, &s);
    if (f < 0) {
      rc = kiln_fuse_failed(ctx);
      break;
    }
    if (kiln_node_set_float(&g->nodes[f], "epsilon", rm.epsilon) || kiln_node_set_int(&g->nodes[f], "axis", rm.axis))
      rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    (*count)++;
  }
  return kiln_fuse_scan_end(&s, g, rc);
}
