/* The operator description every kernel registers: schema, shape function, reference kernel.
 *
 * One file per operator or family in src/ops/ defines a table
 *     const kiln_op_schema kiln_ops_<family>[] = { {...}, ..., {0} };
 * listed once in src/ops/registry.c. An op is chosen by (domain, name) and the model's opset:
 * the entry with the highest `since` not above the imported version. A kernel may read
 * c->opset to follow behaviour that changed between versions it covers.
 */
#ifndef KILN_OPS_OP_H
#define KILN_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

struct kiln_kctx;
struct kiln_threadpool;
struct kiln_plugin_set;
struct kiln_options;

/* What the runtime offers kernels, filled by the executor once per graph run: kernels reach it
 * through the functions below (kiln_out, kiln_kpool, kiln_kamx, kiln_in_const,
 * kiln_kscratch_take, kiln_subgraph_run), never through the executor's own state. NULL where a kernel runs
 * outside a session (constant folding): outputs are then allocated, loops run serially and no
 * subgraph can run. */
typedef struct kiln_kservices {
  void *rt;                            /* the executor's, handed back to the functions */
  const kiln_graph *graph;             /* the graph being run (its constants) */
  struct kiln_threadpool *pool;        /* the session's pool, or NULL */
  const struct kiln_options *opts;     /* the session's options: strict_fp32, limits, logging */
  const struct kiln_plugin_set *plugins; /* the model's plugin ops (their kernel states), or NULL */
  /* Memory of `bytes` for output i of c's node planned by the run, or NULL (allocate). */
  void *(*out_slot)(void *rt, const struct kiln_kctx *c, size_t i, size_t bytes);
  /* Run graph g (an attribute of c's node) on inputs bound to g's inputs in order. */
  kiln_code (*subgraph)(void *rt, struct kiln_kctx *c, const kiln_graph *g, size_t n_inputs,
                        const kiln_tensor *const *inputs, kiln_tensor **outputs);
  /* The run context's scratch slot of c's node (see kiln_kscratch_take), or NULL for none. */
  void *(*scratch_take)(void *rt, const struct kiln_kctx *c);
  void (*scratch_put)(void *rt, const struct kiln_kctx *c, void *v, void (*free_fn)(void *));
} kiln_kservices;

/* What the compiled model keeps for one node (at any depth of the graph) beside the immutable
 * IR: made from the model, shared by every session and concurrent run of it, and so changed
 * only atomically. Kernels reach it through their context (kiln_cache_* below); the executor
 * keeps a fused node's verdicts here. */
typedef struct kiln_node_state {
  void *cache;                 /* the kernel's cache: packed or transformed constant weights
                                  (published once; work buffers go to kiln_kscratch_take);
                                  freed with the model by cache_free */
  void (*cache_free)(void *cache);
  int fallback;                /* a fused node whose kernel failed runs "original" from now on */
  int verified;                /* verify_fusions: 0 not yet, 2 claimed by a run, 1 compared */
  double verify_abs, verify_rel; /* the largest differences found (verified == 1) */
} kiln_node_state;

/* What a kernel sees for one node execution. */
typedef struct kiln_kctx {
  const kiln_node *node;
  int opset;
  size_t n_in, n_out;
  const kiln_tensor *const *in; /* in[i] NULL when the optional input is omitted */
  kiln_tensor **out;            /* the kernel stores new values here (kiln_out or its own) */
  const kiln_kservices *rt;     /* the runtime's services, or NULL (see kiln_kservices) */
  kiln_error *err;
  kiln_node_state *state;       /* the compiled model's state of this node; NULL where there is
                                   none (constant folding): kernels then cache nothing */
  int64_t max_out_elems;        /* > 0: kiln_out refuses an output of more elements before
                                   making it (constant folding's size cap) */
} kiln_kctx;

/* What a shape function sees at load time. */
typedef struct kiln_ictx {
  const kiln_node *node;
  int opset;
  size_t n_in, n_out;
  const kiln_type *const *in;   /* NULL when omitted */
  const kiln_tensor *const *cin;/* constant value of input i when known at load, else NULL */
  kiln_type *const *out;        /* preset to unknown; fill what is known */
  kiln_error *err;
} kiln_ictx;

