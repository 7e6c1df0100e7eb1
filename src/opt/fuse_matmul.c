/* MatMul fusions: MatMul -> Add(bias) [-> activation] and Gemm -> activation become
 * ai.kiln::FusedMatMul / ai.kiln::FusedGemm with the bias and activation in the epilogue.
 * A lone Gemm with constant weights and a bias vector (the usual linear layer) becomes a
 * FusedGemm without activation: its weights are then packed once per node, not per run, and
 * the bias is added in the GEMM's epilogue instead of a pass over the output before it. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/fuse.h"

static bool float_matmul(const kiln_graph *g, const kiln_node *n) {
  const kiln_tensor *b = kiln_const_input(g, n, 1);
  const kiln_type *a = kiln_value_type(g, n->in[0]);
  return b && b->dtype == KILN_FLOAT && b->rank == 2 && a->kind == KILN_T_TENSOR &&
         a->dtype == KILN_FLOAT && a->rank >= 1;
}

/* The Add's other input is a constant vector over the MatMul's last dim. */
static bool bias_add(const kiln_graph *g, const kiln_node *n) {
  if (n->n_in != 2) return false;
  for (size_t i = 0; i < 2; i++) {
    const kiln_tensor *t = kiln_const_input(g, n, i);
    if (!t || t->dtype != KILN_FLOAT) continue;
    bool vec = t->rank >= 1;
    for (int d = 0; d + 1 < t->rank; d++) vec &= t->dims[d] == 1;
    const kiln_node *mm = NULL;
    int other = n->in[1 - i];
    if (other >= 0 && g->values[other].producer >= 0) mm = &g->nodes[g->values[other].producer];
    if (!vec || !mm || !mm->n_in || mm->n_in < 2) continue;
    const kiln_tensor *w = kiln_const_input(g, mm, 1);
    if (w && w->rank == 2 && t->dims[t->rank - 1] == w->dims[1]) {
      /* the bias must not raise the rank of the product */
      const kiln_type *ty = kiln_value_type(g, other);
      if (ty->rank >= t->rank) return true;
    }
  }
  return false;
}

static bool gemm_plain(const kiln_graph *g, const kiln_node *n) {
  return n->n_in >= 2 && kiln_attr_int(n, "transA", 0) == 0 && kiln_value_type(g, n->in[0])->dtype == KILN_FLOAT;
}

/* Gemm(A, const B, [const C of N values, beta 1]) with A not transposed: what FusedGemm's fast
 * path runs with packed weights (src/ops/fused.c). */
static bool gemm_linear(const kiln_graph *g, const kiln_node *n) {
  if (!gemm_plain(g, n)) return false;
  const kiln_tensor *b = kiln_const_input(g, n, 1);
  if (!b || b->dtype != KILN_FLOAT || b->rank != 2) return false;
  int64_t cols = b->dims[kiln_attr_int(n, "transB", 0) != 0 ? 0 : 1];
  if (n->n_in < 3 || n->in[2] < 0) return true;
  const kiln_tensor *c = kiln_const_input(g, n, 2);
  return c && c->dtype == KILN_FLOAT && c->rank >= 1 && c->numel == cols && c->dims[c->rank - 1] == cols &&
         kiln_attr_float(n, "beta", 1.0f) == 1.0f;
}

#define ACTS "Relu|LeakyRelu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh"
static const kiln_pattern patterns[] = {
    {"matmul_add_act", 3, {{"MatMul", -1, float_matmul}, {"Add", -1, bias_add}, {ACTS, 0, NULL}}},
    {"matmul_add", 2, {{"MatMul", -1, float_matmul}, {"Add", -1, bias_add}}},
    {"gemm_act", 2, {{"Gemm", -1, gemm_plain}, {ACTS, 0, NULL}}},
    {"gemm_linear", 1, {{"Gemm", -1, gemm_linear}}},
};

/* FusedMatMul(A, B, bias) or FusedGemm(A, B, [C]) (Gemm's attributes) with the activation. */
static kiln_code build_matmul(const kiln_graph *g, const kiln_match *m, size_t p, const char **op_type,
                              int *in, size_t *n_in, kiln_node *attrs) {
  (void)p;
  const kiln_node *first = &g->nodes[m->nodes[0]], *last = &g->nodes[m->nodes[m->n - 1]];
  bool gemm = kiln_op_is(first, "Gemm");
  in[0] = first->in[0], in[1] = first->in[1], in[2] = gemm && first->n_in > 2 ? first->in[2] : -1;
  if (!gemm) {
    const kiln_node *add = &g->nodes[m->nodes[1]];
    in[2] = add->in[0] == first->out[0] ? add->in[1] : add->in[0];
  }
  *op_type = gemm ? "FusedGemm" : "FusedMatMul";
  *n_in = 3;
  kiln_code rc = gemm ? kiln_node_copy_attrs(attrs, first) : KILN_OK;
  return rc ? rc : kiln_fuse_set_activation(attrs, g, kiln_op_is(last, "Add|Gemm") ? NULL : last);
}

kiln_code kiln_pass_fuse_matmul(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  return kiln_fuse_patterns(ctx, g, patterns, sizeof patterns / sizeof patterns[0], build_matmul, count);
}
