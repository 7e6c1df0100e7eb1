/* parallel_for for plugin kernels: a simple pthread fan-out until the runtime's thread pool
 * takes over (same contract: disjoint ranges covering [0, n), return when all are done). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "plugin/plugin.h"

enum { MAX_THREADS = 256 };

typedef struct range_job {
  void (*fn)(void *user, size_t begin, size_t end);
  void *user;
  size_t begin, end;
} range_job;

static void *run_job(void *arg) {
  range_job *j = arg;
  j->fn(j->user, j->begin, j->end);
  return NULL;
}

int kiln_default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

void kiln_parallel_for(int threads, size_t n, void (*fn)(void *user, size_t begin, size_t end),
                       void *user) {
  if (n == 0 || !fn) return;
  size_t t = threads > 0 ? (size_t)threads : (size_t)kiln_default_threads();
  if (t > MAX_THREADS) t = MAX_THREADS;
  if (t > n) t = n;
  if (t <= 1) {
    fn(user, 0, n);
    return;
  }
  range_job jobs[MAX_THREADS];
  pthread_t tids[MAX_THREADS];
  bool started[MAX_THREADS];
  size_t chunk = n / t, extra = n % t, at = 0;
  for (size_t i = 0; i < t; i++) {
    size_t len = chunk + (i < extra ? 1 : 0);
    jobs[i] = (range_job){fn, user, at, at + len};
    at += len;
  }
  for (size_t i = 1; i < t; i++)
    started[i] = pthread_create(&tids[i], NULL, run_job, &jobs[i]) == 0;
  run_job(&jobs[0]);
  for (size_t i = 1; i < t; i++) {
    if (started[i])
      pthread_join(tids[i], NULL);
    else
      run_job(&jobs[i]); /* no thread to be had: do its share here */
  }
}
