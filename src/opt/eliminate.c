/* Remove nodes that pass their input through unchanged: Identity, Dropout in inference,
 * Cast to the type the input already has, Transpose by the identity permutation, Reshape,
 * Squeeze/Unsqueeze-free Reshape to the shape the input already has. Readers of the output
 * read the input instead. Outputs that are graph outputs or read by subgraphs keep their node. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#include "ir/edit.h"
#include "opt/opt.h"

static bool static_shape(const kiln_type *t) {
  if (t->kind != KILN_T_TENSOR || t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

static bool same_static_type(const kiln_type *a, const kiln_type *b) {
  if (!static_shape(a) || !static_shape(b) || a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool dropout_is_identity(const kiln_graph *g, const kiln_node *n) {
  if (n->n_out > 1 && n->out[1] >= 0) return false; /* the mask is wanted */
  if (n->opset < 12) return true; /* kiln runs inference: ratio-only Dropout is the identity */
  if (n->n_in < 3 || n->in[2] < 0) return true;
  const kiln_tensor *t = g->values[n->in[2]].init;
  return t && t->kind == KILN_KIND_TENSOR && t->numel == 1 && t->dtype == KILN_BOOL &&
         !((const uint8_t *)t->data)[0] && !g->values[n->in[2]].is_input;
}

/* Whether node n returns its first input unchanged. */
static bool passes_through(const kiln_graph *g, const kiln_node *n) {
  if (*n->domain || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0) return false;
  const kiln_type *in = kiln_value_type(g, n->in[0]), *out = kiln_value_type(g, n->out[0]);
  const char *op = n->op_type;
  if (!strcmp(op, "Identity")) return in->kind == KILN_T_TENSOR;
  if (!strcmp(op, "Dropout")) return dropout_is_identity(g, n);
  if (!strcmp(op, "Cast"))
    return in->kind == KILN_T_TENSOR && in->dtype && in->dtype == kiln_attr_int(n, "to", -1);
  if (!strcmp(op, "Transpose")) {
    size_t np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    if (!perm || (in->rank >= 0 && (size_t)in->rank != np)) return false;
    for (size_t i = 0; i < np; i++)
      if (perm[i] != (int64_t)i) return false;
    return true;
  }
  if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
      !strcmp(op, "Unsqueeze") || !strcmp(op, "Expand"))
    return same_static_type(in, out);
  return false;
}

kiln_code kiln_pass_eliminate(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  bool *dead = kiln_calloc(g->n_nodes, sizeof *dead);
  if (!dead) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  size_t n_dead = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!passes_through(g, n)) continue;
    int out = n->out[0];
    if (kiln_graph_is_output(g, out) || kiln_graph_name_used_by_subgraphs(g, g->values[out].name))
      continue;
    kiln_graph_replace_uses(g, out, n->in[0]);
    dead[i] = true;
    n_dead++;
  }
  if (n_dead) kiln_graph_remove_nodes(g, dead);
  free(dead);
  *count += n_dead;
  return KILN_OK;
}
