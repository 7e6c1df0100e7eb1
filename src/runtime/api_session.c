/* Public session API: create, inspect, run. */
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

void kiln_options_init(kiln_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->opt_level = 2;
  o->threads = 0;
}

static kiln_code check_opsets(const kiln_model *m, kiln_error *err) {
  for (size_t i = 0; i < m->n_opsets; i++) {
    const kiln_opset *o = &m->opsets[i];
    if (!*o->domain && (o->version < 1 || o->version > KILN_MAX_OPSET))
      return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                       "the model imports ai.onnx opset %lld; kiln supports opsets 1 to %d",
                       (long long)o->version, KILN_MAX_OPSET);
  }
  return KILN_OK;
}

static int hist_cmp(const void *a, const void *b) {
  const kiln_op_hist *x = a, *y = b;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return strcmp(x->op, y->op);
}

static kiln_code build_hist(kiln_session *s, kiln_error *err) {
  const kiln_graph *g = s->model->graph;
  s->hist = kiln_calloc(g->n_nodes, sizeof *s->hist);
  if (!s->hist) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_nodes; i++) {
    size_t k = 0;
    while (k < s->n_hist && strcmp(s->hist[k].op, g->nodes[i].op_type)) k++;
    if (k == s->n_hist) s->hist[s->n_hist++].op = g->nodes[i].op_type;
    s->hist[k].count++;
  }
  qsort(s->hist, s->n_hist, sizeof *s->hist, hist_cmp);
  return KILN_OK;
}

static kiln_code finish_create(kiln_model *m, const kiln_options *opts, kiln_session **out,
                               kiln_error *err) {
  kiln_session *s = calloc(1, sizeof *s);
  if (!s) {
    kiln_model_free(m);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  s->model = m;
  kiln_options_init(&s->opts);
  if (opts) memcpy(&s->opts, opts, opts->size < sizeof s->opts ? opts->size : sizeof s->opts);
  s->opts.size = sizeof s->opts;
  s->opts.disabled_passes = NULL; /* borrowed only during creation */
  s->opts.plugins = NULL;
  const char *const *plugin_paths =
      opts && opts->size >= offsetof(kiln_options, plugins) + sizeof opts->plugins ? opts->plugins : NULL;
  const char *ff = getenv("KILN_FUSION_FAIL"), *fs = getenv("KILN_FUSION_SKEW");
  if ((ff && *ff && !(s->force_fail = kiln_strdup(ff))) || (fs && *fs && !(s->force_skew = kiln_strdup(fs)))) {
    kiln_session_free(s);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  kiln_code rc = kiln_plugins_load(plugin_paths, getenv("KILN_PLUGINS"), &s->plugins, err);
  if (!rc) rc = check_opsets(m, err);
  if (!rc) rc = kiln_graph_prepare_ops(m->graph, m, s->plugins, err);
  if (!rc && s->opts.opt_level > 0) {
    kiln_opt_config cfg = {.level = s->opts.opt_level,
                           .disabled = opts && opts->size > offsetof(kiln_options, disabled_passes)
                                           ? opts->disabled_passes : NULL};
    rc = kiln_optimize_plugins(m, &cfg, s->plugins, &s->opt_log, err);
  }
  if (!rc) rc = kiln_plugins_instantiate(s->plugins, m->graph, err);
  if (rc) {
    kiln_session_free(s);
    return rc;
  }
  const kiln_graph *g = m->graph;
  s->feeds = kiln_malloc(g->n_inputs * sizeof *s->feeds);
  if (!s->feeds) rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; !rc && i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].init) s->feeds[s->n_feeds++] = g->inputs[i];
  if (!rc) rc = build_hist(s, err);
  if (!rc && s->opts.threads < 0) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "threads must be >= 0 (0: one per core)");
  if (!rc) s->pool = kiln_pool_acquire(s->opts.threads);
  if (!rc && s->opts.inter_op && kiln_threadpool_size(s->pool) > 1 && !(s->sched = kiln_schedule_new(g)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && !(s->planner = kiln_planner_new(g, s->sched ? s->sched->level : NULL)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && s->opts.profile && !(s->profile = kiln_profile_new(g->n_nodes)))
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!rc && !s->opts.lazy_weights) s->n_prepacked = kiln_prepack(s);
  if (rc) {
    kiln_session_free(s);
    return rc;
  }
  *out = s;
  return KILN_OK;
}

