/* Pass manager: run the enabled passes of the configured level until nothing changes. */
#include "opt/opt.h"

#include <string.h>

#include "runtime/session.h"

static const kiln_pass passes[] = {
    {"eliminate", 1, kiln_pass_eliminate},
    {"constant_folding", 1, kiln_pass_fold},
    {"fold_shapes", 1, kiln_pass_fold_shapes},
    {"cse", 1, kiln_pass_cse},
    {"dead_code", 1, kiln_pass_dead_code},
    {"fuse_attention", 2, kiln_pass_fuse_attention},
    {"fuse_layernorm", 2, kiln_pass_fuse_layernorm},
    {"fuse_gelu", 2, kiln_pass_fuse_gelu},
    {"fuse_embedding", 2, kiln_pass_fuse_embedding},
    {"fuse_conv_bn", 2, kiln_pass_fuse_conv_bn},
    {"fuse_conv_act", 2, kiln_pass_fuse_conv_act},
    {"fuse_matmul", 2, kiln_pass_fuse_matmul},
    {"fuse_transpose", 2, kiln_pass_fuse_transpose},
    {"fuse_elementwise", 2, kiln_pass_fuse_elementwise},
};
enum { N_PASSES = sizeof passes / sizeof passes[0], MAX_ROUNDS = 16 };

size_t kiln_pass_count(void) { return N_PASSES; }
const kiln_pass *kiln_pass_at(size_t i) { return i < N_PASSES ? &passes[i] : NULL; }

static bool disabled(const char *list, const char *name) {
  if (!list) return false;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    if (!end) break;
    p = end + 1;
  }
  return false;
}

kiln_code kiln_optimize(kiln_model *m, const kiln_opt_config *cfg, kiln_opt_log *log,
                        kiln_error *err) {
  kiln_opt_log local;
  if (!log) log = &local;
  memset(log, 0, sizeof *log);
  log->nodes_before = m->graph->n_nodes;
  for (size_t i = 0; i < N_PASSES; i++) log->stats[i].pass = passes[i].name;
  log->n = N_PASSES;
  kiln_pass_ctx ctx = {m, cfg, err};
  for (size_t round = 0; round < MAX_ROUNDS; round++) {
    size_t changed = 0;
    for (size_t i = 0; i < N_PASSES; i++) {
      if (passes[i].level > cfg->level || disabled(cfg->disabled, passes[i].name)) continue;
      size_t count = 0;
      kiln_code rc = passes[i].run(&ctx, m->graph, &count);
      if (rc) {
        kiln_error_prefix(err, "optimizer pass %s", passes[i].name);
        return rc;
      }
      if (count) {
        log->stats[i].rewrites += count;
        changed += count;
        if ((rc = kiln_graph_prepare(m->graph, m, err))) {
          kiln_error_prefix(err, "after optimizer pass %s", passes[i].name);
          return rc;
        }
      }
    }
    log->rounds = round + 1;
    if (!changed) break;
  }
  log->nodes_after = m->graph->n_nodes;
  return KILN_OK;
}
