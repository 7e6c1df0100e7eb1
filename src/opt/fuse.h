/* Building fused nodes: a matched chain becomes one node in domain ai.kiln that keeps the chain
 * it replaced as a graph attribute "original". The executor runs "original" instead when the
 * fused kernel fails (fallback); validate runs both to compare. */
#ifndef KILN_OPT_FUSE_H
#define KILN_OPT_FUSE_H

#include "ir/graph.h"
#include "ops/op.h"
#include "opt/opt.h"
#include "opt/pattern.h"


/* Replace the matched nodes of g by one node `op_type` in domain ai.kiln whose inputs are the
 * value ids in `inputs` (-1 for an omitted optional input) and whose outputs are the anchor's.
 * The matched nodes move into the "original" subgraph: its inputs are the fused node's inputs
 * (same names); any other value the chain reads resolves from the enclosing graph by name.
 * Returns the new node's index, or -1 with err set. The matched nodes are left as empty
 * husks marked in `dead` (remove them with kiln_graph_remove_nodes after the pass). */
int kiln_fuse_chain(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
                    const int *inputs, size_t n_inputs, bool *dead);

/* Attribute setters on a (fused) node. */
kiln_code kiln_node_set_int(kiln_node *n, const char *name, int64_t v);
kiln_code kiln_node_set_float(kiln_node *n, const char *name, float v);
kiln_code kiln_node_set_string(kiln_node *n, const char *name, const char *v);
kiln_code kiln_node_set_ints(kiln_node *n, const char *name, const int64_t *v, size_t count);
/* Copy every attribute of src onto dst (deep copy; graphs are not supported). */
kiln_code kiln_node_copy_attrs(kiln_node *dst, const kiln_node *src);

/* What a fusion pass scans the graph with: the use counts of every value as the pass found them,
 * and a flag per node, set once a rewrite has taken the node (its husk is removed at the end).
 * The flags grow with the graph as fused nodes are appended. */
typedef struct {
  size_t *uses;
  bool *dead;
  size_t n_dead; /* entries of dead: the node count when it last grew */
} kiln_fuse_scan;

/* Use counts and all-false flags for g; KILN_ERR_NOMEM (also in ctx->err) when out of memory,
 * with s still safe to end. */
kiln_code kiln_fuse_scan_begin(kiln_pass_ctx *ctx, const kiln_graph *g, kiln_fuse_scan *s);
/* The flags grown to g's node count, the new entries false. */
kiln_code kiln_fuse_scan_grow(kiln_pass_ctx *ctx, const kiln_graph *g, kiln_fuse_scan *s);
/* Remove the flagged nodes from g if rc is KILN_OK, free s's arrays, and return rc. */
kiln_code kiln_fuse_scan_end(kiln_fuse_scan *s, kiln_graph *g, kiln_code rc);
/* The error of a failed rewrite: the code in ctx->err, else KILN_ERR_NOMEM. */
kiln_code kiln_fuse_failed(const kiln_pass_ctx *ctx);

/* kiln_fuse_chain, then move `attrs`' attributes onto the new node, clear `attrs`, count the
 * rewrite and grow s's flags to the new node count. Returns KILN_OK or the error (also in
 * ctx->err). */
kiln_code kiln_fuse_emit(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
                         const int *inputs, size_t n_inputs, kiln_node *attrs, kiln_fuse_scan *s,
                         size_t *count);

/* What a fusion pass makes of a match of its pattern p (an index into its patterns): the fused
 * node's op type, its inputs (*n_in value ids, -1 for omitted ones; at most KILN_FUSE_MAX_IN)
 * and its attributes, built on attrs (read before the chain moves into the node's subgraph).
 * KILN_OK, or an error (attrs is then cleared by the caller). */
enum { KILN_FUSE_MAX_IN = 8 };
typedef kiln_code (*kiln_fuse_build_fn)(const kiln_graph *g, const kiln_match *m, size_t p,
                                        const char **op_type, int *in, size_t *n_in, kiln_node *attrs);

/* The loop of a pattern-fusion pass: anchors from the last node back, the first of `pats` that
 * matches there (so the longest chain ending at a node wins, when the patterns are listed
 * longest first), each match turned into a node by build and kiln_fuse_emit; the husks are
 * removed at the end. */
kiln_code kiln_fuse_patterns(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_pattern *pats, size_t n_pats,
                             kiln_fuse_build_fn build, size_t *count);

/* Set the fused node's activation attributes (activation, alpha, beta) from a standard
 * activation node, or "" when act is NULL. */
kiln_code kiln_fuse_set_activation(kiln_node *f, const kiln_graph *g, const kiln_node *act);
/* The same under the names <prefix>activation, <prefix>act_alpha, <prefix>act_beta. */
kiln_code kiln_fuse_set_activation_prefixed(kiln_node *f, const kiln_graph *g, const kiln_node *act,
                                            const char *prefix);

/* Make sure the model imports ai.kiln version 1. */
kiln_code kiln_model_import_kiln(kiln_ir_model *m, kiln_error *err);

#endif
