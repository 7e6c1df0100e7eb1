/* Dimension flow: which dims of which values are equal, and what small integer (shape)
 * vectors hold, as far as the graph tells before running it.
 *
 * Shape inference stores -1 for every unknown dim and keeps symbolic names only through a few
 * ops, so "dim 0 of this Reshape's input is the same `seq` as dim 0 of that Shape's input" is
 * not visible in kiln_type. This analysis walks the (sorted) graph once and gives every dim a
 * token: a static size (>= 0), a symbolic class (< 0; two dims with the same class are equal
 * at run time), or KILN_DIM_UNKNOWN (equal to nothing). Classes come from graph inputs'
 * dims (same dim_param name, same class), are carried through ops that keep dims (elementwise,
 * broadcasting, Transpose, MatMul, Gather, Slice, Reshape targets built from Shape, ...) and
 * are merged where an op requires two dims to be equal (Concat's other axes, MatMul's
 * contracted dims). Anything not understood gets a fresh class (never wrongly equal).
 *
 * For int64/int32 scalars and 1-D vectors built from Shape (Shape, Gather, Slice, Unsqueeze,
 * Squeeze, Concat, Cast, simple arithmetic) the analysis also keeps each element: a token as
 * above plus where it came from (value and dim of a Shape's input), so shape computations can
 * be folded or rebuilt (see fold_shapes.c). */
#ifndef KILN_OPT_DIMFLOW_H
#define KILN_OPT_DIMFLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"

#define KILN_DIM_UNKNOWN INT64_MIN

typedef enum { KILN_ELEM_UNKNOWN, KILN_ELEM_CONST, KILN_ELEM_SYM } kiln_elem_kind;

typedef struct kiln_dimelem {
  kiln_elem_kind kind;
  int64_t val;   /* CONST: the value (any integer); SYM: the dim's class token (< 0) */
  int src, dim;  /* the dim `dim` of value `src` this element is a copy of, or src -1 */
} kiln_dimelem;

typedef struct kiln_dimflow kiln_dimflow;

/* Analyse g (nodes in topological order). NULL on allocation failure. */
kiln_dimflow *kiln_dimflow_new(const kiln_graph *g);
void kiln_dimflow_free(kiln_dimflow *df);

/* Rank of value v as tracked (-1 unknown), and the token of its dim k (class canonical). */
int kiln_dimflow_rank(const kiln_dimflow *df, int v);
int64_t kiln_dimflow_dim(const kiln_dimflow *df, int v, int k);
/* Whether two tokens denote the same size for sure. */
bool kiln_dimflow_same(const kiln_dimflow *df, int64_t a, int64_t b);
/* Contents of an integer scalar/vector value: number of elements, or -1 when not tracked;
 * *scalar tells a 0-D value. elems gets at most KILN_MAX_RANK entries. */
int kiln_dimflow_vec(const kiln_dimflow *df, int v, kiln_dimelem *elems, bool *scalar);

#endif
