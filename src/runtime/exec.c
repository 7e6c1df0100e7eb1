/* The reference executor: nodes in topological order, one fresh tensor per output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"

static const char *nlabel(const kiln_node *n, char *buf, size_t len) {
  snprintf(buf, len, "node '%s' (%s)", n->name && *n->name ? n->name : "<unnamed>", n->op_type);
  return buf;
}

/* The value bound to `id` in frame f, looking through enclosing frames for outer names. */
static const kiln_tensor *lookup(const kiln_frame *f, int id) {
  const kiln_value_info *vi = &f->g->values[id];
  if (f->vals[id]) return f->vals[id];
  if (vi->init) return vi->init;
  if (!vi->is_outer) return NULL;
  for (const kiln_frame *p = f->parent; p; p = p->parent) {
    int pid = kiln_graph_find(p->g, vi->name);
    if (pid >= 0) {
      if (p->vals[pid]) return p->vals[pid];
      if (p->g->values[pid].init) return p->g->values[pid].init;
      if (!p->g->values[pid].is_outer) return NULL;
    }
  }
  return NULL;
}

/* Run a fused node's original chain on the node's present inputs. */
static kiln_code run_original(kiln_frame *f, const kiln_node *n, const kiln_graph *orig,
                              const kiln_tensor *const *in, kiln_tensor **out, kiln_error *err) {
  enum { CAP = 64 };
  const kiln_tensor *ins[CAP];
  kiln_tensor *outs[CAP];
  size_t ni = 0;
  for (size_t i = 0; i < n->n_in && ni < CAP; i++)
    if (n->in[i] >= 0) ins[ni++] = in[i];
  if (orig->n_outputs > CAP) return kiln_fail(err, KILN_ERR_UNSUPPORTED, "too many outputs");
  kiln_code rc = kiln_graph_run(f->session, f, orig, ni, ins, outs, err);
  if (rc) return rc;
  size_t k = 0;
  for (size_t i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && k < orig->n_outputs) out[i] = outs[k++];
  for (; k < orig->n_outputs; k++) kiln_tensor_free(outs[k]);
  return KILN_OK;
}

/* Largest differences of a from b (float tensors; other kinds compare equal or not). An
 * element agrees within 1e-4 + 1e-3 |b| + 1e-4 max |b|: the last term, relative to the
 * output's range, admits the rounding of the AMX bf16x3 GEMM (about 1e-5 of the range, which
 * near-zero elements of a wide output cannot meet relatively) and no real fault. */
static bool outputs_agree(const kiln_tensor *a, const kiln_tensor *b, double *max_abs, double *max_rel) {
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  if (a->kind != KILN_KIND_TENSOR) return true;
  if (!kiln_same_shape(a, b)) return false;
  bool ok = true;
  double range = 0;
  for (int64_t i = 0; i < b->numel; i++) {
    double y = fabs(kiln_get_f64(b, i));
    if (y > range && y < INFINITY) range = y;
  }
  for (int64_t i = 0; i < a->numel; i++) {
    double x = kiln_get_f64(a, i), y = kiln_get_f64(b, i);
    if (x != x && y != y) continue;
    double d = fabs(x - y);
    if (d != d) d = INFINITY;
    if (d > *max_abs) *max_abs = d;
    if (fabs(y) > 1e-6 && d / fabs(y) > *max_rel) *max_rel = d / fabs(y);
    if (!(d <= 1e-4 + 1e-3 * fabs(y) + 1e-4 * range)) ok = false;
  }
  return ok;
}

/* verify_fusions: the first run of a fused node also runs its original chain; the node keeps
 * its kernel only when the two agree. The chain's outputs are what the graph uses this time. */
