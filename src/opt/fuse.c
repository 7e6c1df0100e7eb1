#include "opt/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"

static kiln_attr *add_attr(kiln_node *n, const char *name, kiln_attr_kind kind) {
  for (size_t i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) {
      kiln_attr_clear(&n->attrs[i]);
      if (!(n->attrs[i].name = kiln_strdup(name))) return NULL;
      n->attrs[i].kind = kind;
      return &n->attrs[i];
    }
  kiln_attr *a = realloc(n->attrs, (n->n_attrs + 1) * sizeof *a);
  if (!a) return NULL;
  n->attrs = a;
  a = &n->attrs[n->n_attrs];
  memset(a, 0, sizeof *a);
  a->tp.rank = -1;
  if (!(a->name = kiln_strdup(name))) return NULL;
  a->kind = kind;
  n->n_attrs++;
  return a;
}

kiln_code kiln_node_set_int(kiln_node *n, const char *name, int64_t v) {
  kiln_attr *a = add_attr(n, name, KILN_ATTR_INT);
  if (!a) return KILN_ERR_NOMEM;
  a->i = v;
  return KILN_OK;
}

kiln_code kiln_node_set_float(kiln_node *n, const char *name, float v) {
  kiln_attr *a = add_attr(n, name, KILN_ATTR_FLOAT);
  if (!a) return KILN_ERR_NOMEM;
  a->f = v;
  return KILN_OK;
}

kiln_code kiln_node_set_string(kiln_node *n, const char *name, const char *v) {
  kiln_attr *a = add_attr(n, name, KILN_ATTR_STRING);
  if (!a || !(a->s = kiln_strdup(v))) return KILN_ERR_NOMEM;
  a->s_len = strlen(v);
  return KILN_OK;
}

kiln_code kiln_node_set_ints(kiln_node *n, const char *name, const int64_t *v, size_t count) {
  kiln_attr *a = add_attr(n, name, KILN_ATTR_INTS);
  if (!a || !(a->ints = kiln_malloc(count * sizeof *v))) return KILN_ERR_NOMEM;
  if (count) memcpy(a->ints, v, count * sizeof *v);
  a->n = count;
  return KILN_OK;
}

/* Move every attribute of src onto dst (src keeps emptied entries; clear it afterwards). */
static kiln_code adopt_attrs(kiln_node *dst, kiln_node *src) {
  for (size_t a = 0; a < src->n_attrs; a++) {
    kiln_attr *na = realloc(dst->attrs, (dst->n_attrs + 1) * sizeof *na);
    if (!na) return KILN_ERR_NOMEM;
    dst->attrs = na;
    dst->attrs[dst->n_attrs++] = src->attrs[a];
    memset(&src->attrs[a], 0, sizeof src->attrs[a]);
  }
  return KILN_OK;
}

kiln_code kiln_fuse_scan_begin(kiln_pass_ctx *ctx, const kiln_graph *g, kiln_fuse_scan *s) {
  s->uses = kiln_graph_use_counts(g);
  s->dead = kiln_calloc(g->n_nodes, sizeof *s->dead);
  s->n_dead = g->n_nodes;
  return s->uses && s->dead ? KILN_OK : kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
}

kiln_code kiln_fuse_scan_grow(kiln_pass_ctx *ctx, const kiln_graph *g, kiln_fuse_scan *s) {
  bool *grown = realloc(s->dead, (g->n_nodes ? g->n_nodes : 1) * sizeof *grown);
  if (!grown) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  for (size_t j = s->n_dead; j < g->n_nodes; j++) grown[j] = false;
  s->dead = grown;
  s->n_dead = g->n_nodes;
  return KILN_OK;
}

kiln_code kiln_fuse_scan_end(kiln_fuse_scan *s, kiln_graph *g, kiln_code rc) {
  if (!rc) kiln_graph_remove_nodes(g, s->dead);
  free(s->uses);
  free(s->dead);
  s->uses = NULL;
  s->dead = NULL;
  return rc;
}

