/* Per-node profile of the main graph (kiln_options.profile): wall time, runs, and the work of
 * each node's first run (flops of the compute-heavy ops, bytes in and out). */
#ifndef KILN_RUNTIME_PROFILE_H
#define KILN_RUNTIME_PROFILE_H

#include <stdint.h>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "base/threadpool.h"

typedef struct kiln_prof_entry {
  uint64_t ns;       /* summed wall time (atomic) */
  uint64_t runs;     /* (atomic) */
  double flops, bytes;
  uint64_t last_start_ns, last_ns; /* the latest run: CLOCK_MONOTONIC start, wall time */
  char shape[96];
} kiln_prof_entry;

/* One pool thread's share of one node (per_thread profiles only). */
typedef struct kiln_prof_thread {
  uint64_t busy_ns;        /* task time summed over runs */
  uint64_t last_start_ns;  /* the latest run: start of its first task (0: none) */
  uint64_t last_busy_ns;   /* the latest run: its task time */
} kiln_prof_thread;

typedef struct kiln_profile {
  size_t n;
  kiln_prof_entry *e;
  int n_threads;             /* the pool's threads (1 without one) */
  kiln_prof_thread *thr;     /* n * n_threads, or NULL when nodes may overlap (inter-op) */
  unsigned long long *snap;  /* n_threads: busy counters at the current node's start */
  kiln_threadpool *pool;     /* borrowed */
} kiln_profile;

/* A profile of n_nodes nodes; with per_thread (nodes never overlap), each node also gets the
 * busy time of every thread of `pool` (may be NULL) while it ran. */
kiln_profile *kiln_profile_new(size_t n_nodes, kiln_threadpool *pool, bool per_thread);
void kiln_profile_free(kiln_profile *p);
/* Forget every time so far. */
void kiln_profile_reset(kiln_profile *p);
/* Call right before a node runs: snapshots the pool's per-thread counters. */
void kiln_profile_begin(kiln_profile *p);
struct kiln_kctx;
/* Record one run of node `idx` (the kernel context it ran with) from t0 to t1
 * (kiln_profile_now_ns). */
void kiln_profile_record(kiln_profile *p, size_t idx, const struct kiln_kctx *c, uint64_t t0,
                         uint64_t t1);
/* Work of one run (the op's cost hook, kiln_cost_fn): floating-point operations (multiply-add
 * = 2; 0 for ops that count none) and bytes (inputs and outputs unless the op knows better). */
void kiln_node_cost(const struct kiln_kctx *c, double *flops, double *bytes);
/* CLOCK_MONOTONIC, or with KILN_PROFILE_CLOCK=thread the calling thread's CPU time. */
uint64_t kiln_profile_now_ns(void);

#endif
