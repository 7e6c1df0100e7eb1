/* Loading plugins into a session's plugin set: dlopen, the entry point, registration with
 * its checks (ABI version both ways, duplicates, descriptions), per-node kernel states. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/registry.h"
#include "plugin/internal.h"

/* The size of kiln_fusion_desc in ABI 1.0 (fields up to and including `user`). */
#define FUSION_V1_SIZE (offsetof(kiln_fusion_desc, user) + sizeof(void *))

static bool domain_eq(const char *a, const char *b) {
  if (!strcmp(a, "ai.onnx")) a = "";
  if (!strcmp(b, "ai.onnx")) b = "";
  return !strcmp(a, b);
}

static bool ranges_overlap(int s1, int u1, int s2, int u2) {
  int64_t hi1 = u1 ? u1 : INT32_MAX, hi2 = u2 ? u2 : INT32_MAX;
  return s1 <= hi2 && s2 <= hi1;
}

/* ---- registration ------------------------------------------------------------------------ */

static kiln_status reg_failed(kiln_registry *reg, kiln_code rc) {
  reg->code = rc;
  return rc == KILN_ERR_UNSUPPORTED ? KILN_STATUS_ABI_MISMATCH : kiln_status_from_code(rc);
}

static bool push(void ***arr, size_t *n, void *item) {
  void **p = realloc(*arr, (*n + 1) * sizeof *p);
  if (!p) return false;
  p[(*n)++] = item;
  *arr = p;
  return true;
}

kiln_status kiln_api_register_op(kiln_registry *reg, const kiln_op_desc *desc) {
  if (!reg || !reg->set) return KILN_STATUS_INVALID_ARG;
  if (reg->code) return KILN_STATUS_ERROR; /* keep the first problem's message */
  kiln_adapted_op *op = kiln_calloc(1, sizeof *op);
  if (!op) return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_NOMEM, "out of memory"));
  kiln_code rc = kiln_adapt_op(desc, true, op, reg->err);
  if (rc) {
    free(op);
    return reg_failed(reg, rc);
  }
  op->lib = reg->lib;
  char lbl[300];
  kiln_op_label(op->d.domain, op->d.name, lbl, sizeof lbl);
  kiln_builtin_ops_init();
  if (kiln_op_known(op->d.domain, op->d.name)) {
    rc = kiln_fail(reg->err, KILN_ERR_INVALID_ARG,
                   "duplicate op '%s': it is one of kiln's built-in ops, and a plugin may not override a built-in "
                   "op (give yours a name in your own domain)", lbl);
  }
  for (size_t i = 0; !rc && i < reg->set->n_ops; i++) {
    const kiln_adapted_op *o = reg->set->ops[i];
    if (!domain_eq(o->d.domain, op->d.domain) || strcmp(o->d.name, op->d.name)) continue;
    if (o->lib != op->lib)
      rc = kiln_fail(reg->err, KILN_ERR_INVALID_ARG,
                     "duplicate op '%s': it is already registered by plugin '%s', and a plugin may not override "
                     "another plugin's op", lbl, o->lib ? o->lib->path : "?");
    else if (ranges_overlap(o->d.since_version, o->d.until_version, op->d.since_version, op->d.until_version))
      rc = kiln_fail(reg->err, KILN_ERR_INVALID_ARG,
                     "duplicate op '%s': registered twice by this plugin with overlapping opset ranges "
                     "(%d..%d and %d..%d; 0 means no upper bound)", lbl, o->d.since_version, o->d.until_version,
                     op->d.since_version, op->d.until_version);
  }
  if (!rc && !push((void ***)&reg->set->ops, &reg->set->n_ops, op))
    rc = kiln_fail(reg->err, KILN_ERR_NOMEM, "out of memory");
  if (rc) {
    kiln_adapted_op_clear(op);
    free(op);
    return reg_failed(reg, rc);
  }
  reg->n_registered++;
  return KILN_STATUS_OK;
}

