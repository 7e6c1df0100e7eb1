/* Common subexpression elimination and duplicate initializer merging.
 *
 *  - Initializers with the same element type, shape and bytes become one value (exporters
 *    repeat small constants: axes, shape pieces, epsilons, biases shared by tied layers).
 *  - Nodes with the same domain, op, attributes and inputs (after the merges so far) compute
 *    the same outputs: readers of the later node's outputs read the first node's instead and
 *    the later node goes. Nodes are visited in topological order, so a merge exposes the next
 *    one (two identical Shape -> Gather chains collapse in one sweep).
 * Not merged: nodes with subgraphs, random ops (each draw differs), nodes whose outputs are
 * graph outputs or read by name from a subgraph (their names must stay). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "ops/op.h"
#include "opt/opt.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_str(uint64_t h, const char *s) { return hash_bytes(h, s, strlen(s)); }

static bool plain_tensor(const kiln_tensor *t) {
  return t && t->kind == KILN_KIND_TENSOR && t->dtype != KILN_STRING && t->data && t->numel >= 0;
}

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
  if (!plain_tensor(a) || !plain_tensor(b) || a->dtype != b->dtype || a->rank != b->rank ||
      a->numel != b->numel || a->nbytes != b->nbytes)
    return false;
  if (a->rank && memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims)) return false;
  return a->data == b->data || !memcmp(a->data, b->data, a->nbytes);
}

/* Type, shape and a sample of the bytes: all of a small tensor, the two ends and 64 spread
 * pieces of a large one (same_tensor compares every byte of a candidate pair, so a sample
 * only has to keep unequal tensors apart in practice; hashing every byte of a model's
 * weights took most of ResNet-50's load time). */
enum { HASH_ALL_BYTES = 1024, HASH_PIECE = 16, HASH_PIECES = 64 };
static uint64_t hash_tensor(const kiln_tensor *t) {
  uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->rank);
  for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->dims[d]);
  h = mix(h, (uint64_t)t->nbytes);
  if (t->nbytes <= HASH_ALL_BYTES) return hash_bytes(h, t->data, t->nbytes);
  const unsigned char *b = t->data;
  size_t step = (t->nbytes - HASH_PIECE) / (HASH_PIECES - 1);
  for (size_t i = 0; i < HASH_PIECES; i++) h = hash_bytes(h, b + i * step, HASH_PIECE);
  return hash_bytes(h, b + t->nbytes - HASH_PIECE, HASH_PIECE);
}

static bool names_readable(const kiln_graph *g, int v, bool has_sub) {
  return !kiln_graph_is_output(g, v) && !(has_sub && kiln_graph_name_used_by_subgraphs(g, g->values[v].name));
}

/* ---- duplicate initializers ---- */

typedef struct keyed {
  uint64_t h;
  int id;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->h != y->h) return x->h < y->h ? -1 : 1;
  return x->id - y->id;
}

static kiln_code merge_initializers(kiln_pass_ctx *ctx, kiln_graph *g, const size_t *uses, bool has_sub,
                                    size_t *count) {
  keyed *k = kiln_malloc((g->n_values + 1) * sizeof *k);
  if (!k) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  size_t n = 0;
  for (size_t v = 0; v < g->n_values; v++) {
    const kiln_value_info *vi = &g->values[v];
    if (!vi->init || vi->is_input || vi->is_outer || vi->producer >= 0 || !plain_tensor(vi->init)) continue;
    k[n++] = (keyed){hash_tensor(vi->init), (int)v};
  }
  qsort(k, n, sizeof *k, cmp_keyed);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && k[j].h == k[i].h) j++;
    /* within a hash group: every value merges into the first equal one */
    for (size_t a = i; a < j; a++) {
      if (k[a].id < 0) continue;
      for (size_t b = a + 1; b < j; b++) {
        int dup = k[b].id;
        if (dup < 0 || !uses[dup] || !same_tensor(g->values[k[a].id].init, g->values[dup].init) ||
            !names_readable(g, dup, has_sub))
          continue;
        kiln_graph_replace_uses(g, dup, k[a].id);
        k[b].id = -1;
        (*count)++;
      }
    }
    i = j;
  }
  free(k);
  return KILN_OK;
}

/* ---- common subexpressions ---- */

