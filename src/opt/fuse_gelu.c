/* GELU fusion.
 *
 * Exporters write GELU out in two forms, each with the 0.5 at either end or in the middle:
 *   erf:  x * 0.5 * (1 + Erf(x / 1.4142135))        (or Mul(x, 0.70710678) inside the Erf)
 *   tanh: x * 0.5 * (1 + Tanh(0.7978845 * (x + 0.044715 * x^3)))   (Pow(x, 3) or x*x*x)
 * The spine from the scaling (or the cube) to the last Mul is a chain matched with pattern.h;
 * x, read by the first and by a later node, is a side edge checked here, as is the tail:
 *   T1  Mul(Mul(x, A), 0.5)     T2  Mul(Mul(x, 0.5), A)     T3  Mul(x, Mul(A, 0.5))
 * with A = Add(Erf|Tanh(..), 1). kfn_closed() checks that no intermediate is read elsewhere.
 *
 * What it becomes, longest first:
 *   MatMul(A, B const 2-D float) -> Add(bias) -> GELU  =>  ai.kiln::FusedMatMul(A, B, bias),
 *       activation "Gelu" / "GeluTanh" (its epilogue in src/ops/fused.c); this pass runs before
 *       fuse_matmul, which only knows default-domain activations
 *   Add(x, constant bias over the last dim) -> GELU    =>  ai.kiln::BiasGelu(x, bias)
 *   GELU                                               =>  ai.kiln::Gelu(x)
 * where GELU is one of the chains above or the standard Gelu op (opset 20), with attribute
 * approximate = "none" | "tanh" on the last two. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse_norm_common.h"

#define SQRT2 1.4142135623730951
#define SQRT_2_PI 0.79788456080286536
#define RTOL 1e-6 /* exporters write these constants rounded to float */

static bool erf_scale(const kiln_graph *g, const kiln_node *n) {
  if (kiln_op_is(n, "Div")) return n->n_in == 2 && kfn_scalar_is(g, n, 1, SQRT2, RTOL) && !kiln_const_input(g, n, 0);
  return kfn_scalar_side(g, n, 1.0 / SQRT2, RTOL) >= 0;
}
static bool plus_one(const kiln_graph *g, const kiln_node *n) { return kfn_scalar_side(g, n, 1.0, 0.0) >= 0; }
static bool kappa(const kiln_graph *g, const kiln_node *n) { return kfn_scalar_side(g, n, 0.044715, RTOL) >= 0; }
static bool sqrt_2_pi(const kiln_graph *g, const kiln_node *n) { return kfn_scalar_side(g, n, SQRT_2_PI, RTOL) >= 0; }
static bool cube(const kiln_graph *g, const kiln_node *n) { return n->n_in == 2 && kfn_scalar_is(g, n, 1, 3.0, 0.0); }
static bool squared(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return n->n_in == 2 && n->in[0] == n->in[1];
}
static bool binary(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return n->n_in == 2;
}

#define ERF {"Div|Mul", -1, erf_scale}, {"Erf", 0, NULL}, {"Add", -1, plus_one}, {"Mul", -1, binary}
#define TANH_TAIL {"Mul", -1, kappa}, {"Add", -1, binary}, {"Mul", -1, sqrt_2_pi}, {"Tanh", 0, NULL}, \
                  {"Add", -1, plus_one}, {"Mul", -1, binary}
#define POW3 {"Pow", 0, cube}
#define MUL3 {"Mul", -1, squared}, {"Mul", -1, binary}
enum { FORM_ERF, FORM_POW, FORM_MUL };
/* one: the index of Add(., 1) in the spine; one or two Muls follow it */
static const struct { kiln_pattern p; int form; size_t one; } spines[] = {
    {{"erf_5", 5, {ERF, {"Mul", -1, binary}}}, FORM_ERF, 2},
    {{"tanh_pow_8", 8, {POW3, TANH_TAIL, {"Mul", -1, binary}}}, FORM_POW, 5},
    {{"tanh_mul_9", 9, {MUL3, TANH_TAIL, {"Mul", -1, binary}}}, FORM_MUL, 6},
    {{"erf_4", 4, {ERF}}, FORM_ERF, 2},
    {{"tanh_pow_7", 7, {POW3, TANH_TAIL}}, FORM_POW, 5},
    {{"tanh_mul_8", 8, {MUL3, TANH_TAIL}}, FORM_MUL, 6},
};