static void fusion_free(kiln_plugin_fusion *f) {
  if (!f) return;
  free(f->name);
  free(f->domain);
  free(f->op_type);
  free(f->inputs);
  for (size_t i = 0; i < KILN_PAT_MAX; i++) free(f->strings[i]);
  free(f);
}

static bool op_types_ok(const char *s) {
  if (!s || !*s || *s == '|') return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          (*p == '|' && p[1] && p[1] != '|')))
      return false;
  return true;
}

static kiln_code check_fusion(const kiln_registry *reg, const kiln_fusion_desc *d, const kiln_adapted_op **op_out,
                              kiln_error *err) {
  const char *nm = d->name;
  if (!nm || !*nm) return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern: it has no name");
  if (!d->domain || !d->op_type || !*d->op_type)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern '%s': no replacement op (domain, op_type)", nm);
  const kiln_adapted_op *op = NULL;
  for (size_t i = 0; i < reg->set->n_ops && !op; i++) {
    const kiln_adapted_op *o = reg->set->ops[i];
    if (o->lib == reg->lib && domain_eq(o->d.domain, d->domain) && !strcmp(o->d.name, d->op_type)) op = o;
  }
  char lbl[300];
  kiln_op_label(d->domain, d->op_type, lbl, sizeof lbl);
  if (!op)
    return kiln_fail(err, KILN_ERR_INVALID_ARG,
                     "invalid fusion pattern '%s': its replacement op '%s' is not registered by this plugin "
                     "(register the op before the pattern)", nm, lbl);
  if (d->n_steps < 1 || d->n_steps > KILN_FUSION_MAX_STEPS || !d->steps)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern '%s': %u steps (1 to %d, steps not NULL)", nm,
                     d->n_steps, KILN_FUSION_MAX_STEPS);
  for (uint32_t s = 0; s < d->n_steps; s++) {
    if (!op_types_ok(d->steps[s].op_types))
      return kiln_fail(err, KILN_ERR_INVALID_ARG,
                       "invalid fusion pattern '%s': step %u's op_types '%s' is not an op type or \"A|B\" list", nm, s,
                       d->steps[s].op_types ? d->steps[s].op_types : "(null)");
    if (d->steps[s].slot < -1)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern '%s': step %u's slot %d (-1 or an input index)",
                       nm, s, d->steps[s].slot);
  }
  if (d->n_inputs > 64 || (d->n_inputs && !d->inputs))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern '%s': %u inputs (at most 64, inputs not NULL)",
                     nm, d->n_inputs);
  for (uint32_t k = 0; k < d->n_inputs; k++) {
    const kiln_fusion_input *in = &d->inputs[k];
    if (in->step >= d->n_steps || in->input < KILN_FUSION_OTHER || (in->input == KILN_FUSION_OTHER && in->step == 0))
      return kiln_fail(err, KILN_ERR_INVALID_ARG,
                       "invalid fusion pattern '%s': input %u refers to step %u input %d (steps 0..%u; "
                       "KILN_FUSION_OTHER only for steps after the first)", nm, k, in->step, in->input, d->n_steps - 1);
    if (in->step > 0 && d->steps[in->step].slot >= 0 && in->input == d->steps[in->step].slot)
      return kiln_fail(err, KILN_ERR_INVALID_ARG,
                       "invalid fusion pattern '%s': input %u is step %u's input %d, which the previous step feeds", nm,
                       k, in->step, in->input);
  }
  if ((int)d->n_inputs < op->schema.inputs.min || (op->schema.inputs.max >= 0 && (int)d->n_inputs > op->schema.inputs.max))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "invalid fusion pattern '%s': it gives %u inputs but '%s' takes %d to %d",
                     nm, d->n_inputs, lbl, op->schema.inputs.min, op->schema.inputs.max);
  *op_out = op;
  return KILN_OK;
}