static kiln_code verify_fused(kiln_frame *f, const kiln_node *n, const kiln_graph *orig, kiln_kctx *c,
                              kiln_error *err) {
  kiln_node_state *st = c->state;
  const kiln_session *s = f->session;
  enum { CAP = 64 };
  kiln_tensor *ref[CAP] = {0};
  if (n->n_out > CAP) return n->schema->run(c);
  kiln_code rc = n->schema->run(c);
  /* Test hook: KILN_FUSION_SKEW=Op makes the kernel's first output wrong, to prove that a
   * disagreeing fusion is caught and disabled. */
  if (!rc && s && s->model->force_skew && kiln_list_has(s->model->force_skew, n->op_type) && c->out[0] &&
      c->out[0]->kind == KILN_KIND_TENSOR && c->out[0]->numel && kiln_dtype_is_float(c->out[0]->dtype))
    kiln_set_f64(c->out[0], 0, kiln_get_f64(c->out[0], 0) + 1.0);
  kiln_error local = {0};
  kiln_code rc2 = run_original(f, n, orig, c->in, ref, &local);
  if (rc2) { /* the chain itself fails here: keep the kernel's answer (or its error) */
    for (size_t i = 0; i < n->n_out; i++) kiln_tensor_free(ref[i]);
    __atomic_store_n(&st->verified, 0, __ATOMIC_RELEASE);
    return rc;
  }
  bool agree = rc == KILN_OK;
  double ma = 0, mr = 0;
  for (size_t i = 0; agree && i < n->n_out; i++)
    if (n->out[i] >= 0) agree = outputs_agree(c->out[i], ref[i], &ma, &mr);
  st->verify_abs = ma;
  st->verify_rel = mr;
  __atomic_store_n(&st->verified, 1, __ATOMIC_RELEASE);
  if (!agree && __atomic_exchange_n(&st->fallback, 1, __ATOMIC_ACQ_REL) == 0) {
    if (s) __atomic_add_fetch(&s->model->n_fallbacks, 1, __ATOMIC_RELAXED);
    kiln_log(s ? &s->opts : NULL, KILN_LOG_WARNING, "fused node '%s' (%s) %s its original chain (max abs %.3g); running the chain from now on",
            n->name, n->op_type, rc ? "failed where" : "disagrees with", ma);
  }
  for (size_t i = 0; i < n->n_out; i++) {
    kiln_tensor_free(c->out[i]);
    c->out[i] = ref[i];
  }
  kiln_error_clear(err);
  return KILN_OK;
}

/* A fused node runs its kernel unless it has fallen back; when the kernel fails (or
 * KILN_FUSION_FAIL names its op), it switches to its original chain for good, saying so once
 * (the verdicts are the compiled model's node state; without one, each run decides alone). */
