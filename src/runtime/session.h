/* Session internals shared by the executor and the API layer. */
#ifndef KILN_RUNTIME_SESSION_H
#define KILN_RUNTIME_SESSION_H

#include "ir/graph.h"
#include "ops/op.h"
#include "opt/opt.h"
#include "runtime/planner.h"
#include "runtime/profile.h"
#include "runtime/schedule.h"
#include "runtime/threadpool.h"

#define KILN_MAX_OPSET 18

typedef struct kiln_op_hist {
  const char *op;
  size_t count;
} kiln_op_hist;

struct kiln_session {
  kiln_model *model;
  kiln_options opts;
  size_t n_feeds;          /* graph inputs that are not initializers */
  int *feeds;              /* value ids */
  const char **dim_names;  /* scratch for io info: KILN_MAX_RANK per io, built on demand */
  size_t n_hist;
  kiln_op_hist *hist;
  kiln_opt_log opt_log;    /* what the optimizer did at creation */
  char *force_fail;        /* KILN_FUSION_FAIL: fused op types whose kernel is treated as failed */
  char *force_skew;        /* KILN_FUSION_SKEW: test hook, fused op types whose output is off by 1 */
  kiln_planner *planner;   /* memory plans of the main graph, per input signature */
  kiln_threadpool *pool;   /* shared pool of opts.threads threads; NULL runs single-threaded */
  size_t n_fallbacks;      /* fused nodes that fell back to their original chain (atomic) */
  struct kiln_plugin_set *plugins; /* this session's plugin ops and patterns (NULL: none) */
  kiln_profile *profile;   /* per-node times of the main graph (opts.profile), or NULL */
  kiln_schedule *sched;    /* waves of the main graph (opts.inter_op with a pool), or NULL */
  size_t n_prepacked;      /* nodes that packed their weights at creation (prepack.c) */
};

/* At creation, unless opts.lazy_weights: the prepare hook of every main-graph node that has
 * one (kiln_op_prepare); returns how many made something. */
size_t kiln_prepack(const kiln_session *s);

/* One activation of a graph: the values its nodes produced. */
typedef struct kiln_frame {
  const kiln_graph *g;
  kiln_tensor **vals;       /* per value id; NULL until produced or bound */
  bool *owned;              /* vals[i] is ours to free */
  struct kiln_frame *parent;
  const kiln_session *session;
  kiln_run_mem *mem;        /* arena for planned intermediates (main graph only), or NULL */
} kiln_frame;

/* Resolve schemas, sort and infer types for a graph and its subgraphs. */
kiln_code kiln_graph_prepare(kiln_graph *g, const kiln_model *m, kiln_error *err);
/* The same, resolving ops in the plugin set `ps` too (may be NULL). */
struct kiln_plugin_set;
kiln_code kiln_graph_prepare_ops(kiln_graph *g, const kiln_model *m,
                                 const struct kiln_plugin_set *ps, kiln_error *err);

/* Run `g` with `inputs` bound to g->inputs in order (borrowed; NULL leaves an input unbound,
 * which is an error unless it has an initializer). outputs[i] receives a new value for each
 * graph output. */
kiln_code kiln_graph_run(const kiln_session *s, kiln_frame *parent, const kiln_graph *g,
                         size_t n_inputs, const kiln_tensor *const *inputs, kiln_tensor **outputs,
                         kiln_error *err);

/* For control-flow kernels: run a subgraph attribute of the current node. */
kiln_code kiln_subgraph_run(kiln_kctx *c, const kiln_graph *g, size_t n_inputs,
                            const kiln_tensor *const *inputs, kiln_tensor **outputs);

#endif