kiln_code kiln_session_create(const char *model_path, const kiln_options *opts,
                              kiln_session **out, kiln_error *err) {
  if (!model_path || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model path and out are required");
  *out = NULL;
  kiln_model *m;
  kiln_code rc = kiln_model_read_file(model_path, &m, err);
  if (rc) return rc;
  rc = finish_create(m, opts, out, err);
  if (rc) kiln_error_prefix(err, "%s", model_path);
  return rc;
}

kiln_code kiln_session_create_from_memory(const void *bytes, size_t len, const char *base_dir,
                                          const kiln_options *opts, kiln_session **out,
                                          kiln_error *err) {
  if (!bytes || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "bytes and out are required");
  *out = NULL;
  kiln_model *m;
  kiln_code rc = kiln_model_read_memory(bytes, len, base_dir, &m, err);
  if (rc) return rc;
  return finish_create(m, opts, out, err);
}

void kiln_session_free(kiln_session *s) {
  if (!s) return;
  kiln_plugins_free(s->plugins); /* kernel states, then the libraries (nothing runs after) */
  kiln_model_free(s->model);
  free(s->feeds);
  free(s->hist);
  free(s->force_fail);
  free(s->force_skew);
  kiln_planner_free(s->planner);
  kiln_pool_release(s->pool);
  kiln_profile_free(s->profile);
  kiln_schedule_free(s->sched);
  free(s);
}

kiln_code kiln_session_prepacked(const kiln_session *s, size_t *nodes) {
  if (!s || !nodes) return KILN_ERR_INVALID_ARG;
  *nodes = s->n_prepacked;
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
  const kiln_graph *g = s->model->graph;
  for (size_t k = 0; k < g->n_nodes; k++) {
    const kiln_node *n = &g->nodes[k];
    const kiln_attr *orig = kiln_node_attr(n, "original");
    if (!orig || !orig->g || i-- > 0) continue;
    info->name = n->name;
    info->op_type = n->op_type;
    info->domain = n->domain;
    info->replaced = orig->g->n_nodes;
    info->verified = __atomic_load_n(&n->verified, __ATOMIC_ACQUIRE) == 1;
    info->max_abs = info->verified ? n->verify_abs : 0;
    info->max_rel = info->verified ? n->verify_rel : 0;
    info->fallen_back = __atomic_load_n(&n->fallback, __ATOMIC_ACQUIRE);
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
  return s ? __atomic_load_n(&s->n_fallbacks, __ATOMIC_RELAXED) : 0;
}

size_t kiln_session_input_count(const kiln_session *s) { return s ? s->n_feeds : 0; }
size_t kiln_session_output_count(const kiln_session *s) { return s ? s->model->graph->n_outputs : 0; }

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
  if (!s || !info || i >= s->n_feeds) return kiln_fail(err, KILN_ERR_INVALID_ARG, "input %zu does not exist", i);
  fill_info(&s->model->graph->values[s->feeds[i]], info);
  return KILN_OK;
}

kiln_code kiln_session_output_info(const kiln_session *s, size_t i, kiln_io_info *info, kiln_error *err) {
  if (!s || !info || i >= s->model->graph->n_outputs)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "output %zu does not exist", i);
  fill_info(&s->model->graph->values[s->model->graph->outputs[i]], info);
  return KILN_OK;
}

/* A fed value must match the declared input: kind, element type, rank and fixed dims. */
static kiln_code check_feed(const kiln_value_info *v, const kiln_tensor *t, kiln_error *err) {
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
  if (ty->rank != t->rank)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects shape %s, got %s", v->name,
                     kiln_type_str(ty, a, sizeof a), kiln_shape_str(t, b, sizeof b));
  for (int d = 0; d < t->rank; d++)
    if (ty->dims[d] >= 0 && !ty->sym[d] && ty->dims[d] != t->dims[d])
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' expects shape %s, got %s (dim %d)",
                       v->name, kiln_type_str(ty, a, sizeof a), kiln_shape_str(t, b, sizeof b), d);
  return KILN_OK;
}

