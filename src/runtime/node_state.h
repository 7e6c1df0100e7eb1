/* The per-node compiled state of a model (kiln_node_state, ops/op.h): one array per graph at
 * any depth (the main graph, control-flow bodies, fused nodes' original chains), owned by the
 * compiled model and found by graph. Built once after optimisation; the table itself never
 * changes afterwards, only the states' atomics do. */
#ifndef KILN_RUNTIME_NODE_STATE_H
#define KILN_RUNTIME_NODE_STATE_H

#include "ir/graph.h"
#include "ops/op.h"

typedef struct kiln_graph_states {
  const kiln_graph *g;
  kiln_node_state *nodes; /* g->n_nodes entries */
} kiln_graph_states;

typedef struct kiln_state_table {
  size_t n;
  kiln_graph_states *e;   /* sorted by graph address */
} kiln_state_table;

/* One zeroed state per node of g and of every graph below it. */
kiln_code kiln_states_build(kiln_state_table *t, const kiln_graph *g, kiln_error *err);
/* The states of graph g's nodes (indexed like g->nodes), NULL when g is not in the table. */
kiln_node_state *kiln_states_of(const kiln_state_table *t, const kiln_graph *g);
/* Free every node's cache, then the table. */
void kiln_states_free(kiln_state_table *t);

#endif