static const kiln_node *step(const kiln_graph *g, const kiln_match *m, size_t s) { return &g->nodes[m->nodes[s]]; }
static int out0(const kiln_graph *g, const kiln_match *m, size_t s) { return step(g, m, s)->out[0]; }

/* The GELU input x of a matched spine (side edges checked), or -1. */
static int spine_input(const kiln_graph *g, const kiln_match *m, int form) {
  const kiln_node *first = step(g, m, 0);
  if (form == FORM_ERF) {
    if (kiln_op_is(first, "Div")) return first->in[0];
    return first->in[kfn_scalar_side(g, first, 1.0 / SQRT2, RTOL)];
  }
  int x = first->in[0];
  size_t s = 1;
  if (form == FORM_MUL) { /* Mul(x, x) then Mul(x^2, x) */
    if (kfn_other(step(g, m, 1), out0(g, m, 0)) != x) return -1;
    s = 2;
  }
  /* step s is Mul(kappa, x^3), then Add(x, .) */
  return kfn_other(step(g, m, s + 1), out0(g, m, s)) == x ? x : -1;
}

/* The tail after A = Add(., 1) (spine step `one`) reads x once more and multiplies by 0.5:
 * T1 Mul(Mul(x, A), 0.5), T3 Mul(x, Mul(A, 0.5)), or T2 Mul(Mul(x, 0.5), A), whose Mul(x, 0.5)
 * joins m. */
static bool tail_ok(const kiln_graph *g, kiln_match *m, size_t one, int x, const bool *taken) {
  const kiln_node *m1 = step(g, m, one + 1);
  int o1 = kfn_other(m1, out0(g, m, one));
  if (one + 2 < m->n) {
    const kiln_node *m2 = step(g, m, one + 2);
    if (o1 == x) return kfn_scalar_side(g, m2, 0.5, 0.0) >= 0;
    return kfn_scalar_side(g, m1, 0.5, 0.0) >= 0 && kfn_other(m2, out0(g, m, one + 1)) == x;
  }
  int h = kfn_producer(g, o1, "Mul", taken);
  int side = h >= 0 ? kfn_scalar_side(g, &g->nodes[h], 0.5, 0.0) : -1;
  return side >= 0 && g->nodes[h].in[side] == x && kfn_match_add(m, (size_t)h);
}

/* A constant float vector over x's last dim (leading dims 1, no higher rank than x): a bias. */
static int bias_side(const kiln_graph *g, const kiln_node *add) {
  if (add->n_in != 2) return -1;
  for (int i = 0; i < 2; i++) {
    int other = add->in[1 - i];
    if (!kfn_is_float(g, other) || kiln_const_input(g, add, 1 - (size_t)i)) continue;
    if (kfn_const_over_last(kiln_const_input(g, add, (size_t)i), kiln_value_type(g, other), 1)) return i;
  }
  return -1;
}

/* MatMul with constant 2-D float weights, as fuse_matmul requires. */
static bool const_matmul(const kiln_graph *g, const kiln_node *n) {
  const kiln_tensor *b = kiln_const_input(g, n, 1);
  return n->n_in == 2 && b && b->dtype == KILN_FLOAT && b->rank == 2 && kfn_is_float(g, n->in[0]) &&
         kiln_value_type(g, n->in[0])->rank >= 1;
}

typedef struct gelu_fusion {
  kiln_match m;     /* the GELU's nodes, then the bias Add and MatMul absorbed */
  int x;            /* the GELU's input */
  bool tanh;
  const char *op;   /* what m becomes */
  int in[3];
  size_t n_in;
} gelu_fusion;

/* Absorb what precedes the GELU: the bias Add(y, bias) producing x (read by the GELU only),
 * and the MatMul(A, B) producing y, or only the MatMul when the bias is given (an existing
 * BiasGelu(y, bias)). Sets op and inputs; false when nothing was absorbed. */
