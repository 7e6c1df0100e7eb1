/* kiln_threadpool when a worker is late: a loop that finds a worker still holding the last
 * job (it has not woken up yet) runs on the caller alone instead of waiting for it. Every
 * index must still run exactly once with a valid thread index, back-to-back loops must not
 * deadlock, and a late worker waking during a later loop must not run that loop's tasks with
 * the old job. Workers that sleep at once (spin 0) are late on almost every loop; a worker
 * kept busy by a slow task of the previous loop is late for the next one. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "testutil.h"

typedef struct job {
  atomic_int *hits;
  size_t n;
  int n_threads, tag; /* tag: which loop this context belongs to */
  atomic_int bad;
  atomic_int on_worker; /* tasks run by a thread other than the caller */
  int slow_task;        /* index whose task sleeps (a worker taking it is late), -1 none, -2 all
                           (briefly: long enough for a sleeping worker to wake and join) */
} job;

static void sleep_us(long us) {
  struct timespec t = {0, us * 1000};
  nanosleep(&t, NULL);
}

static void task(void *p, size_t b, size_t e, int tid) {
  job *j = p;
  if (tid < 0 || tid >= j->n_threads || b >= e || e > j->n) atomic_fetch_add(&j->bad, 1);
  if (tid != 0) atomic_fetch_add(&j->on_worker, 1);
  for (size_t i = b; i < e && i < j->n; i++) {
    atomic_fetch_add(&j->hits[i], 1);
    if ((int)i == j->slow_task) sleep_us(2000);
    if (j->slow_task == -2) sleep_us(20);
  }
}

/* One loop of n tasks (chunk 1); true when every index ran once. */
static bool run_once(kiln_threadpool *pool, size_t n, int tag, int slow, int *on_worker) {
  job j;
  memset(&j, 0, sizeof j);
  j.hits = calloc(n, sizeof *j.hits);
  j.n = n;
  j.n_threads = kiln_threadpool_size(pool);
  j.tag = tag;
  j.slow_task = slow;
  kiln_parallel_for(pool, n, task, &j, 1);
  bool ok = atomic_load(&j.bad) == 0;
  for (size_t i = 0; i < n; i++) ok &= atomic_load(&j.hits[i]) == 1;
  if (on_worker) *on_worker += atomic_load(&j.on_worker);
  free(j.hits);
  return ok;
}

static void test_sleeping_workers(void) {
  for (int threads = 2; threads <= 4; threads++) {
    kiln_threadpool *pool = kiln_threadpool_create(threads);
    CHECK(pool != NULL);
    if (!pool) continue;
    kiln_threadpool_set_spin_us(pool, 0); /* workers sleep between loops: often late */
    int bad = 0;
    for (int it = 0; it < 3000; it++)
      if (!run_once(pool, 1 + (size_t)(it % 7), it, -1, NULL)) bad++;
    CHECK_MSG(bad == 0, "threads %d: %d loops lost or repeated an index", threads, bad);
    kiln_threadpool_free(pool);
  }
}

static void test_busy_worker(void) {
  kiln_threadpool *pool = kiln_threadpool_create(2);
  CHECK(pool != NULL);
  if (!pool) return;
  int bad = 0, on_worker = 0;
  for (int it = 0; it < 40; it++) {
    /* a worker that takes the slow task is still in it when the next loop starts */
    if (!run_once(pool, 64, 2 * it, 0, NULL)) bad++;
    if (!run_once(pool, 64, 2 * it + 1, -1, NULL)) bad++;
  }
  /* with the pool idle long enough, loops of tasks that take a while are shared again */
  for (int it = 0; it < 20; it++) {
    sleep_us(100);
    if (!run_once(pool, 32, it, -2, &on_worker)) bad++;
  }
  CHECK_MSG(bad == 0, "%d loops lost or repeated an index", bad);
  CHECK_MSG(on_worker > 0, "the worker took no task in 20 idle-separated loops");
  kiln_threadpool_free(pool);
}

int main(void) {
  test_sleeping_workers();
  test_busy_worker();
  return kt_finish("test_threadpool_late");
}
