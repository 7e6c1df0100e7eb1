/* Persistent pthread pool: a generation counter announces each loop; idle threads spin for a
 * bounded time (pause), then sleep on a condition variable.
 *
 * A loop is over when every task index has been run (`done` reaches n_tasks); the caller then
 * returns at once, even if a worker has not woken up yet (it may be descheduled on a busy
 * machine). Such a worker still has to look at the finished job, so the job's fields are only
 * rewritten after every worker has checked in (`pending` == 0) — checked at the start of the
 * next loop, by which time it has normally happened. */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

#define CACHE_LINE 64

/* One thread's busy-time counters (kiln_threadpool_timing), a cache line each. */
typedef struct thread_slot {
  alignas(CACHE_LINE) _Atomic unsigned long long busy_ns;
  _Atomic unsigned long long first_ns; /* start of its first task since the last reset, 0: none */
} thread_slot;

struct kiln_threadpool {
  int n;                /* threads in all, caller included */
  int n_workers;        /* started workers: n - 1 */
  pthread_t *threads;
  pthread_mutex_t busy; /* held by the thread dispatching a loop */
  pthread_mutex_t mu;   /* guards the sleeps below */
  pthread_cond_t cv_work;
  pthread_cond_t cv_done;
  atomic_uint spin_ns;
  atomic_int timing;    /* > 0: threads add their task time to slots[] */
  thread_slot *slots;   /* n entries */

  /* The current job: written by the dispatcher before it bumps `generation`, and only while
   * no worker is looking at the previous one (pending == 0). */
  alignas(CACHE_LINE) kiln_task_fn fn;
  void *ctx;
  size_t n_tasks;
  size_t chunk;
  alignas(CACHE_LINE) atomic_uint generation;
  atomic_int stop;
  atomic_int n_sleeping;                  /* workers asleep on cv_work */
  alignas(CACHE_LINE) atomic_size_t next; /* next unclaimed task index */
  alignas(CACHE_LINE) atomic_size_t done; /* task indices finished */
  alignas(CACHE_LINE) atomic_int pending; /* workers that have not let go of the job */
  atomic_int caller_sleeping;
};

static _Thread_local int tl_depth; /* > 0 inside a task: nested loops run serially */

