/* Packed weights at session creation: every node of the main graph whose op has a prepare
 * hook (kiln_op_schema.prepare) makes, from its constant inputs and the static
 * shapes of the others, the caches its first run would make (packed and transformed weights).
 * The first run is then as fast as later ones. */
#include <string.h>

#include "ops/op.h"
#include "ops/registry.h"
#include "runtime/session.h"

enum { MAX_IO = 16 };

/* A shape-only stand-in (data NULL) for an input of static type t: its dims, -1 where unknown
 * (numel counts those as 1); false unless t is a tensor of known element type and rank. */
static bool shape_only(const kiln_type *t, kiln_tensor *out) {
  if (t->kind != KILN_T_TENSOR || t->dtype == KILN_UNDEFINED || t->rank < 0) return false;
  memset(out, 0, sizeof *out);
  out->kind = KILN_KIND_TENSOR;
  out->dtype = t->dtype;
  out->rank = t->rank;
  out->numel = 1;
  for (int d = 0; d < t->rank; d++) {
    out->dims[d] = t->dims[d] >= 0 ? t->dims[d] : -1;
    out->numel *= t->dims[d] >= 0 ? t->dims[d] : 1;
  }
  return true;
}

size_t kiln_prepack(const kiln_session *s) {
  kiln_graph *g = s->model->ir->graph;
  kiln_frame f = {.g = g, .session = s, .states = kiln_states_of(&s->model->states, g)};
  kiln_frame_services(&f);
  size_t done = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    kiln_prepare_fn prepare = n->schema ? n->schema->prepare : NULL;
    if (!prepare || n->n_in > MAX_IO || n->n_out > MAX_IO) continue;
    kiln_tensor shapes[MAX_IO];
    const kiln_tensor *in[MAX_IO];
    kiln_tensor *out[MAX_IO] = {0};
    bool ok = true;
    for (size_t k = 0; k < n->n_in && ok; k++) {
      int id = n->in[k];
      const kiln_value_info *v = id >= 0 ? &g->values[id] : NULL;
      in[k] = !v ? NULL : v->init ? v->init : &shapes[k];
      if (v && !v->init) ok = shape_only(&v->type, &shapes[k]);
    }
    kiln_error err = {0};
    kiln_kctx c = {.node = n, .opset = n->opset, .n_in = n->n_in, .n_out = n->n_out, .in = in,
                   .out = out, .rt = &f.svc, .err = &err, .state = f.states ? &f.states[i] : NULL};
    if (ok && prepare(&c) == KILN_OK) done++;
  }
  return done;
}
