/* The optimizer pass for plugin fusion patterns: each match (kiln's one pattern matcher,
 * opt/pattern.h) accepted by the plugin's check becomes one node of the plugin's op that keeps
 * the chain it replaced (kiln_fuse_chain), so it falls back and validates like kiln's own. */
#include <stdlib.h>
#include <string.h>

#include "ir/edit.h"
#include "opt/fuse.h"
#include "plugin/internal.h"

/* ---- what a check callback sees --------------------------------------------------------- */

static const kiln_node *step_node(const kiln_fusion_match *m, size_t step) {
  return m && step < m->m->n ? &m->g->nodes[m->m->nodes[step]] : NULL;
}

/* The static type of value v, filled from its constant value when the type is unknown. */
static bool value_type(const kiln_graph *g, int v, int32_t *dtype, int *rank, const int64_t **dims) {
  if (v < 0) return false;
  const kiln_value_info *vi = &g->values[v];
  if (vi->type.kind == KILN_T_TENSOR) {
    *dtype = (int32_t)vi->type.dtype;
    *rank = vi->type.rank;
    *dims = vi->type.dims;
    return true;
  }
  if (vi->type.kind == KILN_T_UNKNOWN && vi->init && vi->init->kind == KILN_KIND_TENSOR) {
    *dtype = (int32_t)vi->init->dtype;
    *rank = vi->init->rank;
    *dims = vi->init->dims;
    return true;
  }
  return false;
}

static int value_of_input(const kiln_fusion_match *m, size_t step, size_t i) {
  const kiln_node *n = step_node(m, step);
  return n && i < n->n_in ? n->in[i] : -1;
}

static int value_of_output(const kiln_fusion_match *m, size_t step) {
  const kiln_node *n = step_node(m, step);
  return n && n->n_out ? n->out[0] : -1;
}

static int32_t v_dtype(const kiln_fusion_match *m, int v) {
  int32_t dt;
  int r;
  const int64_t *d;
  return m && value_type(m->g, v, &dt, &r, &d) ? dt : 0;
}

static int v_rank(const kiln_fusion_match *m, int v) {
  int32_t dt;
  int r;
  const int64_t *d;
  return m && value_type(m->g, v, &dt, &r, &d) ? r : -1;
}

static int64_t v_dim(const kiln_fusion_match *m, int v, int k) {
  int32_t dt;
  int r;
  const int64_t *d;
  if (!m || !value_type(m->g, v, &dt, &r, &d) || k < 0 || k >= r) return -1;
  if (m->g->values[v].type.kind == KILN_T_TENSOR && m->g->values[v].type.sym[k]) return -1;
  return d[k];
}

size_t kiln_api_match_step_count(const kiln_fusion_match *m) { return m ? m->m->n : 0; }
const char *kiln_api_match_op_type(const kiln_fusion_match *m, size_t step) {
  const kiln_node *n = step_node(m, step);
  return n ? n->op_type : NULL;
}
const kiln_op_attrs *kiln_api_match_attrs(const kiln_fusion_match *m, size_t step) {
  return step_node(m, step) ? &m->step_attrs[step] : NULL;
}
size_t kiln_api_match_input_count(const kiln_fusion_match *m, size_t step) {
  const kiln_node *n = step_node(m, step);
  return n ? n->n_in : 0;
}
size_t kiln_api_match_chain_input(const kiln_fusion_match *m, size_t step) {
  const kiln_node *n = step_node(m, step), *prev = step ? step_node(m, step - 1) : NULL;
  for (size_t i = 0; n && prev && prev->n_out && i < n->n_in; i++)
    if (n->in[i] >= 0 && n->in[i] == prev->out[0]) return i;
  return (size_t)-1;
}
int32_t kiln_api_match_input_dtype(const kiln_fusion_match *m, size_t step, size_t i) {
  return v_dtype(m, value_of_input(m, step, i));
}
int kiln_api_match_input_rank(const kiln_fusion_match *m, size_t step, size_t i) {
  return v_rank(m, value_of_input(m, step, i));
}
int64_t kiln_api_match_input_dim(const kiln_fusion_match *m, size_t step, size_t i, int d) {
  return v_dim(m, value_of_input(m, step, i), d);
}
const kiln_op_tensor *kiln_api_match_input_const(const kiln_fusion_match *m, size_t step, size_t i) {
  const kiln_node *n = step_node(m, step);
  const kiln_tensor *t = n ? kiln_const_input(m->g, n, i) : NULL;
  return t && t->dtype != KILN_STRING ? (const kiln_op_tensor *)(const void *)t : NULL;
}
int32_t kiln_api_match_output_dtype(const kiln_fusion_match *m, size_t step) {
  return v_dtype(m, value_of_output(m, step));
}
int kiln_api_match_output_rank(const kiln_fusion_match *m, size_t step) {
  return v_rank(m, value_of_output(m, step));
}
int64_t kiln_api_match_output_dim(const kiln_fusion_match *m, size_t step, int d) {
  return v_dim(m, value_of_output(m, step), d);
}

