/* Graph editing for the optimizer: use counts, replacing uses, removing nodes. */
#ifndef KILN_IR_EDIT_H
#define KILN_IR_EDIT_H

#include "ir/graph.h"

/* Per value id: how many node inputs read it, plus one per graph output listing it, plus one
 * per nested subgraph that names it as an outer value. Caller frees. NULL on OOM. */
size_t *kiln_graph_use_counts(const kiln_graph *g);
/* Set mark[id] for every value id of g that node n's subgraphs (at any depth) read by name
 * from g without n listing it as an input (If/Loop/Scan bodies reading outer values). */
void kiln_node_mark_outer_reads(const kiln_graph *g, const kiln_node *n, bool *mark);
/* Whether any subgraph (at any depth) of g's nodes reads `name` from an enclosing scope. */
bool kiln_graph_name_used_by_subgraphs(const kiln_graph *g, const char *name);
/* Make every node input that reads `from` read `to` instead (graph outputs are not changed). */
void kiln_graph_replace_uses(kiln_graph *g, int from, int to);
/* Remove the nodes whose `dead[i]` is true (freeing them) and compact the node list. */
void kiln_graph_remove_nodes(kiln_graph *g, const bool *dead);
/* Whether value id is one of the graph's outputs. */
bool kiln_graph_is_output(const kiln_graph *g, int id);
/* Free a node's owned fields (not the node struct itself). */
void kiln_node_clear(kiln_node *n);

#endif
