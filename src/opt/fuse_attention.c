/* Attention fusion: scaled dot-product attention becomes one ai.kiln::Attention node (see
 * src/ops/fused_attention.c for the node's inputs, attributes and kernel).
 *
 * The pattern is a DAG, matched by a small dedicated walk on top of pattern.h's helpers,
 * anchored at the second MatMul (anchors from the last node back, as in the other fusions):
 *
 *   Q --[Transpose|Mul/Div by a constant scalar]*--\
 *                                                   MatMul -> [Mul/Div const]* -> [Where(cond,
 *   K --[Transpose|Mul/Div by a constant scalar]*--/   ., fill) | Add(mask)]{0,2} -> Softmax(last)
 *                                                                                       |
 *   V --[Transpose]*--------------------------------------------------------------> MatMul
 *                                                                                       |
 *                                                                          [Transpose]* -> Y
 *
 * The scores chain (MatMul .. Softmax .. MatMul) is required, and each of its intermediates
 * must be read only by the next node (fan-out blocks the fusion: the scores must not be needed
 * elsewhere). The scale may sit on the scores, on Q or on K (PyTorch scales Q); all constant
 * factors multiply into the `scale` attribute. The Transposes of the head split and merge
 * (and the K^T transpose, whatever its perm) are absorbed as the permutation attributes when
 * they are read only by the attention, so the kernel reads Q, K, V in place. Below those
 * Transposes, a Reshape with a constant target (the head split, once fold_shapes has folded
 * its shape) and below it a one-axis step-1 Slice with constant bounds (the cut of a packed
 * QKV projection, as PyTorch's MultiheadAttention exports it) become the x_shape / x_slice
 * views, and a constant-target Reshape after the output Transposes (the head merge) becomes
 * out_shape: none of them is copied any more. Reshapes with computed targets stay. Q/K/V
 * projections are left to fuse_matmul.
 *
 * Not fused: Softmax on another axis, non-float32 chains (a Cast anywhere breaks the chain),
 * a non-constant or non-scalar scale, masks whose trailing axes statically neither are 1 nor
 * match (Sq, Sk), a scale applied after the mask, and more than KILN_PAT_MAX nodes. A mask
 * whose shape is only known at run time is checked by the kernel, which falls back to the
 * chain when it does not fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse.h"

enum { MAXR = KILN_MAX_RANK };

typedef struct amatch {
  size_t n;                    /* nodes collected so far */
  size_t nodes[KILN_PAT_MAX];
  int q, k, v, mask, cond;     /* value ids of the fused node's inputs (-1: none) */
  int qr, kr, vr, orank;       /* ranks of the permutations (0: identity, not written) */
  int qperm[MAXR], kperm[MAXR], vperm[MAXR], operm[MAXR];
  double scale;                /* product of the absorbed constant factors */
  bool scale_seen;             /* walking back: a scale was met, so no mask may come before it */
  double fill;                 /* Where: the constant it puts where the scores are dropped */
  int keep, where_after;       /* Where keeps the scores where cond is true; Add before Where */
  size_t mm1;                  /* the first MatMul (Q K^T) */
  /* Q, K, V views absorbed below the Transposes: a Slice [axis, start, end] and a Reshape */
  bool has_slice[3], has_shape[3], has_oshape;
  int64_t slice[3][3], shape[3][MAXR], oshape[MAXR];
  size_t shape_n[3], oshape_n;
} amatch;

typedef struct actx {
  const kiln_graph *g;
  const size_t *uses;
  const bool *dead;
} actx;

static bool push(amatch *a, size_t node) {
  if (a->n >= KILN_PAT_MAX) return false;
  a->nodes[a->n++] = node;
  return true;
}

static const kiln_type *vtype(const kiln_graph *g, int v) { return v >= 0 ? kiln_value_type(g, v) : NULL; }

static bool is_float(const kiln_graph *g, int v) {
  const kiln_type *t = vtype(g, v);
  return t && t->kind == KILN_T_TENSOR && t->dtype == KILN_FLOAT && t->rank >= 0;
}

/* The producer of v when v is read by exactly one node (the caller) and that producer is free
 * for this pass; -1 otherwise. */
static int sole_producer(const actx *c, int v) {
  if (v < 0 || c->uses[v] != 1) return -1;
  int p = c->g->values[v].producer;
  if (p < 0 || c->dead[p]) return -1;
  const kiln_node *n = &c->g->nodes[p];
  if (n->n_out < 1 || n->out[0] != v) return -1;
  for (size_t k = 1; k < n->n_out; k++)
    if (n->out[k] >= 0 && c->uses[n->out[k]] > 0) return -1;
  return p;
}

