#include "opt/pattern.h"

#include <string.h>

bool kiln_op_is(const kiln_node *n, const char *ops) {
  if (*n->domain) return false;
  size_t len = strlen(n->op_type);
  for (const char *p = ops; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == len && !strncmp(p, n->op_type, l)) return true;
    p = bar ? bar + 1 : NULL;
  }
  return false;
}

const kiln_tensor *kiln_const_input(const kiln_graph *g, const kiln_node *n, size_t i) {
  if (i >= n->n_in || n->in[i] < 0) return NULL;
  const kiln_value_info *v = &g->values[n->in[i]];
  if (!v->init || v->is_input || v->init->kind != KILN_KIND_TENSOR) return NULL;
  return v->init;
}

bool kiln_const_scalar(const kiln_graph *g, const kiln_node *n, size_t i, double *v) {
  const kiln_tensor *t = kiln_const_input(g, n, i);
  if (!t || t->numel != 1 || !(kiln_dtype_is_float(t->dtype) || kiln_dtype_is_int(t->dtype))) return false;
  *v = kiln_get_f64(t, 0);
  return true;
}

/* Only output 0 may be used, and only by one reader (the next step). */
static bool sole_output_to_next(const kiln_graph *g, const kiln_node *n, const size_t *uses) {
  /* uses[] counts graph outputs and subgraph readers too, so 1 means: the next step only */
  if (n->n_out < 1 || n->out[0] < 0 || uses[n->out[0]] != 1) return false;
  (void)g;
  for (size_t k = 1; k < n->n_out; k++)
    if (n->out[k] >= 0 && uses[n->out[k]] > 0) return false;
  return true;
}

/* Step s at node cur, then (backtracking) each input that a node of step s-1 produces. */
static bool match_step(const kiln_graph *g, const kiln_pattern *p, size_t s, size_t cur,
                       const size_t *uses, const bool *taken, kiln_match *m) {
  const kiln_node *n = &g->nodes[cur];
  const kiln_pat_step *st = &p->steps[s];
  if ((taken && taken[cur]) || !kiln_op_is(n, st->ops) || (st->pred && !st->pred(g, n))) return false;
  if (s + 1 < p->n_steps && !sole_output_to_next(g, n, uses)) return false;
  m->nodes[s] = cur;
  if (s == 0) return true;
  for (size_t k = 0; k < n->n_in; k++) {
    if (st->slot >= 0 && (size_t)st->slot != k) continue;
    int v = n->in[k];
    int pi = v < 0 ? -1 : g->values[v].producer;
    if (pi < 0 || (taken && taken[pi])) continue; /* a node another rewrite already moved */
    const kiln_node *pn = &g->nodes[pi];
    if (pn->n_out > 0 && pn->out[0] == v && match_step(g, p, s - 1, (size_t)pi, uses, taken, m))
      return true;
  }
  return false;
}

bool kiln_pattern_match(const kiln_graph *g, const kiln_pattern *p, size_t anchor,
                        const size_t *uses, const bool *taken, kiln_match *m) {
  if (p->n_steps == 0 || p->n_steps > KILN_PAT_MAX) return false;
  m->n = p->n_steps;
  return match_step(g, p, p->n_steps - 1, anchor, uses, taken, m);
}
