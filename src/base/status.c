#include "base/status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

kiln_code kiln_vfail(kiln_error *err, kiln_code code, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
  }
  return code;
}

kiln_code kiln_fail(kiln_error *err, kiln_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

void kiln_error_prefix(kiln_error *err, const char *fmt, ...) {
  if (!err) return;
  char head[512], old[sizeof err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  memcpy(old, err->message, sizeof old);
  size_t hl = strlen(head), cap = sizeof err->message - 1;
  if (hl > cap - 2) hl = cap - 2;
  memcpy(err->message, head, hl);
  memcpy(err->message + hl, ": ", 2);
  size_t ol = strnlen(old, sizeof old);
  if (ol > cap - hl - 2) ol = cap - hl - 2;
  memcpy(err->message + hl + 2, old, ol);
  err->message[hl + 2 + ol] = 0;
}

void kiln_error_clear(kiln_error *err) {
  if (!err) return;
  err->code = KILN_OK;
  err->message[0] = 0;
}

int kiln_mul_ok(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0) return 0;
  if (a != 0 && b > INT64_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int kiln_add_ok(int64_t a, int64_t b, int64_t *out) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 0;
  *out = a + b;
  return 1;
}

void *kiln_malloc(size_t n) { return malloc(n ? n : 1); }
void *kiln_calloc(size_t n, size_t sz) { return calloc(n ? n : 1, sz ? sz : 1); }

/* n rounded up to whole 64-byte lines (64 for 0) */
static size_t round64(size_t n) { return n ? (n + 63) / 64 * 64 : 64; }

void *kiln_malloc_big(size_t n) {
  void *p = NULL;
  return posix_memalign(&p, 64, round64(n)) ? NULL : p;
}

#ifdef MADV_HUGEPAGE
enum { HUGE_BYTES = 2 << 20 };

static bool g_huge_on;
static pthread_once_t g_huge_once = PTHREAD_ONCE_INIT;

/* KILN_THP=0 turns huge pages off (read once, as KILN_AMX and KILN_ISA are). */
static void huge_probe(void) {
  const char *e = getenv("KILN_THP");
  g_huge_on = !(e && !strcmp(e, "0"));
}
#endif

void *kiln_malloc_weights(size_t n) {
#ifdef MADV_HUGEPAGE
  /* 2 MiB-aligned, its whole 2 MiB pieces transparent huge pages; the tail too where
   * rounding it up adds at most a quarter (else it stays in small pages) */
  size_t len = round64(n), up = (len + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
  if (up - len <= len / 4) len = up;
  pthread_once(&g_huge_once, huge_probe);
  if (len >= HUGE_BYTES && g_huge_on) {
    void *p = NULL;
    if (posix_memalign(&p, HUGE_BYTES, len)) return NULL;
    madvise(p, len / HUGE_BYTES * HUGE_BYTES, MADV_HUGEPAGE);
    return p;
  }
#endif
  return kiln_malloc_big(n);
}

char *kiln_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

const char *kiln_code_name(kiln_code c) {
  switch (c) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARG: return "invalid argument";
    case KILN_ERR_IO: return "i/o error";
    case KILN_ERR_MODEL: return "model error";
    case KILN_ERR_RUN: return "run error";
    case KILN_ERR_NOMEM: return "out of memory";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_CANCELLED: return "cancelled";
  }
  return "unknown";
}

bool kiln_list_has(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}
