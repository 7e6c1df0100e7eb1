#include "ir/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/status.h"
#include "base/strmap.h"
#include "ir/edit.h"
#include "ir/meta.h"

int64_t kiln_model_opset(const kiln_ir_model *m, const char *domain) {
  if (!strcmp(domain, "ai.onnx")) domain = "";
  for (size_t i = 0; i < m->n_opsets; i++)
    if (!strcmp(m->opsets[i].domain, domain)) return m->opsets[i].version;
  return -1;
}

kiln_graph *kiln_graph_new(kiln_graph *parent) {
  kiln_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->parent = parent;
  g->names = kiln_strmap_new();
  if (!g->names) {
    free(g);
    return NULL;
  }
  return g;
}

void kiln_type_clear(kiln_type *t) {
  for (int i = 0; i < KILN_MAX_RANK; i++) {
    free(t->sym[i]);
    t->sym[i] = NULL;
  }
  memset(t, 0, sizeof *t);
  t->rank = -1;
}

void kiln_type_copy(kiln_type *dst, const kiln_type *src) {
  kiln_type_clear(dst);
  *dst = *src;
  for (int i = 0; i < KILN_MAX_RANK; i++) dst->sym[i] = src->sym[i] ? kiln_strdup(src->sym[i]) : NULL;
}

void kiln_attr_clear(kiln_attr *a) {
  free(a->name);
  free(a->s);
  kiln_tensor_free(a->t);
  kiln_graph_free(a->g);
  free(a->floats);
  free(a->ints);
  for (size_t i = 0; a->strings && i < a->n; i++) free(a->strings[i]);
  free(a->strings);
  for (size_t i = 0; a->tensors && i < a->n; i++) kiln_tensor_free(a->tensors[i]);
  free(a->tensors);
  for (size_t i = 0; a->graphs && i < a->n; i++) kiln_graph_free(a->graphs[i]);
  free(a->graphs);
  kiln_type_clear(&a->tp);
  memset(a, 0, sizeof *a);
}

void kiln_graph_free(kiln_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_nodes; i++) kiln_node_clear(&g->nodes[i]);
  free(g->nodes);
  for (size_t i = 0; i < g->n_values; i++) {
    free(g->values[i].name);
    kiln_type_clear(&g->values[i].type);
    kiln_tensor_free(g->values[i].init);
  }
  free(g->values);
  free(g->uses);
  free(g->inputs);
  free(g->outputs);
  free(g->name);
  kiln_strmap_free(g->names);
  free(g);
}

void kiln_ir_model_free(kiln_ir_model *m) {
  if (!m) return;
  kiln_graph_free(m->graph);
  for (size_t i = 0; i < m->n_opsets; i++) free(m->opsets[i].domain);
  free(m->opsets);
  for (size_t i = 0; i < m->n_maps; i++) munmap(m->maps[i].addr, m->maps[i].len);
  free(m->maps);
  free(m->base_dir);
  kiln_meta_free(m->meta);
  free(m);
}

int kiln_graph_find(const kiln_graph *g, const char *name) { return kiln_strmap_get(g->names, name); }

const kiln_type *kiln_value_type(const kiln_graph *g, int v) {
  static const kiln_type unproven = {.kind = KILN_T_TENSOR, .rank = -1};
  const kiln_value_info *vi = &g->values[v];
  return vi->producer >= 0 && vi->claimed && vi->type.kind == KILN_T_TENSOR ? &unproven : &vi->type;
}

int kiln_graph_value(kiln_graph *g, const char *name) {
  int id = kiln_strmap_get(g->names, name);
  if (id >= 0) return id;
  if (g->n_values == g->cap_values) {
    size_t cap = g->cap_values ? g->cap_values * 2 : 32;
    kiln_value_info *v = realloc(g->values, cap * sizeof *v);
    if (!v) return -1;
    g->values = v;
    g->cap_values = cap;
  }
  kiln_value_info *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->type.rank = -1;
  v->producer = -1;
  if (!(v->name = kiln_strdup(name))) return -1;
  if (kiln_strmap_put(g->names, name, (int)g->n_values) != 0) {
    free(v->name);
    return -1;
  }
  return (int)g->n_values++;
}

int kiln_graph_add_node(kiln_graph *g) {
  if (g->n_nodes == g->cap_nodes) {
    size_t cap = g->cap_nodes ? g->cap_nodes * 2 : 32;
    kiln_node *n = realloc(g->nodes, cap * sizeof *n);
    if (!n) return -1;
    g->nodes = n;
    g->cap_nodes = cap;
  }
  memset(&g->nodes[g->n_nodes], 0, sizeof(kiln_node));
  return (int)g->n_nodes++;
}

static bool defined_outside(const kiln_graph *g, const char *name) {
  for (const kiln_graph *p = g->parent; p; p = p->parent)
    if (kiln_graph_find(p, name) >= 0) return true;
  return false;
}