/* Only attributes the replacement op declares, with their declared type. */
static kiln_status settable(kiln_fusion_match *m, const char *name, uint32_t type) {
  if (!m || !name) return KILN_STATUS_INVALID_ARG;
  const kiln_op_attr *d = kiln_adapted_attr(m->f->op, name);
  return d && d->type == type ? KILN_STATUS_OK : KILN_STATUS_INVALID_ARG;
}

kiln_status kiln_api_match_set_attr_int(kiln_fusion_match *m, const char *name, int64_t v) {
  kiln_status st = settable(m, name, KILN_OP_ATTR_INT);
  return st ? st : kiln_node_set_int(m->attrs, name, v) ? KILN_STATUS_NOMEM : KILN_STATUS_OK;
}
kiln_status kiln_api_match_set_attr_float(kiln_fusion_match *m, const char *name, float v) {
  kiln_status st = settable(m, name, KILN_OP_ATTR_FLOAT);
  return st ? st : kiln_node_set_float(m->attrs, name, v) ? KILN_STATUS_NOMEM : KILN_STATUS_OK;
}
kiln_status kiln_api_match_set_attr_string(kiln_fusion_match *m, const char *name, const char *v) {
  kiln_status st = settable(m, name, KILN_OP_ATTR_STRING);
  if (!st && !v) st = KILN_STATUS_INVALID_ARG;
  return st ? st : kiln_node_set_string(m->attrs, name, v) ? KILN_STATUS_NOMEM : KILN_STATUS_OK;
}
kiln_status kiln_api_match_set_attr_ints(kiln_fusion_match *m, const char *name, const int64_t *v,
                                         size_t count) {
  kiln_status st = settable(m, name, KILN_OP_ATTR_INTS);
  if (!st && count && !v) st = KILN_STATUS_INVALID_ARG;
  return st ? st : kiln_node_set_ints(m->attrs, name, v, count) ? KILN_STATUS_NOMEM : KILN_STATUS_OK;
}

/* ---- the pass --------------------------------------------------------------------------- */

static bool dtype_ok(const kiln_op_io *io, int32_t dt) {
  return !io || io->dtypes == 0 || (dt >= 0 && dt < 32 && (io->dtypes & KILN_DT_BIT(dt)));
}

/* The fused node's inputs for match m, or false when this match cannot become the op. */
static bool fused_inputs(const kiln_graph *g, const kiln_plugin_fusion *f, const kiln_match *m, int *in) {
  const kiln_op_desc *d = &f->op->d;
  for (size_t k = 0; k < f->n_inputs; k++) {
    const kiln_node *n = &g->nodes[m->nodes[f->inputs[k].step]];
    int idx = f->inputs[k].input;
    if (idx == KILN_FUSION_OTHER) {
      int prev = g->nodes[m->nodes[f->inputs[k].step - 1]].out[0];
      if (n->n_in != 2 || (n->in[0] == prev) == (n->in[1] == prev)) return false;
      in[k] = n->in[0] == prev ? n->in[1] : n->in[0];
    } else {
      in[k] = (size_t)idx < n->n_in ? n->in[idx] : -1;
    }
    if (in[k] < 0 && (int)k < f->op->schema.inputs.min) return false; /* a required input is absent */
    for (size_t s = 0; in[k] >= 0 && s + 1 < m->n; s++) /* never a value inside the chain */
      if (g->nodes[m->nodes[s]].out[0] == in[k]) return false;
    int32_t dt;
    int r;
    const int64_t *dims;
    if (in[k] >= 0 && value_type(g, in[k], &dt, &r, &dims) && dt &&
        !dtype_ok(k < d->n_inputs ? &d->inputs[k] : d->n_inputs ? &d->inputs[d->n_inputs - 1] : NULL, dt))
      return false;
  }
  const kiln_node *anchor = &g->nodes[m->nodes[m->n - 1]];
  const kiln_op_schema *s = &f->op->schema;
  if ((int)anchor->n_out < s->outputs.min || (s->outputs.max >= 0 && (int)anchor->n_out > s->outputs.max)) return false;
  return true;
}