kiln_status kiln_api_register_fusion(kiln_registry *reg, const kiln_fusion_desc *desc) {
  if (!reg || !reg->set) return KILN_STATUS_INVALID_ARG;
  if (reg->code) return KILN_STATUS_ERROR;
  if (!desc) return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_INVALID_ARG, "invalid fusion pattern: register_fusion was given NULL"));
  if (desc->size < 2 * sizeof(uint32_t))
    return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_INVALID_ARG,
                                     "invalid fusion pattern: size %u is too small to be a kiln_fusion_desc", desc->size));
  uint32_t v = desc->abi_version;
  if (KILN_OP_ABI_MAJOR_OF(v) != KILN_OP_ABI_MAJOR || KILN_OP_ABI_MINOR_OF(v) > KILN_OP_ABI_MINOR)
    return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_UNSUPPORTED,
                                     "ABI version mismatch: a fusion pattern is described for kiln op ABI %u.%u, but this "
                                     "kiln implements ABI %u.%u; rebuild the plugin against this kiln's kiln_op.h",
                                     KILN_OP_ABI_MAJOR_OF(v), KILN_OP_ABI_MINOR_OF(v), KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR));
  if (desc->size < FUSION_V1_SIZE)
    return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_INVALID_ARG,
                                     "invalid fusion pattern: size %u is smaller than kiln_fusion_desc of ABI %u.0 (%zu)",
                                     desc->size, KILN_OP_ABI_MAJOR, (size_t)FUSION_V1_SIZE));
  kiln_fusion_desc d;
  memset(&d, 0, sizeof d);
  memcpy(&d, desc, desc->size < sizeof d ? desc->size : sizeof d);
  const kiln_adapted_op *op = NULL;
  kiln_code rc = check_fusion(reg, &d, &op, reg->err);
  if (rc) return reg_failed(reg, rc);
  kiln_plugin_fusion *f = kiln_calloc(1, sizeof *f);
  bool oom = !f;
  if (f) {
    f->name = kiln_strdup(d.name);
    f->domain = kiln_strdup(d.domain);
    f->op_type = kiln_strdup(d.op_type);
    f->inputs = kiln_malloc(d.n_inputs * sizeof *f->inputs);
    oom = !f->name || !f->domain || !f->op_type || !f->inputs;
    if (!oom && d.n_inputs) memcpy(f->inputs, d.inputs, d.n_inputs * sizeof *f->inputs);
    f->n_inputs = d.n_inputs;
    f->check = d.check;
    f->user = d.user;
    f->op = op;
    f->lib = reg->lib;
    f->pattern.name = f->name;
    f->pattern.n_steps = d.n_steps;
    for (uint32_t s = 0; !oom && s < d.n_steps; s++) {
      if (!(f->strings[s] = kiln_strdup(d.steps[s].op_types))) oom = true;
      f->pattern.steps[s] = (kiln_pat_step){f->strings[s], d.steps[s].slot, NULL};
    }
  }
  if (oom || !push((void ***)&reg->set->fusions, &reg->set->n_fusions, f)) {
    fusion_free(f);
    return reg_failed(reg, kiln_fail(reg->err, KILN_ERR_NOMEM, "out of memory"));
  }
  reg->n_registered++;
  return KILN_STATUS_OK;
}

kiln_status kiln_api_registry_error(kiln_registry *reg, kiln_status code, const char *fmt, ...) {
  if (code == KILN_STATUS_OK) code = KILN_STATUS_ERROR;
  if (!reg) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reg->reason, sizeof reg->reason, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  return code;
}

/* ---- loading ---------------------------------------------------------------------------- */

