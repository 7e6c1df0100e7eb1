/* Public session API: sessions on a compiled model (api_model.c); inspect, run. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx/reader.h"
#include "onnx/writer.h"
#include "opt/opt.h"
#include "plugin/plugin.h"
#include "runtime/pool_shared.h"
#include "runtime/session.h"

kiln_code kiln_session_create_from_model(kiln_model *m, const kiln_options *opts,
                                         kiln_session **out, kiln_error *err) {
  if (!m || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model and out are required");
  *out = NULL;
  kiln_options so;
  kiln_options_init(&so);
  if (opts) memcpy(&so, opts, opts->size < sizeof so ? opts->size : sizeof so);
  if (so.threads < 0) return kiln_fail(err, KILN_ERR_INVALID_ARG, "threads must be >= 0 (0: one per core)");
  kiln_session *s = calloc(1, sizeof *s);
  if (!s) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  s->model = kiln_model_ref(m);
  s->opts = m->opts;
  s->opts.threads = so.threads;
  s->opts.profile = so.profile;
  s->opts.inter_op = so.inter_op;
  s->opts.max_run_ms = so.max_run_ms;
  const kiln_graph *g = m->ir->graph;
  kiln_code rc = KILN_OK;
  s->pool = kiln_pool_acquire(s->opts.threads);
  if (s->opts.inter_op && kiln_threadpool_size(s->pool) > 1 && !(s->sched = kiln_schedule_new(g)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && !(s->planner = kiln_planner_new(g, s->sched ? s->sched->level : NULL)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && !(s->scratch = kiln_scratch_pool_new())) rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && s->opts.profile && !(s->profile = kiln_profile_new(g->n_nodes, s->pool, !s->sched)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && s->profile) kiln_threadpool_timing(s->pool, 1);
  if (rc) {
    kiln_session_free(s);
    return rc;
  }
  *out = s;
  return KILN_OK;
}

kiln_model *kiln_session_model(const kiln_session *s) { return s ? s->model : NULL; }

/* kiln_model_load* and kiln_session_create_from_model, dropping the load's reference. */
static kiln_code session_from(kiln_code rc, kiln_model *m, const kiln_options *opts, kiln_session **out,
                              kiln_error *err) {
  if (!rc) rc = kiln_session_create_from_model(m, opts, out, err);
  kiln_model_free(m);
  return rc;
}

