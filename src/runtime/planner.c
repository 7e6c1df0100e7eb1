#include "runtime/planner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ops/op.h"

enum { ALIGN = 64 };

struct kiln_plan {
  char *signature;
  size_t arena_bytes, total_bytes;
  size_t *offset;          /* per value id; SIZE_MAX = not planned */
  size_t *bytes;           /* per value id: planned size */
  uint64_t last_used;      /* LRU clock */
  uint8_t *spare;          /* an arena kept for the next run (one per plan) */
  int refs;                /* runs using the plan; an evicted plan is freed by the last one */
  bool evicted;
};

struct kiln_planner {
  const kiln_graph *g;
  size_t n_values, n_nodes;
  bool *plannable;         /* per value: may live in the arena */
  int *first, *last;       /* per value: defining node, last reading node */
  bool *concat_cand;       /* per node: a Concat whose inputs may be placed inside its output */
  bool *in_place_cand;     /* per node: an elementwise op whose output may overlay an input */
  pthread_mutex_t mu;
  kiln_plan *plans[KILN_PLAN_CACHE];
  uint64_t clock;
  size_t last_arena, last_total;
};

static void plan_free(kiln_plan *p) {
  if (!p) return;
  free(p->signature);
  free(p->offset);
  free(p->bytes);
  free(p->spare);
  free(p);
}

static bool is_concat(const kiln_node *n) {
  return kiln_node_has(n, KILN_OPF_CONCAT) && n->n_out == 1 && n->out[0] >= 0;
}

/* Concats whose output and inputs are plannable, each input read by the Concat alone (once)
 * and not itself the output of such a Concat (no nesting). A failed allocation leaves none. */
static void find_concats(kiln_planner *p, const kiln_graph *g) {
  if (!(p->concat_cand = kiln_calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p->concat_cand))) return;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    bool ok = is_concat(n) && n->n_in > 1 && p->plannable[n->out[0]];
    for (size_t k = 0; ok && k < n->n_in; k++) {
      int v = n->in[k];
      ok = v >= 0 && p->plannable[v] && g->uses[v] == 1 && g->values[v].producer >= 0 &&
           !is_concat(&g->nodes[g->values[v].producer]);
    }
    p->concat_cand[i] = ok;
  }
}

kiln_planner *kiln_planner_new(const kiln_graph *g, const int *time) {
  kiln_planner *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->g = g;
  p->n_values = g->n_values;
  p->plannable = kiln_calloc(g->n_values, sizeof *p->plannable);
  p->first = kiln_malloc(g->n_values * sizeof *p->first);
  p->last = kiln_malloc(g->n_values * sizeof *p->last);
  if (!p->plannable || !p->first || !p->last || pthread_mutex_init(&p->mu, NULL)) {
    free(p->plannable);
    free(p->first);
    free(p->last);
    free(p);
    return NULL;
  }
  p->n_nodes = g->n_nodes;
  /* Lifetimes in node order (or in `time` units: nodes of one time step may run together); g->uses counts graph outputs and subgraph readers, which must
   * outlive the plan, so a value is plannable only when its node readers account for all uses. */
  size_t *readers = kiln_calloc(g->n_values, sizeof *readers);
#define T(i) (time ? time[i] : (int)(i))
  for (size_t v = 0; v < g->n_values; v++) p->first[v] = p->last[v] = -1;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) {
        p->last[n->in[k]] = T(i);
        if (readers) readers[n->in[k]]++;
      }
    for (size_t k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) p->first[n->out[k]] = p->last[n->out[k]] = T(i);
  }
  /* Reads happen after the definition; recompute last as the max of both. */
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && p->last[n->in[k]] < T(i)) p->last[n->in[k]] = T(i);
  }
#undef T
  for (size_t v = 0; readers && v < g->n_values; v++)
    p->plannable[v] = p->first[v] >= 0 && g->uses && readers[v] == g->uses[v];
  free(readers);
  find_concats(p, g);
  if ((p->in_place_cand = kiln_calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p->in_place_cand)))
    for (size_t i = 0; i < g->n_nodes; i++)
      p->in_place_cand[i] = kiln_op_in_place_ok(&g->nodes[i]) && g->nodes[i].n_out > 0 && g->nodes[i].out[0] >= 0 &&
                            p->plannable[g->nodes[i].out[0]];
  return p;
}

