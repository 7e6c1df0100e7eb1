/* Thread pools shared by the sessions of a process: sessions asking for the same thread count
 * share one pool, so several sessions never start more workers than cores (a pool busy with
 * one session's loop runs another caller's loop serially instead of oversubscribing). This is
 * one of kiln's two deliberate pieces of process-wide state, with the CPU feature probe. */
#ifndef KILN_RUNTIME_POOL_SHARED_H
#define KILN_RUNTIME_POOL_SHARED_H

#include "base/threadpool.h"

/* Physical cores (hyperthread siblings counted once); at least 1. */
int kiln_physical_cores(void);
/* A pool of n threads (n <= 0: physical cores), shared and reference-counted; NULL when n == 1
 * (run inline) or on allocation failure. */
kiln_threadpool *kiln_pool_acquire(int n);
void kiln_pool_release(kiln_threadpool *pool);

#endif
