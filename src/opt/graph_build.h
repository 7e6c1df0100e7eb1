/* Small helpers for passes that add values and nodes (fold_shapes, fuse_transpose, cse).
 * Adding values or nodes may move g->values / g->nodes: re-read pointers afterwards. */
#ifndef KILN_OPT_GRAPH_BUILD_H
#define KILN_OPT_GRAPH_BUILD_H

#include "ir/graph.h"

/* A new value named after `base` and `suffix` (made unique); -1 on allocation failure. */
int kiln_build_value(kiln_graph *g, const char *base, const char *suffix);
/* A new initializer holding t (owned by g afterwards, freed here on failure); -1 on failure. */
int kiln_build_const(kiln_graph *g, const char *base, const char *suffix, kiln_tensor *t);
/* A new int64 1-D (or 0-D when scalar) initializer with n values. */
int kiln_build_ints(kiln_graph *g, const char *base, const char *suffix, const int64_t *v, size_t n,
                    bool scalar);
/* Append a standard-domain node op(ins) -> outs; returns its index or -1. The outputs must
 * be values nothing else produces. */
int kiln_build_node(kiln_graph *g, const char *op, const char *name, const int *ins, size_t n_in,
                    const int *outs, size_t n_out);

#endif