void kiln_planner_free(kiln_planner *p) {
  if (!p) return;
  free(p->concat_cand);
  free(p->in_place_cand);
  for (int i = 0; i < KILN_PLAN_CACHE; i++) plan_free(p->plans[i]);
  pthread_mutex_destroy(&p->mu);
  free(p->plannable);
  free(p->first);
  free(p->last);
  free(p);
}

static kiln_plan *find(kiln_planner *p, const char *sig) {
  for (int i = 0; i < KILN_PLAN_CACHE; i++)
    if (p->plans[i] && !strcmp(p->plans[i]->signature, sig)) return p->plans[i];
  return NULL;
}

kiln_code kiln_planner_begin(kiln_planner *p, const char *signature, kiln_run_mem *rm,
                             kiln_error *err) {
  memset(rm, 0, sizeof *rm);
  rm->planner = p;
  if (!p) return KILN_OK;
  pthread_mutex_lock(&p->mu);
  kiln_plan *plan = find(p, signature);
  if (plan) {
    plan->last_used = ++p->clock;
    plan->refs++;
    rm->plan = plan;
    rm->arena = plan->spare; /* reuse the kept arena when no other run holds it */
    plan->spare = NULL;
    p->last_arena = plan->arena_bytes;
    p->last_total = plan->total_bytes;
  }
  pthread_mutex_unlock(&p->mu);
  if (plan) {
    if (!rm->arena && !(rm->arena = kiln_malloc_big((plan->arena_bytes + ALIGN - 1) / ALIGN * ALIGN + ALIGN)))
      return kiln_fail(err, KILN_ERR_NOMEM, "out of memory allocating a %zu-byte arena", plan->arena_bytes);
    return KILN_OK;
  }
  rm->recorded = kiln_calloc(p->n_values, sizeof *rm->recorded);
  rm->concat_ok = kiln_calloc(p->n_nodes ? p->n_nodes : 1, sizeof *rm->concat_ok);
  rm->signature = kiln_strdup(signature);
  if (!rm->recorded || !rm->signature || !rm->concat_ok) {
    free(rm->recorded);
    free(rm->signature);
    free(rm->concat_ok);
    rm->recorded = NULL;
    rm->signature = NULL;
    rm->concat_ok = NULL;
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  return KILN_OK;
}

void *kiln_planner_slot(kiln_run_mem *rm, int id, size_t nbytes) {
  if (!rm || !rm->planner || id < 0 || (size_t)id >= rm->planner->n_values) return NULL;
  if (rm->recorded) {
    rm->recorded[id] = nbytes;
    return NULL;
  }
  kiln_plan *plan = rm->plan;
  if (!plan || !rm->arena || plan->offset[id] == SIZE_MAX || plan->bytes[id] != nbytes || !nbytes) return NULL;
  return rm->arena + plan->offset[id];
}

bool kiln_planner_concat_candidate(const kiln_run_mem *rm, size_t node) {
  return rm && rm->planner && rm->concat_ok && rm->planner->concat_cand && node < rm->planner->n_nodes &&
         rm->planner->concat_cand[node];
}

void kiln_planner_note_concat(kiln_run_mem *rm, size_t node, bool in_place) {
  if (kiln_planner_concat_candidate(rm, node)) rm->concat_ok[node] = in_place;
}

/* Concats laid out in place for this recording: the inputs' sizes add up to the output's and
 * each starts 64-byte aligned. in_concat[v] gets the output value holding input v (else -1);
 * first[] of each such output moves back to its earliest producer. */
static void group_concats(const kiln_planner *p, const size_t *rec, const bool *ok, int *in_concat,
                          int *first, bool *root) {
  const kiln_graph *g = p->g;
  for (size_t i = 0; ok && p->concat_cand && i < p->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!p->concat_cand[i] || !ok[i]) continue;
    size_t sum = 0;
    bool fits = rec[n->out[0]] > 0;
    for (size_t k = 0; fits && k < n->n_in; k++) {
      fits = rec[n->in[k]] > 0 && rec[n->in[k]] % ALIGN == 0;
      sum += rec[n->in[k]];
    }
    if (!fits || sum != rec[n->out[0]]) continue;
    root[n->out[0]] = true;
    for (size_t k = 0; k < n->n_in; k++) {
      in_concat[n->in[k]] = n->out[0];
      if (first[n->in[k]] < first[n->out[0]]) first[n->out[0]] = first[n->in[k]];
    }
  }
}

