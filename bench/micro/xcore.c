/* How fast one core reads what the other wrote: the number that decides whether a 2-thread run
 * on a cloud guest is fast or slow. Threads 0 and 1 are pinned to CPUs 0 and 1; each round,
 * each writes its half of a buffer, then (after a barrier) reads a half: its own (the data in
 * its own cache) or the other's (every line crosses between the cores). Prints the medians.
 *
 *   cc -O3 -march=native -pthread bench/micro/xcore.c -o build/xcore
 *   build/xcore [KIB]          (default 1536: the buffer; each thread reads half of it)
 *
 * On a 2-vCPU AMD EPYC (Zen 5) guest the other half read at 27-80 GB/s depending on where the
 * host placed the two vCPUs at the time (own half: 90-180 GB/s); see bench/RESULTS.md. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ROUNDS = 101 };

static uint32_t *buf;
static size_t half; /* 32-bit words per half */
static atomic_int arrived;
static double t_own[2][ROUNDS], t_other[2][ROUNDS];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void barrier(int *gen) {
  ++*gen;
  atomic_fetch_add(&arrived, 1);
  while (atomic_load(&arrived) < 2 * *gen) {
  }
}

/* The XOR of half h (a read the compiler vectorises and cannot drop). */
static uint32_t read_half(int h) {
  const uint32_t *p = buf + (size_t)h * half;
  uint32_t x = 0;
  for (size_t i = 0; i < half; i++) x ^= p[i];
  return x;
}

static void write_half(int h, uint32_t v) {
  uint32_t *p = buf + (size_t)h * half;
  for (size_t i = 0; i < half; i++) p[i] = v + (uint32_t)i;
}

static void *run(void *arg) {
  int id = (int)(intptr_t)arg, gen = 0;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(id, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s)) fprintf(stderr, "xcore: cannot pin to CPU %d\n", id);
  volatile uint32_t sink = 0;
  for (int r = 0; r < 2 * ROUNDS; r++) {
    write_half(id, (uint32_t)r);
    barrier(&gen);
    int other = r % 2; /* alternate: own half, the other's */
    double t0 = now();
    sink += read_half(other ? 1 - id : id);
    (other ? t_other : t_own)[id][r / 2] = now() - t0;
    barrier(&gen);
  }
  (void)sink;
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v) {
  qsort(v, ROUNDS, sizeof *v, cmp);
  return v[ROUNDS / 2];
}

int main(int argc, char **argv) {
  long kib = argc > 1 ? atol(argv[1]) : 1536;
  if (kib < 8) {
    fprintf(stderr, "usage: xcore [KIB >= 8]\n");
    return 2;
  }
  half = (size_t)kib * 1024 / sizeof(uint32_t) / 2;
  buf = aligned_alloc(64, half * 2 * sizeof(uint32_t));
  if (!buf) return 1;
  pthread_t t[2];
  for (intptr_t i = 0; i < 2; i++) pthread_create(&t[i], NULL, run, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  double bytes = (double)half * sizeof(uint32_t);
  for (int id = 0; id < 2; id++) {
    double own = median(t_own[id]), other = median(t_other[id]);
    printf("thread %d: own half %.1f us (%.0f GB/s), the other's %.1f us (%.0f GB/s)\n", id, own * 1e6,
           bytes / own / 1e9, other * 1e6, bytes / other / 1e9);
  }
  free(buf);
  return 0;
}
