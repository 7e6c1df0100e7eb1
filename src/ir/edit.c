#include "ir/edit.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static bool graph_reads_outer(const kiln_graph *g, const char *name);

static bool node_subgraphs_read(const kiln_node *n, const char *name) {
  for (size_t a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    if (at->g && graph_reads_outer(at->g, name)) return true;
    for (size_t k = 0; at->graphs && k < at->n; k++)
      if (graph_reads_outer(at->graphs[k], name)) return true;
  }
  return false;
}

/* A subgraph reads `name` from outside when it has a value of that name that it neither
 * produces nor declares (or a nested subgraph does). */
static bool graph_reads_outer(const kiln_graph *g, const char *name) {
  int id = kiln_graph_find(g, name);
  if (id >= 0) {
    const kiln_value_info *v = &g->values[id];
    if (v->is_input || v->init || v->producer >= 0) return false; /* shadowed */
    return true;
  }
  for (size_t i = 0; i < g->n_nodes; i++)
    if (node_subgraphs_read(&g->nodes[i], name)) return true;
  return false;
}

bool kiln_graph_name_used_by_subgraphs(const kiln_graph *g, const char *name) {
  for (size_t i = 0; i < g->n_nodes; i++)
    if (node_subgraphs_read(&g->nodes[i], name)) return true;
  return false;
}

bool kiln_graph_is_output(const kiln_graph *g, int id) {
  for (size_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == id) return true;
  return false;
}

/* A subgraph nested in the graph whose use counts are taken, and the one it is nested in (NULL:
 * that graph itself). */
typedef struct nest {
  const kiln_graph *g;
  const struct nest *up;
} nest;

/* Mark (mark[id] for values id of g) every name that subgraph at->g, or a subgraph nested in
 * it, reads from g: a value it neither produces nor declares, of a name no graph between it and
 * g declares. One pass over the subgraphs' values, where asking
 * kiln_graph_name_used_by_subgraphs for each value of g walked every node once per value (a
 * fused node carries its original chain as a subgraph). */
static void mark_outer_reads(const kiln_graph *g, const nest *at, bool *mark) {
  const kiln_graph *sub = at->g;
  for (size_t v = 0; v < sub->n_values; v++) {
    const kiln_value_info *vi = &sub->values[v];
    if (vi->is_input || vi->init || vi->producer >= 0) continue;
    bool hidden = false;
    for (const nest *b = at->up; b && !hidden; b = b->up) hidden = kiln_graph_find(b->g, vi->name) >= 0;
    int id = hidden ? -1 : kiln_graph_find(g, vi->name);
    if (id >= 0) mark[id] = true;
  }
  for (size_t i = 0; i < sub->n_nodes; i++)
    for (size_t a = 0; a < sub->nodes[i].n_attrs; a++) {
      const kiln_attr *ab = &sub->nodes[i].attrs[a];
      for (size_t k = 0; k < (ab->g ? 1 : ab->graphs ? ab->n : 0); k++) {
        nest inner = {ab->g ? ab->g : ab->graphs[k], at};
        mark_outer_reads(g, &inner, mark);
      }
    }
}

void kiln_node_mark_outer_reads(const kiln_graph *g, const kiln_node *n, bool *mark) {
  for (size_t a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    for (size_t k = 0; k < (at->g ? 1 : at->graphs ? at->n : 0); k++) {
      nest top = {at->g ? at->g : at->graphs[k], NULL};
      mark_outer_reads(g, &top, mark);
    }
  }
}

size_t *kiln_graph_use_counts(const kiln_graph *g) {
  size_t *uses = kiln_calloc(g->n_values, sizeof *uses);
  bool *mark = kiln_calloc(g->n_values, sizeof *mark);
  if (!uses || !mark) {
    free(uses);
    free(mark);
    return NULL;
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) uses[n->in[k]]++;
    kiln_node_mark_outer_reads(g, n, mark);
  }
  for (size_t i = 0; i < g->n_outputs; i++) uses[g->outputs[i]]++;
  for (size_t v = 0; v < g->n_values; v++) uses[v] += mark[v];
  free(mark);
  return uses;
}

void kiln_graph_replace_uses(kiln_graph *g, int from, int to) {
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == from) g->nodes[i].in[k] = to;
}

void kiln_node_clear(kiln_node *n) {
  free(n->name);
  free(n->op_type);
  free(n->domain);
  free(n->in);
  free(n->out);
  for (size_t i = 0; i < n->n_attrs; i++) kiln_attr_clear(&n->attrs[i]);
  free(n->attrs);
  memset(n, 0, sizeof *n);
}

void kiln_graph_remove_nodes(kiln_graph *g, const bool *dead) {
  size_t w = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    if (dead[i]) {
      kiln_node_clear(&g->nodes[i]);
      continue;
    }
    if (w != i) g->nodes[w] = g->nodes[i];
    w++;
  }
  g->n_nodes = w;
  for (size_t v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = (int)i;
}
