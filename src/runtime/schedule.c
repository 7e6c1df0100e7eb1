/* Waves of independent nodes: see schedule.h. */
#include "runtime/schedule.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ops/op.h"

void kiln_schedule_free(kiln_schedule *s) {
  if (!s) return;
  free(s->level);
  free(s->order);
  free(s->wave_off);
  free(s);
}

/* Whether n runs a subgraph that may read outer values the node does not list as inputs
 * (If, Loop, Scan; a fused ai.kiln node's `original` chain reads only the node's inputs). */
static bool reads_outer_values(const kiln_node *n) {
  if (!strcmp(n->domain, KILN_FUSED_DOMAIN)) return false;
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].kind == KILN_ATTR_GRAPH || n->attrs[a].kind == KILN_ATTR_GRAPHS) return true;
  return false;
}

/* A node's wave is one past the latest wave among the producers of its inputs (graph inputs,
 * initializers and outer values are ready before wave 0). */
kiln_schedule *kiln_schedule_new(const kiln_graph *g) {
  kiln_schedule *s = kiln_calloc(1, sizeof *s);
  size_t n = g->n_nodes;
  if (!s) return NULL;
  s->n_nodes = n;
  s->level = kiln_calloc(n ? n : 1, sizeof *s->level);
  s->order = kiln_calloc(n ? n : 1, sizeof *s->order);
  s->wave_off = kiln_calloc(n + 2, sizeof *s->wave_off);
  if (!s->level || !s->order || !s->wave_off) {
    kiln_schedule_free(s);
    return NULL;
  }
  /* the wave each value is ready after; -1: before wave 0 */
  int *ready = kiln_malloc((g->n_values ? g->n_values : 1) * sizeof *ready);
  if (!ready) {
    kiln_schedule_free(s);
    return NULL;
  }
  for (size_t v = 0; v < g->n_values; v++) ready[v] = -1;
  int top = -1;
  for (size_t i = 0; i < n; i++) {
    const kiln_node *nd = &g->nodes[i];
    int lv = 0;
    for (size_t k = 0; k < nd->n_in; k++)
      if (nd->in[k] >= 0 && ready[nd->in[k]] + 1 > lv) lv = ready[nd->in[k]] + 1;
    if (reads_outer_values(nd)) lv = top + 1; /* after every earlier node, whatever it reads */
    s->level[i] = lv;
    for (size_t k = 0; k < nd->n_out; k++)
      if (nd->out[k] >= 0) ready[nd->out[k]] = lv;
    if (lv > top) top = lv;
  }
  free(ready);
  s->n_waves = (size_t)(top + 1);
  /* counting sort by wave, stable: graph order inside a wave */
  for (size_t i = 0; i < n; i++) s->wave_off[s->level[i] + 1]++;
  for (size_t w = 0; w < s->n_waves; w++) s->wave_off[w + 1] += s->wave_off[w];
  size_t *fill = kiln_calloc(s->n_waves ? s->n_waves : 1, sizeof *fill);
  if (!fill) {
    kiln_schedule_free(s);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) s->order[s->wave_off[s->level[i]] + fill[s->level[i]]++] = i;
  free(fill);
  return s;
}
