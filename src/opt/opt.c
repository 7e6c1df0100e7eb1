/* Pass manager: run the enabled passes of the configured level until nothing changes. */
#include "opt/opt.h"

#include <string.h>

#include "base/status.h"


static const kiln_pass passes[] = {
#define KILN_PASS(fn, name, level) {name, level, kiln_pass_##fn},
#include "opt/passes.def"
#undef KILN_PASS
};
enum { N_PASSES = sizeof passes / sizeof passes[0], MAX_ROUNDS = 16 };

size_t kiln_pass_count(void) { return N_PASSES; }
const kiln_pass *kiln_pass_at(size_t i) { return i < N_PASSES ? &passes[i] : NULL; }

/* The extra pass (plugin patterns): one pass, run before kiln's own fusions in every round (a
 * pattern the user loaded wins over a built-in fusion of the same nodes). */
static kiln_code run_extra_pass(kiln_pass_ctx *ctx, kiln_opt_log *log, size_t *changed) {
  size_t count = 0;
  const kiln_opt_config *cfg = ctx->cfg;
  kiln_code rc = cfg->extra(ctx, ctx->model->graph, &count);
  if (rc) {
    kiln_error_prefix(ctx->err, "optimizer pass %s", cfg->extra_name);
    return rc;
  }
  if (count) {
    log->stats[N_PASSES].rewrites += count;
    *changed += count;
    if ((rc = cfg->prepare(ctx->model, cfg->user, ctx->err)))
      kiln_error_prefix(ctx->err, "after optimizer pass %s", cfg->extra_name);
  }
  return rc;
}

kiln_code kiln_optimize(kiln_ir_model *m, const kiln_opt_config *cfg, kiln_opt_log *log,
                        kiln_error *err) {
  kiln_opt_log local;
  if (!log) log = &local;
  memset(log, 0, sizeof *log);
  log->nodes_before = m->graph->n_nodes;
  for (size_t i = 0; i < N_PASSES; i++) log->stats[i].pass = passes[i].name;
  log->n = N_PASSES;
  bool plug = cfg->extra && cfg->level >= 2 && !kiln_list_has(cfg->disabled, cfg->extra_name);
  if (plug) log->stats[log->n++].pass = cfg->extra_name;
  kiln_pass_ctx ctx = {m, cfg, err};
  for (size_t round = 0; round < MAX_ROUNDS; round++) {
    size_t changed = 0;
    bool plug_ran = !plug;
    for (size_t i = 0; i < N_PASSES; i++) {
      if (passes[i].level > cfg->level || kiln_list_has(cfg->disabled, passes[i].name)) continue;
      if (!plug_ran && passes[i].level >= 2) {
        plug_ran = true;
        kiln_code prc = run_extra_pass(&ctx, log, &changed);
        if (prc) return prc;
      }
      size_t count = 0;
      kiln_code rc = passes[i].run(&ctx, m->graph, &count);
      if (rc) {
        kiln_error_prefix(err, "optimizer pass %s", passes[i].name);
        return rc;
      }
      if (count) {
        log->stats[i].rewrites += count;
        changed += count;
        if ((rc = cfg->prepare(m, cfg->user, err))) {
          kiln_error_prefix(err, "after optimizer pass %s", passes[i].name);
          return rc;
        }
      }
    }
    if (!plug_ran) { /* no level-2 pass of kiln's own is enabled */
      kiln_code prc = run_extra_pass(&ctx, log, &changed);
      if (prc) return prc;
    }
    log->rounds = round + 1;
    if (!changed) break;
  }
  log->nodes_after = m->graph->n_nodes;
  return KILN_OK;
}