kiln_code kiln_fuse_failed(const kiln_pass_ctx *ctx) {
  return ctx->err && ctx->err->code ? ctx->err->code : KILN_ERR_NOMEM;
}

kiln_code kiln_node_copy_attrs(kiln_node *dst, const kiln_node *src) {
  for (size_t i = 0; i < src->n_attrs; i++) {
    const kiln_attr *s = &src->attrs[i];
    kiln_code rc = KILN_OK;
    switch (s->kind) {
      case KILN_ATTR_INT: rc = kiln_node_set_int(dst, s->name, s->i); break;
      case KILN_ATTR_FLOAT: rc = kiln_node_set_float(dst, s->name, s->f); break;
      case KILN_ATTR_STRING: rc = kiln_node_set_string(dst, s->name, s->s ? s->s : ""); break;
      case KILN_ATTR_INTS: rc = kiln_node_set_ints(dst, s->name, s->ints, s->n); break;
      case KILN_ATTR_FLOATS: {
        kiln_attr *a = add_attr(dst, s->name, KILN_ATTR_FLOATS);
        if (!a || !(a->floats = kiln_malloc(s->n * sizeof(float)))) return KILN_ERR_NOMEM;
        if (s->n) memcpy(a->floats, s->floats, s->n * sizeof(float));
        a->n = s->n;
        break;
      }
      case KILN_ATTR_TENSOR: {
        kiln_attr *a = add_attr(dst, s->name, KILN_ATTR_TENSOR);
        if (!a || !(a->t = kiln_tensor_clone(s->t, NULL))) return KILN_ERR_NOMEM;
        break;
      }
      default: return KILN_ERR_UNSUPPORTED;
    }
    if (rc) return rc;
  }
  return KILN_OK;
}

