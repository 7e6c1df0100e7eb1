/* Per-node compiled state: see node_state.h. */
#include "runtime/node_state.h"

#include <stdint.h>
#include <stdlib.h>

static size_t count_graphs(const kiln_graph *g) {
  size_t n = 1;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t a = 0; a < g->nodes[i].n_attrs; a++) {
      const kiln_attr *at = &g->nodes[i].attrs[a];
      if (at->g) n += count_graphs(at->g);
      for (size_t k = 0; at->graphs && k < at->n; k++) n += count_graphs(at->graphs[k]);
    }
  return n;
}

static bool add_graphs(kiln_state_table *t, const kiln_graph *g) {
  kiln_graph_states *e = &t->e[t->n++];
  e->g = g;
  if (!(e->nodes = kiln_calloc(g->n_nodes ? g->n_nodes : 1, sizeof *e->nodes))) return false;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t a = 0; a < g->nodes[i].n_attrs; a++) {
      const kiln_attr *at = &g->nodes[i].attrs[a];
      if (at->g && !add_graphs(t, at->g)) return false;
      for (size_t k = 0; at->graphs && k < at->n; k++)
        if (!add_graphs(t, at->graphs[k])) return false;
    }
  return true;
}

static int by_graph(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const kiln_graph_states *)a)->g, y = (uintptr_t)((const kiln_graph_states *)b)->g;
  return x < y ? -1 : x > y;
}

kiln_code kiln_states_build(kiln_state_table *t, const kiln_graph *g, kiln_error *err) {
  t->n = 0;
  if (!(t->e = kiln_calloc(count_graphs(g), sizeof *t->e)) || !add_graphs(t, g)) {
    kiln_states_free(t);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  qsort(t->e, t->n, sizeof *t->e, by_graph);
  return KILN_OK;
}

kiln_node_state *kiln_states_of(const kiln_state_table *t, const kiln_graph *g) {
  if (!t->e) return NULL;
  kiln_graph_states key = {.g = g};
  const kiln_graph_states *e = bsearch(&key, t->e, t->n, sizeof *t->e, by_graph);
  return e ? e->nodes : NULL;
}

void kiln_states_free(kiln_state_table *t) {
  for (size_t i = 0; t->e && i < t->n; i++) {
    const kiln_graph *g = t->e[i].g;
    for (size_t k = 0; t->e[i].nodes && k < g->n_nodes; k++) {
      kiln_node_state *s = &t->e[i].nodes[k];
      if (s->cache && s->cache_free) s->cache_free(s->cache);
    }
    free(t->e[i].nodes);
  }
  free(t->e);
  t->e = NULL;
  t->n = 0;
}