kiln_code kiln_session_create(const char *model_path, const kiln_options *opts,
                              kiln_session **out, kiln_error *err) {
  if (!model_path || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model path and out are required");
  *out = NULL;
  kiln_model *m = NULL;
  kiln_code rc = kiln_model_load(model_path, opts, &m, err);
  return session_from(rc, m, opts, out, err);
}

kiln_code kiln_session_create_from_memory(const void *bytes, size_t len, const char *base_dir,
                                          const kiln_options *opts, kiln_session **out,
                                          kiln_error *err) {
  if (!bytes || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "bytes and out are required");
  *out = NULL;
  kiln_model *m = NULL;
  kiln_code rc = kiln_model_load_from_memory(bytes, len, base_dir, opts, &m, err);
  return session_from(rc, m, opts, out, err);
}

void kiln_session_free(kiln_session *s) {
  if (!s) return;
  kiln_planner_free(s->planner);
  kiln_scratch_pool_free(s->scratch);
  if (s->profile) kiln_threadpool_timing(s->pool, 0);
  kiln_pool_release(s->pool);
  kiln_profile_free(s->profile);
  kiln_schedule_free(s->sched);
  kiln_model_free(s->model);
  free(s);
}

kiln_code kiln_session_prepacked(const kiln_session *s, size_t *nodes) {
  if (!s || !nodes) return KILN_ERR_INVALID_ARG;
  *nodes = s->model->n_prepacked;
  return KILN_OK;
}

kiln_code kiln_session_memory(const kiln_session *s, size_t *arena_bytes,
                              size_t *intermediate_bytes) {
  if (!s) return KILN_ERR_INVALID_ARG;
  kiln_planner_stats(s->planner, arena_bytes, intermediate_bytes, NULL);
  return KILN_OK;
}

kiln_code kiln_session_fusion_info(const kiln_session *s, size_t i, kiln_fusion_info *info) {
  if (!s || !info) return KILN_ERR_INVALID_ARG;
  const kiln_graph *g = s->model->ir->graph;
  for (size_t k = 0; k < g->n_nodes; k++) {
    const kiln_node *n = &g->nodes[k];
    const kiln_attr *orig = kiln_node_attr(n, "original");
    if (!orig || !orig->g || i-- > 0) continue;
    info->name = n->name;
    info->op_type = n->op_type;
    info->domain = n->domain;
    info->replaced = orig->g->n_nodes;
    kiln_node_state none = {0}, *ns = kiln_states_of(&s->model->states, g);
    const kiln_node_state *st = ns ? &ns[k] : &none;
    info->verified = __atomic_load_n(&st->verified, __ATOMIC_ACQUIRE) == 1;
    info->max_abs = info->verified ? st->verify_abs : 0;
    info->max_rel = info->verified ? st->verify_rel : 0;
    info->fallen_back = __atomic_load_n(&st->fallback, __ATOMIC_ACQUIRE);
    info->intermediate_bytes = 0;
    const kiln_graph *og = orig->g;
    for (size_t v = 0; v < og->n_values; v++) {
      const kiln_type *t = &og->values[v].type;
      bool is_out = false;
      for (size_t o = 0; o < og->n_outputs; o++) is_out |= og->outputs[o] == (int)v;
      if (is_out || og->values[v].producer < 0 || t->kind != KILN_T_TENSOR || t->rank < 0) continue;
      uint64_t bytes = kiln_dtype_size(t->dtype);
      for (int d = 0; d < t->rank; d++) bytes *= (uint64_t)(t->dims[d] > 0 ? t->dims[d] : 1);
      info->intermediate_bytes += bytes;
    }
    return KILN_OK;
  }
  return KILN_ERR_INVALID_ARG;
}

size_t kiln_session_fallback_count(const kiln_session *s) {
  return s ? __atomic_load_n(&s->model->n_fallbacks, __ATOMIC_RELAXED) : 0;
}

size_t kiln_session_input_count(const kiln_session *s) { return s ? s->model->n_feeds : 0; }
size_t kiln_session_output_count(const kiln_session *s) { return s ? s->model->ir->graph->n_outputs : 0; }

static void fill_info(const kiln_value_info *v, kiln_io_info *info) {
  info->name = v->name;
  const kiln_type *t = &v->type;
  info->kind = t->kind == KILN_T_SEQUENCE ? KILN_KIND_SEQUENCE
               : t->kind == KILN_T_OPTIONAL ? KILN_KIND_NONE : KILN_KIND_TENSOR;
  info->dtype = t->dtype;
  info->rank = t->rank;
  info->dims = t->dims;
  info->dim_names = (const char *const *)t->sym;
}

kiln_code kiln_session_input_info(const kiln_session *s, size_t i, kiln_io_info *info, kiln_error *err) {
  if (!s || !info || i >= s->model->n_feeds) return kiln_fail(err, KILN_ERR_INVALID_ARG, "input %zu does not exist", i);
  fill_info(&s->model->ir->graph->values[s->model->feeds[i]], info);
  return KILN_OK;
}

kiln_code kiln_session_output_info(const kiln_session *s, size_t i, kiln_io_info *info, kiln_error *err) {
  if (!s || !info || i >= s->model->ir->graph->n_outputs)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "output %zu does not exist", i);
  fill_info(&s->model->ir->graph->values[s->model->ir->graph->outputs[i]], info);
  return KILN_OK;
}

/* One element in a tensor of rank >= 1 (every dim 1): what callers pass for a scalar. */
static bool one_element(const kiln_tensor *t) {
  return t->kind == KILN_KIND_TENSOR && t->rank > 0 && t->numel == 1;
}

/* A fed value must match the declared input: kind, element type, rank and fixed dims. A
 * declared scalar (rank 0) also takes a one-element tensor of any rank, as ONNX Runtime does;
 * *as_scalar is then set and the caller passes it on as rank 0. */
