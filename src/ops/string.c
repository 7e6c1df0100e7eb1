/* String operators: StringNormalizer and TfIdfVectorizer.
 *
 * Case mapping is done here on UTF-8 without the C locale (which is process-global state):
 * ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic letters are mapped, which covers the
 * en_US behaviour the spec asks for and more; other characters and invalid bytes pass through
 * unchanged. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* ---- UTF-8 case mapping ---- */

/* Decode one code point at s (n bytes left); 0 bytes consumed means invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
  if (!len || len > n || s[0] > 0xf4) return 0;
  uint32_t v = s[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3f);
  }
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Upper-case code point for `cp`, or `cp` itself; `lower` asks for the opposite mapping. */
static uint32_t map_case(uint32_t cp, bool lower) {
  if (lower) {
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) ||
        (cp >= 0x391 && cp <= 0x3ab && cp != 0x3a2) || (cp >= 0x410 && cp <= 0x42f))
      return cp + 32;
    if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
    if (cp == 0x386) return 0x3ac; /* Greek letters with tonos */
    if (cp >= 0x388 && cp <= 0x38a) return cp + 37;
    if (cp == 0x38c) return 0x3cc;
    if (cp == 0x38e || cp == 0x38f) return cp + 63;
    if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
        cp != 0x17f) {
      /* Latin Extended-A pairs: even upper / odd lower, except 0x139-0x148 and 0x179-0x17e
       * where the upper case letter is odd. */
      bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
      if (cp == 0x178) return 0xff;
      if ((cp & 1) == (odd_upper ? 1u : 0u)) return cp + 1;
    }
    return cp;
  }
  if ((cp >= 'a' && cp <= 'z') || (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) ||
      (cp >= 0x3b1 && cp <= 0x3cb && cp != 0x3c2) || (cp >= 0x430 && cp <= 0x44f))
    return cp - 32;
  if (cp == 0x3c2) return 0x3a3; /* final sigma */
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  if (cp == 0x3ac) return 0x386;
  if (cp >= 0x3ad && cp <= 0x3af) return cp - 37;
  if (cp == 0x3cc) return 0x38c;
  if (cp == 0x3cd || cp == 0x3ce) return cp - 63;
  if (cp == 0xff) return 0x178;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
    if ((cp & 1) != (odd_upper ? 1u : 0u)) return cp - 1;
  }
  return cp;
}

/* New malloc'd copy of s with its case changed; NULL when out of memory. */
static char *change_case(const char *s, bool lower) {
  size_t n = strlen(s);
  /* Every mapping here keeps the UTF-8 length (ASCII to ASCII, two-byte letters to two-byte
   * letters), so n bytes suffice; 2n leaves room should that ever change. */
  char *out = malloc(n * 2 + 1);
  if (!out) return NULL;
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, o = 0;
  while (i < n) {
    uint32_t cp;
    size_t len = utf8_decode(p + i, n - i, &cp);
    if (!len) {
      out[o++] = (char)p[i++];
      continue;
    }
    o += utf8_encode(map_case(cp, lower), out + o);
    i += len;
  }
  out[o] = 0;
  return out;
}

/* ---- StringNormalizer ---- */

static kiln_code strnorm_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank >= 0 && x->rank != 1 && x->rank != 2)
    return kiln_ifail(c, "input must have shape [C] or [1, C]");
  int64_t dims[2] = {-1, -1};
  if (x->rank == 2) dims[0] = 1;
  kiln_infer_tensor(c, 0, KILN_STRING, x->rank, x->rank >= 0 ? dims : NULL);
  return KILN_OK;
}