static bool extend(const kiln_graph *g, const size_t *uses, const bool *taken, gelu_fusion *f, int bias_in) {
  int y = f->x, bias_v = bias_in;
  if (bias_v < 0) {
    int add = kfn_producer(g, f->x, "Add", taken);
    kiln_ln_match ln; /* not the beta Add of a normalisation */
    int b = add >= 0 && uses[f->x] == kfn_reads(g, &f->m, f->x) && !kiln_match_layernorm(g, (size_t)add, uses, taken, &ln)
                ? bias_side(g, &g->nodes[add]) : -1;
    if (b < 0 || !kfn_match_add(&f->m, (size_t)add)) return false;
    y = g->nodes[add].in[1 - b];
    bias_v = g->nodes[add].in[b];
    f->op = "BiasGelu";
    f->in[0] = y;
    f->in[1] = bias_v;
    f->n_in = 2;
  }
  const kiln_tensor *bias = g->values[bias_v].init;
  int mm = kfn_producer(g, y, "MatMul", taken);
  const kiln_tensor *w = mm >= 0 ? kiln_const_input(g, &g->nodes[mm], 1) : NULL;
  if (mm >= 0 && uses[y] == 1 && const_matmul(g, &g->nodes[mm]) && bias && w->dims[1] == bias->dims[bias->rank - 1] &&
      kiln_value_type(g, y)->rank >= bias->rank && kfn_match_add(&f->m, (size_t)mm)) {
    f->op = "FusedMatMul";
    f->in[0] = g->nodes[mm].in[0];
    f->in[1] = g->nodes[mm].in[1];
    f->in[2] = bias_v;
    f->n_in = 3;
    return true;
  }
  return bias_in < 0;
}

/* A GELU chain ending at node i, with its spine form. */
static bool match_chain(const kiln_graph *g, size_t i, const size_t *uses, const bool *taken, gelu_fusion *f) {
  for (size_t p = 0; p < sizeof spines / sizeof spines[0]; p++) {
    if (!kfn_pattern_match(g, &spines[p].p, i, uses, taken, &f->m)) continue;
    int x = spine_input(g, &f->m, spines[p].form);
    int out = g->nodes[i].out[0]; /* same rank as x: no constant of higher rank broadcast it */
    if (x < 0 || !kfn_is_float(g, x) || !kfn_is_float(g, out) || kiln_value_type(g, out)->rank != kiln_value_type(g, x)->rank ||
        !tail_ok(g, &f->m, spines[p].one, x, taken) || !kfn_closed(g, &f->m, uses, NULL, 0))
      continue;
    f->x = x;
    f->tanh = spines[p].form != FORM_ERF;
    return true;
  }
  return false;
}

kiln_code kiln_pass_fuse_gelu(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  size_t *uses = s.uses;
  size_t n0 = g->n_nodes;
  /* Anchors from the last node back: the longest chain ending at a node wins. */
  for (size_t i = n0; !rc && i-- > 0;) {
    if (s.dead[i]) continue;
    const kiln_node *n = &g->nodes[i];
    gelu_fusion f = {.op = "Gelu", .n_in = 1, .in = {-1, -1, -1}};
    bool fused_gelu = kfn_is_kiln(n, "Gelu") && n->n_in == 1, fused_bias = kfn_is_kiln(n, "BiasGelu") && n->n_in == 2;
    if (fused_gelu || fused_bias) {
      /* made in an earlier round, before a bias or the weights became constant */
      const char *a = kiln_attr_str(n, "approximate", "none");
      if (strcmp(a, "none") && strcmp(a, "tanh")) continue;
      f.m.n = 1;
      f.m.nodes[0] = i;
      f.x = n->in[0];
      f.tanh = !strcmp(a, "tanh");
      if (!kfn_is_float(g, f.x) || !extend(g, uses, s.dead, &f, fused_bias ? n->in[1] : -1) || !strcmp(f.op, "Gelu"))
        continue;
    } else if (kiln_op_is(n, "Gelu") && n->n_in == 1 && n->n_out == 1) {
      /* the standard Gelu (opset 20): what its chain would have become */
      const char *a = kiln_attr_str(n, "approximate", "none");
      if ((strcmp(a, "none") && strcmp(a, "tanh")) || !kfn_is_float(g, n->in[0])) continue;
      f.m.n = 1;
      f.m.nodes[0] = i;
      f.x = f.in[0] = n->in[0];
      f.tanh = !strcmp(a, "tanh");
      extend(g, uses, s.dead, &f, -1);
    } else {
      if (!match_chain(g, i, uses, s.dead, &f)) continue;
      f.in[0] = f.x;
      extend(g, uses, s.dead, &f, -1);
    }
    int k = kfn_fuse(ctx, g, &f.m, f.op, f.in, f.n_in, NULL, 0, &s);
    if (k < 0) {
      rc = kiln_fuse_failed(ctx);
      break;
    }
    if (!strcmp(f.op, "FusedMatMul")) rc = kiln_node_set_string(&g->nodes[k], "activation", f.tanh ? "GeluTanh" : "Gelu");
    else rc = kiln_node_set_string(&g->nodes[k], "approximate", f.tanh ? "tanh" : "none");
    if (rc) rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    (*count)++;
  }
  return kiln_fuse_scan_end(&s, g, rc);
}