static int alias_root(const int *alias, int v) {
  while (alias[v] >= 0) v = alias[v];
  return v;
}

/* Elementwise ops laid out in place: the output takes the slot of an input of the same size
 * read by the op alone (alias[out] = that input), unless either belongs to an in-place Concat.
 * Chains share one slot: its root's lifetime grows to the last reader of the chain. */
static void group_in_place(const kiln_planner *p, const size_t *rec, const int *in_concat,
                           const bool *croot, int *alias, int *last) {
  const kiln_graph *g = p->g;
  for (size_t i = 0; p->in_place_cand && i < p->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!p->in_place_cand[i]) continue; /* candidates have an output (kiln_planner_new) */
    int y = n->out[0];
    if (!rec[y] || in_concat[y] >= 0 || croot[y]) continue;
    for (size_t k = 0; k < n->n_in; k++) {
      int x = n->in[k];
      if (x < 0 || !p->plannable[x] || g->uses[x] != 1 || rec[x] != rec[y] || in_concat[x] >= 0 || croot[x])
        continue;
      alias[y] = x;
      int r = alias_root(alias, x);
      if (last[y] > last[r]) last[r] = last[y];
      break;
    }
  }
}

/* Inputs of in-place Concats: offsets inside their output's slot, in input order. */
static void place_concat_inputs(const kiln_planner *p, const size_t *rec, const int *in_concat,
                                kiln_plan *plan) {
  const kiln_graph *g = p->g;
  for (size_t i = 0; i < p->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!p->concat_cand || !p->concat_cand[i] || in_concat[n->in[0]] != n->out[0]) continue;
    size_t off = plan->offset[n->out[0]];
    if (off == SIZE_MAX) continue;
    for (size_t k = 0; k < n->n_in; k++) {
      plan->offset[n->in[k]] = off;
      plan->bytes[n->in[k]] = rec[n->in[k]];
      off += rec[n->in[k]];
    }
  }
}

/* Greedy by size: each value, largest first, takes the lowest offset where it fits between the
 * already placed values whose lifetimes overlap its own (best fit among the gaps). */