/* For a Mul/Div node whose output continues the chain: the constant scalar factor it applies
 * and the input carrying the chain; false when it is not such a scale. The constant must not
 * raise the rank (a scalar of rank <= the other operand's) and must be finite. */
static bool scale_node(const kiln_graph *g, const kiln_node *n, double *f, int *chain) {
  if (n->n_in != 2 || !kiln_op_is(n, "Mul|Div")) return false;
  bool div = kiln_op_is(n, "Div");
  for (size_t i = 0; i < 2; i++) {
    if (div && i == 0) continue; /* c / x is not a scale */
    const kiln_tensor *t = kiln_const_input(g, n, i);
    double v;
    if (!t || t->dtype != KILN_FLOAT || !kiln_const_scalar(g, n, i, &v)) continue;
    int other = n->in[1 - i];
    const kiln_type *ot = vtype(g, other);
    if (!is_float(g, other) || t->rank > ot->rank || kiln_const_input(g, n, 1 - i)) continue;
    if (!isfinite(v) || (div && v == 0)) continue;
    *f = div ? 1.0 / v : v;
    *chain = other;
    return true;
  }
  return false;
}

/* Transpose's permutation for rank r (default: reversed); false when unknown or invalid. */
static bool transpose_perm(const kiln_graph *g, const kiln_node *n, int *r, int *perm) {
  size_t cnt;
  const int64_t *p = kiln_attr_ints(n, "perm", &cnt);
  const kiln_type *t = vtype(g, n->n_in ? n->in[0] : -1);
  int rank = p ? (int)cnt : (t && t->kind == KILN_T_TENSOR ? t->rank : -1);
  bool seen[MAXR] = {false};
  if (rank < 2 || rank > MAXR) return false;
  for (int i = 0; i < rank; i++) {
    int64_t a = p ? p[i] : rank - 1 - i;
    if (a < 0 || a >= rank || seen[a]) return false;
    seen[a] = true;
    perm[i] = (int)a;
  }
  *r = rank;
  return true;
}

/* Walk back from value v through Transposes (composing them into perm, of rank *r; 0 means
 * identity so far) and, when allowed, constant scalar Mul/Div (into a->scale), while the nodes
 * are read only by the attention and the node budget lasts. Returns the value reached. */
static int absorb_input(const actx *c, amatch *a, int v, int *r, int *perm, bool scales) {
  for (;;) {
    int p = sole_producer(c, v);
    if (p < 0 || a->n >= KILN_PAT_MAX) return v;
    const kiln_node *n = &c->g->nodes[p];
    if (kiln_op_is(n, "Transpose") && n->n_in == 1 && is_float(c->g, n->in[0])) {
      int tr, tp[MAXR], np[MAXR];
      if (!transpose_perm(c->g, n, &tr, tp) || (*r && *r != tr)) return v;
      if (!*r) {
        *r = tr;
        for (int i = 0; i < tr; i++) perm[i] = i;
      }
      /* L = transpose(out, perm), out = transpose(in, tp): L axis i is in axis tp[perm[i]] */
      for (int i = 0; i < tr; i++) np[i] = tp[perm[i]];
      memcpy(perm, np, (size_t)tr * sizeof *perm);
      v = n->in[0];
    } else {
      double f;
      int chain;
      if (!scales || !scale_node(c->g, n, &f, &chain)) return v;
      a->scale *= f;
      v = chain;
    }
    push(a, (size_t)p);
  }
}

/* A Reshape whose target is a constant list of at most MAXR ints, without allowzero: its
 * target in shape[*n]. */
static bool const_reshape(const kiln_graph *g, const kiln_node *n, int64_t *shape, size_t *cnt) {
  if (!kiln_op_is(n, "Reshape") || n->n_in != 2 || n->n_out != 1 || !is_float(g, n->in[0])) return false;
  if (n->opset >= 14 && kiln_attr_int(n, "allowzero", 0)) return false;
  const kiln_tensor *t = kiln_const_input(g, n, 1);
  if (!t || t->rank != 1 || t->numel > MAXR || t->numel < 1 || !kiln_dtype_is_int(t->dtype)) return false;
  for (int64_t i = 0; i < t->numel; i++) shape[i] = kiln_get_i64(t, i);
  *cnt = (size_t)t->numel;
  return true;
}

