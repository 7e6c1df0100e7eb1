/* Public compiled-model API: load, check, optimise and pack a model once (kiln_model), shared
 * by every session created from it (api_session.c). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm_amx.h"
#include "onnx/reader.h"
#include "opt/opt.h"
#include "plugin/plugin.h"
#include "runtime/dims.h"
#include "runtime/mem_check.h"
#include "runtime/pool_shared.h"
#include "runtime/session.h"

kiln_model *kiln_model_ref(kiln_model *m) {
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
  return m;
}

void kiln_model_free(kiln_model *m) {
  if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  kiln_states_free(&m->states); /* the node caches, while the graph still describes them */
  kiln_plugins_free(m->plugins); /* kernel states, then the libraries (nothing runs after) */
  kiln_ir_model_free(m->ir);
  free(m->feeds);
  free(m->hist);
  free(m->force_fail);
  free(m->force_skew);
  free(m);
}

static kiln_code check_opsets(const kiln_ir_model *m, kiln_error *err) {
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

static kiln_code build_hist(kiln_model *m, kiln_error *err) {
  const kiln_graph *g = m->ir->graph;
  m->hist = kiln_calloc(g->n_nodes, sizeof *m->hist);
  if (!m->hist) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_nodes; i++) {
    size_t k = 0;
    while (k < m->n_hist && strcmp(m->hist[k].op, g->nodes[i].op_type)) k++;
    if (k == m->n_hist) m->hist[m->n_hist++].op = g->nodes[i].op_type;
    m->hist[k].count++;
  }
  qsort(m->hist, m->n_hist, sizeof *m->hist, hist_cmp);
  return KILN_OK;
}

static kiln_code find_feeds(kiln_model *m, kiln_error *err) {
  const kiln_graph *g = m->ir->graph;
  m->feeds = kiln_malloc(g->n_inputs * sizeof *m->feeds);
  if (!m->feeds && g->n_inputs) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].init) m->feeds[m->n_feeds++] = g->inputs[i];
  return KILN_OK;
}

/* The options as the model keeps them: defaults, then what the caller's struct holds (as far
 * as its size reaches); the borrowed pointers are cleared. */
static void copy_options(kiln_options *dst, const kiln_options *opts) {
  kiln_options_init(dst);
  if (opts) memcpy(dst, opts, opts->size < sizeof *dst ? opts->size : sizeof *dst);
  dst->size = sizeof *dst;
  dst->disabled_passes = NULL; /* borrowed only during loading */
  dst->plugins = NULL;
  dst->dim_overrides = NULL;
}

static const char *const *opt_plugins(const kiln_options *opts) {
  return opts && opts->size >= offsetof(kiln_options, plugins) + sizeof opts->plugins ? opts->plugins : NULL;
}

static const char *const *opt_dims(const kiln_options *opts) {
  return opts && opts->size >= offsetof(kiln_options, dim_overrides) + sizeof opts->dim_overrides
             ? opts->dim_overrides : NULL;
}

static const char *opt_disabled(const kiln_options *opts) {
  return opts && opts->size > offsetof(kiln_options, disabled_passes) ? opts->disabled_passes : NULL;
}

/* The optimizer's re-preparation after a pass: resolve ops (the model's plugins too), sort, type. */
static kiln_code reprepare(kiln_ir_model *ir, const void *plugins, kiln_error *err) {
  return kiln_graph_prepare_ops(ir->graph, ir, plugins, err);
}

