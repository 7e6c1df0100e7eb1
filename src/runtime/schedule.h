/* Inter-op schedule of the main graph (kiln_options.inter_op): nodes grouped into waves, each
 * wave holding nodes whose inputs all come from earlier waves, so the nodes of one wave may run
 * at the same time. */
#ifndef KILN_RUNTIME_SCHEDULE_H
#define KILN_RUNTIME_SCHEDULE_H

#include <stddef.h>

#include "ir/graph.h"

typedef struct kiln_schedule {
  size_t n_nodes, n_waves;
  int *level;        /* per node: its wave */
  size_t *order;     /* node indices, wave by wave, in graph order within a wave */
  size_t *wave_off;  /* wave w is order[wave_off[w] .. wave_off[w + 1]) */
} kiln_schedule;

/* NULL when memory runs out. The graph's nodes must be topologically sorted. */
kiln_schedule *kiln_schedule_new(const kiln_graph *g);
void kiln_schedule_free(kiln_schedule *s);

#endif
