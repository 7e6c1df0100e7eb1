/* StringSplit (opset 20): split each string of X as Python's str.split does.
 *
 * With a non-empty `delimiter`, every occurrence splits (consecutive delimiters give empty
 * substrings); without one, runs of whitespace split and leading / trailing whitespace is
 * dropped. `maxsplit` caps the splits per string (the rest stays in the last substring).
 * Output 0 has X's shape plus one axis as long as the most substrings any element has, padded
 * with empty strings; output 1 (int64, X's shape) counts each element's substrings. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* The substrings of s: starts and lengths into caller arrays of s's length + 1 entries. */
static int64_t split_one(const char *s, const char *delim, int64_t maxsplit, size_t *start,
                         size_t *len) {
  int64_t n = 0;
  size_t i = 0, ls = strlen(s);
  if (delim && *delim) {
    size_t ld = strlen(delim);
    for (;;) {
      const char *hit = maxsplit >= 0 && n >= maxsplit ? NULL : strstr(s + i, delim);
      start[n] = i;
      len[n++] = hit ? (size_t)(hit - s) - i : ls - i;
      if (!hit) return n;
      i = (size_t)(hit - s) + ld;
    }
  }
  for (;;) {
    while (i < ls && isspace((unsigned char)s[i])) i++;
    if (i == ls) return n;
    size_t j = i;
    if (maxsplit >= 0 && n >= maxsplit) { /* the rest, trailing whitespace kept (as Python) */
      j = ls;
    } else {
      while (j < ls && !isspace((unsigned char)s[j])) j++;
    }
    start[n] = i;
    len[n++] = j - i;
    i = j;
  }
}

static int64_t max_len(const kiln_tensor *x) {
  int64_t m = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    const char *s = ((char *const *)x->data)[i];
    int64_t l = s ? (int64_t)strlen(s) : 0;
    m = l > m ? l : m;
  }
  return m;
}

static const char *elem(const kiln_tensor *x, int64_t i) {
  const char *s = ((char *const *)x->data)[i];
  return s ? s : "";
}

static kiln_code split_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0);
  if (x->dtype != KILN_STRING) return kiln_kfail(c, "input must be a string tensor, not %s", kiln_dtype_name(x->dtype));
  if (x->rank >= KILN_MAX_RANK) return kiln_kunsup(c, "input rank %d leaves no room for the output's axis", x->rank);
  const char *delim = kiln_attr_str(c->node, "delimiter", NULL);
  const kiln_attr *ms = kiln_node_attr(c->node, "maxsplit");
  int64_t maxsplit = ms ? ms->i : -1;
  if (ms && maxsplit < 0) return kiln_kfail(c, "maxsplit must be >= 0, not %lld", (long long)maxsplit);
  size_t cap = (size_t)max_len(x) + 2;
  size_t *start = malloc(cap * sizeof *start), *len = malloc(cap * sizeof *len);
  int64_t *count = calloc((size_t)x->numel + 1, sizeof *count);
  rc = KILN_OK;
  if (!start || !len || !count) {
    rc = kiln_kfail(c, "out of memory");
    goto done;
  }
  int64_t most = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    count[i] = split_one(elem(x, i), delim, maxsplit, start, len);
    most = count[i] > most ? count[i] : most;
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, (size_t)x->rank * sizeof *dims);
  dims[x->rank] = most;
  kiln_tensor *y = kiln_out(c, 0, KILN_STRING, x->rank + 1, dims);
  kiln_tensor *z = y ? kiln_out(c, 1, KILN_INT64, x->rank, x->dims) : NULL;
  if (!z) {
    rc = c->err->code ? c->err->code : KILN_ERR_NOMEM;
    goto done;
  }
  memcpy(z->data, count, (size_t)x->numel * sizeof *count);
  char **ys = y->data;
  for (int64_t i = 0; i < x->numel && !rc; i++) {
    const char *s = elem(x, i);
    int64_t n = split_one(s, delim, maxsplit, start, len);
    for (int64_t k = 0; k < n; k++) {
      char *piece = malloc(len[k] + 1);
      if (!piece) {
        rc = kiln_kfail(c, "out of memory");
        break;
      }
      memcpy(piece, s + start[k], len[k]);
      piece[len[k]] = 0;
      free(ys[i * most + k]);
      ys[i * most + k] = piece;
    }
  }
done:
  free(start);
  free(len);
  free(count);
  return rc;
}

static kiln_code split_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  if (!x || x->rank < 0 || x->rank >= KILN_MAX_RANK) {
    kiln_infer_tensor(c, 0, KILN_STRING, -1, NULL);
    kiln_infer_tensor(c, 1, KILN_INT64, x ? x->rank : -1, x && x->rank >= 0 ? x->dims : NULL);
    return KILN_OK;
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, (size_t)x->rank * sizeof *dims);
  dims[x->rank] = -1; /* the most substrings: known only from the data */
  kiln_infer_tensor(c, 0, KILN_STRING, x->rank + 1, dims);
  kiln_infer_tensor(c, 1, KILN_INT64, x->rank, x->dims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_string_split[] = {
    {.domain = "", .name = "StringSplit", .since = 20, .inputs = {1, 1}, .outputs = {2, 2},
     .infer = split_infer, .run = split_run},
    {0},
};
