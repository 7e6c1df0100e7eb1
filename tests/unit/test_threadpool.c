/* kiln_threadpool: every index exactly once, for many sizes, chunkings and pool sizes;
 * repeated and nested calls; several pools (and one shared pool) used from several threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "testutil.h"

typedef struct count_ctx {
  atomic_int *hits;
  int n_threads;
  atomic_int bad_tid;
  atomic_int bad_range;
  size_t n;
} count_ctx;

static void count_fn(void *p, size_t b, size_t e, int tid) {
  count_ctx *c = p;
  if (tid < 0 || tid >= c->n_threads) atomic_fetch_add(&c->bad_tid, 1);
  if (b >= e || e > c->n) atomic_fetch_add(&c->bad_range, 1);
  for (size_t i = b; i < e && i < c->n; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* Run one loop and check every index was passed once. */
static int check_once(kiln_threadpool *pool, size_t n, size_t chunk) {
  count_ctx c;
  memset(&c, 0, sizeof c);
  c.hits = calloc(n ? n : 1, sizeof *c.hits);
  c.n = n;
  c.n_threads = kiln_threadpool_size(pool);
  kiln_parallel_for(pool, n, count_fn, &c, chunk);
  int ok = atomic_load(&c.bad_tid) == 0 && atomic_load(&c.bad_range) == 0;
  for (size_t i = 0; i < n; i++)
    if (atomic_load(&c.hits[i]) != 1) ok = 0;
  free(c.hits);
  return ok;
}

static void test_sizes(void) {
  static const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 31, 64, 100, 1000, 4097, 100003};
  static const size_t chunks[] = {0, 1, 2, 3, 7, 64, 1000, 1000000};
  static const int threads[] = {1, 2, 3, 5};
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    kiln_threadpool *pool = kiln_threadpool_create(threads[t]);
    CHECK(pool != NULL);
    if (!pool) continue;
    CHECK(kiln_threadpool_size(pool) == threads[t]);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
        CHECK_MSG(check_once(pool, sizes[s], chunks[c]), "threads %d n %zu chunk %zu", threads[t],
                  sizes[s], chunks[c]);
    kiln_threadpool_free(pool);
  }
  CHECK(check_once(NULL, 1000, 0));
  CHECK(kiln_threadpool_size(NULL) == 1);
  kiln_threadpool_free(NULL);
}

/* Sum of i over [0, n), accumulated per thread index. */
typedef struct sum_ctx {
  long long part[16];
  char pad[64];
} sum_ctx;

static void sum_fn(void *p, size_t b, size_t e, int tid) {
  sum_ctx *s = p;
  for (size_t i = b; i < e; i++) s->part[tid] += (long long)i;
}

static void test_repeated(int spin_us) {
  kiln_threadpool *pool = kiln_threadpool_create(2);
  CHECK(pool != NULL);
  if (!pool) return;
  kiln_threadpool_set_spin_us(pool, (unsigned)spin_us);
  int bad = 0;
  for (int r = 0; r < 3000; r++) {
    sum_ctx s;
    memset(&s, 0, sizeof s);
    size_t n = (size_t)(r % 97) + 1;
    kiln_parallel_for(pool, n, sum_fn, &s, (size_t)(r % 3));
    long long tot = 0;
    for (int i = 0; i < 16; i++) tot += s.part[i];
    if (tot != (long long)n * (long long)(n - 1) / 2) bad++;
  }
  CHECK_MSG(bad == 0, "spin %d: %d bad sums", spin_us, bad);
  kiln_threadpool_free(pool);
}

/* Nested: each task runs an inner loop on the same pool and on another pool. */
typedef struct nest_ctx {
  kiln_threadpool *outer, *other;
  atomic_int total;
  atomic_int inner_bad;
  atomic_int in_region_bad;
} nest_ctx;

static void inner_fn(void *p, size_t b, size_t e, int tid) {
  (void)tid;
  nest_ctx *c = p;
  atomic_fetch_add(&c->total, (int)(e - b));
}

static void outer_fn(void *p, size_t b, size_t e, int tid) {
  (void)tid;
  nest_ctx *c = p;
  if (!kiln_in_parallel_region()) atomic_fetch_add(&c->in_region_bad, 1);
  for (size_t i = b; i < e; i++) {
    kiln_parallel_for(c->outer, 10, inner_fn, c, 1);
    kiln_parallel_for(c->other, 5, inner_fn, c, 0);
  }
}

static void test_nested(void) {
  nest_ctx c;
  memset(&c, 0, sizeof c);
  c.outer = kiln_threadpool_create(3);
  c.other = kiln_threadpool_create(2);
  CHECK(c.outer && c.other);
  if (c.outer && c.other) {
    kiln_parallel_for(c.outer, 40, outer_fn, &c, 1);
    CHECK_MSG(atomic_load(&c.total) == 40 * 15, "nested total %d", atomic_load(&c.total));
    CHECK(atomic_load(&c.in_region_bad) == 0);
    CHECK(!kiln_in_parallel_region());
  }
  kiln_threadpool_free(c.outer);
  kiln_threadpool_free(c.other);
}

/* Several threads, each with its own pool, plus two threads sharing one pool. */
typedef struct user_arg {
  kiln_threadpool *pool;
  int own;
  int ok;
} user_arg;

static void *user_main(void *p) {
  user_arg *u = p;
  kiln_threadpool *pool = u->own ? kiln_threadpool_create(2) : u->pool;
  u->ok = pool != NULL;
  for (int r = 0; r < 300 && u->ok; r++) u->ok = check_once(pool, (size_t)(r * 7 % 500), (size_t)(r % 4));
  if (u->own) kiln_threadpool_free(pool);
  return NULL;
}

static void test_concurrent(void) {
  kiln_threadpool *shared = kiln_threadpool_create(2);
  CHECK(shared != NULL);
  user_arg args[6];
  pthread_t th[6];
  for (int i = 0; i < 6; i++) {
    args[i].pool = shared;
    args[i].own = i < 4;
    args[i].ok = 0;
    CHECK(pthread_create(&th[i], NULL, user_main, &args[i]) == 0);
  }
  for (int i = 0; i < 6; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(args[i].ok, "user thread %d", i);
  }
  kiln_threadpool_free(shared);
}

/* Create/free churn, including free right after a loop and without any loop. */
static void test_lifecycle(void) {
  for (int i = 0; i < 50; i++) {
    kiln_threadpool *p = kiln_threadpool_create(1 + i % 4);
    CHECK(p != NULL);
    if (i % 2) CHECK(check_once(p, 33, 0));
    if (i % 3 == 0) kiln_threadpool_set_spin_us(p, 0);
    kiln_threadpool_free(p);
  }
  kiln_threadpool *p = kiln_threadpool_create(0);
  CHECK(p && kiln_threadpool_size(p) >= 1);
  CHECK(check_once(p, 1000, 1));
  kiln_threadpool_free(p);
}

int main(void) {
  test_sizes();
  test_repeated(50);
  test_repeated(0);
  test_nested();
  test_concurrent();
  test_lifecycle();
  return kt_finish("test_threadpool");
}
