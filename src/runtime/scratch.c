/* Per-run scratch of kernels: run contexts of per-node slots, pooled per session (scratch.h). */
#include "runtime/scratch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct slot {
  const void *key;   /* NULL: never used */
  void *v;           /* NULL: empty */
  void (*free_fn)(void *);
} slot;

/* Open addressing with linear probing; keys stay once inserted (an empty slot keeps its key),
 * so a probe stops at the first unused slot. */
struct kiln_scratch {
  pthread_mutex_t mu;
  size_t cap, used; /* cap: a power of two, or 0 */
  slot *slots;
  kiln_scratch *next; /* in the pool's free list */
};

struct kiln_scratch_pool {
  pthread_mutex_t mu;
  kiln_scratch *free_list;
};

static size_t hash_key(const void *key) {
  uint64_t h = (uint64_t)(uintptr_t)key;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (size_t)h;
}

/* The slot of key, or the unused slot where it would go (s->cap > 0). */
static slot *find(const kiln_scratch *s, const void *key) {
  size_t i = hash_key(key) & (s->cap - 1);
  while (s->slots[i].key && s->slots[i].key != key) i = (i + 1) & (s->cap - 1);
  return &s->slots[i];
}

/* Room for one more key (at most half the slots used). false when out of memory. */
static bool reserve(kiln_scratch *s) {
  if (2 * (s->used + 1) <= s->cap) return true;
  size_t ncap = s->cap ? 2 * s->cap : 16;
  slot *old = s->slots, *ns = calloc(ncap, sizeof *ns);
  if (!ns) return false;
  size_t ocap = s->cap;
  s->slots = ns;
  s->cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].key) *find(s, old[i].key) = old[i];
  free(old);
  return true;
}

static void scratch_free(kiln_scratch *s) {
  for (size_t i = 0; i < s->cap; i++)
    if (s->slots[i].v) s->slots[i].free_fn(s->slots[i].v);
  free(s->slots);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

kiln_scratch_pool *kiln_scratch_pool_new(void) {
  kiln_scratch_pool *p = calloc(1, sizeof *p);
  if (p && pthread_mutex_init(&p->mu, NULL)) {
    free(p);
    return NULL;
  }
  return p;
}

void kiln_scratch_pool_free(kiln_scratch_pool *p) {
  if (!p) return;
  for (kiln_scratch *s = p->free_list, *next; s; s = next) {
    next = s->next;
    scratch_free(s);
  }
  pthread_mutex_destroy(&p->mu);
  free(p);
}

kiln_scratch *kiln_scratch_acquire(kiln_scratch_pool *p) {
  if (!p) return NULL;
  pthread_mutex_lock(&p->mu);
  kiln_scratch *s = p->free_list;
  if (s) p->free_list = s->next;
  pthread_mutex_unlock(&p->mu);
  if (s) return s;
  if (!(s = calloc(1, sizeof *s))) return NULL;
  if (pthread_mutex_init(&s->mu, NULL)) {
    free(s);
    return NULL;
  }
  return s;
}

void kiln_scratch_release(kiln_scratch_pool *p, kiln_scratch *s) {
  if (!s) return;
  if (!p) {
    scratch_free(s);
    return;
  }
  pthread_mutex_lock(&p->mu);
  s->next = p->free_list;
  p->free_list = s;
  pthread_mutex_unlock(&p->mu);
}

void *kiln_scratch_take(kiln_scratch *s, const void *key) {
  if (!s || !key) return NULL;
  void *v = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->cap) {
    slot *e = find(s, key);
    v = e->v;
    e->v = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  return v;
}

void kiln_scratch_put(kiln_scratch *s, const void *key, void *v, void (*free_fn)(void *)) {
  if (!v) return;
  bool kept = false;
  if (s && key) {
    pthread_mutex_lock(&s->mu);
    slot *e = s->cap ? find(s, key) : NULL;
    if (!e || !e->key) e = reserve(s) ? find(s, key) : NULL; /* a new key */
    if (e && !e->v) {
      if (!e->key) s->used++;
      *e = (slot){key, v, free_fn};
      kept = true;
    }
    pthread_mutex_unlock(&s->mu);
  }
  if (!kept) free_fn(v);
}