static kiln_code strnorm_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || x->dtype != KILN_STRING) return kiln_kfail(c, "input must be a string tensor");
  if (x->rank != 1 && !(x->rank == 2 && x->dims[0] == 1))
    return kiln_kfail(c, "input must have shape [C] or [1, C]");
  const char *action = kiln_attr_str(c->node, "case_change_action", "NONE");
  int mode; /* 0 none, 1 lower, 2 upper */
  if (!strcmp(action, "NONE")) mode = 0;
  else if (!strcmp(action, "LOWER")) mode = 1;
  else if (!strcmp(action, "UPPER")) mode = 2;
  else return kiln_kfail(c, "case_change_action '%s' is not NONE, LOWER or UPPER", action);
  bool sensitive = kiln_attr_int(c->node, "is_case_sensitive", 0) != 0;
  const kiln_attr *sw = kiln_node_attr(c->node, "stopwords");
  size_t nsw = sw && sw->kind == KILN_ATTR_STRINGS ? sw->n : 0;

  char *const *in = x->data;
  kiln_code rc = KILN_ERR_NOMEM;
  char **lowered = calloc(nsw + 1, sizeof *lowered); /* stopwords folded for comparison */
  bool *keep = calloc((size_t)x->numel + 1, sizeof *keep);
  if (!lowered || !keep) goto oom;
  for (size_t k = 0; k < nsw && !sensitive; k++)
    if (!(lowered[k] = change_case(sw->strings[k], true))) goto oom;
  int64_t kept = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    char *folded = NULL;
    if (!sensitive && nsw && !(folded = change_case(in[i], true))) goto oom;
    bool stop = false;
    for (size_t k = 0; k < nsw && !stop; k++)
      stop = sensitive ? !strcmp(in[i], sw->strings[k]) : !strcmp(folded, lowered[k]);
    free(folded);
    keep[i] = !stop;
    kept += keep[i];
  }
  /* When every string is removed the output holds one empty string. */
  int64_t dims[2] = {1, kept ? kept : 1};
  kiln_tensor *y = x->rank == 1 ? kiln_out(c, 0, KILN_STRING, 1, dims + 1)
                                : kiln_out(c, 0, KILN_STRING, 2, dims);
  if (!y) goto done;
  char **out = y->data;
  int64_t o = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    if (!keep[i]) continue;
    char *s = mode ? change_case(in[i], mode == 1) : kiln_strdup(in[i]);
    if (!s) goto oom;
    free(out[o]);
    out[o++] = s;
  }
  rc = KILN_OK;
  goto done;
oom:
  rc = kiln_kfail(c, "out of memory");
done:
  for (size_t k = 0; lowered && k < nsw; k++) free(lowered[k]);
  free(lowered);
  free(keep);
  return rc;
}

/* ---- TfIdfVectorizer ---- */

/* The pool's n-grams, sorted per length for binary search. Item k of n-gram g of length n is
 * the pool entry at start[g] + k; col[g] is its output column. */
typedef struct tfidf {
  const kiln_attr *strs;  /* pool_strings, or NULL */
  const int64_t *ints;    /* pool_int64s, or NULL */
  int64_t *start, *col;   /* per n-gram */
  int64_t *lvl;           /* n-grams of length n occupy [lvl[n-1], lvl[n]) in start/col */
} tfidf;

/* Compare pool item a with pool item b (both pool offsets) for sorting. */
static int pool_cmp(const tfidf *t, int64_t a, int64_t b) {
  if (t->ints) return t->ints[a] < t->ints[b] ? -1 : t->ints[a] > t->ints[b];
  int r = strcmp(t->strs->strings[a], t->strs->strings[b]);
  return r < 0 ? -1 : r > 0;
}

/* Compare input token x[i] with pool item p (the types were checked to match). */
static int tok_cmp(const tfidf *t, const kiln_tensor *x, int64_t i, int64_t p) {
  if (t->ints) {
    int64_t v = kiln_get_i64(x, i);
    return v < t->ints[p] ? -1 : v > t->ints[p];
  }
  int r = strcmp(((char *const *)x->data)[i], t->strs->strings[p]);
  return r < 0 ? -1 : r > 0;
}

static int ngram_cmp(const tfidf *t, int64_t n, int64_t ga, int64_t gb) {
  for (int64_t k = 0; k < n; k++) {
    int r = pool_cmp(t, t->start[ga] + k, t->start[gb] + k);
    if (r) return r;
  }
  return 0;
}

/* Sort the n-grams of one length (slots [lo, hi)) by a bottom-up merge sort, merging slot
 * numbers into tmp and then permuting start/col through tmp's two spare thirds. */
