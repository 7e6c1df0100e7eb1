/* kiln_pool_dispatch_ns (kiln.h): the fixed cost of one parallel loop on kiln's thread pool,
 * the 10th percentile of 31 batches of 64 loops (load from other processes only adds to it). */
#include <stdlib.h>
#include <time.h>

#include "base/status.h"
#include "kiln/kiln.h"
#include "runtime/pool_shared.h"

static void empty_task(void *ctx, size_t b, size_t e, int tid) {
  (void)ctx;
  (void)b;
  (void)e;
  (void)tid;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

kiln_code kiln_pool_dispatch_ns(int threads, double *ns, kiln_error *err) {
  if (!ns) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_pool_dispatch_ns: ns is NULL");
  *ns = 0;
  kiln_threadpool *p = kiln_pool_acquire(threads);
  if (!p) return KILN_OK; /* one thread: loops run inline, nothing to dispatch */
  enum { BATCHES = 31, LOOPS = 64 };
  double t[BATCHES];
  size_t n = (size_t)kiln_threadpool_size(p);
  for (int w = 0; w < 200; w++) kiln_parallel_for(p, n, empty_task, NULL, 1); /* wake workers */
  for (int b = 0; b < BATCHES; b++) {
    double t0 = now_ns();
    for (int i = 0; i < LOOPS; i++) kiln_parallel_for(p, n, empty_task, NULL, 1);
    t[b] = (now_ns() - t0) / LOOPS;
  }
  kiln_pool_release(p);
  qsort(t, BATCHES, sizeof *t, cmp_double);
  *ns = t[BATCHES / 10]; /* a low quantile: other processes only ever add to it */
  return KILN_OK;
}
