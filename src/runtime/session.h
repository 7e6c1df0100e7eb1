/* Session internals shared by the executor and the API layer. */
#ifndef KILN_RUNTIME_SESSION_H
#define KILN_RUNTIME_SESSION_H

#include "ir/graph.h"
#include "ops/op.h"
#include "opt/opt.h"
#include "runtime/node_state.h"
#include "runtime/planner.h"
#include "runtime/profile.h"
#include "runtime/schedule.h"
#include "runtime/scratch.h"
#include "base/threadpool.h"

#define KILN_MAX_OPSET 26

typedef struct kiln_op_hist {
  const char *op;
  size_t count;
} kiln_op_hist;

/* A compiled model (kiln.h): what loading, checking, optimising and packing made, shared by
 * every session created from it. Nothing here changes after kiln_model_load but the per-node
 * states (caches, fused nodes' fallback and verification: atomics) and n_fallbacks; the IR
 * never does. */
struct kiln_model {
  int refs;                /* the caller's reference plus one per session (atomic) */
  kiln_ir_model *ir;
  kiln_options opts;       /* as compiled; borrowed pointers cleared */
  size_t n_feeds;          /* graph inputs that are not initializers */
  int *feeds;              /* value ids */
  size_t n_hist;
  kiln_op_hist *hist;
  kiln_opt_log opt_log;    /* what the optimizer did */
  char *force_fail;        /* KILN_FUSION_FAIL: fused op types whose kernel is treated as failed */
  char *force_skew;        /* KILN_FUSION_SKEW: test hook, fused op types whose output is off by 1 */
  size_t n_fallbacks;      /* fused nodes that fell back to their original chain (atomic) */
  struct kiln_plugin_set *plugins; /* the model's plugin ops and patterns (NULL: none) */
  size_t n_prepacked;      /* nodes that packed their weights at load (prepack.c) */
  kiln_state_table states; /* per-node compiled state of every graph (node_state.h) */
};

/* Take one more reference to m (released by kiln_model_free). */
kiln_model *kiln_model_ref(kiln_model *m);

/* A session: what runs of one compiled model mutate, plus its thread pool. */
struct kiln_session {
  kiln_model *model;
  kiln_options opts;       /* the model's, with this session's threads, profile and inter_op */
  kiln_planner *planner;   /* memory plans of the main graph, per input signature */
  kiln_threadpool *pool;   /* shared pool of opts.threads threads; NULL runs single-threaded */
  kiln_profile *profile;   /* per-node times of the main graph (opts.profile), or NULL */
  kiln_schedule *sched;    /* waves of the main graph (opts.inter_op with a pool), or NULL */
  kiln_scratch_pool *scratch; /* the kernels' per-run scratch, one context per run in flight */
};

/* At model load, unless opts.lazy_weights: the prepare hook of every main-graph node that has
 * one (kiln_op_schema.prepare), run with the session `s` (a stand-in made for loading); returns how
 * many made something. */
size_t kiln_prepack(const kiln_session *s);

/* The kernel services of frame f (f->svc filled in: pool, options, planned memory, subgraphs). */
struct kiln_frame;
void kiln_frame_services(struct kiln_frame *f);

/* When a run must stop (api_run.c): its run options' terminate flag and its deadline. */
typedef struct kiln_run_stop {
  const int *flag;     /* the run options' terminate flag (atomic), or NULL */
  int64_t deadline_ns; /* CLOCK_MONOTONIC time after which the run stops; 0: none */
  int64_t limit_ms;    /* the time limit it came from, for the message */
} kiln_run_stop;

/* The stop of a run of session `s` (may be NULL) this thread is starting: the run options
 * given to kiln_session_run_with, if any, else the session's max_run_ms. */
void kiln_run_stop_begin(kiln_run_stop *st, const struct kiln_session *s);
/* KILN_ERR_CANCELLED with a message when the run must stop (st may be NULL), else KILN_OK. */
kiln_code kiln_run_stop_check(const kiln_run_stop *st, kiln_error *err);

/* One activation of a graph: the values its nodes produced. */
typedef struct kiln_frame {
  const kiln_graph *g;
  const kiln_tensor **vals; /* per value id; NULL until produced or bound (inputs borrowed) */
  kiln_tensor **own;        /* per value id: the value this frame produced and frees, or NULL */
  struct kiln_frame *parent;
  const kiln_session *session;
  kiln_run_mem *mem;        /* arena for planned intermediates (main graph only), or NULL */
  const kiln_run_stop *stop; /* when the run must stop (the main graph's), checked before each node */
  kiln_node_state *states;  /* the compiled model's states of g's nodes, or NULL */
  kiln_scratch *scratch;    /* the run's scratch context (the main graph's, shared below), or NULL */
  kiln_kservices svc;       /* what the kernels of this run are offered (rt: this frame) */
} kiln_frame;


/* Resolve schemas, sort and infer types for a graph and its subgraphs. */
kiln_code kiln_graph_prepare(kiln_graph *g, const kiln_ir_model *m, kiln_error *err);
/* The same, resolving ops in the plugin set `ps` too (may be NULL). */
struct kiln_plugin_set;
kiln_code kiln_graph_prepare_ops(kiln_graph *g, const kiln_ir_model *m,
                                 const struct kiln_plugin_set *ps, kiln_error *err);

/* Run `g` with `inputs` bound to g->inputs in order (borrowed; NULL leaves an input unbound,
 * which is an error unless it has an initializer). outputs[i] receives a new value for each
 * graph output. */
kiln_code kiln_graph_run(const kiln_session *s, kiln_frame *parent, const kiln_graph *g,
                         size_t n_inputs, const kiln_tensor *const *inputs, kiln_tensor **outputs,
                         kiln_error *err);

#endif
