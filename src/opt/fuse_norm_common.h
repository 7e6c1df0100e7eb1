/* Helpers shared by the LayerNorm, GELU and embedding fusions (fuse_layernorm.c, fuse_gelu.c,
 * fuse_embedding.c). Their patterns are DAGs, not chains: the linear spine of each is matched
 * with pattern.h, then the side edges (a value read by two nodes of the pattern) are checked
 * here, and kfn_closed() checks fan-out for the whole node set at once. */
#ifndef KILN_OPT_FUSE_NORM_COMMON_H
#define KILN_OPT_FUSE_NORM_COMMON_H

#include "opt/fuse.h"

/* The node producing value v as its first output, when its op is one of `ops` in the default
 * domain (or, with kiln_domain, the ai.kiln op `ops`) and no other rewrite took it; else -1. */
int kfn_producer(const kiln_graph *g, int v, const char *ops, const bool *taken);
int kfn_kiln_producer(const kiln_graph *g, int v, const char *op, const bool *taken);
/* Whether n is the ai.kiln op `op`. */
bool kfn_is_kiln(const kiln_node *n, const char *op);
/* For a two-input node reading v: its other input (-1 when v is not an input of n). */
int kfn_other(const kiln_node *n, int v);
/* Whether input i of n is a constant of one element within relative tolerance rtol of want. */
bool kfn_scalar_is(const kiln_graph *g, const kiln_node *n, size_t i, double want, double rtol);
/* For a two-input node with one constant scalar input near `want`: the index of the other input
 * (0 or 1), else -1. */
int kfn_scalar_side(const kiln_graph *g, const kiln_node *n, double want, double rtol);
/* Whether value v is statically a float32 tensor of known rank. */
bool kfn_is_float(const kiln_graph *g, int v);
/* Whether constant t (float32) holds one value per position of the last k dims of a value of
 * type ty, laid out over exactly those dims (leading dims of t all 1, t no higher rank than ty):
 * multiplying or adding it then neither broadcasts the value nor raises its rank. Requires
 * those k dims of ty to be known. */
bool kfn_const_over_last(const kiln_tensor *t, const kiln_type *ty, int k);

/* kiln_pattern_match with backtracking: where a step reads the previous one at any input
 * (slot -1) and several inputs come from nodes of the previous step's op, each is tried in
 * turn. (kiln_pattern_match commits to the first, so Mul(x, Add(erf, 1)) fails to match when
 * x itself comes from an Add.) Same arguments and result. */
bool kfn_pattern_match(const kiln_graph *g, const kiln_pattern *p, size_t anchor,
                       const size_t *uses, const bool *taken, kiln_match *m);

/* Add node index i to m (no-op when present), keeping m sorted, i.e. in topological order since
 * g is sorted at the start of a pass. False when m is full. */
bool kfn_match_add(kiln_match *m, size_t i);
/* How many inputs of m's nodes read v. */
size_t kfn_reads(const kiln_graph *g, const kiln_match *m, int v);
/* Fan-out check for a DAG-shaped match: every output of every node of m is read only by nodes of
 * m (as often as uses[] counts, so graph outputs and subgraph readers block the fusion), except
 * the anchor's first output and the values in keep[0..n_keep) that become outputs of the fused
 * node. */
bool kfn_closed(const kiln_graph *g, const kiln_match *m, const size_t *uses, const int *keep,
                size_t n_keep);

/* kiln_fuse_chain, then: the fused node keeps only the anchor's first output, plus `extra`
 * (values produced inside the chain that are read elsewhere) in order, also added to the
 * "original" subgraph's outputs; and s's flags grow to the new node count. Returns the fused
 * node index or -1 with ctx->err set. */
int kfn_fuse(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
             const int *inputs, size_t n_inputs, const int *extra, size_t n_extra, kiln_fuse_scan *s);

/* ---- the normalisations' pieces (fuse_layernorm.c, fuse_rmsnorm.c), pattern predicates ---- */
/* A ReduceMean with keepdims 1 (and not noop_with_empty_axes). */
bool kfn_keepdims(const kiln_graph *g, const kiln_node *n);
/* Pow(d, 2) or Mul(d, d). */
bool kfn_square(const kiln_graph *g, const kiln_node *n);
/* Add(v, constant float32 scalar eps) with v not constant. */
bool kfn_eps_add(const kiln_graph *g, const kiln_node *n);
/* The reduced axes of ReduceMean n (attribute, or input from opset 18) as "the last k dims of a
 * rank-r value": k, or 0 when they are not such a suffix (or not constant). */
int kfn_suffix_axes(const kiln_graph *g, const kiln_node *n, int r);

/* ---- LayerNorm matching, shared by fuse_layernorm and fuse_embedding ---- */

typedef struct kiln_ln_match {
  kiln_match m;      /* the normalisation's nodes, sorted; the anchor is the last */
  int x;             /* the normalised value */
  int gamma, beta;   /* constant float32 value ids, or -1 */
  float epsilon;
  int axis;          /* first normalised axis counted from the end: -k for the last k dims */
  bool standard;     /* a LayerNormalization node rather than the decomposed chain */
} kiln_ln_match;

/* A layer normalisation of float32 data over its last dims ending at node `anchor`: the
 * decomposed opset < 17 chain (ReduceMean, Sub, Pow|Mul, ReduceMean, Add(eps), Sqrt, Div,
 * [Mul(gamma)], [Add(beta)]) or a standard LayerNormalization whose statistics outputs are
 * unused. Constant gamma/beta only. */
bool kiln_match_layernorm(const kiln_graph *g, size_t anchor, const size_t *uses,
                          const bool *taken, kiln_ln_match *lm);

#endif
