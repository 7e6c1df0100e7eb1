/* Custom operators and fusion patterns described through the public ABI (include/kiln/kiln_op.h):
 * the adapter from a kiln_op_desc to the internal kiln_op_schema, the per-session plugin set
 * (loaded libraries, their ops, fusion patterns and per-node kernel states), and the pattern
 * pass. There is no global plugin state: a set belongs to one session and is freed with it. */
#ifndef KILN_PLUGIN_PLUGIN_H
#define KILN_PLUGIN_PLUGIN_H

#include "kiln/kiln_op.h"
#include "ops/op.h"
#include "opt/opt.h"

struct kiln_plugin_lib;

/* An op described through the ABI, adapted to a schema. node->schema points at `schema`, the
 * first member, so the adapter's infer and run callbacks find the description again. */
typedef struct kiln_adapted_op {
  kiln_op_schema schema;
  kiln_op_desc d;                    /* normalised copy (fields past the plugin's size zeroed) */
  const struct kiln_plugin_lib *lib; /* the library that registered it; NULL for kiln's own */
  bool owned;                        /* d's strings and arrays were copied (freed with the op) */
} kiln_adapted_op;

/* Check a description and build its adapted op into `out`. `copy`: duplicate every string and
 * array (plugins); otherwise they are borrowed (kiln's own static descriptions). The message
 * (without a "plugin 'x'" prefix) names the op and the problem. */
kiln_code kiln_adapt_op(const kiln_op_desc *desc, bool copy, kiln_adapted_op *out, kiln_error *err);
void kiln_adapted_op_clear(kiln_adapted_op *op);
/* The adapted op behind a schema, or NULL when the schema is a plain one. */
const kiln_adapted_op *kiln_adapted_from_schema(const kiln_op_schema *s);
/* For kiln's own ops described through the ABI: the internal kernel context behind a compute
 * context (kiln's kernels may use it; plugins cannot). */
kiln_kctx *kiln_kernel_ctx_internal(kiln_kernel_ctx *c);
kiln_status kiln_status_from_code(kiln_code rc);
/* The function table handed to plugins. */
const kiln_api *kiln_plugin_api(void);

typedef struct kiln_plugin_set kiln_plugin_set;

/* Load every library in `paths` (NULL-terminated, may be NULL) and then every entry of the
 * colon-separated `env_list` (may be NULL). A library named twice is loaded once. *out is NULL
 * when there is nothing to load. */
kiln_code kiln_plugins_load(const char *const *paths, const char *env_list, kiln_plugin_set **out,
                            kiln_error *err);
/* Destroy kernel states, free the ops, close the libraries. Accepts NULL. */
void kiln_plugins_free(kiln_plugin_set *ps);

/* Adapt and register kiln's own ops described through the ABI (builtin.c), once per process;
 * every lookup below does it first. */
void kiln_builtin_ops_init(void);
/* kiln_op_find (kiln's ops, the described ones included), then the ops of a plugin set (may
 * be NULL). */
const kiln_op_schema *kiln_op_find_in(const struct kiln_plugin_set *ps, const char *domain,
                                      const char *name, int opset);

/* The plugin op for (domain, name) covering `opset`, or NULL; `known`: any version exists. */
const kiln_op_schema *kiln_plugins_find(const kiln_plugin_set *ps, const char *domain,
                                        const char *name, int opset);
bool kiln_plugins_known(const kiln_plugin_set *ps, const char *domain, const char *name);
size_t kiln_plugins_op_count(const kiln_plugin_set *ps);
size_t kiln_plugins_fusion_count(const kiln_plugin_set *ps);

/* After optimisation: create the kernel state of every node (at any depth) whose op has a
 * create callback. A failing create fails the session, naming the node. */
kiln_code kiln_plugins_instantiate(kiln_plugin_set *ps, kiln_graph *g, kiln_error *err);
/* The state created for node n, or false when there is none (the adapter then creates a
 * temporary one for the call, e.g. during constant folding). */
bool kiln_plugins_state(const kiln_plugin_set *ps, const kiln_node *n, void **state);

/* The optimizer pass that applies the set's fusion patterns (name KILN_PLUGIN_PASS). */
#define KILN_PLUGIN_PASS "plugin_patterns"
kiln_code kiln_plugins_fuse(kiln_pass_ctx *ctx, const kiln_plugin_set *ps, kiln_graph *g,
                            size_t *count);

/* kiln_plugins_fuse as the optimizer's extra pass (kiln_opt_config.extra): the plugin set is
 * ctx->cfg->user. */
kiln_code kiln_plugins_pass(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count);


#endif