/* The model imports the op's domain at a version the op covers (importing it if needed). */
static bool domain_ready(kiln_ir_model *m, const kiln_adapted_op *op, kiln_error *err, kiln_code *rc) {
  int64_t v = kiln_model_opset(m, op->d.domain);
  if (v >= 0) return v >= op->d.since_version && (op->d.until_version == 0 || v <= op->d.until_version);
  kiln_opset *o = realloc(m->opsets, (m->n_opsets + 1) * sizeof *o);
  if (!o) return *rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), false;
  m->opsets = o;
  if (!(o[m->n_opsets].domain = kiln_strdup(op->d.domain)))
    return *rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), false;
  o[m->n_opsets++].version = op->d.since_version;
  return true;
}

kiln_code kiln_plugins_pass(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  return kiln_plugins_fuse(ctx, ctx->cfg->user, g, count);
}

kiln_code kiln_plugins_fuse(kiln_pass_ctx *ctx, const kiln_plugin_set *ps, kiln_graph *g, size_t *count) {
  if (!ps || !ps->n_fusions) return KILN_OK;
  size_t *uses = kiln_graph_use_counts(g);
  bool *dead = kiln_calloc(g->n_nodes, sizeof *dead);
  kiln_code rc = uses && dead ? KILN_OK : kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  size_t n0 = g->n_nodes;
  /* Anchors from the last node back, patterns in registration order: the first that
   * matches (and that its plugin accepts) wins. */
  for (size_t i = n0; !rc && i-- > 0;) {
    for (size_t p = 0; !rc && p < ps->n_fusions; p++) {
      const kiln_plugin_fusion *f = ps->fusions[p];
      kiln_match m;
      int in[64];
      if (!kiln_pattern_match(g, &f->pattern, i, uses, dead, &m) || !fused_inputs(g, f, &m, in)) continue;
      kiln_node tmp;
      memset(&tmp, 0, sizeof tmp);
      kiln_fusion_match fm;
      memset(&fm, 0, sizeof fm);
      fm.g = g;
      fm.m = &m;
      fm.attrs = &tmp;
      fm.f = f;
      for (size_t s = 0; s < m.n; s++) fm.step_attrs[s] = (kiln_op_attrs){&g->nodes[m.nodes[s]], NULL, NULL, NULL};
      bool accept = !f->check || f->check(&fm, kiln_plugin_api(), f->user);
      if (!accept || !domain_ready(ctx->model, f->op, ctx->err, &rc)) {
        kiln_node_clear(&tmp);
        continue;
      }
      int k = kiln_fuse_chain(ctx, g, &m, f->op_type, in, f->n_inputs, dead);
      if (k < 0) {
        rc = ctx->err && ctx->err->code ? ctx->err->code : KILN_ERR_NOMEM;
      } else {
        kiln_node *fn = &g->nodes[k];
        char *dom = kiln_strdup(f->op->d.domain);
        kiln_attr *na = tmp.n_attrs ? realloc(fn->attrs, (fn->n_attrs + tmp.n_attrs) * sizeof *na) : fn->attrs;
        if (!dom || (tmp.n_attrs && !na)) {
          free(dom);
          rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
        } else {
          free(fn->domain);
          fn->domain = dom;
          fn->attrs = na;
          for (size_t a = 0; a < tmp.n_attrs; a++) {
            fn->attrs[fn->n_attrs++] = tmp.attrs[a];
            memset(&tmp.attrs[a], 0, sizeof tmp.attrs[a]);
          }
          (*count)++;
        }
      }
      kiln_node_clear(&tmp);
      bool *grown = realloc(dead, g->n_nodes * sizeof *dead);
      if (!grown) {
        rc = kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
      } else {
        dead = grown;
        for (size_t j = n0; j < g->n_nodes; j++) dead[j] = false;
      }
      break;
    }
  }
  if (!rc) kiln_graph_remove_nodes(g, dead);
  free(uses);
  free(dead);
  return rc;
}
