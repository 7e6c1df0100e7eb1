#include "runtime/mem_check.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"

/* The footprint of a fully static tensor type (strings: their pointers); 0 when not static,
 * -1 on overflow. */
static int64_t static_bytes(const kiln_type *t) {
  if (t->kind != KILN_T_TENSOR || t->rank < 0 || !t->dtype) return 0;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] < 0 || t->sym[d]) return 0;
  return kiln_tensor_footprint(t->dtype, t->rank, t->dims);
}

static kiln_code too_big(kiln_error *err, const char *what, int64_t bytes, int64_t limit) {
  return kiln_fail(err, KILN_ERR_MODEL,
                   "%s: %lld bytes needed, over the limit max_memory_bytes = %lld; raise it with "
                   "the session option kiln_options.max_memory_bytes (kiln run --limit "
                   "max_memory_bytes=N) if the machine has the memory",
                   what, (long long)bytes, (long long)limit);
}

static kiln_code check_values(const kiln_graph *g, int64_t limit, int64_t *weights, kiln_error *err) {
  char buf[512], tb[256];
  *weights = 0;
  for (size_t v = 0; v < g->n_values; v++) {
    const kiln_value_info *vi = &g->values[v];
    int64_t b = vi->init ? (int64_t)vi->init->nbytes : static_bytes(&vi->type);
    if (b < 0 || b > limit) {
      snprintf(buf, sizeof buf, "value '%s' (%s)", vi->name, kiln_type_str(&vi->type, tb, sizeof tb));
      if (b < 0) return kiln_fail(err, KILN_ERR_MODEL, "%s: its size in bytes overflows", buf);
      return too_big(err, buf, b, limit);
    }
    if (vi->init) *weights += b;
  }
  return KILN_OK;
}

kiln_code kiln_check_memory(const kiln_graph *g, int64_t limit, kiln_error *err) {
  int64_t weights;
  kiln_code rc = check_values(g, limit, &weights, err);
  if (rc) return rc;
  if (weights > limit) return too_big(err, "the model's weights", weights, limit);
  /* last reader (node index) of each value; graph outputs live to the end */
  size_t *last = kiln_calloc(g->n_values + 1, sizeof *last);
  if (!last) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_nodes; i++) { /* nodes are in execution order */
    for (size_t k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0) last[g->nodes[i].out[k]] = i;
    for (size_t k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) last[g->nodes[i].in[k]] = i;
  }
  for (size_t k = 0; k < g->n_outputs; k++) last[g->outputs[k]] = g->n_nodes;
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < g->n_nodes && !rc; i++) {
    const kiln_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0 && !g->values[n->out[k]].init) live += static_bytes(&g->values[n->out[k]].type);
    peak = live > peak ? live : peak;
    if (weights + peak > limit) {
      char what[256];
      snprintf(what, sizeof what, "the memory plan (weights %lld bytes, intermediates up to node '%s' (%s))",
               (long long)weights, n->name, n->op_type);
      rc = too_big(err, what, weights + peak, limit);
    }
    for (size_t k = 0; k < n->n_in + n->n_out; k++) { /* values last used here die */
      int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
      if (v >= 0 && last[v] == i && g->values[v].producer >= 0 && !g->values[v].init) {
        live -= static_bytes(&g->values[v].type);
        last[v] = (size_t)-1; /* counted once even if named twice by this node */
      }
    }
  }
  free(last);
  return rc;
}
