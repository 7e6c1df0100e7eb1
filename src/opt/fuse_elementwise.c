/* Elementwise fusion: a connected group of float32 elementwise nodes (unary activations and
 * math, binary ops with numpy broadcasting) where every intermediate is read by exactly one
 * node of the group becomes one ai.kiln::FusedElementwise node (see src/ops/fused_ew.h) that
 * computes the group per output element, writing only the group's output.
 *
 * The group grows from an anchor (nodes visited from the last back, so the longest group
 * wins) towards the producers of its inputs. It is a chain or a tree (x*sigmoid(x) reads x
 * twice from outside; (a*b)+(c*d) has two branches). Not fused:
 *  - fewer than 2 nodes, more than KILN_PAT_MAX;
 *  - an intermediate read by another node or a graph output (it must exist);
 *  - any dtype but float32 (all inputs and outputs), Pow with an integer exponent included;
 *  - a group whose external inputs do not map onto the output as the kernel can index them
 *    (one run of the output's dims, see map_input in fused_ew.c), decided on the dim flow
 *    analysis so symbolic dims count as equal only when they provably are;
 *  - nodes next to a reduction (up to two nodes after a Reduce or Softmax, or feeding one): the
 *    pieces of LayerNorm and softmax decompositions, and groups shaped like GELU (Erf, or
 *    Tanh with a cube): fuse_layernorm / fuse_gelu / fuse_attention target those with
 *    better kernels and run before this pass; these rules keep them if they have not matched
 *    yet. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "kernels/fused_ew.h"
#include "opt/dimflow.h"
#include "opt/fuse.h"

typedef struct ectx {
  kiln_graph *g;
  const kiln_dimflow *df;
  const size_t *uses;
  bool *elig;        /* per node */
  bool *dead;        /* per node: taken by a fusion this pass */
} ectx;

static bool is_float(const kiln_graph *g, int v) {
  const kiln_type *t = kiln_value_type(g, v);
  return t->kind == KILN_T_TENSOR && t->dtype == KILN_FLOAT;
}

static bool is_reduce(const kiln_node *n) {
  return !*n->domain && (!strncmp(n->op_type, "Reduce", 6) || !strcmp(n->op_type, "Softmax"));
}

/* Number of data operands of node n (Clip's bounds are parameters). */
static size_t n_data(const kiln_node *n) { return kiln_ew_is_binary(kiln_ew_op_code(n->op_type)) ? 2 : 1; }

/* The node's parameters (alpha/min, beta/max); false when they are not constants. */
static bool params_of(const kiln_graph *g, const kiln_node *n, int op, float *p0, float *p1) {
  *p0 = *p1 = 0;
  switch (op) {
    case KILN_EW_LEAKYRELU: *p0 = kiln_attr_float(n, "alpha", 0.01f); return true;
    case KILN_EW_ELU: *p0 = kiln_attr_float(n, "alpha", 1.0f); return true;
    case KILN_EW_HARDSIGMOID:
      *p0 = kiln_attr_float(n, "alpha", 0.2f);
      *p1 = kiln_attr_float(n, "beta", 0.5f);
      return true;
    case KILN_EW_CLIP: {
      if (n->opset < 11) {
        *p0 = kiln_attr_float(n, "min", -FLT_MAX);
        *p1 = kiln_attr_float(n, "max", FLT_MAX);
        return true;
      }
      *p0 = -INFINITY;
      *p1 = INFINITY;
      for (size_t i = 1; i < 3; i++) {
        if (i >= n->n_in || n->in[i] < 0) continue;
        const kiln_tensor *t = kiln_const_input(g, n, i);
        if (!t || t->dtype != KILN_FLOAT || t->numel != 1) return false;
        *(i == 1 ? p0 : p1) = ((const float *)t->data)[0];
      }
      return true;
    }
    default: return true;
  }
}

static bool eligible(const kiln_graph *g, const kiln_node *n, const char *from_reduce, const bool *to_reduce) {
  int op = kiln_ew_op_code(n->op_type);
  if (*n->domain || op < 0 || n->n_out != 1 || n->out[0] < 0 || !is_float(g, n->out[0])) return false;
  if (kiln_ew_is_binary(op) && (n->n_in != 2 || n->opset < 7)) return false; /* legacy broadcast */
  if (!kiln_ew_is_binary(op) && n->n_in != 1 && op != KILN_EW_CLIP) return false;
  for (size_t i = 0; i < n_data(n); i++)
    if (i >= n->n_in || n->in[i] < 0 || !is_float(g, n->in[i]) || from_reduce[n->in[i]]) return false;
  float p0, p1;
  return !to_reduce[n->out[0]] && params_of(g, n, op, &p0, &p1);
}

