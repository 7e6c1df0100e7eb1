/* Constant folding: a node whose inputs are all constants is run once at load time with its
 * reference kernel, and its outputs become initializers. Nodes with subgraphs, random ops and
 * outputs above the size cap are left alone. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#include "ir/edit.h"
#include "opt/opt.h"
#include "ops/op.h"

enum { DEFAULT_CAP = 1 << 20 };

static bool foldable_op(const kiln_node *n) {
  if (n->n_in == 0 || !n->schema || kiln_node_has(n, KILN_OPF_RANDOM)) return false;
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs) return false;
  return true;
}

static bool all_inputs_constant(const kiln_graph *g, const kiln_node *n) {
  for (size_t k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    const kiln_value_info *vi = &g->values[v];
    if (!vi->init || vi->is_input || vi->is_outer) return false; /* inputs may be overridden */
  }
  return true;
}

/* Run node i; on success its outputs become initializers and the node is marked dead. */
static kiln_code fold_node(kiln_pass_ctx *ctx, kiln_graph *g, size_t i, bool *dead, size_t cap,
                           bool *folded) {
  kiln_node *n = &g->nodes[i];
  enum { CAP = 64 };
  if (n->n_in > CAP || n->n_out > CAP) return KILN_OK;
  const kiln_tensor *in[CAP];
  kiln_tensor *out[CAP] = {0};
  for (size_t k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? g->values[n->in[k]].init : NULL;
  kiln_error local = {0};
  kiln_kctx c = {.node = n, .opset = n->opset, .n_in = n->n_in, .n_out = n->n_out, .in = in,
                 .out = out, .rt = NULL, .err = &local, .max_out_elems = (int64_t)cap};
  /* A kernel that fails here is not a load error: the node stays and fails (or not) at run
   * time with the real inputs' context. */
  bool ok = n->schema->run(&c) == KILN_OK;
  for (size_t k = 0; ok && k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    if (!out[k] || (out[k]->kind == KILN_KIND_TENSOR && (size_t)out[k]->numel > cap)) ok = false;
    if (out[k] && out[k]->kind != KILN_KIND_TENSOR) ok = false;
    if (ok && (kiln_graph_is_output(g, n->out[k]) || g->values[n->out[k]].init)) ok = false;
  }
  if (ok) {
    for (size_t k = 0; k < n->n_out; k++) {
      if (n->out[k] < 0) continue;
      g->values[n->out[k]].init = out[k];
      out[k] = NULL;
    }
    dead[i] = true;
    *folded = true;
  }
  for (size_t k = 0; k < n->n_out; k++) kiln_tensor_free(out[k]);
  (void)ctx;
  return KILN_OK;
}

kiln_code kiln_pass_fold(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  size_t cap = ctx->cfg->fold_max_elems ? ctx->cfg->fold_max_elems : DEFAULT_CAP;
  bool *dead = kiln_calloc(g->n_nodes, sizeof *dead);
  if (!dead) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  size_t n_folded = 0;
  /* Nodes are in topological order, so a chain of constants folds in one sweep. */
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!foldable_op(n) || !all_inputs_constant(g, n)) continue;
    bool folded = false;
    kiln_code rc = fold_node(ctx, g, i, dead, cap, &folded);
    if (rc) {
      free(dead);
      return rc;
    }
    n_folded += folded;
  }
  if (n_folded) kiln_graph_remove_nodes(g, dead);
  free(dead);
  *count += n_folded;
  return KILN_OK;
}