static void sort_level(tfidf *t, int64_t n, int64_t lo, int64_t hi, int64_t *tmp) {
  int64_t len = hi - lo;
  for (int64_t w = 1; w < len; w *= 2) {
    for (int64_t a = lo; a < hi; a += 2 * w) {
      int64_t mid = a + w < hi ? a + w : hi, end = a + 2 * w < hi ? a + 2 * w : hi;
      int64_t i = a, j = mid, k = 0;
      while (i < mid && j < end) tmp[k++] = ngram_cmp(t, n, j, i) < 0 ? j++ : i++;
      while (i < mid) tmp[k++] = i++;
      while (j < end) tmp[k++] = j++;
      int64_t *s2 = tmp + len, *c2 = tmp + 2 * len;
      for (int64_t q = 0; q < k; q++) {
        s2[q] = t->start[tmp[q]];
        c2[q] = t->col[tmp[q]];
      }
      memcpy(t->start + a, s2, (size_t)k * sizeof *s2);
      memcpy(t->col + a, c2, (size_t)k * sizeof *c2);
    }
  }
}

/* Output column of the n-gram x[pos], x[pos+step], ... of length n, or -1. */
static int64_t tfidf_find(const tfidf *t, const kiln_tensor *x, int64_t pos, int64_t step, int64_t n) {
  int64_t lo = t->lvl[n - 1], hi = t->lvl[n];
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2, r = 0;
    for (int64_t k = 0; k < n && !r; k++) r = tok_cmp(t, x, pos + k * step, t->start[mid] + k);
    if (!r) return t->col[mid];
    if (r < 0) hi = mid;
    else lo = mid + 1;
  }
  return -1;
}

static int64_t tfidf_width(const kiln_node *n) {
  size_t ni = 0;
  const int64_t *idx = kiln_attr_ints(n, "ngram_indexes", &ni);
  int64_t w = 0;
  for (size_t i = 0; i < ni; i++)
    if (idx[i] + 1 > w) w = idx[i] + 1;
  return w;
}

static kiln_code tfidf_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank >= 0 && x->rank != 1 && x->rank != 2)
    return kiln_ifail(c, "input must have shape [C] or [N, C]");
  int64_t dims[2] = {x->rank == 2 ? x->dims[0] : tfidf_width(c->node), tfidf_width(c->node)};
  kiln_infer_tensor(c, 0, KILN_FLOAT, x->rank, x->rank >= 0 ? dims : NULL);
  return KILN_OK;
}

