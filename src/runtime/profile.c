/* Per-node profile: see profile.h. Times are summed with atomics so concurrent runs of one
 * session add up; flops/bytes/shape describe the first run since creation or reset. The
 * per-thread shares assume one run at a time (they are for kiln profile's trace). */
#include "runtime/profile.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "ops/op.h"

kiln_profile *kiln_profile_new(size_t n_nodes, kiln_threadpool *pool, bool per_thread) {
  kiln_profile *p = kiln_calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_nodes;
  p->pool = pool;
  p->n_threads = kiln_threadpool_size(pool);
  p->e = kiln_calloc(n_nodes ? n_nodes : 1, sizeof *p->e);
  bool thr = per_thread && pool;
  if (thr) {
    p->thr = kiln_calloc((n_nodes ? n_nodes : 1) * (size_t)p->n_threads, sizeof *p->thr);
    p->snap = kiln_calloc((size_t)p->n_threads, sizeof *p->snap);
  }
  if (!p->e || (thr && (!p->thr || !p->snap))) {
    kiln_profile_free(p);
    return NULL;
  }
  return p;
}

void kiln_profile_free(kiln_profile *p) {
  if (!p) return;
  free(p->e);
  free(p->thr);
  free(p->snap);
  free(p);
}

void kiln_profile_reset(kiln_profile *p) {
  if (!p) return;
  memset(p->e, 0, p->n * sizeof *p->e);
  if (p->thr) memset(p->thr, 0, p->n * (size_t)p->n_threads * sizeof *p->thr);
}

void kiln_profile_begin(kiln_profile *p) {
  if (p && p->thr) kiln_threadpool_thread_times(p->pool, p->snap, NULL);
}

/* Each worker's task time and first start during node idx (thread 0, the caller, is busy for
 * the node's whole wall time). */
static void record_threads(kiln_profile *p, size_t idx, uint64_t t0, uint64_t t1) {
  enum { CAP = 256 };
  unsigned long long busy[CAP], first[CAP];
  if (!p->thr || p->n_threads > CAP) return;
  kiln_threadpool_thread_times(p->pool, busy, first);
  kiln_prof_thread *th = &p->thr[idx * (size_t)p->n_threads];
  for (int t = 0; t < p->n_threads; t++) {
    uint64_t b = t ? busy[t] - p->snap[t] : t1 - t0;
    th[t].busy_ns += b;
    th[t].last_busy_ns = b;
    th[t].last_start_ns = t ? (b ? first[t] : 0) : t0;
  }
}

/* KILN_PROFILE_CLOCK=thread: node times are the calling thread's CPU time, which leaves out
 * the time it was descheduled (per-node comparisons on a loaded machine; one thread only, as
 * the pool's workers are not counted). Read once. */
static clockid_t profile_clock(void) {
  static atomic_int which = -1; /* every thread that reads the variable stores the same value */
  int w = atomic_load_explicit(&which, memory_order_relaxed);
  if (w < 0) {
    const char *e = getenv("KILN_PROFILE_CLOCK");
    w = e && !strcmp(e, "thread");
    atomic_store_explicit(&which, w, memory_order_relaxed);
  }
  return w ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
}

uint64_t kiln_profile_now_ns(void) {
  struct timespec t;
  clock_gettime(profile_clock(), &t);
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

void kiln_profile_record(kiln_profile *p, size_t idx, const kiln_kctx *c, uint64_t t0, uint64_t t1) {
  if (!p || idx >= p->n) return;
  kiln_prof_entry *e = &p->e[idx];
  __atomic_add_fetch(&e->ns, t1 - t0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->last_start_ns, t0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->last_ns, t1 - t0, __ATOMIC_RELAXED);
  record_threads(p, idx, t0, t1);
  /* the work and shape of the first run since creation or reset: one writer, no race */
  if (__atomic_add_fetch(&e->runs, 1, __ATOMIC_ACQ_REL) != 1) return;
  kiln_node_cost(c, &e->flops, &e->bytes);
  if (c->n_out > 0 && c->out[0]) kiln_shape_str(c->out[0], e->shape, sizeof e->shape);
}
