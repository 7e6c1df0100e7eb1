/* The thread pool's per-thread busy counters (kiln_threadpool_timing, for the profiler): off,
 * nothing is counted; on, the threads' task times add up to the work done and each thread that
 * ran a task reports when its first one started, once. */
#include <time.h>

#include "base/threadpool.h"
#include "testutil.h"

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* Each task spins for 200 us. */
static void spin_task(void *ctx, size_t b, size_t e, int tid) {
  (void)ctx;
  (void)tid;
  for (size_t i = b; i < e; i++) {
    unsigned long long t0 = now_ns();
    while (now_ns() - t0 < 200000) {}
  }
}

static unsigned long long total(const unsigned long long *v, int n) {
  unsigned long long s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s;
}

int main(void) {
  kiln_threadpool *p = kiln_threadpool_create(2);
  CHECK(p != NULL);
  int n = kiln_threadpool_size(p);
  unsigned long long busy[8] = {0}, first[8] = {0}, busy2[8] = {0};
  kiln_parallel_for(p, 16, spin_task, NULL, 1);
  kiln_threadpool_thread_times(p, busy, first);
  CHECK_MSG(total(busy, n) == 0 && total(first, n) == 0, "nothing counted while timing is off");

  kiln_threadpool_timing(p, 1);
  unsigned long long t0 = now_ns();
  kiln_parallel_for(p, 16, spin_task, NULL, 1); /* 16 x 200 us of work */
  unsigned long long t1 = now_ns();
  kiln_threadpool_thread_times(p, busy, first);
  unsigned long long sum = total(busy, n);
  CHECK_MSG(sum >= 16 * 200000ull && sum <= (unsigned long long)n * (t1 - t0),
            "busy time %llu ns covers the 3.2 ms of work and fits in the loop (%llu ns x %d)", sum, t1 - t0, n);
  for (int t = 0; t < n; t++)
    CHECK_MSG(busy[t] == 0 ? first[t] == 0 : first[t] >= t0 && first[t] <= t1,
              "thread %d: first task start %llu within [%llu, %llu] when busy", t, first[t], t0, t1);
  kiln_threadpool_thread_times(p, busy2, first);
  CHECK_MSG(total(first, n) == 0, "the first-task starts were reset by the previous call");
  CHECK_MSG(total(busy2, n) == sum, "the busy counters only grow with work");

  kiln_threadpool_timing(p, 0);
  kiln_parallel_for(p, 16, spin_task, NULL, 1);
  kiln_threadpool_thread_times(p, busy2, NULL);
  CHECK_MSG(total(busy2, n) == sum, "timing off again: nothing more counted");
  kiln_threadpool_free(p);
  return kt_finish("test_threadpool_timing");
}
