/* Per-node profile of the main graph (kiln_options.profile): wall time, runs, and the work of
 * each node's first run (flops of the compute-heavy ops, bytes in and out). */
#ifndef KILN_RUNTIME_PROFILE_H
#define KILN_RUNTIME_PROFILE_H

#include <stdint.h>

#include "ir/graph.h"
#include "ir/tensor.h"

typedef struct kiln_prof_entry {
  uint64_t ns;       /* summed wall time (atomic) */
  uint64_t runs;     /* (atomic) */
  double flops, bytes;
  char shape[96];
} kiln_prof_entry;

typedef struct kiln_profile {
  size_t n;
  kiln_prof_entry *e;
} kiln_profile;

kiln_profile *kiln_profile_new(size_t n_nodes);
void kiln_profile_free(kiln_profile *p);
struct kiln_kctx;
/* Record one run of node `idx` (the kernel context it ran with), taking `ns` nanoseconds. */
void kiln_profile_record(kiln_profile *p, size_t idx, const struct kiln_kctx *c, uint64_t ns);
/* Work of one run (the op's cost hook, kiln_cost_fn): floating-point operations (multiply-add
 * = 2; 0 for ops that count none) and bytes (inputs and outputs unless the op knows better). */
void kiln_node_cost(const struct kiln_kctx *c, double *flops, double *bytes);
uint64_t kiln_profile_now_ns(void);

#endif
