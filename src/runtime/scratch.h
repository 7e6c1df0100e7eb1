/* Kernels' per-run scratch memory (kiln_kscratch_take / kiln_kscratch_put, ops/op.h).
 *
 * A run context (kiln_scratch) holds one slot per node, at any depth of the graph: what a
 * kernel left there (work buffers) for that node's next run in the same context. A session
 * keeps its run contexts in a pool: each run of the main graph takes one (made when none is
 * free), its subgraphs and fused nodes' original chains use the same, and it goes back to the
 * pool when the run ends. So concurrent runs never share a context, later runs reuse what
 * earlier ones left, and the memory belongs to the session, never to the compiled model that
 * several sessions share. Freed with the session. */
#ifndef KILN_RUNTIME_SCRATCH_H
#define KILN_RUNTIME_SCRATCH_H

typedef struct kiln_scratch kiln_scratch;
typedef struct kiln_scratch_pool kiln_scratch_pool;

/* NULL when out of memory. */
kiln_scratch_pool *kiln_scratch_pool_new(void);
/* Frees every context of the pool and what their slots hold (no run may be using one). */
void kiln_scratch_pool_free(kiln_scratch_pool *p);

/* A context for one run, or NULL (p NULL or out of memory: kernels then keep nothing). */
kiln_scratch *kiln_scratch_acquire(kiln_scratch_pool *p);
/* Hand the run's context back to its pool (NULL: nothing). */
void kiln_scratch_release(kiln_scratch_pool *p, kiln_scratch *s);

/* Take what the slot of `key` holds (the slot is then empty), or NULL. Nodes of one wave may
 * run at once (inter_op): both calls are thread-safe. */
void *kiln_scratch_take(kiln_scratch *s, const void *key);
/* Put v (freed by free_fn) into the slot of `key`; freed now when s is NULL, the slot is full
 * or out of memory. */
void kiln_scratch_put(kiln_scratch *s, const void *key, void *v, void (*free_fn)(void *));

#endif
