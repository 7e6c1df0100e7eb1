#include "opt/graph_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

int kiln_build_value(kiln_graph *g, const char *base, const char *suffix) {
  char name[512];
  snprintf(name, sizeof name, "%s_%s", base, suffix);
  for (int k = 1; kiln_graph_find(g, name) >= 0; k++) snprintf(name, sizeof name, "%s_%s_%d", base, suffix, k);
  return kiln_graph_value(g, name);
}

int kiln_build_const(kiln_graph *g, const char *base, const char *suffix, kiln_tensor *t) {
  int id = t ? kiln_build_value(g, base, suffix) : -1;
  if (id < 0) {
    kiln_tensor_free(t);
    return -1;
  }
  kiln_value_info *v = &g->values[id];
  v->init = t;
  v->type.kind = KILN_T_TENSOR;
  v->type.dtype = t->dtype;
  v->type.rank = t->rank;
  for (int d = 0; d < t->rank; d++) v->type.dims[d] = t->dims[d];
  return id;
}

int kiln_build_ints(kiln_graph *g, const char *base, const char *suffix, const int64_t *v, size_t n,
                    bool scalar) {
  int64_t len = (int64_t)n;
  kiln_tensor *t = kiln_tensor_new(KILN_INT64, scalar ? 0 : 1, &len, NULL);
  if (t && n) memcpy(t->data, v, n * sizeof *v);
  return kiln_build_const(g, base, suffix, t);
}

int kiln_build_node(kiln_graph *g, const char *op, const char *name, const int *ins, size_t n_in,
                    const int *outs, size_t n_out) {
  int k = kiln_graph_add_node(g);
  if (k < 0) return -1;
  kiln_node *n = &g->nodes[k];
  n->name = kiln_strdup(name);
  n->op_type = kiln_strdup(op);
  n->domain = kiln_strdup("");
  n->in = kiln_malloc((n_in ? n_in : 1) * sizeof *n->in);
  n->out = kiln_malloc((n_out ? n_out : 1) * sizeof *n->out);
  if (!n->name || !n->op_type || !n->domain || !n->in || !n->out) {
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->in);
    free(n->out);
    g->n_nodes--;
    return -1;
  }
  if (n_in) memcpy(n->in, ins, n_in * sizeof *ins);
  if (n_out) memcpy(n->out, outs, n_out * sizeof *outs);
  n->n_in = n_in;
  n->n_out = n_out;
  for (size_t i = 0; i < n_out; i++)
    if (outs[i] >= 0) g->values[outs[i]].producer = k;
  return k;
}
