/* Load-time checks: every node resolves to a known op at the model's opset, the graph sorts,
 * and types and shapes are inferred so a wrong model fails here, naming the node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/edit.h"
#include "onnx/reader.h"
#include "ops/registry.h"
#include "plugin/plugin.h"
#include "runtime/session.h"

static kiln_code resolve_node(kiln_node *n, const kiln_ir_model *m, const kiln_plugin_set *ps,
                              kiln_error *err) {
  char lbl[300];
  int64_t v = kiln_model_opset(m, n->domain);
  if (v < 0)
    return kiln_fail(err, KILN_ERR_MODEL, "%s uses domain '%s', which the model does not import",
                     kiln_node_label(n, lbl, sizeof lbl), n->domain);
  n->opset = (int)v;
  n->schema = kiln_op_find_in(ps, n->domain, n->op_type, n->opset);
  if (!n->schema) {
    if (kiln_plugins_known(ps, n->domain, n->op_type))
      return kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: the plugin that provides this op does not cover opset %d",
                       kiln_node_label(n, lbl, sizeof lbl), n->opset);
    if (kiln_op_known(n->domain, n->op_type))
      return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                       "%s: kiln does not implement operator '%s' in domain '%s' at opset %d",
                       kiln_node_label(n, lbl, sizeof lbl), n->op_type,
                       *n->domain ? n->domain : "ai.onnx", n->opset);
    bool custom = *n->domain && strcmp(n->domain, "ai.onnx") && strcmp(n->domain, "ai.onnx.ml") &&
                  strcmp(n->domain, KILN_FUSED_DOMAIN);
    return kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: unknown operator '%s' in domain '%s'%s (the model imports the domain at opset %d)",
                     kiln_node_label(n, lbl, sizeof lbl), n->op_type, *n->domain ? n->domain : "ai.onnx",
                     custom ? " (if a plugin provides it, load it: --plugin PATH.so or KILN_PLUGINS)" : "",
                     n->opset);
  }
  const kiln_op_schema *s = n->schema;
  if ((int)n->n_in < s->inputs.min || (s->inputs.max >= 0 && (int)n->n_in > s->inputs.max))
    return kiln_fail(err, KILN_ERR_MODEL, "%s has %zu inputs; the op takes %d to %d",
                     kiln_node_label(n, lbl, sizeof lbl), n->n_in, s->inputs.min, s->inputs.max);
  if ((int)n->n_out < s->outputs.min || (s->outputs.max >= 0 && (int)n->n_out > s->outputs.max))
    return kiln_fail(err, KILN_ERR_MODEL, "%s has %zu outputs; the op gives %d to %d",
                     kiln_node_label(n, lbl, sizeof lbl), n->n_out, s->outputs.min, s->outputs.max);
  /* Inputs below the op's minimum arity are required: an empty name there is malformed, and no
   * kernel has to guard against it. (Loop and Scan-8 take optional inputs first.) */
  bool leading_optional = s->flags & KILN_OPF_LEADING_OPTIONAL;
  for (int i = 0; i < s->inputs.min && (size_t)i < n->n_in && !leading_optional; i++)
    if (n->in[i] < 0)
      return kiln_fail(err, KILN_ERR_MODEL, "%s: required input %d is missing (empty name)",
                       kiln_node_label(n, lbl, sizeof lbl), i);
  for (size_t i = 0; i < n->n_attrs; i++) {
    kiln_attr *a = &n->attrs[i];
    kiln_code rc = KILN_OK;
    if (a->g) rc = kiln_graph_prepare_ops(a->g, m, ps, err);
    for (size_t k = 0; !rc && a->graphs && k < a->n; k++) rc = kiln_graph_prepare_ops(a->graphs[k], m, ps, err);
    if (rc) {
      kiln_error_prefix(err, "in subgraph '%s' of %s", a->name, kiln_node_label(n, lbl, sizeof lbl));
      return rc;
    }
  }
  return KILN_OK;
}

/* Whether declared tensor type d states a rank or static dim that inferred inf does not prove.
 * Symbolic names are not counted: shape inference tools name every unknown dim (unk__N), and
 * counting them would mark most of such a model claimed. */
static bool states_more(const kiln_type *d, const kiln_type *inf) {
  if (d->kind != KILN_T_TENSOR || d->rank < 0) return false;
  if (inf->kind != KILN_T_TENSOR || inf->rank < 0) return true;
  for (int i = 0; i < d->rank; i++)
    if (d->dims[i] >= 0 && inf->dims[i] < 0) return true;
  return false;
}

/* Merge an inferred type into what the model declared; a contradiction is an error. What only
 * the declaration states marks the value claimed (see kiln_value_info), as does an inference
 * made from a claimed input (tainted). */