static kiln_code run_fused(kiln_frame *f, const kiln_node *n, const kiln_graph *orig, kiln_kctx *c,
                           kiln_error *err) {
  kiln_node_state alone = {0}, *st = c->state ? c->state : &alone;
  const kiln_session *s = f->session;
  bool forced = s && s->model->force_fail && kiln_list_has(s->model->force_fail, n->op_type);
  kiln_code rc = KILN_ERR_RUN;
  int unclaimed = 0; /* verified: 0 not yet, 2 claimed by a run, 1 done (a swap would undo 1) */
  if (!forced && s && c->state && s->opts.verify_fusions && !__atomic_load_n(&st->fallback, __ATOMIC_ACQUIRE) &&
      __atomic_compare_exchange_n(&st->verified, &unclaimed, 2, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return verify_fused(f, n, orig, c, err);
  if (!forced && !__atomic_load_n(&st->fallback, __ATOMIC_ACQUIRE)) {
    rc = n->schema->run(c);
    if (rc == KILN_OK) return rc;
  }
  for (size_t i = 0; i < n->n_out; i++) {
    kiln_tensor_free(c->out[i]);
    c->out[i] = NULL;
  }
  if (__atomic_exchange_n(&st->fallback, 1, __ATOMIC_ACQ_REL) == 0) {
    if (s) __atomic_add_fetch(&s->model->n_fallbacks, 1, __ATOMIC_RELAXED);
    kiln_log(s ? &s->opts : NULL, KILN_LOG_WARNING, "fused node '%s' (%s) %s; running the chain it replaced from now on",
            n->name, n->op_type, forced ? "is forced to fail by KILN_FUSION_FAIL" : err->message);
  }
  kiln_error_clear(err);
  return run_original(f, n, orig, c->in, c->out, err);
}

static kiln_code run_node(kiln_frame *f, const kiln_node *n, kiln_error *err) {
  if (kiln_run_stop_check(f->stop, err)) return KILN_ERR_CANCELLED;
  char lbl[300];
  enum { CAP = 64 };
  const kiln_tensor *inbuf[CAP];
  kiln_tensor *outbuf[CAP];
  const kiln_tensor **in = n->n_in <= CAP ? inbuf : kiln_calloc(n->n_in, sizeof *in);
  kiln_tensor **out = n->n_out <= CAP ? outbuf : kiln_calloc(n->n_out, sizeof *out);
  kiln_code rc = KILN_OK;
  if (!in || !out) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n->n_in; i++) {
    in[i] = NULL;
    if (n->in[i] < 0) continue;
    if (!(in[i] = lookup(f, n->in[i]))) {
      rc = kiln_fail(err, KILN_ERR_RUN, "%s: input '%s' has no value", nlabel(n, lbl, sizeof lbl),
                     f->g->values[n->in[i]].name);
      goto done;
    }
  }
  for (size_t i = 0; i < n->n_out; i++) out[i] = NULL;
  kiln_kctx c = {.node = n, .opset = n->opset, .n_in = n->n_in, .n_out = n->n_out, .in = in,
                 .out = out, .rt = &f->svc, .err = err, .state = f->states ? &f->states[n - f->g->nodes] : NULL};
  /* a fused node (kiln's own or a plugin's) keeps the chain it replaced as "original" */
  const kiln_attr *orig = *n->domain ? kiln_node_attr(n, "original") : NULL;
  kiln_profile *prof = !f->parent && f->session && f->g == f->session->model->ir->graph ? f->session->profile : NULL;
  if (prof) kiln_profile_begin(prof);
  uint64_t t0 = prof ? kiln_profile_now_ns() : 0;
  if (orig && orig->g)
    rc = run_fused(f, n, orig->g, &c, err);
  else
    rc = n->schema->run(&c);
  if (prof && rc == KILN_OK)
    kiln_profile_record(prof, (size_t)(n - f->g->nodes), &c, t0, kiln_profile_now_ns());
  if (rc == KILN_OK) {
    for (size_t i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0) continue;
      if (!out[i]) {
        rc = kiln_fail(err, KILN_ERR_RUN, "%s: kernel produced no value for output %zu",
                       nlabel(n, lbl, sizeof lbl), i);
        break;
      }
    }
  } else if (err && !strstr(err->message, "node '")) {
    kiln_error_prefix(err, "%s", nlabel(n, lbl, sizeof lbl));
  }
  for (size_t i = 0; i < n->n_out; i++) {
    if (rc == KILN_OK && n->out[i] >= 0) {
      kiln_tensor_free(f->own[n->out[i]]);
      f->vals[n->out[i]] = f->own[n->out[i]] = out[i];
    } else {
      kiln_tensor_free(out[i]);
    }
  }
done:
  if (in != inbuf) free(in);
  if (out != outbuf) free(out);
  return rc;
}

/* Whether the Concat n just run could have its inputs laid out inside its output: every axis
 * before the concat axis has size 1, so each input is one contiguous block of the output. */
static bool concat_in_place(const kiln_frame *f, const kiln_node *n) {
  const kiln_tensor *y = f->vals[n->out[0]];
  if (!y || y->kind != KILN_KIND_TENSOR || y->dtype == KILN_STRING || y->rank < 1) return false;
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (axis < 0) axis += y->rank;
  if (axis < 0 || axis >= y->rank) return false;
  for (int d = 0; d < axis; d++)
    if (y->dims[d] != 1) return false;
  return true;
}

/* After node i ran: tell a recording plan whether a Concat could be laid out in place, and free
 * each input whose last reader this was (remaining[] counts the readers still to run). */
static void after_node(kiln_frame *f, size_t i, size_t *remaining) {
  const kiln_node *n = &f->g->nodes[i];
  if (f->mem && kiln_planner_concat_candidate(f->mem, i))
    kiln_planner_note_concat(f->mem, i, concat_in_place(f, n));
  for (size_t k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v >= 0 && remaining[v] > 0 && --remaining[v] == 0 && f->own[v]) {
      kiln_tensor_free(f->own[v]);
      f->vals[v] = f->own[v] = NULL;
    }
  }
}

typedef struct wave_ctx {
  kiln_frame *f;
  const size_t *nodes; /* this wave's node indices */
  kiln_code *rc;       /* per node of the wave */
  kiln_error *err;
} wave_ctx;

static void wave_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const wave_ctx *w = ctx;
  for (size_t t = begin; t < end; t++) w->rc[t] = run_node(w->f, &w->f->g->nodes[w->nodes[t]], &w->err[t]);
}