static kiln_code check_feed(const kiln_value_info *v, const kiln_tensor *t, bool *as_scalar,
                            kiln_error *err) {
  const kiln_type *ty = &v->type;
  char a[256], b[256];
  if (ty->kind == KILN_T_UNKNOWN) return KILN_OK;
  if (ty->kind == KILN_T_OPTIONAL) return KILN_OK;
  if ((ty->kind == KILN_T_SEQUENCE) != (t->kind == KILN_KIND_SEQUENCE) || t->kind == KILN_KIND_NONE)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects %s, got %s", v->name,
                     kiln_type_str(ty, a, sizeof a), kiln_shape_str(t, b, sizeof b));
  if (ty->dtype && t->dtype != ty->dtype && !(t->kind == KILN_KIND_SEQUENCE && t->n_items == 0))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects element type %s, got %s", v->name,
                     kiln_dtype_name(ty->dtype), kiln_dtype_name(t->dtype));
  if (t->kind != KILN_KIND_TENSOR || ty->rank < 0) return KILN_OK;
  if ((*as_scalar = ty->rank == 0 && one_element(t))) return KILN_OK;
  if (ty->rank != t->rank)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects shape %s, got %s", v->name,
                     kiln_type_str(ty, a, sizeof a), kiln_shape_str(t, b, sizeof b));
  for (int d = 0; d < t->rank; d++)
    if (ty->dims[d] >= 0 && !ty->sym[d] && ty->dims[d] != t->dims[d])
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects shape %s, got %s (dim %d)",
                       v->name, kiln_type_str(ty, a, sizeof a), kiln_shape_str(t, b, sizeof b), d);
  return KILN_OK;
}

/* A rank-0 view of a one-element tensor: the same data, borrowed, never freed. */
static const kiln_tensor *scalar_view(const kiln_tensor *t, kiln_tensor *view) {
  *view = *t;
  view->rank = 0;
  view->borrowed = true;
  view->pool_cap = 0;
  return view;
}

kiln_code kiln_session_run(kiln_session *s, size_t n_inputs, const char *const *input_names,
                           const kiln_tensor *const *inputs, size_t n_outputs,
                           const char *const *output_names, kiln_tensor **outputs,
                           kiln_error *err) {
  if (!s || (n_inputs && (!input_names || !inputs)) || !outputs)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_session_run: missing argument");
  const kiln_graph *g = s->model->ir->graph;
  const kiln_tensor **bound = kiln_calloc(g->n_inputs, sizeof *bound);
  kiln_tensor **all = kiln_calloc(g->n_outputs, sizeof *all);
  kiln_tensor *scalars = kiln_calloc(g->n_inputs, sizeof *scalars); /* rank-0 views of feeds */
  kiln_code rc = KILN_OK;
  if (!bound || !all || !scalars) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_inputs && !rc; i++) {
    size_t k = 0;
    while (k < g->n_inputs && strcmp(g->values[g->inputs[k]].name, input_names[i] ? input_names[i] : "")) k++;
    if (k == g->n_inputs) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "the model has no input named '%s'", input_names[i]);
    else if (!inputs[i]) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' is NULL", input_names[i]);
    else {
      bool as_scalar = false;
      if (!(rc = check_feed(&g->values[g->inputs[k]], inputs[i], &as_scalar, err))) bound[k] = inputs[i];
      if (!rc && as_scalar) bound[k] = scalar_view(inputs[i], &scalars[k]);
    }
  }
  for (size_t k = 0; k < g->n_inputs && !rc; k++)
    if (!bound[k] && !g->values[g->inputs[k]].init && g->values[g->inputs[k]].type.kind != KILN_T_OPTIONAL)
      rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' was not given", g->values[g->inputs[k]].name);
  if (!rc) rc = kiln_graph_run(s, NULL, g, g->n_inputs, bound, all, err);
  if (rc) goto done;
  if (!output_names) {
    for (size_t i = 0; i < n_outputs && i < g->n_outputs; i++) {
      outputs[i] = all[i];
      all[i] = NULL;
    }
  } else {
    for (size_t i = 0; i < n_outputs; i++) outputs[i] = NULL;
    for (size_t i = 0; i < n_outputs && !rc; i++) {
      size_t k = 0;
      while (k < g->n_outputs && strcmp(g->values[g->outputs[k]].name, output_names[i] ? output_names[i] : "")) k++;
      if (k == g->n_outputs) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "the model has no output named '%s'", output_names[i]);
      else if (all[k]) {
        outputs[i] = all[k];
        all[k] = NULL;
      } else {
        size_t j = 0; /* the same output asked for twice: copy the first */
        while (j < i && strcmp(output_names[j], output_names[i])) j++;
        if (!(outputs[i] = kiln_tensor_clone(outputs[j], err))) rc = KILN_ERR_NOMEM;
      }
    }
    if (rc)
      for (size_t i = 0; i < n_outputs; i++) {
        kiln_tensor_free(outputs[i]);
        outputs[i] = NULL;
      }
  }