/* The constant 1-element integer input i of n (absent: *v = dflt). */
static bool const_one(const kiln_graph *g, const kiln_node *n, size_t i, int64_t dflt, int64_t *v) {
  if (i >= n->n_in || n->in[i] < 0) {
    *v = dflt;
    return true;
  }
  const kiln_tensor *t = kiln_const_input(g, n, i);
  if (!t || t->rank != 1 || t->numel != 1 || !kiln_dtype_is_int(t->dtype)) return false;
  *v = kiln_get_i64(t, 0);
  return true;
}

/* A Slice (opset >= 10) of one axis with step 1 and constant bounds: [axis, start, end]. */
static bool const_slice(const kiln_graph *g, const kiln_node *n, int64_t *sl) {
  int64_t step;
  if (!kiln_op_is(n, "Slice") || n->opset < 10 || n->n_in < 3 || n->n_out != 1 || !is_float(g, n->in[0]))
    return false;
  return const_one(g, n, 1, 0, &sl[1]) && const_one(g, n, 2, 0, &sl[2]) && const_one(g, n, 3, 0, &sl[0]) &&
         const_one(g, n, 4, 1, &step) && step == 1;
}

/* Below the Transposes of input x (value *v): a Reshape and/or a Slice read only by the
 * attention become the x_shape / x_slice view, so the kernel reads the sliced tensor (e.g.
 * a packed QKV projection) in place. */
static void absorb_view(const actx *c, amatch *a, size_t x, int *v) {
  int p = sole_producer(c, *v);
  if (p >= 0 && a->n < KILN_PAT_MAX && const_reshape(c->g, &c->g->nodes[p], a->shape[x], &a->shape_n[x])) {
    a->has_shape[x] = true;
    push(a, (size_t)p);
    *v = c->g->nodes[p].in[0];
    p = sole_producer(c, *v);
  }
  if (p >= 0 && a->n < KILN_PAT_MAX && const_slice(c->g, &c->g->nodes[p], a->slice[x])) {
    a->has_slice[x] = true;
    push(a, (size_t)p);
    *v = c->g->nodes[p].in[0];
  }
}

/* Whether a mask or cond of type t can broadcast onto the scores (type s, the first MatMul's
 * output) without growing their query or key axes. Growing the batch axes is fine (the kernel
 * broadcasts them as the chain would). A dim known only at run time is checked by the kernel
 * (which falls back to the chain), except against a scores dim of 1, which it could grow. */
static bool mask_fits(const kiln_type *t, const kiln_type *s) {
  if (t->kind != KILN_T_TENSOR || t->rank < 0 || s->kind != KILN_T_TENSOR || s->rank < 2) return false;
  for (int i = 1; i <= t->rank && i <= s->rank; i++) {
    int64_t m = t->dims[t->rank - i], x = s->dims[s->rank - i];
    if (m == 1) continue;
    if (i <= 2 && x == 1) return false;
    if (m >= 0 && x >= 0 && m != x && x != 1) return false;
  }
  return true;
}

/* Walk back from value v (the chain's value entering Softmax, or a step before it) to the
 * first MatMul, collecting mask, cond and scales. Tries each operand of an Add/Where as the
 * chain side; `a` is updated only on success. */
static bool walk_scores(const actx *c, amatch *a, int v) {
  int p = sole_producer(c, v);
  if (p < 0 || a->n >= KILN_PAT_MAX) return false;
  const kiln_node *n = &c->g->nodes[p];
  if (!is_float(c->g, v)) return false;
  if (kiln_op_is(n, "MatMul") && n->n_in == 2) {
    if (!is_float(c->g, n->in[0]) || !is_float(c->g, n->in[1]) || vtype(c->g, n->in[0])->rank < 2 ||
        vtype(c->g, n->in[1])->rank < 2)
      return false;
    a->mm1 = (size_t)p;
    return push(a, (size_t)p);
  }
  amatch t = *a;
  double f;
  int chain;
  if (scale_node(c->g, n, &f, &chain)) {
    t.scale *= f;
    t.scale_seen = true;
    if (push(&t, (size_t)p) && walk_scores(c, &t, chain)) {
      *a = t;
      return true;
    }
    return false;
  }
  if (a->scale_seen) return false; /* a mask applied before the scale: not handled */
  if (kiln_op_is(n, "Add") && n->n_in == 2 && a->mask < 0) {
    for (int k = 0; k < 2; k++) {
      int other = n->in[1 - k];
      if (!is_float(c->g, other) || other == n->in[k]) continue;
      t = *a;
      t.mask = other;
      t.where_after = a->cond >= 0; /* the Where (already met) comes after this Add */
      if (push(&t, (size_t)p) && walk_scores(c, &t, n->in[k])) {
        *a = t;
        return true;
      }
    }
  }
  if (kiln_op_is(n, "Where") && n->n_in == 3 && a->cond < 0) {
    const kiln_type *ct = vtype(c->g, n->in[0]);
    if (!ct || ct->kind != KILN_T_TENSOR || ct->dtype != KILN_BOOL || ct->rank < 0) return false;
    for (int k = 1; k <= 2; k++) {
      double fill;
      const kiln_tensor *ft = kiln_const_input(c->g, n, (size_t)(3 - k));
      if (!ft || ft->dtype != KILN_FLOAT || !kiln_const_scalar(c->g, n, (size_t)(3 - k), &fill)) continue;
      if (ft->rank > vtype(c->g, n->in[k])->rank || n->in[k] == n->in[0]) continue;
      t = *a;
      t.cond = n->in[0];
      t.fill = fill;
      t.keep = k == 1;
      if (push(&t, (size_t)p) && walk_scores(c, &t, n->in[k])) {
        *a = t;
        return true;
      }
    }
  }
  return false;
}