static kiln_plan *build(kiln_planner *p, const size_t *rec, const bool *concat_ok, const char *sig) {
  size_t nv = p->n_values, n = 0;
  kiln_plan *plan = calloc(1, sizeof *plan);
  int *order = kiln_malloc(nv * sizeof *order);
  size_t *placed = kiln_malloc(nv * sizeof *placed);
  int *in_concat = kiln_malloc(nv * sizeof *in_concat), *first = kiln_malloc(nv * sizeof *first);
  int *alias = kiln_malloc(nv * sizeof *alias), *last = kiln_malloc(nv * sizeof *last);
  bool *croot = kiln_calloc(nv, sizeof *croot);
  if (!plan || !order || !placed || !in_concat || !first || !alias || !last || !croot) goto fail;
  for (size_t v = 0; v < nv; v++) in_concat[v] = alias[v] = -1;
  memcpy(first, p->first, nv * sizeof *first);
  memcpy(last, p->last, nv * sizeof *last);
  group_concats(p, rec, concat_ok, in_concat, first, croot);
  group_in_place(p, rec, in_concat, croot, alias, last);
  plan->offset = kiln_malloc(nv * sizeof *plan->offset);
  plan->bytes = kiln_calloc(nv, sizeof *plan->bytes);
  plan->signature = kiln_strdup(sig);
  if (!plan->offset || !plan->bytes || !plan->signature) goto fail;
  for (size_t v = 0; v < nv; v++) {
    plan->offset[v] = SIZE_MAX;
    if (p->plannable[v] && rec[v] && in_concat[v] < 0 && alias[v] < 0) order[n++] = (int)v;
  }
  /* insertion sort by size, descending (graphs have at most thousands of values) */
  for (size_t i = 1; i < n; i++) {
    int x = order[i];
    size_t j = i;
    while (j > 0 && rec[order[j - 1]] < rec[x]) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
  size_t n_placed = 0;
  for (size_t i = 0; i < n; i++) {
    int v = order[i];
    size_t size = (rec[v] + ALIGN - 1) / ALIGN * ALIGN;
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    /* placed[] is kept sorted by offset; walk the gaps between conflicting neighbours */
    for (size_t k = 0; k <= n_placed; k++) {
      size_t end_gap = SIZE_MAX;
      int u = -1;
      if (k < n_placed) {
        u = (int)placed[k];
        if (last[u] < first[v] || last[v] < first[u]) continue; /* disjoint in time */
        end_gap = plan->offset[u];
      }
      if (end_gap >= cursor && end_gap - cursor >= size && (best == SIZE_MAX || end_gap - cursor < best_gap)) {
        best = cursor;
        best_gap = end_gap - cursor;
      }
      if (u >= 0) {
        size_t uend = plan->offset[u] + (plan->bytes[u] + ALIGN - 1) / ALIGN * ALIGN;
        if (uend > cursor) cursor = uend;
      }
    }
    plan->offset[v] = best;
    plan->bytes[v] = rec[v];
    plan->total_bytes += rec[v];
    if (best + size > plan->arena_bytes) plan->arena_bytes = best + size;
    size_t pos = n_placed++;
    while (pos > 0 && plan->offset[placed[pos - 1]] > best) {
      placed[pos] = placed[pos - 1];
      pos--;
    }
    placed[pos] = (size_t)v;
  }
  place_concat_inputs(p, rec, in_concat, plan);
  for (size_t v = 0; v < nv; v++)
    if (alias[v] >= 0 && plan->offset[alias_root(alias, (int)v)] != SIZE_MAX) {
      plan->offset[v] = plan->offset[alias_root(alias, (int)v)];
      plan->bytes[v] = rec[v];
    }
  for (size_t v = 0; v < nv; v++)
    if ((in_concat[v] >= 0 || alias[v] >= 0) && plan->offset[v] != SIZE_MAX) plan->total_bytes += rec[v];
  free(order);
  free(placed);
  free(in_concat);
  free(first);
  free(alias);
  free(last);
  free(croot);
  return plan;
fail:
  free(order);
  free(placed);
  free(in_concat);
  free(first);
  free(alias);
  free(last);
  free(croot);
  plan_free(plan);
  return NULL;
}

void kiln_planner_end(kiln_run_mem *rm, bool ok) {
  kiln_planner *p = rm->planner;
  if (!p) return;
  if (rm->recorded) {
    kiln_plan *plan = ok ? build(p, rm->recorded, rm->concat_ok, rm->signature) : NULL;
    pthread_mutex_lock(&p->mu);
    if (plan && !find(p, plan->signature)) {
      int slot = 0;
      for (int i = 0; i < KILN_PLAN_CACHE; i++) {
        if (!p->plans[i]) {
          slot = i;
          break;
        }
        if (p->plans[i]->last_used < p->plans[slot]->last_used) slot = i;
      }
      if (p->plans[slot]) {
        if (p->plans[slot]->refs) p->plans[slot]->evicted = true; /* its last run frees it */
        else plan_free(p->plans[slot]);
      }
      plan->last_used = ++p->clock;
      p->plans[slot] = plan;
      p->last_arena = plan->arena_bytes;
      p->last_total = plan->total_bytes;
      plan = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    plan_free(plan);
    free(rm->recorded);
    free(rm->concat_ok);
    free(rm->signature);
  } else if (rm->plan) {
    pthread_mutex_lock(&p->mu);
    kiln_plan *plan = rm->plan, *dead = NULL;
    if (!plan->evicted && !plan->spare) {
      plan->spare = rm->arena;
      rm->arena = NULL;
    }
    if (--plan->refs == 0 && plan->evicted) dead = plan;
    pthread_mutex_unlock(&p->mu);
    plan_free(dead);
    free(rm->arena);
  }
  memset(rm, 0, sizeof *rm);
}

void kiln_planner_stats(kiln_planner *p, size_t *arena_bytes, size_t *intermediate_bytes,
                        size_t *n_plans) {
  size_t a = 0, t = 0, n = 0;
  if (p) {
    pthread_mutex_lock(&p->mu);
    a = p->last_arena;
    t = p->last_total;
    for (int i = 0; i < KILN_PLAN_CACHE; i++) n += p->plans[i] != NULL;
    pthread_mutex_unlock(&p->mu);
  }
  if (arena_bytes) *arena_bytes = a;
  if (intermediate_bytes) *intermediate_bytes = t;
  if (n_plans) *n_plans = n;
}