/* Inter-op execution: the nodes of each wave run at the same time, one per pool thread (their
 * kernels' own loops then run serially); frees and plan notes happen between waves, in graph
 * order. The first failing node in graph order reports the error. */
static kiln_code run_waves(kiln_frame *f, const kiln_schedule *sc, size_t *remaining, kiln_error *err) {
  size_t widest = 0;
  for (size_t w = 0; w < sc->n_waves; w++)
    if (sc->wave_off[w + 1] - sc->wave_off[w] > widest) widest = sc->wave_off[w + 1] - sc->wave_off[w];
  kiln_code *rcs = kiln_calloc(widest ? widest : 1, sizeof *rcs);
  kiln_error *errs = kiln_calloc(widest ? widest : 1, sizeof *errs);
  kiln_code rc = rcs && errs ? KILN_OK : kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t w = 0; w < sc->n_waves && rc == KILN_OK; w++) {
    const size_t *nodes = sc->order + sc->wave_off[w];
    size_t n = sc->wave_off[w + 1] - sc->wave_off[w];
    if (n == 1) {
      rc = run_node(f, &f->g->nodes[nodes[0]], err);
    } else {
      memset(errs, 0, n * sizeof *errs);
      wave_ctx ctx = {f, nodes, rcs, errs};
      kiln_parallel_for(f->session->pool, n, wave_task, &ctx, 1);
      for (size_t t = 0; t < n && rc == KILN_OK; t++)
        if ((rc = rcs[t]) != KILN_OK && err) *err = errs[t];
    }
    for (size_t t = 0; t < n && rc == KILN_OK; t++) after_node(f, nodes[t], remaining);
  }
  free(rcs);
  free(errs);
  return rc;
}

/* The input-shape signature that keys memory plans: dtype and dims of every bound input. */
static void input_signature(const kiln_graph *g, size_t n, const kiln_tensor *const *inputs,
                            char *buf, size_t cap) {
  size_t off = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && i < g->n_inputs && off + 32 < cap; i++) {
    const kiln_tensor *t = inputs[i];
    if (!t) {
      off += (size_t)snprintf(buf + off, cap - off, "-;");
      continue;
    }
    off += (size_t)snprintf(buf + off, cap - off, "%d:%d", (int)t->kind, (int)t->dtype);
    for (int d = 0; d < t->rank && off + 24 < cap; d++)
      off += (size_t)snprintf(buf + off, cap - off, ",%lld", (long long)t->dims[d]);
    if (t->kind == KILN_KIND_SEQUENCE) off += (size_t)snprintf(buf + off, cap - off, "#%zu", t->n_items);
    if (off < cap) off += (size_t)snprintf(buf + off, cap - off, ";");
  }
}

static void frame_release(kiln_frame *f) {
  for (size_t i = 0; i < f->g->n_values; i++)
    kiln_tensor_free(f->own[i]);
  free(f->vals);
  free(f->own);
}