kiln_code kiln_model_import_kiln(kiln_ir_model *m, kiln_error *err) {
  for (size_t i = 0; i < m->n_opsets; i++)
    if (!strcmp(m->opsets[i].domain, KILN_FUSED_DOMAIN)) return KILN_OK;
  kiln_opset *o = realloc(m->opsets, (m->n_opsets + 1) * sizeof *o);
  if (!o) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  m->opsets = o;
  if (!(o[m->n_opsets].domain = kiln_strdup(KILN_FUSED_DOMAIN))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  o[m->n_opsets++].version = 1;
  return KILN_OK;
}

/* The id in `sub` of g's value v, created with g's type on first sight. */
static int sub_value(kiln_graph *sub, const kiln_graph *g, int v) {
  if (v < 0) return -1;
  int id = kiln_graph_find(sub, g->values[v].name);
  if (id >= 0) return id;
  id = kiln_graph_value(sub, g->values[v].name);
  if (id >= 0) kiln_type_copy(&sub->values[id].type, kiln_value_type(g, v));
  return id;
}

int kiln_fuse_chain(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
                    const int *inputs, size_t n_inputs, bool *dead) {
  kiln_error *err = ctx->err;
  if (kiln_model_import_kiln(ctx->model, err)) return -1;
  kiln_graph *sub = kiln_graph_new(g);
  if (!sub) goto oom;
  const kiln_node *anchor = &g->nodes[m->nodes[m->n - 1]];
  size_t n_out = anchor->n_out;
  int *outs = kiln_malloc(n_out * sizeof *outs);
  int *ins = kiln_malloc(n_inputs * sizeof *ins);
  char name[512];
  snprintf(name, sizeof name, "kiln_fused_%s_%s", op_type,
           anchor->name && *anchor->name ? anchor->name : g->values[anchor->out[0]].name);
  if (!outs || !ins || !(sub->name = kiln_strdup(name))) {
    free(outs);
    free(ins);
    goto oom;
  }
  memcpy(outs, anchor->out, n_out * sizeof *outs);
  if (n_inputs) memcpy(ins, inputs, n_inputs * sizeof *ins);
  /* The subgraph's inputs: the fused node's present inputs, in order. */
  sub->inputs = kiln_malloc(n_inputs * sizeof(int));
  sub->outputs = kiln_malloc(n_out * sizeof(int));
  if (!sub->inputs || !sub->outputs) goto oom_io;
  for (size_t i = 0; i < n_inputs; i++) {
    if (inputs[i] < 0) continue;
    int id = sub_value(sub, g, inputs[i]);
    if (id < 0) goto oom_io;
    sub->values[id].is_input = true;
    sub->inputs[sub->n_inputs++] = id;
  }
  /* Move the chain's nodes into the subgraph, renumbering their values. */
  for (size_t s = 0; s < m->n; s++) {
    kiln_node *src = &g->nodes[m->nodes[s]];
    int k = kiln_graph_add_node(sub);
    if (k < 0) goto oom_io;
    for (size_t i = 0; i < src->n_in; i++)
      if (src->in[i] >= 0 && (src->in[i] = sub_value(sub, g, src->in[i])) < 0) goto oom_io;
    for (size_t i = 0; i < src->n_out; i++)
      if (src->out[i] >= 0 && (src->out[i] = sub_value(sub, g, src->out[i])) < 0) goto oom_io;
    sub->nodes[k] = *src;
    memset(src, 0, sizeof *src);
    dead[m->nodes[s]] = true;
  }
  for (size_t i = 0; i < n_out; i++)
    if (outs[i] >= 0) sub->outputs[sub->n_outputs++] = sub_value(sub, g, outs[i]);
  /* The fused node. */
  int k = kiln_graph_add_node(g);
  if (k < 0) goto oom_io;
  kiln_node *f = &g->nodes[k];
  f->name = kiln_strdup(name);
  f->op_type = kiln_strdup(op_type);
  f->domain = kiln_strdup(KILN_FUSED_DOMAIN);
  f->in = ins;
  f->n_in = n_inputs;
  f->out = outs;
  f->n_out = n_out;
  kiln_attr *a = add_attr(f, "original", KILN_ATTR_GRAPH);
  if (!f->name || !f->op_type || !f->domain || !a) {
    kiln_graph_free(sub);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
  }
  a->g = sub;
  return k;
oom_io:
  free(outs);
  free(ins);
oom:
  kiln_graph_free(sub);
  kiln_fail(err, KILN_ERR_NOMEM, "out of memory fusing a chain");
  return -1;
}

kiln_code kiln_fuse_emit(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, const char *op_type,
                         const int *inputs, size_t n_inputs, kiln_node *attrs, kiln_fuse_scan *s,
                         size_t *count) {
  kiln_code rc = KILN_OK;
  int k = kiln_fuse_chain(ctx, g, m, op_type, inputs, n_inputs, s->dead);
  if (k < 0)
    rc = kiln_fuse_failed(ctx);
  else if (adopt_attrs(&g->nodes[k], attrs))
    rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  if (k >= 0) (*count)++;
  kiln_node_clear(attrs);
  kiln_code grown = kiln_fuse_scan_grow(ctx, g, s);
  return grown ? grown : rc;
}

kiln_code kiln_fuse_patterns(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_pattern *pats, size_t n_pats,
                             kiln_fuse_build_fn build, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  for (size_t i = g->n_nodes; !rc && i-- > 0;)
    for (size_t p = 0; p < n_pats; p++) {
      kiln_match m;
      if (!kiln_pattern_match(g, &pats[p], i, s.uses, s.dead, &m)) continue;
      const char *op_type = NULL;
      int in[KILN_FUSE_MAX_IN];
      size_t n_in = 0;
      kiln_node attrs = {0};
      rc = build(g, &m, p, &op_type, in, &n_in, &attrs);
      if (!rc) rc = kiln_fuse_emit(ctx, g, &m, op_type, in, n_in, &attrs, &s, count);
      else kiln_node_clear(&attrs);
      break;
    }
  return kiln_fuse_scan_end(&s, g, rc);
}
