/* kiln serve: the fast path for tensor data in JSON requests.
 *
 * jansson builds a node per number (a malloc and a strtod each), which costs more than a small
 * model's run. So before jansson sees a request, this scanner finds each inputs[k].data array
 * holding only numbers, true/false and nested arrays (no strings, objects or null), and the
 * caller blanks it out of jansson's copy; its values are then read here straight from the text,
 * with the JSON grammar checked as strictly as jansson does. Anything else (strings such as
 * BYTES or "nan", an escaped key, odd structure) is left to jansson. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* The index past the string starting at s[i] == '"', or n when it does not end. */
static size_t string_end(const char *s, size_t i, size_t n) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

/* An array at s[i] == '[' of only numbers, literals and arrays: the index past its ']', or 0. */
static size_t numeric_array_end(const char *s, size_t i, size_t n) {
  long depth = 0;
  for (; i < n; i++) {
    char c = s[i];
    if (c == '[') depth++;
    else if (c == ']' && --depth == 0) return i + 1;
    else if (c == '"' || c == '{' || c == '}' || c == ':') return 0;
  }
  return 0;
}

static int key_is(const char *key, size_t len, const char *want) {
  return key && len == strlen(want) && !memcmp(key, want, len);
}

typedef struct level {
  char type;        /* '{' or '[' */
  const char *key;  /* objects: the key whose value comes next */
  size_t klen;
  size_t count;     /* arrays: index of the current element */
} level;

int srv_find_data_spans(const char *s, size_t n, srv_span *out, int max) {
  level st[8];
  int depth = 0, deeper = 0, found = 0; /* deeper: levels past st's 8, which hold no inputs' data */
  const char *str = NULL;
  size_t slen = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '"') {
      size_t e = string_end(s, i, n);
      str = s + i + 1;
      slen = e > i + 1 ? e - i - 2 : 0;
      i = e - 1;
    } else if (c == ':') {
      if (depth && st[depth - 1].type == '{') {
        st[depth - 1].key = str;
        st[depth - 1].klen = slen;
      }
    } else if (c == ',') {
      if (depth && st[depth - 1].type == '{') st[depth - 1].key = NULL;
      if (depth && st[depth - 1].type == '[') st[depth - 1].count++;
    } else if (c == '[' || c == '{') {
      if (c == '[' && depth == 3 && st[2].type == '{' && key_is(st[2].key, st[2].klen, "data") &&
          st[1].type == '[' && st[0].type == '{' && key_is(st[0].key, st[0].klen, "inputs") &&
          found < max) {
        size_t e = numeric_array_end(s, i, n);
        if (e) {
          out[found].input = st[1].count;
          out[found].start = i;
          out[found++].end = e;
          i = e - 1;
          continue;
        }
      }
      if (depth == 8) {
        deeper++;
        continue;
      }
      st[depth].type = c;
      st[depth].key = NULL;
      st[depth].klen = 0;
      st[depth++].count = 0;
    } else if (c == '}' || c == ']') {
      if (deeper) deeper--;
      else if (depth) depth--;
    }
  }
  return found;
}

typedef struct scan {
  const char *s;
  size_t i, n;
  int (*put)(void *ctx, const srv_scalar *v);
  void *ctx;
  long depth;
} scan;

static void ws(scan *x) {
  while (x->i < x->n && (x->s[x->i] == ' ' || x->s[x->i] == '\t' || x->s[x->i] == '\n' || x->s[x->i] == '\r'))
    x->i++;
}

static int digits(scan *x) {
  size_t b = x->i;
  while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') x->i++;
  return x->i > b;
}

/* A JSON number (strict grammar), converted. 0 ok, -1 malformed, or the put's error (1). */
static int number(scan *x) {
  size_t b = x->i;
  int integer = 1;
  if (x->i < x->n && x->s[x->i] == '-') x->i++;
  if (x->i < x->n && x->s[x->i] == '0') x->i++;
  else if (!digits(x)) return -1;
  if (x->i < x->n && x->s[x->i] == '.') {
    x->i++;
    integer = 0;
    if (!digits(x)) return -1;
  }
  if (x->i < x->n && (x->s[x->i] == 'e' || x->s[x->i] == 'E')) {
    x->i++;
    integer = 0;
    if (x->i < x->n && (x->s[x->i] == '+' || x->s[x->i] == '-')) x->i++;
    if (!digits(x)) return -1;
  }
  char tok[64];
  size_t len = x->i - b;
  if (len >= sizeof tok) { /* a long literal: only reals get here in practice */
    char *t = malloc(len + 1);
    if (!t) return -1;
    memcpy(t, x->s + b, len);
    t[len] = 0;
    srv_scalar v = {integer ? SRV_SC_BIGINT : SRV_SC_REAL, 0, strtod(t, NULL), NULL};
    free(t);
    return x->put(x->ctx, &v) ? 1 : 0;
  }
  memcpy(tok, x->s + b, len);
  tok[len] = 0;
  srv_scalar v = {SRV_SC_REAL, 0, 0, NULL};
  if (integer) {
    errno = 0;
    v.i = strtoll(tok, NULL, 10);
    v.kind = errno == ERANGE ? SRV_SC_BIGINT : SRV_SC_INT;
    v.d = (double)v.i;
  } else {
    v.d = strtod(tok, NULL);
  }
  return x->put(x->ctx, &v) ? 1 : 0;
}

static int value(scan *x);

static int array(scan *x) {
  if (++x->depth > 64) return -1;
  x->i++; /* '[' */
  ws(x);
  if (x->i < x->n && x->s[x->i] == ']') {
    x->i++;
    x->depth--;
    return 0;
  }
  for (;;) {
    int rc = value(x);
    if (rc) return rc;
    ws(x);
    if (x->i >= x->n) return -1;
    char c = x->s[x->i++];
    if (c == ']') break;
    if (c != ',') return -1;
  }
  x->depth--;
  return 0;
}

static int literal(scan *x, const char *word, int b) {
  size_t len = strlen(word);
  if (x->n - x->i < len || memcmp(x->s + x->i, word, len)) return -1;
  x->i += len;
  srv_scalar v = {SRV_SC_BOOL, b, b, NULL};
  return x->put(x->ctx, &v) ? 1 : 0;
}

static int value(scan *x) {
  ws(x);
  if (x->i >= x->n) return -1;
  char c = x->s[x->i];
  if (c == '[') return array(x);
  if (c == 't') return literal(x, "true", 1);
  if (c == 'f') return literal(x, "false", 0);
  return number(x);
}

int srv_scan_numbers(const char *s, size_t n, int (*put)(void *ctx, const srv_scalar *v), void *ctx,
                     size_t *err_off) {
  scan x = {s, 0, n, put, ctx, 0};
  int rc = value(&x);
  if (!rc) {
    ws(&x);
    if (x.i != n) rc = -1;
  }
  *err_off = x.i;
  return rc;
}
