/* A persistent pthread pool for data-parallel loops.
 *
 * A pool of n threads is the calling thread plus n-1 workers. Between loops the workers spin
 * for a bounded time (with a pause instruction), then sleep on a condition variable, so a
 * burst of loops costs a few hundred nanoseconds each and an idle pool costs nothing.
 *
 * kiln_parallel_for() hands out [begin, end) ranges of task indices; the calling thread takes
 * part and the call returns when every index has been run exactly once. It never deadlocks:
 * - a call made from inside a running loop (any pool) runs serially on the calling thread;
 * - a call on a pool that is busy with another thread's loop runs serially on the caller;
 * - a pool of 1 thread, or NULL, runs inline.
 * Several pools may coexist in one process.
 */
#ifndef KILN_BASE_THREADPOOL_H
#define KILN_BASE_THREADPOOL_H

#include <stddef.h>

typedef struct kiln_threadpool kiln_threadpool;

/* Run tasks [begin, end). thread_index is in [0, kiln_threadpool_size(pool)) and is unique
 * among the threads running one kiln_parallel_for call at the same time (0: the caller), so
 * it can index per-thread scratch owned by that call. */
typedef void (*kiln_task_fn)(void *ctx, size_t begin, size_t end, int thread_index);

/* A pool of n_threads threads in all (the caller counts as one); n_threads <= 0 means one
 * per online CPU. Returns NULL only when memory runs out; if the OS refuses to start some
 * workers, the pool is smaller (see kiln_threadpool_size). */
kiln_threadpool *kiln_threadpool_create(int n_threads);
/* Stop and join the workers. Accepts NULL. Must not be called while a loop is running. */
void kiln_threadpool_free(kiln_threadpool *pool);
/* Threads in the pool, the caller included (1 for NULL). */
int kiln_threadpool_size(const kiln_threadpool *pool);
/* How long an idle worker (and a caller waiting for workers) spins before sleeping, in
 * microseconds. Default 50, or the environment variable KILN_SPIN_US at creation. 0 sleeps
 * at once. */
void kiln_threadpool_set_spin_us(kiln_threadpool *pool, unsigned us);

/* Run fn over task indices [0, n_tasks).
 * chunk == 0: static — the range is cut into one contiguous piece per thread (a thread that
 *             finishes early takes a piece whose thread has not started yet).
 * chunk >= 1: dynamic — threads take pieces of `chunk` indices from a shared counter.
 * Each index is passed exactly once; fn may be called several times per thread. */
void kiln_parallel_for(kiln_threadpool *pool, size_t n_tasks, kiln_task_fn fn, void *ctx,
                       size_t chunk);

/* Busy-time accounting for the profiler: while the count of timing(on=1) calls exceeds that
 * of timing(on=0), every thread adds the time it spends in tasks to its own counter (two clock
 * reads per piece of work; nothing when off). */
void kiln_threadpool_timing(kiln_threadpool *pool, int on);
/* Per thread t of [0, kiln_threadpool_size): busy_ns[t], its task time so far, and first_ns[t],
 * the CLOCK_MONOTONIC start of its first task since the previous call (0: none), which this
 * call resets. Either array may be NULL. */
void kiln_threadpool_thread_times(kiln_threadpool *pool, unsigned long long *busy_ns,
                                  unsigned long long *first_ns);

/* 1 while the calling thread is running a kiln_parallel_for task (where a nested call would
 * run serially). */
int kiln_in_parallel_region(void);

#endif