typedef kiln_code (*kiln_kernel_fn)(kiln_kctx *c);
typedef kiln_code (*kiln_infer_fn)(kiln_ictx *c);
/* Optional, for kernels that keep caches made from constant inputs (packed weights), listed
 * as the schema's `prepare`: called once at session creation (unless
 * kiln_options.lazy_weights) with the inputs known then: constant ones (initializers, folded
 * constants) with their data, the others as shape-only tensors (data NULL; the static dims,
 * -1 where unknown, which numel counts as 1). c->out is not to be touched. It makes what the
 * node's first run with those shapes would make, so that run is as fast as later ones, and
 * nothing where an unknown dim would decide. KILN_OK when it made something; any other code
 * leaves the caches to the first run. */
typedef kiln_code (*kiln_prepare_fn)(kiln_kctx *c);

/* Work of one node execution for the profiler, read after the kernel ran (c->in and c->out
 * hold the run's tensors; c->out is not to be touched): *flops counts floating-point
 * operations (a multiply-add is 2), *bytes the memory traffic. Both arrive preset, *flops to 0
 * and *bytes to the sum of the inputs' and outputs' sizes; a hook changes what it knows
 * better. Ops without a hook keep the presets. */
typedef void (*kiln_cost_fn)(const kiln_kctx *c, double *flops, double *bytes);

/* Facts about an op that the runtime and the optimizer act on (kiln_op_schema.flags). */
enum {
  /* Output 0 may be written over input 0 or 1 (same type and byte size; the planner then
   * gives both one slot): element i of the output depends only on element i of that input
   * (and on broadcast operands), and the kernel reads it before writing there. The view ops
   * (Reshape, Flatten, Squeeze, Unsqueeze: the same elements in new dims) then copy nothing. */
  KILN_OPF_IN_PLACE = 1u << 0,
  /* Outputs may differ between runs with the same inputs: never constant-folded, never
   * merged with a twin by common-subexpression elimination. */
  KILN_OPF_RANDOM = 1u << 1,
  /* The inputs may be produced straight into the slices of the output along its `axis`
   * (the planner's in-place Concat). */
  KILN_OPF_CONCAT = 1u << 2,
  /* Optional inputs may come before required ones (Loop, Scan-8): an omitted input below the
   * minimum arity is no error. */
  KILN_OPF_LEADING_OPTIONAL = 1u << 3,
};

/* How an op's output shape (and, for small integer vectors, its values) follows from its
 * inputs, for the symbolic dim-flow analysis of the optimizer (src/opt/dimflow.c applies the
 * rule; attributes are read as the op defines them). KILN_FLOW_NONE: nothing is known. */
typedef enum kiln_flow {
  KILN_FLOW_NONE = 0,
  KILN_FLOW_SAME,        /* output 0 has input 0's shape */
  KILN_FLOW_COPY,        /* SAME, and output 0 holds input 0's values (Identity, Cast) */
  KILN_FLOW_BROADCAST,   /* numpy broadcast of all inputs */
  KILN_FLOW_ADD,         /* BROADCAST, and integer vectors add (and so on) element by element */
  KILN_FLOW_SUB,
  KILN_FLOW_MUL,
  KILN_FLOW_DIV,
  KILN_FLOW_TRANSPOSE,   /* perm */
  KILN_FLOW_MATMUL,      /* numpy matmul of inputs 0 and 1 */
  KILN_FLOW_GEMM,        /* transA, transB */
  KILN_FLOW_GATHER,      /* axis, indices input 1 */
  KILN_FLOW_SLICE,       /* starts, ends, axes, steps inputs (opset 10) or attributes */
  KILN_FLOW_RESHAPE,     /* shape input 1, allowzero */
  KILN_FLOW_UNSQUEEZE,   /* axes attribute or input 1 */
  KILN_FLOW_SQUEEZE,
  KILN_FLOW_CONCAT,      /* axis */
  KILN_FLOW_FLATTEN,     /* axis */
  KILN_FLOW_SPLIT,       /* axis: every output has input 0's shape but along it */
  KILN_FLOW_REDUCE,      /* axes, keepdims, noop_with_empty_axes */
  KILN_FLOW_ARG_REDUCE,  /* axis, keepdims */
  KILN_FLOW_EXPAND,      /* shape input 1 */
  KILN_FLOW_CONSTANT_OF_SHAPE,
  KILN_FLOW_BATCH,       /* output 0 keeps input 0's rank and batch dim (Conv, pooling, ...) */
  KILN_FLOW_SHAPE,       /* output 0 is input 0's shape (start, end) */
  KILN_FLOW_SIZE,        /* output 0 is input 0's element count */
} kiln_flow;