int kiln_in_parallel_region(void) { return tl_depth > 0; }

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* Claim and run pieces of the current job until none are left. */
static void run_job(kiln_threadpool *p, int tid) {
  kiln_task_fn fn = p->fn;
  void *ctx = p->ctx;
  size_t n = p->n_tasks, chunk = p->chunk;
  int timing = atomic_load_explicit(&p->timing, memory_order_relaxed) > 0;
  for (;;) {
    size_t b = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
    if (b >= n) break;
    size_t e = n - b < chunk ? n : b + chunk;
    unsigned long long t0 = timing ? now_ns() : 0;
    fn(ctx, b, e, tid);
    if (timing) {
      thread_slot *sl = &p->slots[tid];
      atomic_fetch_add_explicit(&sl->busy_ns, now_ns() - t0, memory_order_relaxed);
      unsigned long long none = 0;
      atomic_compare_exchange_strong_explicit(&sl->first_ns, &none, t0, memory_order_relaxed,
                                              memory_order_relaxed);
    }
    /* the caller reads the results after seeing done == n */
    if (atomic_fetch_add(&p->done, e - b) + (e - b) == n && /* seq_cst: see wait_for */
        atomic_load(&p->caller_sleeping)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

typedef struct worker_arg {
  kiln_threadpool *pool;
  int tid;
} worker_arg;

static void *worker_main(void *argp) {
  worker_arg a = *(worker_arg *)argp;
  free(argp);
  kiln_threadpool *p = a.pool;
  tl_depth = 1;
  unsigned seen = 0; /* the generation at creation: a job may be posted before we get here */
  for (;;) {
    /* Wait for a new generation: spin (bounded), then sleep. */
    unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
    if (g == seen) {
      unsigned spin = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
      if (spin) {
        unsigned long long t0 = now_ns();
        for (unsigned i = 1;; i++) {
          CPU_RELAX();
          g = atomic_load_explicit(&p->generation, memory_order_acquire);
          if (g != seen) break;
          if ((i & 63) == 0 && now_ns() - t0 > spin) break;
        }
      }
      if (g == seen) {
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->n_sleeping, 1);
        while ((g = atomic_load(&p->generation)) == seen) pthread_cond_wait(&p->cv_work, &p->mu);
        atomic_fetch_sub(&p->n_sleeping, 1);
        pthread_mutex_unlock(&p->mu);
      }
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    run_job(p, a.tid);
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

/* Wait (spin, then sleep on cv_done) until *counter == want. Workers signal cv_done when they
 * make `done` reach n_tasks or `pending` reach 0 while caller_sleeping is set. */
static void wait_for(kiln_threadpool *p, atomic_size_t *sz_counter, atomic_int *int_counter,
                     size_t want) {
#define REACHED_MO(mo)                                                        \
  (sz_counter ? atomic_load_explicit(sz_counter, mo) == want                  \
              : (size_t)atomic_load_explicit(int_counter, mo) == want)
#define REACHED() REACHED_MO(memory_order_acquire)
  if (REACHED()) return;
  unsigned spin = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
  if (spin) {
    unsigned long long t0 = now_ns();
    for (unsigned i = 1;; i++) {
      CPU_RELAX();
      if (REACHED()) return;
      if ((i & 63) == 0 && now_ns() - t0 > spin) break;
    }
  }
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeping, 1); /* seq_cst: pairs with the workers' check */
  while (!REACHED_MO(memory_order_seq_cst)) pthread_cond_wait(&p->cv_done, &p->mu);
  atomic_store(&p->caller_sleeping, 0);
  pthread_mutex_unlock(&p->mu);
#undef REACHED
#undef REACHED_MO
}

/* Whether every worker has let go of the last job, spinning up to LATE_SPIN_NS for it. */
enum { LATE_SPIN_NS = 20000 };
static bool pending_clear(kiln_threadpool *p) {
  if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return true;
  unsigned long long t0 = now_ns();
  for (unsigned i = 1;; i++) {
    CPU_RELAX();
    if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return true;
    if ((i & 63) == 0 && now_ns() - t0 > LATE_SPIN_NS) return false;
  }
}

static void bump_generation(kiln_threadpool *p) {
  atomic_fetch_add(&p->generation, 1); /* seq_cst: pairs with n_sleeping below */
  if (atomic_load(&p->n_sleeping) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
  }
}

kiln_threadpool *kiln_threadpool_create(int n_threads) {
  if (n_threads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = c > 0 ? (int)c : 1;
  }
  kiln_threadpool *p =
      aligned_alloc(CACHE_LINE, (sizeof *p + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
  if (!p) return NULL;
  memset(p, 0, sizeof *p);
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  p->slots = aligned_alloc(CACHE_LINE, (size_t)n_threads * sizeof *p->slots);
  if (!p->threads || !p->slots) {
    free(p->threads);
    free(p->slots);
    free(p);
    return NULL;
  }
  for (int i = 0; i < n_threads; i++) {
    atomic_init(&p->slots[i].busy_ns, 0);
    atomic_init(&p->slots[i].first_ns, 0);
  }
  atomic_init(&p->timing, 0);
  pthread_mutex_init(&p->busy, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  unsigned spin_us = 50;
  const char *env = getenv("KILN_SPIN_US");
  if (env && *env) spin_us = (unsigned)strtoul(env, NULL, 10);
  if (spin_us > 1000000) spin_us = 1000000;
  atomic_init(&p->spin_ns, spin_us * 1000u);
  atomic_init(&p->generation, 0);
  atomic_init(&p->stop, 0);
  atomic_init(&p->n_sleeping, 0);
  atomic_init(&p->next, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->caller_sleeping, 0);
  p->n = 1;
  for (int i = 1; i < n_threads; i++) {
    worker_arg *a = malloc(sizeof *a);
    if (!a) break;
    a->pool = p;
    a->tid = i;
    if (pthread_create(&p->threads[i], NULL, worker_main, a) != 0) {
      free(a);
      break;
    }
    p->n = i + 1;
  }
  p->n_workers = p->n - 1;
  return p;
}

void kiln_threadpool_free(kiln_threadpool *p) {
  if (!p) return;
  wait_for(p, NULL, &p->pending, 0); /* late workers let go of the last job */
  atomic_store(&p->stop, 1);
  bump_generation(p);
  for (int i = 1; i <= p->n_workers; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->busy);
  free(p->threads);
  free(p->slots);
  free(p);
}

void kiln_threadpool_timing(kiln_threadpool *p, int on) {
  if (p) atomic_fetch_add(&p->timing, on ? 1 : -1);
}

void kiln_threadpool_thread_times(kiln_threadpool *p, unsigned long long *busy_ns,
                                  unsigned long long *first_ns) {
  if (!p) return;
  for (int t = 0; t < p->n; t++) {
    if (busy_ns) busy_ns[t] = atomic_load_explicit(&p->slots[t].busy_ns, memory_order_relaxed);
    if (first_ns)
      first_ns[t] = atomic_exchange_explicit(&p->slots[t].first_ns, 0, memory_order_relaxed);
  }
}

int kiln_threadpool_size(const kiln_threadpool *p) { return p ? p->n : 1; }

void kiln_threadpool_set_spin_us(kiln_threadpool *p, unsigned us) {
  if (!p) return;
  if (us > 1000000) us = 1000000;
  atomic_store(&p->spin_ns, us * 1000u);
}

/* A loop run on the calling thread alone, counted as thread 0's (or, nested in a task, the
 * enclosing task's) busy time: a nested loop's time is already inside its task's. */
static void run_inline(kiln_threadpool *p, kiln_task_fn fn, void *ctx, size_t n_tasks) {
  bool timing = p && tl_depth == 0 && atomic_load_explicit(&p->timing, memory_order_relaxed) > 0;
  unsigned long long t0 = timing ? now_ns() : 0;
  tl_depth++;
  fn(ctx, 0, n_tasks, 0);
  tl_depth--;
  if (timing) {
    atomic_fetch_add_explicit(&p->slots[0].busy_ns, now_ns() - t0, memory_order_relaxed);
    unsigned long long none = 0;
    atomic_compare_exchange_strong_explicit(&p->slots[0].first_ns, &none, t0, memory_order_relaxed,
                                            memory_order_relaxed);
  }
}

void kiln_parallel_for(kiln_threadpool *p, size_t n_tasks, kiln_task_fn fn, void *ctx,
                       size_t chunk) {
  if (n_tasks == 0) return;
  size_t n_thr = p ? (size_t)p->n : 1;
  if (chunk == 0) chunk = (n_tasks + n_thr - 1) / n_thr;
  if (n_thr <= 1 || tl_depth > 0 || chunk >= n_tasks || pthread_mutex_trylock(&p->busy) != 0) {
    run_inline(p, fn, ctx, n_tasks);
    return;
  }
  /* Every worker must have let go of the previous job before its fields are rewritten. A
   * worker that has not (descheduled on a busy machine: it may not run again for a whole
   * time slice) is not waited for beyond a short spin: this loop then runs on the caller
   * alone, as on a busy pool (tasks give the same results however they are spread). */
  if (!pending_clear(p)) {
    pthread_mutex_unlock(&p->busy);
    run_inline(p, fn, ctx, n_tasks);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->n_tasks = n_tasks;
  p->chunk = chunk;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->pending, p->n_workers, memory_order_relaxed);
  bump_generation(p); /* publishes the job (seq_cst) */

  tl_depth++;
  run_job(p, 0);
  tl_depth--;
  wait_for(p, &p->done, NULL, n_tasks);
  pthread_mutex_unlock(&p->busy);
}