static kiln_code tfidf_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  const kiln_node *nd = c->node;
  if (!is_tensor(x) || (x->dtype != KILN_STRING && x->dtype != KILN_INT32 && x->dtype != KILN_INT64))
    return kiln_kfail(c, "input must be a string, int32 or int64 tensor");
  if (x->rank != 1 && x->rank != 2) return kiln_kfail(c, "input must have shape [C] or [N, C]");
  const char *mode_s = kiln_attr_str(nd, "mode", "");
  int mode = !strcmp(mode_s, "TF") ? 0 : !strcmp(mode_s, "IDF") ? 1 : !strcmp(mode_s, "TFIDF") ? 2 : -1;
  if (mode < 0) return kiln_kfail(c, "mode '%s' is not TF, IDF or TFIDF", mode_s);
  int64_t min_n = kiln_attr_int(nd, "min_gram_length", 0), max_n = kiln_attr_int(nd, "max_gram_length", 0);
  int64_t max_skip = kiln_attr_int(nd, "max_skip_count", 0);
  if (min_n < 1 || max_n < min_n || max_skip < 0)
    return kiln_kfail(c, "need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  size_t n_counts = 0, n_idx = 0, n_w = 0;
  const int64_t *counts = kiln_attr_ints(nd, "ngram_counts", &n_counts);
  const int64_t *indexes = kiln_attr_ints(nd, "ngram_indexes", &n_idx);
  const float *weights = kiln_attr_floats(nd, "weights", &n_w);
  tfidf t = {0};
  const kiln_attr *ps = kiln_node_attr(nd, "pool_strings");
  size_t pool_n = 0;
  if (ps && ps->kind == KILN_ATTR_STRINGS && ps->n) {
    t.strs = ps;
    pool_n = ps->n;
  } else {
    t.ints = kiln_attr_ints(nd, "pool_int64s", &pool_n);
  }
  if (t.strs ? x->dtype != KILN_STRING : x->dtype == KILN_STRING)
    return kiln_kfail(c, "the input's type does not match the pool (%s)",
                      t.strs ? "pool_strings" : "pool_int64s");
  if ((size_t)max_n > n_counts) max_n = (int64_t)n_counts;
  int64_t width = tfidf_width(nd);
  if (weights && (int64_t)n_w < width) return kiln_kfail(c, "weights has fewer entries than outputs");

  /* Split the pool into n-grams: counts[n-1] is where length-n n-grams start. */
  int64_t ngrams = 0;
  for (size_t l = 0; l < n_counts; l++) {
    int64_t b = counts[l], e = l + 1 < n_counts ? counts[l + 1] : (int64_t)pool_n;
    if (b < 0 || e < b || e > (int64_t)pool_n || (e - b) % (int64_t)(l + 1))
      return kiln_kfail(c, "ngram_counts does not split the pool into whole n-grams");
    ngrams += (e - b) / (int64_t)(l + 1);
  }
  if ((int64_t)n_idx != ngrams)
    return kiln_kfail(c, "ngram_indexes has %zu entries for %lld n-grams", n_idx, (long long)ngrams);
  for (size_t i = 0; i < n_idx; i++)
    if (indexes[i] < 0) return kiln_kfail(c, "ngram_indexes has a negative entry");

  kiln_code rc = KILN_ERR_NOMEM;
  int64_t *mem = malloc(((size_t)ngrams * 5 + n_counts + 2) * sizeof *mem);
  int64_t rows = x->rank == 2 ? x->dims[0] : 1, len = x->dims[x->rank - 1];
  int64_t dims[2] = {rows, width};
  kiln_tensor *y = x->rank == 2 ? kiln_out(c, 0, KILN_FLOAT, 2, dims) : kiln_out(c, 0, KILN_FLOAT, 1, &width);
  if (!mem) {
    rc = kiln_kfail(c, "out of memory");
    goto done;
  }
  if (!y) goto done;
  t.start = mem;
  t.col = mem + ngrams;
  t.lvl = mem + 2 * ngrams;
  int64_t *tmp = t.lvl + n_counts + 1;
  int64_t g = 0;
  t.lvl[0] = 0;
  for (size_t l = 0; l < n_counts; l++) {
    int64_t b = counts[l], e = l + 1 < n_counts ? counts[l + 1] : (int64_t)pool_n;
    for (int64_t p = b; p < e; p += (int64_t)(l + 1), g++) {
      t.start[g] = p;
      t.col[g] = indexes[g];
    }
    t.lvl[l + 1] = g;
    sort_level(&t, (int64_t)(l + 1), t.lvl[l], g, tmp);
  }

  /* Count like the reference: for each skip distance, each start position and each length,
   * take tokens pos, pos+d, pos+2d, ...; unigrams only once (skip distance 1). */
  float *out = y->data;
  for (int64_t r = 0; r < rows; r++) {
    float *row = out + r * width;
    int64_t base = r * len, lo_n = min_n;
    for (int64_t d = 1; d <= max_skip + 1 && lo_n <= max_n; d++) {
      for (int64_t pos = 0; pos < len; pos++) {
        for (int64_t n = lo_n; n <= max_n && pos + (n - 1) * d < len; n++) {
          int64_t col = tfidf_find(&t, x, base + pos, d, n);
          if (col >= 0) row[col] += 1;
        }
      }
      if (lo_n == 1) lo_n = 2;
    }
    for (int64_t k = 0; k < width; k++) {
      float w = weights ? weights[k] : 1.0f;
      if (mode == 1) row[k] = row[k] > 0 ? w : 0;
      else if (mode == 2) row[k] *= w;
    }
  }
  rc = KILN_OK;
done:
  free(mem);
  return rc;
}

const kiln_op_schema kiln_ops_string[] = {
    {.domain = "", .name = "StringNormalizer", .since = 10, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = strnorm_infer, .run = strnorm_run},
    {.domain = "", .name = "TfIdfVectorizer", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = tfidf_infer, .run = tfidf_run},
    {0},
};