/* Softmax over the last axis of its (known-rank) input. */
static bool softmax_last(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *t = vtype(g, n->n_in ? n->in[0] : -1);
  if (!t || t->kind != KILN_T_TENSOR || t->rank < 1) return false;
  int64_t axis = kiln_attr_int(n, "axis", n->opset < 13 ? 1 : -1);
  if (axis < 0) axis += t->rank;
  return axis == t->rank - 1;
}

/* The one node reading v, or -1. */
static int sole_reader(const kiln_graph *g, const size_t *uses, int v) {
  if (v < 0 || uses[v] != 1) return -1;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v) return (int)i;
  return -1;
}

static bool match_at(const actx *c, size_t anchor, amatch *a) {
  const kiln_graph *g = c->g;
  const kiln_node *mm2 = &g->nodes[anchor];
  memset(a, 0, sizeof *a);
  a->q = a->k = a->v = a->mask = a->cond = -1;
  a->scale = 1.0;
  if (c->dead[anchor] || !kiln_op_is(mm2, "MatMul") || mm2->n_in != 2 || mm2->n_out != 1) return false;
  if (!is_float(g, mm2->in[1]) || vtype(g, mm2->in[1])->rank < 2 || !is_float(g, mm2->out[0])) return false;
  int sm = sole_producer(c, mm2->in[0]);
  if (sm < 0 || !kiln_op_is(&g->nodes[sm], "Softmax") || !softmax_last(g, &g->nodes[sm])) return false;
  /* The core: MatMul .. Softmax, MatMul (in chain order once the sides are added). */
  amatch core = *a;
  if (!walk_scores(c, &core, g->nodes[sm].in[0])) return false;
  *a = core;
  const kiln_type *scores = vtype(g, g->nodes[a->mm1].out[0]);
  if ((a->mask >= 0 && !mask_fits(vtype(g, a->mask), scores)) ||
      (a->cond >= 0 && !mask_fits(vtype(g, a->cond), scores)))
    return false;
  if (!push(a, (size_t)sm) || !push(a, anchor)) return false;
  /* Sides, as the budget allows: Q and K (with scales), V, then the output Transposes. */
  const kiln_node *mm1 = &g->nodes[a->mm1];
  size_t core_n = a->n;
  a->q = absorb_input(c, a, mm1->in[0], &a->qr, a->qperm, true);
  a->k = absorb_input(c, a, mm1->in[1], &a->kr, a->kperm, true);
  a->v = absorb_input(c, a, mm2->in[1], &a->vr, a->vperm, false);
  absorb_view(c, a, 0, &a->q);
  absorb_view(c, a, 1, &a->k);
  absorb_view(c, a, 2, &a->v);
  if (!isfinite(a->scale) || !isfinite((float)a->scale)) return false;
  /* Output Transposes: the anchor becomes the last one. */
  int o = mm2->out[0];
  size_t last = anchor;
  while (a->n < KILN_PAT_MAX && !kiln_graph_is_output(g, o)) {
    int rdr = sole_reader(g, c->uses, o), tr, tp[MAXR], np[MAXR];
    if (rdr < 0 || c->dead[rdr]) break;
    const kiln_node *t = &g->nodes[rdr];
    if (!kiln_op_is(t, "Transpose") || !transpose_perm(g, t, &tr, tp) || (a->orank && a->orank != tr)) break;
    if (!a->orank) {
      a->orank = tr;
      for (int i = 0; i < tr; i++) a->operm[i] = i;
    }
    /* Y = transpose(O', tp), O' = transpose(O, operm): Y axis i is O axis operm[tp[i]] */
    for (int i = 0; i < tr; i++) np[i] = a->operm[tp[i]];
    memcpy(a->operm, np, (size_t)tr * sizeof np[0]);
    push(a, (size_t)rdr);
    last = (size_t)rdr;
    o = t->out[0];
  }
  /* then the head merge Reshape: the output is contiguous, so only its dims change */
  int rdr = a->n < KILN_PAT_MAX && !kiln_graph_is_output(g, o) ? sole_reader(g, c->uses, o) : -1;
  if (rdr >= 0 && !c->dead[rdr] && g->nodes[rdr].in[0] == o &&
      const_reshape(g, &g->nodes[rdr], a->oshape, &a->oshape_n)) {
    a->has_oshape = true;
    push(a, (size_t)rdr);
    last = (size_t)rdr;
  }
  /* kiln_fuse_chain takes the last node as the anchor: move the core's MatMul2 before the
   * sides and put the last output Transpose at the end. */
  size_t ordered[KILN_PAT_MAX], n = 0;
  for (size_t i = core_n; i < a->n; i++)
    if (a->nodes[i] != last) ordered[n++] = a->nodes[i];
  for (size_t i = 0; i < core_n; i++)
    if (a->nodes[i] != last) ordered[n++] = a->nodes[i];
  ordered[n++] = last;
  memcpy(a->nodes, ordered, n * sizeof ordered[0]);
  return a->q >= 0 && a->k >= 0 && a->v >= 0;
}

