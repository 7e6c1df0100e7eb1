/* The graph optimizer: passes by level, enabled or disabled by name, run to a fixed point,
 * with a log of what each pass did. */
#ifndef KILN_OPT_OPT_H
#define KILN_OPT_OPT_H

#include "ir/graph.h"

struct kiln_pass_ctx;
typedef struct kiln_opt_config {
  int level;                  /* 0 none, 1 basic, 2 fusion */
  const char *disabled;       /* comma-separated pass names, or NULL */
  size_t fold_max_elems;      /* constant folding size cap (0: default) */
  /* The kernels the compiled model will run on can do Conv + MaxPool in one pass (the direct
   * kernel, AVX2 or AVX-512): fuse_conv_pool applies. Chosen by the caller from the CPU, so the
   * optimizer itself never asks the CPU. */
  bool conv_pool_one_pass;
  /* Whether kernels/conv2d_f32 runs an inverted residual block in one call (AVX-512 without
   * AMX, where the convolutions would take AMX): fuse_conv_block applies. */
  bool conv_block;
  /* Resolve, sort and type the graph again after a pass changed it (the caller's op
   * resolution, plugins included); `user` below is handed back. */
  kiln_code (*prepare)(kiln_ir_model *m, const void *user, kiln_error *err);
  /* One more pass (plugin fusion patterns), run before kiln's own fusions in every round at
   * level 2 unless `disabled` names it; NULL: none. It finds `user` in ctx->cfg. */
  const char *extra_name;
  kiln_code (*extra)(struct kiln_pass_ctx *ctx, kiln_graph *g, size_t *count);
  const void *user;
} kiln_opt_config;

typedef struct kiln_pass_stat {
  const char *pass;
  size_t rewrites;            /* total over all rounds */
} kiln_pass_stat;

typedef struct kiln_opt_log {
  size_t n;
  kiln_pass_stat stats[32];
  size_t rounds;
  size_t nodes_before, nodes_after;
} kiln_opt_log;

typedef struct kiln_pass_ctx {
  kiln_ir_model *model;
  const kiln_opt_config *cfg;
  kiln_error *err;
} kiln_pass_ctx;

/* A pass rewrites g in place and adds the number of rewrites it made to *count. */
typedef kiln_code (*kiln_pass_fn)(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count);

typedef struct kiln_pass {
  const char *name;
  int level;
  kiln_pass_fn run;
} kiln_pass;

/* Optimise the model's main graph in place. The graph must be prepared (schemas resolved,
 * sorted, typed); it is prepared again after every round. `log` may be NULL. */
kiln_code kiln_optimize(kiln_ir_model *m, const kiln_opt_config *cfg, kiln_opt_log *log,
                        kiln_error *err);
/* Names of all passes, for --help and validation of --disable. */
size_t kiln_pass_count(void);
const kiln_pass *kiln_pass_at(size_t i);

/* Passes (one file each). */
#define KILN_PASS(fn, name, level) kiln_code kiln_pass_##fn(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count);
#include "opt/passes.def"
#undef KILN_PASS

#endif