/* Plugins, checks, optimisation and packing of a freshly read IR model (m->ir). */
static kiln_code compile(kiln_model *m, const kiln_options *opts, kiln_error *err) {
  const char *ff = getenv("KILN_FUSION_FAIL"), *fs = getenv("KILN_FUSION_SKEW");
  if ((ff && *ff && !(m->force_fail = kiln_strdup(ff))) || (fs && *fs && !(m->force_skew = kiln_strdup(fs))))
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (m->opts.threads < 0) return kiln_fail(err, KILN_ERR_INVALID_ARG, "threads must be >= 0 (0: one per core)");
  kiln_code rc = kiln_plugins_load(opt_plugins(opts), getenv("KILN_PLUGINS"), &m->plugins, err);
  if (!rc) rc = check_opsets(m->ir, err);
  if (!rc) rc = kiln_dims_override(m->ir, opt_dims(opts), err);
  if (!rc) rc = kiln_graph_prepare_ops(m->ir->graph, m->ir, m->plugins, err);
  if (!rc && m->opts.opt_level > 0) {
    kiln_opt_config cfg = {.level = m->opts.opt_level, .disabled = opt_disabled(opts), .prepare = reprepare,
                           .user = m->plugins};
    cfg.conv_pool_one_pass = kiln_cpu_isa() >= KILN_ISA_AVX2; /* CPU choices at compile time */
    cfg.conv_block = kiln_cpu_isa() >= KILN_ISA_AVX512 && !kiln_amx_available();
    if (kiln_plugins_fusion_count(m->plugins)) cfg.extra_name = KILN_PLUGIN_PASS, cfg.extra = kiln_plugins_pass;
    rc = kiln_optimize(m->ir, &cfg, &m->opt_log, err);
  }
  if (!rc) rc = kiln_plugins_instantiate(m->plugins, m->ir->graph, err);
  if (!rc) rc = kiln_check_memory(m->ir->graph, m->opts.max_memory_bytes, err);
  if (!rc) rc = kiln_states_build(&m->states, m->ir->graph, err);
  if (!rc) rc = find_feeds(m, err);
  if (!rc) rc = build_hist(m, err);
  if (!rc && !m->opts.lazy_weights) {
    /* the prepare hooks see a session: a stand-in with the model's options and a pool */
    kiln_session packer = {.model = m, .opts = m->opts, .pool = kiln_pool_acquire(m->opts.threads)};
    m->n_prepacked = kiln_prepack(&packer);
    kiln_pool_release(packer.pool);
  }
  for (size_t i = 0; !rc && i < m->opt_log.n; i++)
    if (m->opt_log.stats[i].rewrites)
      kiln_log(&m->opts, KILN_LOG_INFO, "pass %s: %zu rewrites", m->opt_log.stats[i].pass, m->opt_log.stats[i].rewrites);
  if (!rc)
    kiln_log(&m->opts, KILN_LOG_INFO, "model compiled: %zu nodes at level %d, %zu nodes packed their weights",
             m->ir->graph->n_nodes, m->opts.opt_level, m->n_prepacked);
  return rc;
}

/* Wrap a read IR model (taking it, also on failure) and compile it. */
static kiln_code finish_load(kiln_ir_model *ir, const kiln_options *opts, kiln_model **out, kiln_error *err) {
  kiln_model *m = calloc(1, sizeof *m);
  if (!m) {
    kiln_ir_model_free(ir);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  m->refs = 1;
  m->ir = ir;
  copy_options(&m->opts, opts);
  kiln_limits lim;
  kiln_limits_from_options(opts, &lim);
  m->opts.max_memory_bytes = kiln_limits_memory(&lim); /* the default resolved, for every run */
  kiln_code rc = compile(m, opts, err);
  if (rc) {
    kiln_model_free(m);
    return rc;
  }
  *out = m;
  return KILN_OK;
}

kiln_code kiln_model_load(const char *model_path, const kiln_options *opts, kiln_model **out,
                          kiln_error *err) {
  if (!model_path || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model path and out are required");
  *out = NULL;
  kiln_ir_model *ir;
  kiln_limits lim;
  kiln_limits_from_options(opts, &lim);
  kiln_code rc = kiln_model_read_file(model_path, &lim, &ir, err);
  if (rc) return rc;
  rc = finish_load(ir, opts, out, err);
  if (rc) kiln_error_prefix(err, "%s", model_path);
  return rc;
}

kiln_code kiln_model_load_from_memory(const void *bytes, size_t len, const char *base_dir,
                                      const kiln_options *opts, kiln_model **out,
                                      kiln_error *err) {
  if (!bytes || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "bytes and out are required");
  *out = NULL;
  kiln_ir_model *ir;
  kiln_limits lim;
  kiln_limits_from_options(opts, &lim);
  kiln_code rc = kiln_model_read_memory(bytes, len, base_dir, &lim, &ir, err);
  if (rc) return rc;
  return finish_load(ir, opts, out, err);
}
