/* Dead code: nodes none of whose outputs is read (by a node, a subgraph or a graph output), and
 * initializers nothing reads. Repeats until stable, so whole dead chains go. */
#include <stdlib.h>

#include "base/status.h"
#include "ir/edit.h"
#include "opt/opt.h"

kiln_code kiln_pass_dead_code(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  for (;;) {
    size_t *uses = kiln_graph_use_counts(g);
    bool *dead = kiln_calloc(g->n_nodes, sizeof *dead);
    if (!uses || !dead) {
      free(uses);
      free(dead);
      return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    }
    size_t removed = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
      const kiln_node *n = &g->nodes[i];
      bool used = false;
      for (size_t k = 0; k < n->n_out; k++) used |= n->out[k] >= 0 && uses[n->out[k]] > 0;
      if (!used) {
        dead[i] = true;
        removed++;
      }
    }
    for (size_t v = 0; v < g->n_values; v++) {
      kiln_value_info *vi = &g->values[v];
      if (vi->init && !vi->is_input && uses[v] == 0) {
        kiln_tensor_free(vi->init);
        vi->init = NULL;
        (*count)++;
      }
    }
    if (removed) kiln_graph_remove_nodes(g, dead);
    free(uses);
    free(dead);
    *count += removed;
    if (!removed) return KILN_OK;
  }
}