done:
  if (all)
    for (size_t i = 0; i < g->n_outputs; i++) kiln_tensor_free(all[i]);
  free(all);
  free(bound);
  free(scalars);
  return rc;
}

int kiln_session_threads(const kiln_session *s) { return s ? kiln_threadpool_size(s->pool) : 1; }

kiln_code kiln_session_stats(const kiln_session *s, kiln_model_stats *st) {
  if (!s || !st) return KILN_ERR_INVALID_ARG;
  memset(st, 0, sizeof *st);
  const kiln_graph *g = s->model->ir->graph;
  st->ir_version = s->model->ir->ir_version;
  st->n_nodes = g->n_nodes;
  st->n_opsets = s->model->ir->n_opsets;
  for (size_t i = 0; i < g->n_values; i++)
    if (g->values[i].init) {
      st->n_initializers++;
      st->param_bytes += g->values[i].init->nbytes;
    }
  return KILN_OK;
}

kiln_code kiln_session_opset(const kiln_session *s, size_t i, const char **domain, int64_t *version) {
  if (!s || i >= s->model->ir->n_opsets) return KILN_ERR_INVALID_ARG;
  *domain = s->model->ir->opsets[i].domain;
  *version = s->model->ir->opsets[i].version;
  return KILN_OK;
}

kiln_code kiln_session_pass_stat(const kiln_session *s, size_t i, const char **pass,
                                 size_t *rewrites) {
  if (!s || i >= s->model->opt_log.n) return KILN_ERR_INVALID_ARG;
  *pass = s->model->opt_log.stats[i].pass;
  *rewrites = s->model->opt_log.stats[i].rewrites;
  return KILN_OK;
}

kiln_code kiln_session_save(const kiln_session *s, const char *path, kiln_error *err) {
  if (!s || !path) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_session_save: missing argument");
  return kiln_model_write_file(s->model->ir, path, err);
}

kiln_code kiln_session_op_count(const kiln_session *s, size_t i, const char **op_type, size_t *count) {
  if (!s || i >= s->model->n_hist) return KILN_ERR_INVALID_ARG;
  *op_type = s->model->hist[i].op;
  *count = s->model->hist[i].count;
  return KILN_OK;
}

size_t kiln_session_profile_count(const kiln_session *s) {
  return s && s->profile ? s->profile->n : 0;
}

kiln_code kiln_session_profile(const kiln_session *s, size_t i, kiln_node_profile *out) {
  if (!s || !out || !s->profile || i >= s->profile->n) return KILN_ERR_INVALID_ARG;
  const kiln_node *n = &s->model->ir->graph->nodes[i];
  const kiln_prof_entry *e = &s->profile->e[i];
  out->name = n->name;
  out->op_type = n->op_type;
  out->domain = n->domain;
  out->runs = __atomic_load_n(&e->runs, __ATOMIC_ACQUIRE);
  out->total_ms = (double)__atomic_load_n(&e->ns, __ATOMIC_RELAXED) * 1e-6;
  out->flops = out->runs ? e->flops : 0;
  out->bytes = out->runs ? e->bytes : 0;
  out->shape = out->runs ? e->shape : "";
  out->last_start_ms = (double)__atomic_load_n(&e->last_start_ns, __ATOMIC_RELAXED) * 1e-6;
  out->last_ms = (double)__atomic_load_n(&e->last_ns, __ATOMIC_RELAXED) * 1e-6;
  out->threads = s->profile->thr ? s->profile->n_threads : 0;
  return KILN_OK;
}

kiln_code kiln_session_profile_thread(const kiln_session *s, size_t i, int t, kiln_thread_profile *out) {
  if (!s || !out || !s->profile || i >= s->profile->n || !s->profile->thr || t < 0 ||
      t >= s->profile->n_threads)
    return KILN_ERR_INVALID_ARG;
  const kiln_prof_thread *th = &s->profile->thr[i * (size_t)s->profile->n_threads + (size_t)t];
  out->busy_ms = (double)th->busy_ns * 1e-6;
  out->last_start_ms = (double)th->last_start_ns * 1e-6;
  out->last_busy_ms = (double)th->last_busy_ns * 1e-6;
  return KILN_OK;
}

void kiln_session_profile_reset(kiln_session *s) {
  if (s) kiln_profile_reset(s->profile);
}