static kiln_code load_one(kiln_plugin_set *set, const char *path, kiln_error *err) {
  char p[4096];
  /* dlopen searches the library path for bare names; a plugin is always the file named */
  snprintf(p, sizeof p, "%s%s", strchr(path, '/') ? "" : "./", path);
  struct stat st;
  if (stat(p, &st) != 0)
    return kiln_fail(err, KILN_ERR_IO, "plugin '%s': cannot open it: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return kiln_fail(err, KILN_ERR_IO, "plugin '%s' is a directory, not a shared library", path);
  dlerror();
  void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return kiln_fail(err, KILN_ERR_IO, "plugin '%s' is not a shared library kiln can load: %s", path,
                     why ? why : "dlopen failed");
  }
  for (size_t i = 0; i < set->n_libs; i++)
    if (set->libs[i]->handle == h) { /* named twice: loaded once (dlopen counted it; undo) */
      dlclose(h);
      return KILN_OK;
    }
  void *sym = dlsym(h, KILN_PLUGIN_ENTRY_NAME);
  if (!sym) {
    dlclose(h);
    return kiln_fail(err, KILN_ERR_INVALID_ARG,
                     "plugin '%s' does not export the entry point " KILN_PLUGIN_ENTRY_NAME
                     " (define it with KILN_PLUGIN_EXPORT from kiln/kiln_op.h)", path);
  }
  kiln_register_ops_fn entry;
  memcpy(&entry, &sym, sizeof entry);
  kiln_plugin_lib *lib = kiln_calloc(1, sizeof *lib);
  if (!lib || !(lib->path = kiln_strdup(path)) || !push((void ***)&set->libs, &set->n_libs, lib)) {
    if (lib) free(lib->path);
    free(lib);
    dlclose(h);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  lib->handle = h;
  kiln_registry reg;
  memset(&reg, 0, sizeof reg);
  reg.set = set;
  reg.lib = lib;
  reg.err = err;
  kiln_status rs = entry(&reg, kiln_plugin_api(), KILN_OP_ABI_VERSION);
  if (reg.code) {
    kiln_error_prefix(err, "plugin '%s'", path);
    return reg.code;
  }
  if (rs == KILN_STATUS_ABI_MISMATCH)
    return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                     "plugin '%s': ABI version mismatch: the plugin does not accept this kiln's op ABI %u.%u%s%s",
                     path, KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR, reg.reason[0] ? ": " : "", reg.reason);
  if (rs != KILN_STATUS_OK)
    return kiln_fail(err, rs == KILN_STATUS_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_INVALID_ARG, "plugin '%s': " KILN_PLUGIN_ENTRY_NAME " failed (%s)%s%s", path,
                     kiln_status_text(rs), reg.reason[0] ? ": " : "", reg.reason);
  if (reg.n_registered == 0)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "plugin '%s' registered no op and no fusion pattern", path);
  return KILN_OK;
}

kiln_code kiln_plugins_load(const char *const *paths, const char *env_list, kiln_plugin_set **out,
                            kiln_error *err) {
  *out = NULL;
  bool any = env_list && strspn(env_list, ":") < strlen(env_list);
  for (size_t i = 0; paths && paths[i]; i++) any |= *paths[i] != 0;
  if (!any) return KILN_OK;
  kiln_plugin_set *set = kiln_calloc(1, sizeof *set);
  if (!set) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  kiln_code rc = KILN_OK;
  for (size_t i = 0; !rc && paths && paths[i]; i++)
    if (*paths[i]) rc = load_one(set, paths[i], err);
  for (const char *p = env_list; !rc && p && *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len) {
      char *one = kiln_malloc(len + 1);
      if (!one) {
        rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        break;
      }
      memcpy(one, p, len);
      one[len] = 0;
      rc = load_one(set, one, err);
      free(one);
    }
    p = end ? end + 1 : NULL;
  }
  if (rc) {
    kiln_plugins_free(set);
    return rc;
  }
  *out = set;
  return KILN_OK;
}

void kiln_plugins_free(kiln_plugin_set *ps) {
  if (!ps) return;
  for (size_t i = 0; i < ps->n_states; i++)
    if (ps->states[i].op->d.destroy) ps->states[i].op->d.destroy(ps->states[i].state, ps->states[i].op->d.user);
  free(ps->states);
  for (size_t i = 0; i < ps->n_fusions; i++) fusion_free(ps->fusions[i]);
  free(ps->fusions);
  for (size_t i = 0; i < ps->n_ops; i++) {
    kiln_adapted_op_clear(ps->ops[i]);
    free(ps->ops[i]);
  }
  free(ps->ops);
  for (size_t i = ps->n_libs; i-- > 0;) {
    if (ps->libs[i]->handle) dlclose(ps->libs[i]->handle);
    free(ps->libs[i]->path);
    free(ps->libs[i]);
  }
  free(ps->libs);
  free(ps);
}

