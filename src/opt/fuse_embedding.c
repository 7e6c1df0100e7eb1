/* Embedding fusion: the token lookup of a transformer's input and what follows it,
 *     Gather(word table, ids) + P  [-> Relu]  [-> LayerNorm over the last dim]
 * => ai.kiln::FusedEmbedding(ids, word, pos, [pos_ids], [pos_ends], [gamma], [beta]), which
 * writes each output row once (see src/ops/fused_norm.c). The word table is a constant
 * [V, D] float32 Gather on axis 0; P, the position term, is one of
 *   a constant (e.g. a folded pos[:, :S] slice)               -> pos = P
 *   Gather(constant table [N, D], pos_ids) on axis 0          -> pos = table, pos_ids
 *   Slice(constant table, starts 0, ends E, axes, steps 1)    -> pos = table, pos_ends = E,
 *       with E known at run time only (pos[:, :S] with S from Shape(ids))  pos_axes = axes
 * The LayerNorm is a decomposed chain or a standard LayerNormalization (kiln_match_layernorm),
 * or, since fuse_layernorm runs first, ai.kiln::LayerNorm / SkipLayerNorm: the latter already
 * holds the Add (its inputs are the Gather output and P). When the value entering the
 * LayerNorm is read elsewhere too (a pre-norm transformer's residual), it becomes the fused
 * node's second output. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse_norm_common.h"

enum { E_IDS, E_WORD, E_POS, E_POS_IDS, E_POS_ENDS, E_GAMMA, E_BETA, E_N };

static bool int_typed(const kiln_graph *g, int v) {
  if (v < 0) return false;
  const kiln_type *t = kiln_value_type(g, v);
  return t->kind == KILN_T_TENSOR && (t->dtype == KILN_INT64 || t->dtype == KILN_INT32) && t->rank >= 0;
}

/* A Gather on axis 0 from a constant float32 table [rows, d] (d = -1: any): its index, else -1.
 * Its output must be read only once (by the Add). */
static int table_gather(const kiln_graph *g, int v, int64_t d, const size_t *uses, const bool *taken) {
  int gi = kfn_producer(g, v, "Gather", taken);
  if (gi < 0 || uses[v] != 1) return -1;
  const kiln_node *n = &g->nodes[gi];
  const kiln_tensor *t = kiln_const_input(g, n, 0);
  if (n->n_in != 2 || kiln_attr_int(n, "axis", 0) != 0 || !t || t->dtype != KILN_FLOAT || t->rank != 2 ||
      (d >= 0 && t->dims[1] != d) || !int_typed(g, n->in[1]))
    return -1;
  return gi;
}

static bool all_ints(const kiln_tensor *t, int64_t want) {
  if (!t || !kiln_dtype_is_int(t->dtype)) return false;
  for (int64_t i = 0; i < t->numel; i++)
    if (kiln_get_i64(t, i) != want) return false;
  return true;
}

typedef struct emb {
  int in[E_N];
  kiln_match m;
  int64_t axes[KILN_MAX_RANK];
  size_t n_axes;     /* pos_axes, for a sliced position table */
} emb;

/* The position term p, an addend with last dim d: fills e->in[E_POS..E_POS_ENDS] and adds its
 * producer (for a Gather or Slice) to e->m. */
static bool position_term(const kiln_graph *g, int p, int64_t d, const size_t *uses, const bool *taken, emb *e) {
  const kiln_value_info *v = &g->values[p];
  if (v->init && !v->is_input) { /* a constant */
    const kiln_tensor *t = v->init;
    if (t->kind != KILN_KIND_TENSOR || t->dtype != KILN_FLOAT || t->rank < 1 || t->dims[t->rank - 1] != d) return false;
    e->in[E_POS] = p;
    return true;
  }
  int pg = table_gather(g, p, d, uses, taken);
  if (pg >= 0) {
    e->in[E_POS] = g->nodes[pg].in[0];
    e->in[E_POS_IDS] = g->nodes[pg].in[1];
    return kfn_match_add(&e->m, (size_t)pg);
  }
  int sl = kfn_producer(g, p, "Slice", taken);
  if (sl < 0 || uses[p] != 1) return false;
  const kiln_node *n = &g->nodes[sl];
  const kiln_tensor *data = kiln_const_input(g, n, 0), *starts = kiln_const_input(g, n, 1);
  if (n->opset < 10 || n->n_in < 3 || !data || data->dtype != KILN_FLOAT || data->rank < 1 ||
      data->dims[data->rank - 1] != d || !all_ints(starts, 0) || !int_typed(g, n->in[2]))
    return false;
  if (n->n_in > 4 && n->in[4] >= 0 && !all_ints(kiln_const_input(g, n, 4), 1)) return false;
  e->n_axes = (size_t)starts->numel;
  if (e->n_axes > KILN_MAX_RANK) return false;
  const kiln_tensor *axes = n->n_in > 3 && n->in[3] >= 0 ? kiln_const_input(g, n, 3) : NULL;
  if (n->n_in > 3 && n->in[3] >= 0 && (!axes || !kiln_dtype_is_int(axes->dtype) || (size_t)axes->numel != e->n_axes))
    return false;
  for (size_t i = 0; i < e->n_axes; i++) {
    e->axes[i] = axes ? kiln_get_i64(axes, (int64_t)i) : (int64_t)i;
    int64_t a = e->axes[i] < 0 ? e->axes[i] + data->rank : e->axes[i];
    if (a < 0 || a >= data->rank || a == data->rank - 1) return false; /* never cut D */
  }
  e->in[E_POS] = n->in[0];
  e->in[E_POS_ENDS] = n->in[2];
  return kfn_match_add(&e->m, (size_t)sl);
}