typedef struct kiln_arity {
  int min, max;         /* max KILN_VARIADIC: any number */
} kiln_arity;

/* One op (or one version range of it): everything kiln knows about it is here. */
typedef struct kiln_op_schema {
  const char *domain;   /* "" for ai.onnx */
  const char *name;
  int since;            /* first opset version this entry covers */
  kiln_arity inputs, outputs;
  kiln_infer_fn infer;  /* may be NULL: outputs stay unknown until run time */
  kiln_kernel_fn run;
  unsigned flags;       /* KILN_OPF_* */
  kiln_prepare_fn prepare; /* may be NULL: nothing to pack ahead of the first run */
  kiln_cost_fn cost;    /* may be NULL: the profiler counts no flops, and bytes in + out */
  kiln_flow flow;       /* dim-flow rule */
} kiln_op_schema;

#define KILN_VARIADIC (-1)
/* The domain of kiln's fused ops. */
#define KILN_FUSED_DOMAIN "ai.kiln"

/* ---- helpers for kernels ---- */

/* Allocate output i with the given type and shape and store it in c->out[i]. NULL on error
 * (c->err is set naming the node). */
kiln_tensor *kiln_out(kiln_kctx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims);
/* As kiln_out, but the elements may hold arbitrary values (planned arena memory is not
 * zero-filled; string tensors still start empty): only for kernels that write every element. */