static const char *node_label(const kiln_node *n, char *buf, size_t len) {
  snprintf(buf, len, "'%s' (%s)", n->name && *n->name ? n->name : "<unnamed>", n->op_type);
  return buf;
}

const char *kiln_node_label(const kiln_node *n, char *buf, size_t len) {
  snprintf(buf, len, "node '%s' (%s%s%s)", n && n->name && *n->name ? n->name : "<unnamed>",
           n && *n->domain ? n->domain : "", n && *n->domain ? "::" : "", n ? n->op_type : "?");
  return buf;
}

/* Whether sub defines value v itself (an input, an initializer or a node's output). */
static bool defined_in(const kiln_graph *sub, int v) {
  const kiln_value_info *vi = &sub->values[v];
  if (vi->init || vi->is_input || vi->producer >= 0) return true;
  if (vi->is_outer) return false; /* sub was sorted: an outer value */
  for (size_t i = 0; i < sub->n_nodes; i++)
    for (size_t k = 0; k < sub->nodes[i].n_out; k++)
      if (sub->nodes[i].out[k] == v) return true;
  return false;
}

/* Calls fn(v, node, ctx) for every value v of g that node reads from g's nodes: its inputs and
 * the values its subgraphs (at any depth) read from g by name, which must be produced before
 * the node runs too. */
typedef void (*dep_fn)(int v, int node, void *ctx);

static void sub_deps(const kiln_graph *g, const kiln_graph *sub, int node, dep_fn fn, void *ctx) {
  for (size_t i = 0; i < sub->n_nodes; i++) {
    const kiln_node *n = &sub->nodes[i];
    for (size_t k = 0; k < n->n_in; k++) {
      if (n->in[k] < 0 || defined_in(sub, n->in[k])) continue;
      int v = kiln_graph_find(g, sub->values[n->in[k]].name);
      if (v >= 0) fn(v, node, ctx);
    }
    for (size_t a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) sub_deps(g, at->g, node, fn, ctx);
      for (size_t k = 0; at->graphs && k < at->n; k++) sub_deps(g, at->graphs[k], node, fn, ctx);
    }
  }
}

static void node_deps(const kiln_graph *g, int i, dep_fn fn, void *ctx) {
  const kiln_node *n = &g->nodes[i];
  for (size_t k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0) fn(n->in[k], i, ctx);
  for (size_t a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    if (at->g) sub_deps(g, at->g, i, fn, ctx);
    for (size_t k = 0; at->graphs && k < at->n; k++) sub_deps(g, at->graphs[k], i, fn, ctx);
  }
}

typedef struct sort_edges {
  const int *producer;
  int *pending;
  size_t *n_users, *user_off, n_edges;
  int *users; /* NULL while counting */
} sort_edges;

static void add_edge(int v, int node, void *ctx) {
  sort_edges *e = ctx;
  if (e->producer[v] < 0) return;
  if (!e->users) {
    e->n_users[v]++;
    e->n_edges++;
    e->pending[node]++;
  } else {
    e->users[e->user_off[v] + e->n_users[v]++] = node;
  }
}