/* Addends a and b: one is the word Gather, the other the position term. */
static bool addends(const kiln_graph *g, int a, int b, const size_t *uses, const bool *taken, emb *e) {
  for (int k = 0; k < 2; k++) {
    int w = k ? b : a, p = k ? a : b;
    int wg = table_gather(g, w, -1, uses, taken);
    if (wg < 0) continue;
    emb save = *e;
    e->in[E_IDS] = g->nodes[wg].in[1];
    e->in[E_WORD] = g->nodes[wg].in[0];
    if (kfn_match_add(&e->m, (size_t)wg) &&
        position_term(g, p, kiln_const_input(g, &g->nodes[wg], 0)->dims[1], uses, taken, e))
      return true;
    *e = save;
  }
  return false;
}

/* gamma / beta of a fused normalisation node, checked constant over d values. */
static bool const_vec(const kiln_graph *g, const kiln_node *n, size_t i, int *out) {
  *out = -1;
  if (i >= n->n_in || n->in[i] < 0) return true;
  const kiln_tensor *t = kiln_const_input(g, n, i);
  *out = n->in[i];
  return t && t->dtype == KILN_FLOAT;
}

kiln_code kiln_pass_fuse_embedding(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  size_t *uses = s.uses;
  size_t n0 = g->n_nodes;
  for (size_t i = n0; !rc && i-- > 0;) {
    if (s.dead[i]) continue;
    const kiln_node *n = &g->nodes[i];
    emb e;
    for (int k = 0; k < E_N; k++) e.in[k] = -1;
    e.m.n = 0;
    e.n_axes = 0;
    bool ln = false, relu = false, ok = false;
    float eps = 1e-5f;
    int x = -1, pre = -1; /* pre: the value entering the LayerNorm, when read elsewhere too */
    kiln_ln_match lm;
    if (kfn_is_kiln(n, "SkipLayerNorm") && kiln_attr_int(n, "axis", -1) == -1 && n->n_in >= 2) {
      ln = true;
      eps = kiln_attr_float(n, "epsilon", 1e-5f);
      pre = n->n_out > 1 ? n->out[1] : -1;
      e.m.n = 1;
      e.m.nodes[0] = i;
      ok = const_vec(g, n, 2, &e.in[E_GAMMA]) && const_vec(g, n, 3, &e.in[E_BETA]) &&
           addends(g, n->in[0], n->in[1], uses, s.dead, &e);
    } else {
      if (kfn_is_kiln(n, "LayerNorm") && kiln_attr_int(n, "axis", -1) == -1) {
        if (!const_vec(g, n, 1, &e.in[E_GAMMA]) || !const_vec(g, n, 2, &e.in[E_BETA])) continue;
        ln = true;
        eps = kiln_attr_float(n, "epsilon", 1e-5f);
        x = n->in[0];
        e.m.n = 1;
        e.m.nodes[0] = i;
      } else if (kiln_match_layernorm(g, i, uses, s.dead, &lm) && lm.axis == -1) {
        ln = true;
        eps = lm.epsilon;
        x = lm.x;
        e.in[E_GAMMA] = lm.gamma;
        e.in[E_BETA] = lm.beta;
        e.m = lm.m;
      } else if (kiln_op_is(n, "Relu|Add")) {
        x = n->out[0];
        e.m.n = 0;
      }
      if (x < 0) continue;
      if (ln && uses[x] != kfn_reads(g, &e.m, x)) pre = x;
      int r = kfn_producer(g, x, "Relu", s.dead);
      if (r >= 0 && kfn_match_add(&e.m, (size_t)r)) {
        relu = true;
        x = g->nodes[r].in[0];
        if (x < 0 || uses[x] != 1) continue;
      }
      int add = kfn_producer(g, x, "Add", s.dead);
      ok = add >= 0 && g->nodes[add].n_in == 2 && kfn_match_add(&e.m, (size_t)add) &&
           addends(g, g->nodes[add].in[0], g->nodes[add].in[1], uses, s.dead, &e);
    }
    if (!ok || !kfn_closed(g, &e.m, uses, &pre, pre >= 0)) continue;
    size_t n_in = E_N;
    while (e.in[n_in - 1] < 0) n_in--;
    int f = kfn_fuse(ctx, g, &e.m, "FusedEmbedding", e.in, n_in, &pre, pre >= 0, &s);
    if (f < 0) {
      rc = kiln_fuse_failed(ctx);
      break;
    }
    kiln_node *fn = &g->nodes[f];
    if ((relu && kiln_node_set_int(fn, "relu", 1)) ||
        (ln && (kiln_node_set_int(fn, "layernorm", 1) || kiln_node_set_float(fn, "epsilon", eps))) ||
        (e.n_axes && e.in[E_POS_ENDS] >= 0 && kiln_node_set_ints(fn, "pos_axes", e.axes, e.n_axes)))
      rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    (*count)++;
  }
  return kiln_fuse_scan_end(&s, g, rc);
}
