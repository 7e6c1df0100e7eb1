#include "runtime/pool_shared.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_POOLS = 8 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  kiln_threadpool *pool;
  int threads, refs;
} pools[MAX_POOLS];

int kiln_physical_cores(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n = online > 0 ? (int)online : 1, physical = 0;
  /* A core is counted by the first CPU of its sibling list. */
  for (int cpu = 0; cpu < n; cpu++) {
    char path[128], buf[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    FILE *f = fopen(path, "r");
    if (!f) return n;
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return n;
    if (atoi(buf) == cpu) physical++;
  }
  return physical > 0 ? physical : n;
}

kiln_threadpool *kiln_pool_acquire(int n) {
  if (n <= 0) n = kiln_physical_cores();
  if (n <= 1) return NULL;
  pthread_mutex_lock(&mu);
  kiln_threadpool *p = NULL;
  for (int i = 0; i < MAX_POOLS && !p; i++)
    if (pools[i].pool && pools[i].threads == n) {
      pools[i].refs++;
      p = pools[i].pool;
    }
  for (int i = 0; i < MAX_POOLS && !p; i++)
    if (!pools[i].pool && (p = kiln_threadpool_create(n))) {
      pools[i].pool = p;
      pools[i].threads = n;
      pools[i].refs = 1;
    }
  pthread_mutex_unlock(&mu);
  return p; /* NULL when every slot is taken by other sizes: run single-threaded */
}

void kiln_pool_release(kiln_threadpool *pool) {
  if (!pool) return;
  kiln_threadpool *dead = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_POOLS; i++)
    if (pools[i].pool == pool && --pools[i].refs == 0) {
      dead = pool;
      pools[i].pool = NULL;
    }
  pthread_mutex_unlock(&mu);
  kiln_threadpool_free(dead);
}
