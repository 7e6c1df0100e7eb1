/* kiln serve: growable buffers, clocks and number parsing shared by the server's files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static int buf_reserve(srv_buf *b, size_t extra) {
  if (b->failed) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->failed = 1;
      return -1;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->failed = 1;
    return -1;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

void srv_buf_put(srv_buf *b, const void *p, size_t n) {
  if (buf_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_put(b, s, strlen(s)); }

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[256];
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if ((size_t)k < sizeof tmp) {
    srv_buf_put(b, tmp, (size_t)k);
    return;
  }
  if (buf_reserve(b, (size_t)k)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)k + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)k;
}

void srv_buf_json_str(srv_buf *b, const char *s) {
  srv_buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      srv_buf_put(b, e, 2);
    } else if (*p < 0x20) {
      srv_buf_printf(b, "\\u%04x", *p);
    } else {
      srv_buf_put(b, p, 1);
    }
  }
  srv_buf_put(b, "\"", 1);
}

void srv_buf_free(srv_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

double srv_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void srv_msg(char *dst, size_t n, const char *fmt, ...) {
  if (!dst || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, n, fmt, ap);
  va_end(ap);
}

int srv_parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int srv_parse_double(const char *s, double lo, double hi, double *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}
