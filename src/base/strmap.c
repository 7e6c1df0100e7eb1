#include "base/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

struct kiln_strmap {
  size_t cap, n;
  char **keys;
  int *vals;
};

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

kiln_strmap *kiln_strmap_new(void) {
  kiln_strmap *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->cap = 64;
  m->keys = calloc(m->cap, sizeof *m->keys);
  m->vals = calloc(m->cap, sizeof *m->vals);
  if (!m->keys || !m->vals) {
    kiln_strmap_free(m);
    return NULL;
  }
  return m;
}

void kiln_strmap_free(kiln_strmap *m) {
  if (!m) return;
  if (m->keys)
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  free(m);
}

static size_t slot(const kiln_strmap *m, const char *key) {
  size_t i = (size_t)hash(key) & (m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (m->cap - 1);
  return i;
}

static int grow(kiln_strmap *m) {
  kiln_strmap big = {m->cap * 2, 0, calloc(m->cap * 2, sizeof(char *)), calloc(m->cap * 2, sizeof(int))};
  if (!big.keys || !big.vals) {
    free(big.keys);
    free(big.vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = slot(&big, m->keys[i]);
    big.keys[j] = m->keys[i];
    big.vals[j] = m->vals[i];
    big.n++;
  }
  free(m->keys);
  free(m->vals);
  *m = big;
  return 0;
}

int kiln_strmap_put(kiln_strmap *m, const char *key, int value) {
  if ((m->n + 1) * 2 > m->cap && grow(m) != 0) return -1;
  size_t i = slot(m, key);
  if (!m->keys[i]) {
    if (!(m->keys[i] = kiln_strdup(key))) return -1;
    m->n++;
  }
  m->vals[i] = value;
  return 0;
}

int kiln_strmap_get(const kiln_strmap *m, const char *key) {
  size_t i = slot(m, key);
  return m->keys[i] ? m->vals[i] : -1;
}

size_t kiln_strmap_size(const kiln_strmap *m) { return m->n; }
