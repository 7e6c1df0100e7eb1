/* The one pattern matcher every fusion uses (and, later, plugins).
 *
 * A pattern is a chain of steps: step i > 0 reads step i-1's first output at input `slot`
 * (-1: any input). Side inputs of every step are free (they become inputs of the fused node).
 * A match also requires that every intermediate output is read only by the next step and is
 * not a graph output (fan-out blocks a fusion: the intermediate must not be needed elsewhere),
 * and that each step's predicate holds. */
#ifndef KILN_OPT_PATTERN_H
#define KILN_OPT_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/graph.h"

enum { KILN_PAT_MAX = 16 };

typedef bool (*kiln_pat_pred)(const kiln_graph *g, const kiln_node *n);

typedef struct kiln_pat_step {
  const char *ops;        /* op type, or alternatives separated by '|': "Div|Mul" */
  int slot;               /* input of this step fed by the previous step; -1 any */
  kiln_pat_pred pred;     /* NULL: no further condition */
} kiln_pat_step;

typedef struct kiln_pattern {
  const char *name;
  size_t n_steps;
  kiln_pat_step steps[KILN_PAT_MAX];
} kiln_pattern;

typedef struct kiln_match {
  size_t n;
  size_t nodes[KILN_PAT_MAX]; /* node indices in chain order; nodes[n-1] is the anchor */
} kiln_match;

/* Try to match `p` with node `anchor` as its last step. `uses` is kiln_graph_use_counts(g);
 * `taken` marks nodes already claimed by another rewrite in this pass (may be NULL). */
bool kiln_pattern_match(const kiln_graph *g, const kiln_pattern *p, size_t anchor,
                        const size_t *uses, const bool *taken, kiln_match *m);

/* Whether node n's op type is one of `ops` ("A|B|C"), in the default domain. */
bool kiln_op_is(const kiln_node *n, const char *ops);

/* Helpers for predicates and rewrites. */
const kiln_tensor *kiln_const_input(const kiln_graph *g, const kiln_node *n, size_t i);
bool kiln_const_scalar(const kiln_graph *g, const kiln_node *n, size_t i, double *v);

#endif