/* Whether value v may be absorbed: its producer is an eligible free node read only by m. */
static int absorbable(const ectx *e, const kiln_node *m, int v, const bool *in_r) {
  int p = v >= 0 ? e->g->values[v].producer : -1;
  if (p < 0 || in_r[p] || e->dead[p] || !e->elig[p]) return -1;
  size_t cnt = 0;
  for (size_t k = 0; k < m->n_in; k++) cnt += m->in[k] == v;
  return e->uses[v] == cnt ? p : -1;
}

/* Whether external input v broadcasts onto output y as the kernel can index it. */
static bool indexable(const kiln_dimflow *df, int v, int y) {
  int rv = kiln_dimflow_rank(df, v), ry = kiln_dimflow_rank(df, y);
  if (rv < 0 || ry < 0 || rv > ry) return false;
  bool started = false, gap = false;
  for (int p = 0; p < ry; p++) {
    int64_t o = kiln_dimflow_dim(df, y, p), i = p < ry - rv ? 1 : kiln_dimflow_dim(df, v, p - (ry - rv));
    if (o == 1) continue;
    if (kiln_dimflow_same(df, i, o)) {
      if (gap) return false;
      started = true;
    } else if (i == 1) {
      gap = started;
    } else {
      return false; /* a relation the analysis cannot prove */
    }
  }
  return true;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static bool in_group(const size_t *r, size_t nr, int node) {
  for (size_t k = 0; k < nr; k++)
    if (node >= 0 && (size_t)node == r[k]) return true;
  return false;
}

/* Groups shaped like GELU are left to fuse_gelu: x * (1 + erf(x / c)) (x also multiplied
 * directly), or the tanh form with a cube of a value that is read again. */
static bool gelu_like(const kiln_graph *g, const size_t *r, size_t nr) {
  bool tanh = false, cube = false;
  int erf_x[KILN_PAT_MAX], n_erf = 0;
  for (size_t k = 0; k < nr; k++) {
    const kiln_node *n = &g->nodes[r[k]];
    double v;
    tanh |= !strcmp(n->op_type, "Tanh");
    cube |= !strcmp(n->op_type, "Pow") && kiln_const_scalar(g, n, 1, &v) && v == 3.0;
    if (strcmp(n->op_type, "Erf")) continue;
    /* the erf's argument: x, or x / c, x * c computed in the group */
    int x = n->in[0], p = g->values[x].producer;
    if (in_group(r, nr, p) && kiln_op_is(&g->nodes[p], "Div|Mul") &&
        (kiln_const_input(g, &g->nodes[p], 1) || kiln_const_input(g, &g->nodes[p], 0)))
      x = g->nodes[p].in[kiln_const_input(g, &g->nodes[p], 1) ? 0 : 1];
    erf_x[n_erf++] = x;
  }
  for (size_t k = 0; k < nr; k++) {
    const kiln_node *n = &g->nodes[r[k]];
    if (!kiln_op_is(n, "Mul")) continue;
    for (int e = 0; e < n_erf; e++)
      if (n->in[0] == erf_x[e] || n->in[1] == erf_x[e]) return true;
    if (tanh && cube) /* x * (...tanh(...x^3...)) */
      for (size_t s = 0; s < 2; s++) {
        int p = g->values[n->in[s]].producer;
        if (!in_group(r, nr, p) && !g->values[n->in[s]].init) return true;
      }
  }
  return false;
}

static kiln_code add_floats(kiln_node *f, const char *name, const float *v, size_t n) {
  kiln_attr *a = realloc(f->attrs, (f->n_attrs + 1) * sizeof *a);
  if (!a) return KILN_ERR_NOMEM;
  f->attrs = a;
  a = &f->attrs[f->n_attrs];
  memset(a, 0, sizeof *a);
  a->tp.rank = -1;
  a->kind = KILN_ATTR_FLOATS;
  a->name = kiln_strdup(name);
  a->floats = kiln_malloc((n ? n : 1) * sizeof *v);
  if (!a->name || !a->floats) {
    free(a->name);
    free(a->floats);
    return KILN_ERR_NOMEM;
  }
  memcpy(a->floats, v, n * sizeof *v);
  a->n = n;
  f->n_attrs++;
  return KILN_OK;
}

/* Try the group anchored at node i; 1 fused, 0 not, -1 error (ctx->err set). */
static int fuse_at(kiln_pass_ctx *ctx, ectx *e, size_t i, bool *in_r) {
  kiln_graph *g = e->g;
  size_t r[KILN_PAT_MAX], nr = 1, stack[KILN_PAT_MAX], ns = 1;
  r[0] = stack[0] = i;
  in_r[i] = true;
  while (ns && nr < KILN_PAT_MAX) {
    const kiln_node *m = &g->nodes[stack[--ns]];
    for (size_t k = 0; k < n_data(m) && nr < KILN_PAT_MAX; k++) {
      int p = absorbable(e, m, m->in[k], in_r);
      if (p < 0) continue;
      in_r[p] = true;
      r[nr++] = (size_t)p;
      stack[ns++] = (size_t)p;
    }
  }
  for (size_t k = 0; k < nr; k++) in_r[r[k]] = false;
  if (nr < 2) return 0;
  qsort(r, nr, sizeof *r, cmp_size); /* topological order; the anchor is last */
  /* external data inputs, deduplicated */
  int ext[2 * KILN_PAT_MAX];
  size_t ne = 0;
  for (size_t k = 0; k < nr; k++) {
    const kiln_node *n = &g->nodes[r[k]];
    for (size_t s = 0; s < n_data(n); s++) {
      int v = n->in[s], p = g->values[v].producer;
      bool inside = false;
      for (size_t j = 0; j < nr && !inside; j++) inside = p >= 0 && (size_t)p == r[j];
      bool seen = false;
      for (size_t j = 0; j < ne && !seen; j++) seen = ext[j] == v;
      if (!inside && !seen) ext[ne++] = v;
    }
  }
  int y = g->nodes[i].out[0];
  for (size_t j = 0; j < ne; j++)
    if (!indexable(e->df, ext[j], y)) return 0;
  if (gelu_like(g, r, nr)) {
    for (size_t k = 0; k < nr; k++) e->elig[r[k]] = false; /* nor any part of it */
    return 0;
  }
  /* the program */
  int64_t prog[3 * KILN_PAT_MAX];
  float params[2 * KILN_PAT_MAX];
  for (size_t k = 0; k < nr; k++) {
    const kiln_node *n = &g->nodes[r[k]];
    int op = kiln_ew_op_code(n->op_type);
    prog[3 * k] = op;
    prog[3 * k + 2] = -1;
    for (size_t s = 0; s < n_data(n); s++) {
      int v = n->in[s], p = g->values[v].producer;
      int64_t operand = -1;
      for (size_t j = 0; j < k && operand < 0; j++)
        if (p >= 0 && (size_t)p == r[j]) operand = (int64_t)(ne + j);
      for (size_t j = 0; j < ne && operand < 0; j++)
        if (ext[j] == v) operand = (int64_t)j;
      prog[3 * k + 1 + s] = operand;
    }
    params_of(g, n, op, &params[2 * k], &params[2 * k + 1]);
  }
  kiln_match m = {.n = nr};
  memcpy(m.nodes, r, nr * sizeof *r);
  int f = kiln_fuse_chain(ctx, g, &m, "FusedElementwise", ext, ne, e->dead);
  if (f < 0) return -1;
  if (kiln_node_set_ints(&g->nodes[f], "program", prog, 3 * nr) ||
      add_floats(&g->nodes[f], "params", params, 2 * nr)) {
    kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    return -1;
  }
  return 1;
}

kiln_code kiln_pass_fuse_elementwise(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  size_t n0 = g->n_nodes;
  kiln_dimflow *df = kiln_dimflow_new(g);
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  bool *elig = kiln_calloc(n0 + 1, sizeof *elig), *in_r = kiln_calloc(n0 + 1, sizeof *in_r);
  char *from_reduce = kiln_calloc(g->n_values + 1, 1);
  bool *to_reduce = kiln_calloc(g->n_values + 1, sizeof(bool));
  if (rc) goto done;
  if (!df || !elig || !in_r || !from_reduce || !to_reduce) {
    rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  /* values at most two nodes downstream of a reduction, and values feeding one */
  for (int hop = 0; hop < 2; hop++)
    for (size_t i = 0; i < n0; i++) {
      const kiln_node *n = &g->nodes[i];
      bool mark = hop == 0 ? is_reduce(n) : false;
      for (size_t k = 0; hop == 1 && k < n->n_in; k++) mark |= n->in[k] >= 0 && from_reduce[n->in[k]] == 1;
      for (size_t k = 0; mark && k < n->n_out; k++)
        if (n->out[k] >= 0 && !from_reduce[n->out[k]]) from_reduce[n->out[k]] = (char)(hop + 1);
      if (hop == 0 && mark && n->n_in && n->in[0] >= 0) to_reduce[n->in[0]] = true;
    }
  for (size_t i = 0; i < n0; i++) elig[i] = eligible(g, &g->nodes[i], from_reduce, to_reduce);
  ectx e = {g, df, s.uses, elig, s.dead};
  for (size_t i = n0; !rc && i-- > 0;) {
    if (!elig[i] || s.dead[i]) continue;
    int k = fuse_at(ctx, &e, i, in_r);
    if (k < 0) rc = kiln_fuse_failed(ctx);
    if (k <= 0) continue;
    (*count)++;
    rc = kiln_fuse_scan_grow(ctx, g, &s);
    e.dead = s.dead;
  }
done:
  kiln_dimflow_free(df);
  free(elig);
  free(in_r);
  free(from_reduce);
  free(to_reduce);
  return kiln_fuse_scan_end(&s, g, rc);
}