kiln_code kiln_graph_run(const kiln_session *s, kiln_frame *parent, const kiln_graph *g,
                         size_t n_inputs, const kiln_tensor *const *inputs, kiln_tensor **outputs,
                         kiln_error *err) {
  kiln_run_stop stop;
  if (!parent) kiln_run_stop_begin(&stop, s);
  /* a subgraph checks on entry too, so a Loop or Scan whose body has no nodes still stops */
  else if (kiln_run_stop_check(parent->stop, err)) {
    for (size_t i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
    return KILN_ERR_CANCELLED;
  }
  kiln_frame f = {.g = g, .vals = kiln_calloc(g->n_values, sizeof(kiln_tensor *)),
                  .own = kiln_calloc(g->n_values, sizeof(kiln_tensor *)), .parent = parent, .session = s,
                  .stop = parent ? parent->stop : &stop,
                  .states = s ? kiln_states_of(&s->model->states, g) : NULL,
                  .scratch = parent ? parent->scratch : NULL};
  bool own_scratch = !parent && s && (f.scratch = kiln_scratch_acquire(s->scratch));
  kiln_frame_services(&f);
  kiln_code rc = KILN_OK;
  kiln_run_mem mem;
  bool planned = false;
  if (!parent && s && s->planner && g == s->model->ir->graph) {
    char sig[1024];
    input_signature(g, n_inputs, inputs, sig, sizeof sig);
    if ((rc = kiln_planner_begin(s->planner, sig, &mem, err))) {
      kiln_planner_end(&mem, false);
      goto done;
    }
    planned = true;
    f.mem = &mem;
  }
  for (size_t i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
  if (!f.vals || !f.own) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_inputs && i < g->n_inputs; i++)
    if (inputs[i]) f.vals[g->inputs[i]] = inputs[i]; /* borrowed */
  /* Free each intermediate after its last reader: remaining[] counts readers still to run.
   * Graph outputs and values read by subgraphs are counted too, so they are never freed here. */
  size_t *remaining = kiln_malloc(g->n_values * sizeof *remaining);
  if (!remaining) rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  else memcpy(remaining, g->uses, g->n_values * sizeof *remaining);
  const kiln_schedule *sched = !parent && s && g == s->model->ir->graph && !kiln_in_parallel_region() ? s->sched : NULL;
  if (rc == KILN_OK && sched) {
    rc = run_waves(&f, sched, remaining, err);
  } else {
    for (size_t i = 0; i < g->n_nodes && rc == KILN_OK; i++)
      if ((rc = run_node(&f, &g->nodes[i], err)) == KILN_OK) after_node(&f, i, remaining);
  }
  free(remaining);
  for (size_t i = 0; i < g->n_outputs && rc == KILN_OK; i++) {
    int id = g->outputs[i];
    const kiln_tensor *v = lookup(&f, id);
    if (!v) {
      rc = kiln_fail(err, KILN_ERR_RUN, "graph output '%s' has no value", g->values[id].name);
      break;
    }
    bool dup = false; /* the same value may be listed twice as an output */
    for (size_t k = 0; k < i; k++) dup |= g->outputs[k] == id;
    if (f.own[id] && !dup) {
      outputs[i] = f.own[id];
      f.vals[id] = f.own[id] = NULL;
      /* later duplicates must still find it */
      for (size_t k = i + 1; k < g->n_outputs; k++)
        if (g->outputs[k] == id) {
          outputs[k] = kiln_tensor_clone(outputs[i], err);
          if (!outputs[k]) rc = KILN_ERR_NOMEM;
        }
    } else if (!outputs[i]) {
      if (!(outputs[i] = kiln_tensor_clone(v, err))) rc = err ? err->code : KILN_ERR_NOMEM;
    }
  }
  if (rc)
    for (size_t i = 0; i < g->n_outputs; i++) {
      kiln_tensor_free(outputs[i]);
      outputs[i] = NULL;
    }
done:
  if (f.vals && f.own) frame_release(&f);
  else {
    free(f.vals);
    free(f.own);
  }
  if (planned) kiln_planner_end(&mem, rc == KILN_OK);
  if (own_scratch) kiln_scratch_release(s->scratch, f.scratch);
  return rc;
}

static kiln_code frame_subgraph(void *rt, kiln_kctx *c, const kiln_graph *g, size_t n_inputs,
                                const kiln_tensor *const *inputs, kiln_tensor **outputs) {
  kiln_frame *f = rt;
  return kiln_graph_run(f->session, f, g, n_inputs, inputs, outputs, c->err);
}

static void *frame_scratch_take(void *rt, const kiln_kctx *c) {
  return kiln_scratch_take(((kiln_frame *)rt)->scratch, c->node);
}

static void frame_scratch_put(void *rt, const kiln_kctx *c, void *v, void (*free_fn)(void *)) {
  kiln_scratch_put(((kiln_frame *)rt)->scratch, c->node, v, free_fn);
}

static void *frame_out_slot(void *rt, const kiln_kctx *c, size_t i, size_t bytes) {
  kiln_frame *f = rt;
  return f->mem ? kiln_planner_slot(f->mem, c->node->out[i], bytes) : NULL;
}

void kiln_frame_services(kiln_frame *f) {
  const kiln_session *s = f->session;
  f->svc = (kiln_kservices){.rt = f, .graph = f->g, .pool = s ? s->pool : NULL, .opts = s ? &s->opts : NULL,
                            .plugins = s ? s->model->plugins : NULL, .out_slot = frame_out_slot,
                            .subgraph = frame_subgraph, .scratch_take = frame_scratch_take,
                            .scratch_put = frame_scratch_put};
}