kiln_code kiln_session_run(kiln_session *s, size_t n_inputs, const char *const *input_names,
                           const kiln_tensor *const *inputs, size_t n_outputs,
                           const char *const *output_names, kiln_tensor **outputs,
                           kiln_error *err) {
  if (!s || (n_inputs && (!input_names || !inputs)) || !outputs)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_session_run: missing argument");
  const kiln_graph *g = s->model->graph;
  const kiln_tensor **bound = kiln_calloc(g->n_inputs, sizeof *bound);
  kiln_tensor **all = kiln_calloc(g->n_outputs, sizeof *all);
  kiln_code rc = KILN_OK;
  if (!bound || !all) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_inputs && !rc; i++) {
    size_t k = 0;
    while (k < g->n_inputs && strcmp(g->values[g->inputs[k]].name, input_names[i] ? input_names[i] : "")) k++;
    if (k == g->n_inputs) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "the model has no input named '%s'", input_names[i]);
    else if (!inputs[i]) rc = kiln_fail(err, KILN_ERR_INVALID_ARG, "input '%s' is NULL", input_names[i]);
    else if (!(rc = check_feed(&g->values[g->inputs[k]], inputs[i], err))) bound[k] = inputs[i];
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
  return rc;
}

int kiln_session_threads(const kiln_session *s) { return s ? kiln_threadpool_size(s->pool) : 1; }

kiln_code kiln_session_stats(const kiln_session *s, kiln_model_stats *st) {
  if (!s || !st) return KILN_ERR_INVALID_ARG;
  memset(st, 0, sizeof *st);
  const kiln_graph *g = s->model->graph;
  st->ir_version = s->model->ir_version;
  st->n_nodes = g->n_nodes;
  st->n_opsets = s->model->n_opsets;
  for (size_t i = 0; i < g->n_values; i++)
    if (g->values[i].init) {
      st->n_initializers++;
      st->param_bytes += g->values[i].init->nbytes;
    }
  return KILN_OK;
}

kiln_code kiln_session_opset(const kiln_session *s, size_t i, const char **domain, int64_t *version) {
  if (!s || i >= s->model->n_opsets) return KILN_ERR_INVALID_ARG;
  *domain = s->model->opsets[i].domain;
  *version = s->model->opsets[i].version;
  return KILN_OK;
}

kiln_code kiln_session_pass_stat(const kiln_session *s, size_t i, const char **pass,
                                 size_t *rewrites) {
  if (!s || i >= s->opt_log.n) return KILN_ERR_INVALID_ARG;
  *pass = s->opt_log.stats[i].pass;
  *rewrites = s->opt_log.stats[i].rewrites;
  return KILN_OK;
}

kiln_code kiln_session_save(const kiln_session *s, const char *path, kiln_error *err) {
  if (!s || !path) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_session_save: missing argument");
  return kiln_model_write_file(s->model, path, err);
}

kiln_code kiln_session_op_count(const kiln_session *s, size_t i, const char **op_type, size_t *count) {
  if (!s || i >= s->n_hist) return KILN_ERR_INVALID_ARG;
  *op_type = s->hist[i].op;
  *count = s->hist[i].count;
  return KILN_OK;
}

size_t kiln_session_profile_count(const kiln_session *s) {
  return s && s->profile ? s->profile->n : 0;
}

kiln_code kiln_session_profile(const kiln_session *s, size_t i, kiln_node_profile *out) {
  if (!s || !out || !s->profile || i >= s->profile->n) return KILN_ERR_INVALID_ARG;
  const kiln_node *n = &s->model->graph->nodes[i];
  const kiln_prof_entry *e = &s->profile->e[i];
  out->name = n->name;
  out->op_type = n->op_type;
  out->domain = n->domain;
  out->runs = __atomic_load_n(&e->runs, __ATOMIC_ACQUIRE);
  out->total_ms = (double)__atomic_load_n(&e->ns, __ATOMIC_RELAXED) * 1e-6;
  out->flops = out->runs ? e->flops : 0;
  out->bytes = out->runs ? e->bytes : 0;
  out->shape = out->runs ? e->shape : "";
  return KILN_OK;
}

void kiln_session_profile_reset(kiln_session *s) {
  if (!s || !s->profile) return;
  memset(s->profile->e, 0, s->profile->n * sizeof *s->profile->e);
}