static kiln_code merge_type(kiln_value_info *v, kiln_type *inf, bool tainted, const kiln_node *n,
                            kiln_error *err) {
  char lbl[300], a[200], b[200];
  kiln_type *d = &v->type;
  v->claimed = tainted || states_more(d, inf);
  if (inf->kind == KILN_T_UNKNOWN) return KILN_OK;
  if (d->kind == KILN_T_UNKNOWN) {
    kiln_type_copy(d, inf);
    return KILN_OK;
  }
  if (d->kind != inf->kind || (d->kind == KILN_T_TENSOR && d->dtype && inf->dtype && d->dtype != inf->dtype))
    goto clash;
  if (d->kind != KILN_T_TENSOR) return KILN_OK;
  if (d->rank >= 0 && inf->rank >= 0 && d->rank != inf->rank) goto clash;
  if (inf->rank >= 0 && d->rank >= 0) {
    for (int i = 0; i < d->rank; i++)
      if (d->dims[i] >= 0 && inf->dims[i] >= 0 && d->dims[i] != inf->dims[i]) goto clash;
    for (int i = 0; i < d->rank; i++)
      if (d->dims[i] < 0 && inf->dims[i] >= 0 && !d->sym[i]) d->dims[i] = inf->dims[i];
  } else if (d->rank < 0) {
    kiln_type_copy(d, inf);
  }
  if (!d->dtype) d->dtype = inf->dtype;
  return KILN_OK;
clash:
  return kiln_fail(err, KILN_ERR_MODEL, "%s: output '%s' is %s by the op's rules but the model declares %s",
                   kiln_node_label(n, lbl, sizeof lbl), v->name, kiln_type_str(inf, a, sizeof a),
                   kiln_type_str(d, b, sizeof b));
}

static kiln_code infer_node(kiln_graph *g, kiln_node *n, kiln_error *err) {
  bool tainted = false;
  for (size_t i = 0; i < n->n_in; i++) tainted |= n->in[i] >= 0 && g->values[n->in[i]].claimed;
  if (!n->schema->infer) {
    for (size_t i = 0; i < n->n_out; i++)
      if (n->out[i] >= 0) g->values[n->out[i]].claimed = g->values[n->out[i]].type.kind != KILN_T_UNKNOWN;
    return KILN_OK;
  }
  enum { CAP = 64 };
  const kiln_type *in[CAP];
  const kiln_tensor *cin[CAP];
  kiln_type outs[CAP];
  kiln_type *outp[CAP];
  if (n->n_in > CAP || n->n_out > CAP) return KILN_OK;
  for (size_t i = 0; i < n->n_in; i++) {
    int v = n->in[i];
    in[i] = v >= 0 ? &g->values[v].type : NULL;
    cin[i] = v >= 0 ? g->values[v].init : NULL;
    if (v >= 0 && g->values[v].init && g->values[v].type.kind == KILN_T_UNKNOWN) {
      /* describe constants by their value */
      const kiln_tensor *t = g->values[v].init;
      kiln_type *ty = &g->values[v].type;
      ty->kind = t->kind == KILN_KIND_TENSOR ? KILN_T_TENSOR : KILN_T_SEQUENCE;
      ty->dtype = t->dtype;
      ty->rank = t->rank;
      for (int d = 0; d < t->rank; d++) ty->dims[d] = t->dims[d];
    }
    if (v >= 0 && g->values[v].is_input && g->values[v].init) cin[i] = NULL; /* may be overridden */
  }
  for (size_t i = 0; i < n->n_out; i++) {
    memset(&outs[i], 0, sizeof outs[i]);
    outs[i].rank = -1;
    outp[i] = &outs[i];
  }
  kiln_ictx c = {.node = n, .opset = n->opset, .n_in = n->n_in, .n_out = n->n_out,
                 .in = in, .cin = cin, .out = outp, .err = err};
  kiln_code rc = n->schema->infer(&c);
  for (size_t i = 0; i < n->n_out; i++) {
    if (!rc && n->out[i] >= 0) rc = merge_type(&g->values[n->out[i]], &outs[i], tainted, n, err);
    kiln_type_clear(&outs[i]);
  }
  return rc;
}

kiln_code kiln_graph_prepare(kiln_graph *g, const kiln_ir_model *m, kiln_error *err) {
  return kiln_graph_prepare_ops(g, m, NULL, err);
}

kiln_code kiln_graph_prepare_ops(kiln_graph *g, const kiln_ir_model *m, const kiln_plugin_set *ps,
                                 kiln_error *err) {
  kiln_code rc;
  for (size_t i = 0; i < g->n_nodes; i++)
    if ((rc = resolve_node(&g->nodes[i], m, ps, err))) return rc;
  if ((rc = kiln_graph_toposort(g, err))) return rc;
  free(g->uses);
  if (!(g->uses = kiln_graph_use_counts(g))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_nodes; i++)
    if ((rc = infer_node(g, &g->nodes[i], err))) return rc;
  return KILN_OK;
}