kiln_code kiln_graph_toposort(kiln_graph *g, kiln_error *err) {
  size_t nv = g->n_values, nn = g->n_nodes;
  char lbl[300];
  kiln_code rc = KILN_OK;
  int *pending = kiln_calloc(nn, sizeof *pending);   /* unresolved inputs per node */
  int *producer = kiln_malloc(nv * sizeof *producer);
  size_t *n_users = kiln_calloc(nv, sizeof *n_users), *user_off = kiln_calloc(nv + 1, sizeof *user_off);
  int *users = NULL, *queue = kiln_malloc(nn * sizeof *queue);
  kiln_node *sorted = kiln_malloc(nn * sizeof *sorted);
  if (!pending || !producer || !n_users || !user_off || !queue || !sorted) goto oom;
  for (size_t v = 0; v < nv; v++) producer[v] = -1;
  for (size_t i = 0; i < nn; i++)
    for (size_t k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v < 0) continue;
      if (producer[v] >= 0 || g->values[v].init || g->values[v].is_input) {
        rc = kiln_fail(err, KILN_ERR_MODEL, "value '%s' is produced twice (again by node %s)",
                       g->values[v].name, node_label(&g->nodes[i], lbl, sizeof lbl));
        goto done;
      }
      producer[v] = (int)i;
    }
  for (size_t i = 0; i < nn; i++)
    for (size_t k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      kiln_value_info *vi = &g->values[v];
      if (producer[v] < 0) {
        if (vi->init || vi->is_input || vi->is_outer) continue;
        if (defined_outside(g, vi->name)) {
          vi->is_outer = true;
          continue;
        }
        rc = kiln_fail(err, KILN_ERR_MODEL,
                       "input '%s' of node %s is never produced: no node, graph input or "
                       "initializer defines it", vi->name, node_label(&g->nodes[i], lbl, sizeof lbl));
        goto done;
      }
    }
  /* The edges: a node's inputs and what its subgraphs read from this graph (an If branch
   * reading a value computed beside the If must run after it). */
  sort_edges e = {producer, pending, n_users, user_off, 0, NULL};
  for (size_t i = 0; i < nn; i++) node_deps(g, (int)i, add_edge, &e);
  for (size_t v = 0; v < nv; v++) user_off[v + 1] = user_off[v] + n_users[v];
  users = kiln_malloc((e.n_edges ? e.n_edges : 1) * sizeof *users);
  if (!users) goto oom;
  memset(n_users, 0, nv * sizeof *n_users);
  e.users = users;
  for (size_t i = 0; i < nn; i++) node_deps(g, (int)i, add_edge, &e);
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < nn; i++)
    if (pending[i] == 0) queue[tail++] = (int)i;
  while (head < tail) {
    int i = queue[head++];
    for (size_t k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v < 0) continue;
      for (size_t u = user_off[v]; u < user_off[v] + n_users[v]; u++)
        if (--pending[users[u]] == 0) queue[tail++] = users[u];
    }
  }
  if (tail < nn) {
    for (size_t i = 0; i < nn; i++)
      if (pending[i] > 0) {
        rc = kiln_fail(err, KILN_ERR_MODEL, "the graph has a cycle through node %s",
                       node_label(&g->nodes[i], lbl, sizeof lbl));
        break;
      }
    goto done;
  }
  /* Stable order: Kahn's queue order is a valid topological order. */
  for (size_t i = 0; i < nn; i++) sorted[i] = g->nodes[queue[i]];
  if (nn) memcpy(g->nodes, sorted, nn * sizeof *sorted);
  for (size_t v = 0; v < nv; v++) g->values[v].producer = -1;
  for (size_t i = 0; i < nn; i++)
    for (size_t k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = (int)i;
  for (size_t k = 0; k < g->n_outputs; k++) {
    kiln_value_info *vi = &g->values[g->outputs[k]];
    if (vi->producer < 0 && !vi->init && !vi->is_input && !vi->is_outer) {
      if (defined_outside(g, vi->name)) {
        vi->is_outer = true;
        continue;
      }
      rc = kiln_fail(err, KILN_ERR_MODEL, "graph output '%s' is never produced", vi->name);
      goto done;
    }
  }
  goto done;
oom:
  rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory sorting the graph");
done:
  free(pending);
  free(producer);
  free(n_users);
  free(user_off);
  free(users);
  free(queue);
  free(sorted);
  return rc;
}

const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name) {
  for (size_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) return def;
  if (a->kind == KILN_ATTR_FLOAT) return (int64_t)a->f;
  return a->i;
}

float kiln_attr_float(const kiln_node *n, const char *name, float def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) return def;
  if (a->kind == KILN_ATTR_INT) return (float)a->i;
  return a->f;
}

const char *kiln_attr_str(const kiln_node *n, const char *name, const char *def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->s ? a->s : def;
}

const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, size_t *count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *count = 0;
  if (!a || a->kind != KILN_ATTR_INTS) return NULL;
  *count = a->n;
  return a->ints ? a->ints : (const int64_t *)"";
}

const float *kiln_attr_floats(const kiln_node *n, const char *name, size_t *count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *count = 0;
  if (!a || a->kind != KILN_ATTR_FLOATS) return NULL;
  *count = a->n;
  return a->floats ? a->floats : (const float *)"\0\0\0";
}

const char *kiln_type_str(const kiln_type *t, char *buf, size_t n) {
  if (t->kind == KILN_T_UNKNOWN) {
    snprintf(buf, n, "?");
    return buf;
  }
  if (t->kind == KILN_T_SEQUENCE) {
    snprintf(buf, n, "seq(%s)", kiln_dtype_name(t->dtype));
    return buf;
  }
  if (t->kind == KILN_T_OPTIONAL) {
    snprintf(buf, n, "optional(%s)", kiln_dtype_name(t->dtype));
    return buf;
  }
  size_t off = (size_t)snprintf(buf, n, "%s", kiln_dtype_name(t->dtype));
  if (t->rank < 0) {
    if (off < n) snprintf(buf + off, n - off, "[?]");
    return buf;
  }
  if (off < n) off += (size_t)snprintf(buf + off, n - off, "[");
  for (int i = 0; i < t->rank && off < n; i++) {
    const char *sep = i ? "," : "";
    if (t->sym[i])
      off += (size_t)snprintf(buf + off, n - off, "%s%s", sep, t->sym[i]);
    else if (t->dims[i] < 0)
      off += (size_t)snprintf(buf + off, n - off, "%s?", sep);
    else
      off += (size_t)snprintf(buf + off, n - off, "%s%lld", sep, (long long)t->dims[i]);
  }
  if (off < n) snprintf(buf + off, n - off, "]");
  return buf;
}