static bool never_merge(const kiln_node *n) {
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs || n->attrs[a].kind == KILN_ATTR_GRAPH ||
        n->attrs[a].kind == KILN_ATTR_GRAPHS)
      return true;
  return kiln_node_has(n, KILN_OPF_RANDOM);
}

static bool same_attr(const kiln_attr *a, const kiln_attr *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case KILN_ATTR_INT: return a->i == b->i;
    case KILN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case KILN_ATTR_STRING: return a->s_len == b->s_len && (!a->s_len || !memcmp(a->s, b->s, a->s_len));
    case KILN_ATTR_INTS: return a->n == b->n && (!a->n || !memcmp(a->ints, b->ints, a->n * sizeof *a->ints));
    case KILN_ATTR_FLOATS:
      return a->n == b->n && (!a->n || !memcmp(a->floats, b->floats, a->n * sizeof *a->floats));
    case KILN_ATTR_STRINGS:
      if (a->n != b->n) return false;
      for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->strings[i], b->strings[i])) return false;
      return true;
    case KILN_ATTR_TENSOR: return same_tensor(a->t, b->t);
    default: return false; /* graphs, sparse tensors, type protos: not compared */
  }
}

static bool same_node(const kiln_node *a, const kiln_node *b) {
  if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain) || a->n_in != b->n_in ||
      a->n_out != b->n_out || a->n_attrs != b->n_attrs || a->opset != b->opset)
    return false;
  if (a->n_in && memcmp(a->in, b->in, a->n_in * sizeof *a->in)) return false;
  for (size_t k = 0; k < a->n_out; k++)
    if ((a->out[k] < 0) != (b->out[k] < 0)) return false;
  for (size_t i = 0; i < a->n_attrs; i++) {
    const kiln_attr *x = &a->attrs[i], *y = NULL;
    for (size_t j = 0; j < b->n_attrs && !y; j++)
      if (!strcmp(b->attrs[j].name, x->name)) y = &b->attrs[j];
    if (!y || !same_attr(x, y)) return false;
  }
  return true;
}

static uint64_t hash_node(const kiln_node *n) {
  uint64_t h = hash_str(hash_str(0xcbf29ce484222325ull, n->op_type), n->domain);
  for (size_t k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)(int64_t)n->in[k]);
  return mix(h, n->n_attrs);
}

static kiln_code merge_nodes(kiln_pass_ctx *ctx, kiln_graph *g, bool has_sub, size_t *count) {
  size_t cap = 16;
  while (cap < 2 * g->n_nodes) cap *= 2;
  int *table = kiln_malloc(cap * sizeof *table);
  bool *dead = kiln_calloc(g->n_nodes + 1, sizeof *dead);
  if (!table || !dead) {
    free(table);
    free(dead);
    return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < cap; i++) table[i] = -1;
  size_t merged = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (never_merge(n)) continue;
    size_t slot = (size_t)hash_node(n) & (cap - 1);
    int found = -1;
    for (; table[slot] >= 0; slot = (slot + 1) & (cap - 1))
      if (same_node(&g->nodes[table[slot]], n)) {
        found = table[slot];
        break;
      }
    if (found < 0) {
      table[slot] = (int)i;
      continue;
    }
    bool ok = true;
    for (size_t k = 0; k < n->n_out && ok; k++)
      if (n->out[k] >= 0) ok = names_readable(g, n->out[k], has_sub);
    if (!ok) continue;
    const kiln_node *keep = &g->nodes[found];
    for (size_t k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) kiln_graph_replace_uses(g, n->out[k], keep->out[k]);
    dead[i] = true;
    merged++;
  }
  if (merged) kiln_graph_remove_nodes(g, dead);
  free(table);
  free(dead);
  *count += merged;
  return KILN_OK;
}

kiln_code kiln_pass_cse(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  bool has_sub = false;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t a = 0; a < g->nodes[i].n_attrs; a++) has_sub |= g->nodes[i].attrs[a].g || g->nodes[i].attrs[a].graphs;
  size_t *uses = kiln_graph_use_counts(g);
  if (!uses) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  kiln_code rc = merge_initializers(ctx, g, uses, has_sub, count);
  free(uses);
  if (!rc) rc = merge_nodes(ctx, g, has_sub, count);
  return rc;
}