static bool identity(const int *perm, int r) {
  for (int i = 0; i < r; i++)
    if (perm[i] != i) return false;
  return true;
}

static kiln_code set_perm(kiln_node *f, const char *name, const int *perm, int r) {
  int64_t p[MAXR];
  if (!r || identity(perm, r)) return KILN_OK;
  for (int i = 0; i < r; i++) p[i] = perm[i];
  return kiln_node_set_ints(f, name, p, (size_t)r);
}

static kiln_code rewrite(kiln_pass_ctx *ctx, kiln_graph *g, const amatch *a, bool *dead) {
  kiln_match m;
  m.n = a->n;
  memcpy(m.nodes, a->nodes, a->n * sizeof a->nodes[0]);
  int in[5] = {a->q, a->k, a->v, a->mask, a->cond};
  int k = kiln_fuse_chain(ctx, g, &m, "Attention", in, 5, dead);
  if (k < 0) return ctx->err && ctx->err->code ? ctx->err->code : KILN_ERR_NOMEM;
  kiln_node *f = &g->nodes[k];
  kiln_code rc = kiln_node_set_float(f, "scale", (float)a->scale);
  if (!rc) rc = set_perm(f, "q_perm", a->qperm, a->qr);
  if (!rc) rc = set_perm(f, "k_perm", a->kperm, a->kr);
  if (!rc) rc = set_perm(f, "v_perm", a->vperm, a->vr);
  if (!rc) rc = set_perm(f, "out_perm", a->operm, a->orank);
  static const char *slices[3] = {"q_slice", "k_slice", "v_slice"}, *shapes[3] = {"q_shape", "k_shape", "v_shape"};
  for (size_t x = 0; x < 3 && !rc; x++) {
    if (a->has_slice[x]) rc = kiln_node_set_ints(f, slices[x], a->slice[x], 3);
    if (!rc && a->has_shape[x]) rc = kiln_node_set_ints(f, shapes[x], a->shape[x], a->shape_n[x]);
  }
  if (!rc && a->has_oshape) rc = kiln_node_set_ints(f, "out_shape", a->oshape, a->oshape_n);
  if (!rc && a->cond >= 0) {
    rc = kiln_node_set_float(f, "mask_fill", (float)a->fill);
    if (!rc) rc = kiln_node_set_int(f, "cond_keep", a->keep);
    if (!rc && a->mask >= 0) rc = kiln_node_set_int(f, "where_after_mask", a->where_after);
  }
  return rc ? kiln_fail(ctx->err, rc, "out of memory setting attention attributes") : KILN_OK;
}

kiln_code kiln_pass_fuse_attention(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  /* Anchors from the last node back, so a later attention claims shared Transposes first. */
  for (size_t i = g->n_nodes; !rc && i-- > 0;) {
    actx c = {g, s.uses, s.dead};
    amatch a;
    if (!match_at(&c, i, &a)) continue;
    if ((rc = rewrite(ctx, g, &a, s.dead))) break;
    (*count)++;
    rc = kiln_fuse_scan_grow(ctx, g, &s);
  }
  return kiln_fuse_scan_end(&s, g, rc);
}
