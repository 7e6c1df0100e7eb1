/* Per-thread scratch memory: see scratch.h. */
#include "kernels/scratch.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct scratch {
  void *p[KILN_SCRATCH_SLOTS];
  size_t cap[KILN_SCRATCH_SLOTS];
} scratch;

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok;

static void destroy(void *v) {
  scratch *s = v;
  for (int i = 0; i < KILN_SCRATCH_SLOTS; i++) free(s->p[i]);
  free(s);
}

static void init(void) { g_ok = pthread_key_create(&g_key, destroy) == 0; }

void *kiln_scratch_get(int slot, size_t bytes) {
  if (slot < 0 || slot >= KILN_SCRATCH_SLOTS || bytes > SIZE_MAX - 8192) return NULL;
  pthread_once(&g_once, init);
  if (!g_ok) return NULL;
  scratch *s = pthread_getspecific(g_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_setspecific(g_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  size_t want = (bytes + 64 + 4095) / 4096 * 4096;
  if (want > s->cap[slot]) {
    free(s->p[slot]);
    s->p[slot] = aligned_alloc(64, want);
    s->cap[slot] = s->p[slot] ? want : 0;
  }
  return s->p[slot];
}