/* ---- lookup ----------------------------------------------------------------------------- */

const kiln_op_schema *kiln_plugins_find(const kiln_plugin_set *ps, const char *domain, const char *name,
                                        int opset) {
  for (size_t i = 0; ps && i < ps->n_ops; i++) {
    const kiln_adapted_op *o = ps->ops[i];
    if (domain_eq(o->d.domain, domain) && !strcmp(o->d.name, name) && o->d.since_version <= opset &&
        (o->d.until_version == 0 || opset <= o->d.until_version))
      return &o->schema;
  }
  return NULL;
}

bool kiln_plugins_known(const kiln_plugin_set *ps, const char *domain, const char *name) {
  for (size_t i = 0; ps && i < ps->n_ops; i++)
    if (domain_eq(ps->ops[i]->d.domain, domain) && !strcmp(ps->ops[i]->d.name, name)) return true;
  return false;
}

size_t kiln_plugins_op_count(const kiln_plugin_set *ps) { return ps ? ps->n_ops : 0; }
size_t kiln_plugins_fusion_count(const kiln_plugin_set *ps) { return ps ? ps->n_fusions : 0; }

/* ---- kernel states ---------------------------------------------------------------------- */

static int state_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const kiln_plugin_state *)a)->node, y = (uintptr_t)((const kiln_plugin_state *)b)->node;
  return x < y ? -1 : x > y;
}

static kiln_code instantiate_graph(kiln_plugin_set *ps, kiln_graph *g, kiln_error *err) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    for (size_t a = 0; a < n->n_attrs; a++) {
      kiln_code rc = KILN_OK;
      if (n->attrs[a].g) rc = instantiate_graph(ps, n->attrs[a].g, err);
      for (size_t k = 0; !rc && n->attrs[a].graphs && k < n->attrs[a].n; k++)
        rc = instantiate_graph(ps, n->attrs[a].graphs[k], err);
      if (rc) return rc;
    }
    const kiln_adapted_op *op = kiln_adapted_from_schema(n->schema);
    if (!op || !op->d.create) continue;
    if (ps->n_states == ps->cap_states) {
      size_t cap = ps->cap_states ? 2 * ps->cap_states : 16;
      kiln_plugin_state *p = realloc(ps->states, cap * sizeof *p);
      if (!p) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      ps->states = p;
      ps->cap_states = cap;
    }
    kiln_code arc = KILN_OK;
    kiln_op_attrs at = {n, op, err, &arc};
    void *state = NULL;
    kiln_status st = op->d.create(&at, kiln_plugin_api(), op->d.user, &state);
    if (st != KILN_STATUS_OK) {
      char lbl[300];
      if (!arc)
        kiln_fail(err, kiln_code_from_status(st), "node '%s' (%s): create failed (%s) without a message", n->name,
                  kiln_op_label(n->domain, n->op_type, lbl, sizeof lbl), kiln_status_text(st));
      return kiln_code_from_status(st);
    }
    ps->states[ps->n_states++] = (kiln_plugin_state){n, op, state};
  }
  return KILN_OK;
}

kiln_code kiln_plugins_instantiate(kiln_plugin_set *ps, kiln_graph *g, kiln_error *err) {
  if (!ps || !ps->n_ops) return KILN_OK;
  kiln_code rc = instantiate_graph(ps, g, err);
  if (ps->n_states) qsort(ps->states, ps->n_states, sizeof *ps->states, state_cmp);
  return rc;
}

bool kiln_plugins_state(const kiln_plugin_set *ps, const kiln_node *n, void **state) {
  if (!ps || !ps->n_states) return false;
  kiln_plugin_state key = {n, NULL, NULL};
  const kiln_plugin_state *hit = bsearch(&key, ps->states, ps->n_states, sizeof key, state_cmp);
  if (!hit) return false;
  *state = hit->state;
  return true;
}
