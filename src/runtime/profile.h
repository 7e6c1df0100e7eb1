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
/* Record one run of node `idx`, taking `ns` nanoseconds, with its inputs and outputs. */
void kiln_profile_record(kiln_profile *p, size_t idx, const kiln_node *n,
                         const kiln_tensor *const *in, kiln_tensor *const *out, uint64_t ns);
/* Floating-point operations of one run of n on these tensors (multiply-add = 2); 0 for ops
 * that are not counted. */
double kiln_node_flops(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *const *out);
uint64_t kiln_profile_now_ns(void);

#endif