kiln_tensor *kiln_out_uninit(kiln_kctx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims);
/* Store an already-built value as output i (ownership passes to the executor). */
void kiln_set_out(kiln_kctx *c, size_t i, kiln_tensor *v);
/* Fail the node: message "node 'name' (Op): <text>"; returns KILN_ERR_RUN. */
kiln_code kiln_kfail(kiln_kctx *c, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Same, for valid inputs kiln does not handle; returns KILN_ERR_UNSUPPORTED. */
kiln_code kiln_kunsup(kiln_kctx *c, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Input i or NULL when omitted / out of range. */
const kiln_tensor *kiln_in(const kiln_kctx *c, size_t i);
/* Whether output i is wanted by the graph (not omitted). */
bool kiln_out_used(const kiln_kctx *c, size_t i);
/* Whether n's op (its resolved schema) has flag f (KILN_OPF_*). */
bool kiln_node_has(const kiln_node *n, unsigned f);
/* Whether n's kernel may write its single output over an input (KILN_OPF_IN_PLACE). */
bool kiln_op_in_place_ok(const kiln_node *n);

/* The session's thread pool for data-parallel loops (NULL: run on the calling thread). */
struct kiln_threadpool *kiln_kpool(const kiln_kctx *c);
/* Whether the session asked for strict float32 arithmetic (kiln_options.strict_fp32). */
bool kiln_kstrict_fp32(const kiln_kctx *c);
/* For control-flow kernels: run a subgraph attribute of the current node with `inputs` bound
 * to its inputs in order (borrowed); outputs[i] receives a new value per graph output. */
kiln_code kiln_subgraph_run(kiln_kctx *c, const kiln_graph *g, size_t n_inputs,
                            const kiln_tensor *const *inputs, kiln_tensor **outputs);
/* Whether input i is the graph's constant value (an initializer or folded constant), given as
 * t: what a kernel makes from such an input it may keep in the node's cache. */
bool kiln_in_const(const kiln_kctx *c, size_t i, const kiln_tensor *t);
/* Whether the AMX bf16x3 GEMM may be used for this node (the session did not ask for
 * strict_fp32, and the CPU has it). */
bool kiln_kamx(const kiln_kctx *c);

/* ---- the node's cache (kiln_node_state.cache), shared by every run of the model ----
 * One cache per node; a kernel that keeps several kinds in it tells them apart itself. */
/* The cache in place, or NULL (none yet, or no state). */
void *kiln_cache_get(const kiln_kctx *c);
/* Publish `mine` (freed by free_fn) as the cache unless one is there (compare-and-swap):
 * returns the cache now in place, mine or the one another run published first (mine is then
 * freed); NULL (mine freed) when the node has no state. */
void *kiln_cache_publish(kiln_kctx *c, void *mine, void (*free_fn)(void *));

/* ---- scratch: the run's memory for this node (kiln_kservices.scratch_take), never shared ----
 * Work buffers a kernel reuses from one run to the next: owned by the session's run context
 * (runtime/scratch.h), not by the compiled model, so concurrent runs each have their own.
 * Take what the node's slot holds (NULL when empty or outside a run); put one back after the
 * run (freed by free_fn when there is no run context or the slot was filled meanwhile). */
void *kiln_kscratch_take(kiln_kctx *c);
void kiln_kscratch_put(kiln_kctx *c, void *v, void (*free_fn)(void *));

/* Normalise an axis in [-rank, rank) to [0, rank); -1 (and c->err set) when out of range. */
int kiln_axis(kiln_kctx *c, int64_t axis, int rank);

/* Numpy-style broadcast of two shapes into out (rank = max). Returns false on mismatch. */
bool kiln_broadcast_shape(int ra, const int64_t *da, int rb, const int64_t *db, int *rout,
                          int64_t *dout);
/* For output flat index i of shape (rank, dims), the flat index into an input of shape
 * (ra, da) broadcast to it. Use kiln_bcast_* for speed in loops. */
typedef struct kiln_bcast {
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK]; /* input stride per output dim, 0 where broadcast */
} kiln_bcast;
void kiln_bcast_init(kiln_bcast *b, int rank, const int64_t *dims, const kiln_tensor *in);
int64_t kiln_bcast_index(const kiln_bcast *b, int64_t i);

/* Integer list input (e.g. shape, axes) to int64 array of at most KILN_MAX_RANK*4 items. */
kiln_code kiln_read_ints(kiln_kctx *c, const kiln_tensor *t, int64_t *out, size_t cap,
                         size_t *count);

/* A scalar (or one-element) integer tensor input as int64; `what` names it in the error. */
kiln_code kiln_scalar_int(kiln_kctx *c, const kiln_tensor *t, const char *what, int64_t *v);

/* Every input below `required` must be present, and every present input a tensor. */
kiln_code kiln_need_tensors(kiln_kctx *c, size_t required);

/* ---- helpers for shape functions ---- */
/* Input i's static type when it is known to be a tensor, else NULL; its element type
 * (UNDEFINED when unknown) and rank (-1 when unknown). */
const kiln_type *kiln_itype(const kiln_ictx *c, size_t i);
kiln_dtype kiln_idtype(const kiln_ictx *c, size_t i);
int kiln_irank(const kiln_ictx *c, size_t i);
/* Integer values of input i when it is a load-time constant (at most cap of them). */
bool kiln_iconst_ints(const kiln_ictx *c, size_t i, int64_t *out, size_t cap, size_t *n);
/* Length of a 1-D input (e.g. an axes list) when its static shape says so, else -1. */
int64_t kiln_ilist_len(const kiln_ictx *c, size_t i);
kiln_code kiln_ifail(kiln_ictx *c, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Pooling's output size along one axis (src/ops/pool.c): input n, kernel extent k, stride s,
 * pads pb and pe, floor or ceil mode (in ceil mode a last window that would start past the
 * input and its leading pad is dropped); -1 when n is unknown, the window exceeds the padded
 * input, or a value is out of range (negative pads, a stride below 1, beyond 2^40). */
int64_t kiln_pool_out_dim(int64_t n, int64_t k, int64_t s, int64_t pb, int64_t pe, bool ceil_mode);
/* Output i: a tensor of dtype with rank/dims (dims entries -1 for unknown). */
void kiln_infer_tensor(kiln_ictx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims);
/* Output i gets input j's type (element type and shape). */
void kiln_infer_same(kiln_ictx *c, size_t i, size_t j);
/* Shape function for ops whose output 0 is input 0's type and shape. */
kiln_code kiln_infer_unary(kiln_ictx *c);
/* Numpy broadcast of all inputs; output dtype = input 0's (or `dtype` when not UNDEFINED). */
kiln_code kiln_infer_broadcast(kiln_ictx *c, kiln_dtype dtype);

#endif
