/* Per-node profile: see profile.h. Times are summed with atomics so concurrent runs of one
 * session add up; flops/bytes/shape describe the first run since creation or reset. */
#include "runtime/profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "ops/op.h"

kiln_profile *kiln_profile_new(size_t n_nodes) {
  kiln_profile *p = kiln_calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_nodes;
  p->e = kiln_calloc(n_nodes ? n_nodes : 1, sizeof *p->e);
  if (!p->e) {
    free(p);
    return NULL;
  }
  return p;
}

void kiln_profile_free(kiln_profile *p) {
  if (!p) return;
  free(p->e);
  free(p);
}

uint64_t kiln_profile_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void kiln_node_cost(const kiln_kctx *c, double *flops, double *bytes) {
  *flops = 0;
  *bytes = 0;
  for (size_t i = 0; i < c->n_in; i++)
    if (c->in[i] && c->in[i]->kind == KILN_KIND_TENSOR) *bytes += (double)c->in[i]->nbytes;
  for (size_t i = 0; i < c->n_out; i++)
    if (c->out[i] && c->out[i]->kind == KILN_KIND_TENSOR) *bytes += (double)c->out[i]->nbytes;
  if (c->node->schema && c->node->schema->cost) c->node->schema->cost(c, flops, bytes);
}

void kiln_profile_record(kiln_profile *p, size_t idx, const kiln_kctx *c, uint64_t ns) {
  if (!p || idx >= p->n) return;
  kiln_prof_entry *e = &p->e[idx];
  __atomic_add_fetch(&e->ns, ns, __ATOMIC_RELAXED);
  /* the work and shape of the first run since creation or reset: one writer, no race */
  if (__atomic_add_fetch(&e->runs, 1, __ATOMIC_ACQ_REL) != 1) return;
  kiln_node_cost(c, &e->flops, &e->bytes);
  if (c->n_out > 0 && c->out[0]) kiln_shape_str(c->out[0], e->shape, sizeof e->shape);
}
