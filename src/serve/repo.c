/* kiln serve: the model repository.
 *
 * Layout: DIR/NAME/VERSION/model.onnx with VERSION all digits, and an optional
 * DIR/NAME/config.json. A version directory is seen only under its final name, so copy a new
 * version into a directory whose name is not all digits (DIR/NAME/.tmp-3) and rename it to
 * DIR/NAME/3 when complete: rename is atomic, and half-copied files are never loaded.
 *
 * Roll-out: a scan (at start, on SIGHUP, every --poll-s, or from the load API) loads each
 * version the policy wants and does not serve yet, checks and warms it up (version.c), and only
 * then puts it in the model's table, under the lock, in one step: requests see the old set or
 * the new one. Versions the policy no longer wants are retired after that, and only when at
 * least one wanted version is serving; so a failed load leaves the old version serving, with the
 * failure in the index and in kiln_model_load_failures_total. A failed version is not retried
 * until its model.onnx changes or the load API asks. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve.h"

static int all_digits(const char *s) { return *s && strspn(s, "0123456789") == strlen(s) && strlen(s) < 15; }

srv_model *srv_repo_find(srv_repo *r, const char *name) {
  for (int i = 0; i < r->n_models; i++)
    if (!strcmp(r->models[i]->name, name)) return r->models[i];
  return NULL;
}

static srv_model *add_model(srv_repo *r, const char *name, char *msg, size_t n) {
  if (strlen(name) >= SRV_NAME_MAX || r->n_models >= SRV_MAX_MODELS) {
    srv_msg(msg, n, "model '%s': name too long or more than %d models", name, SRV_MAX_MODELS);
    return NULL;
  }
  srv_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  snprintf(m->name, sizeof m->name, "%s", name);
  m->cfg = r->cfg->defaults;
  pthread_mutex_lock(&r->mu);
  r->models[r->n_models++] = m;
  pthread_mutex_unlock(&r->mu);
  return m;
}

static void record_failure(srv_model *m, long version, const struct stat *st, const char *reason) {
  int i = 0;
  while (i < m->n_failures && m->failures[i].version != version) i++;
  if (i == m->n_failures) {
    if (m->n_failures == SRV_MAX_FAILURES) {
      memmove(m->failures, m->failures + 1, sizeof m->failures[0] * (SRV_MAX_FAILURES - 1));
      i = SRV_MAX_FAILURES - 1;
    } else {
      m->n_failures++;
    }
  }
  srv_failure *f = &m->failures[i];
  f->version = version;
  f->size = st ? st->st_size : 0;
  f->mtime = st ? st->st_mtime : 0;
  snprintf(f->reason, sizeof f->reason, "%s", reason);
  m->load_failures++;
  fprintf(stderr, "kiln serve: model '%s' version %ld not loaded: %s\n", m->name, version, reason);
}

static void clear_failure(srv_model *m, long version) {
  for (int i = 0; i < m->n_failures; i++)
    if (m->failures[i].version == version) {
      memmove(&m->failures[i], &m->failures[i + 1], sizeof m->failures[0] * (size_t)(m->n_failures - i - 1));
      m->n_failures--;
      return;
    }
}

static const srv_failure *failure_of(const srv_model *m, long version) {
  for (int i = 0; i < m->n_failures; i++)
    if (m->failures[i].version == version) return &m->failures[i];
  return NULL;
}

static srv_version *serving(srv_model *m, long version) {
  for (int i = 0; i < m->n_versions; i++)
    if (m->versions[i]->version == version) return m->versions[i];
  return NULL;
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return x < y ? -1 : x > y;
}

/* The version directories present, ascending. */
static int list_versions(const srv_model *m, long *out, int max) {
  DIR *d = opendir(m->dir);
  int k = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && k < max) {
    char path[4300];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/model.onnx", m->dir, e->d_name);
    if (all_digits(e->d_name) && !stat(path, &st) && S_ISREG(st.st_mode)) out[k++] = atol(e->d_name);
  }
  closedir(d);
  qsort(out, (size_t)k, sizeof out[0], cmp_long);
  return k;
}

/* Of the versions present, those the policy wants. */
static int wanted(const srv_model_config *c, const long *avail, int n, long *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    int keep = c->policy == SRV_POLICY_ALL || (c->policy == SRV_POLICY_LATEST && i >= n - c->latest_n);
    for (int s = 0; c->policy == SRV_POLICY_SPECIFIC && s < c->n_specific; s++)
      if (c->specific[s] == avail[i]) keep = 1;
    if (keep) out[k++] = avail[i];
  }
  return k;
}

static void *retire_main(void *arg) {
  srv_version_retire(arg);
  return NULL;
}

/* Retire v on a thread of its own. The caller may be an HTTP thread (the load and unload API),
 * and a retiring version waits for its last request to be answered, which may be on a
 * connection of that same thread: waiting there would never end. Finished retirements are
 * joined here and in srv_repo_free. */
static void retire_later(srv_repo *r, srv_version *v) {
  pthread_mutex_lock(&r->mu);
  int k = 0;
  for (int i = 0; i < r->n_reapers; i++)
    if (pthread_tryjoin_np(r->reapers[i], NULL)) r->reapers[k++] = r->reapers[i];
  r->n_reapers = k;
  int room = r->n_reapers < SRV_MAX_REAPERS;
  pthread_mutex_unlock(&r->mu);
  pthread_t t;
  if (!room || pthread_create(&t, NULL, retire_main, v)) {
    srv_version_retire(v); /* no thread to spare: in place (only the API's callers risk a wait) */
    return;
  }
  pthread_mutex_lock(&r->mu);
  r->reapers[r->n_reapers++] = t;
  pthread_mutex_unlock(&r->mu);
}

static void insert_version(srv_repo *r, srv_model *m, srv_version *v) {
  pthread_mutex_lock(&r->mu);
  int i = m->n_versions;
  while (i > 0 && m->versions[i - 1]->version > v->version) {
    m->versions[i] = m->versions[i - 1];
    i--;
  }
  m->versions[i] = v;
  m->n_versions++;
  clear_failure(m, v->version);
  pthread_mutex_unlock(&r->mu);
}

/* Take a version out of the table (requests no longer find it), then retire it. */
static void remove_version(srv_repo *r, srv_model *m, srv_version *v) {
  pthread_mutex_lock(&r->mu);
  int k = 0;
  for (int i = 0; i < m->n_versions; i++)
    if (m->versions[i] != v) m->versions[k++] = m->versions[i];
  m->n_versions = k;
  pthread_mutex_unlock(&r->mu);
  fprintf(stderr, "kiln serve: model '%s' version %s unloaded\n", m->name, v->vstr);
  retire_later(r, v);
}

static void load_one(srv_repo *r, srv_model *m, long version, const char *path, int force) {
  struct stat st;
  if (stat(path, &st)) return;
  const srv_failure *f = failure_of(m, version);
  if (f && !force && f->size == st.st_size && f->mtime == st.st_mtime) return;
  char msg[512];
  if (m->n_versions >= SRV_MAX_VERSIONS) {
    snprintf(msg, sizeof msg, "more than %d versions serving at once", SRV_MAX_VERSIONS);
    pthread_mutex_lock(&r->mu);
    record_failure(m, version, &st, msg);
    pthread_mutex_unlock(&r->mu);
    return;
  }
  srv_version *cur = m->n_versions ? m->versions[m->n_versions - 1] : NULL;
  if (cur) srv_version_ref(cur);
  double t0 = srv_now();
  srv_version *v = srv_version_load(m, version, path, cur, msg, sizeof msg);
  if (cur) srv_version_unref(cur);
  if (!v) {
    pthread_mutex_lock(&r->mu);
    record_failure(m, version, &st, msg);
    pthread_mutex_unlock(&r->mu);
    return;
  }
  insert_version(r, m, v);
  fprintf(stderr, "kiln serve: model '%s' version %ld serving (loaded and checked in %.0f ms)\n",
          m->name, version, (srv_now() - t0) * 1e3);
}

static void read_config(srv_repo *r, srv_model *m) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", m->dir);
  srv_model_config c = r->cfg->defaults;
  char msg[512] = {0};
  struct stat st;
  if (stat(path, &st) == 0 && srv_model_config_parse(path, &c, msg, sizeof msg)) {
    pthread_mutex_lock(&r->mu);
    if (strcmp(m->cfg_error, msg)) {
      m->load_failures++;
      fprintf(stderr, "kiln serve: model '%s': config not applied: %s\n", m->name, msg);
    }
    snprintf(m->cfg_error, sizeof m->cfg_error, "%s", msg);
    pthread_mutex_unlock(&r->mu);
    return; /* the settings in force stay */
  }
  pthread_mutex_lock(&r->mu);
  m->cfg = c;
  m->cfg_error[0] = 0;
  pthread_mutex_unlock(&r->mu);
}

/* Labels may only name serving versions: a config whose label does not keeps the labels in
 * force and says why in the index. */
static void check_labels(srv_repo *r, srv_model *m, const srv_model_config *before) {
  for (int i = 0; i < m->cfg.n_labels; i++)
    if (!serving(m, m->cfg.label_version[i])) {
      pthread_mutex_lock(&r->mu);
      snprintf(m->cfg_error, sizeof m->cfg_error,
               "label '%s' points at version %ld, which is not serving: labels unchanged",
               m->cfg.label_name[i], m->cfg.label_version[i]);
      memcpy(m->cfg.label_name, before->label_name, sizeof m->cfg.label_name);
      memcpy(m->cfg.label_version, before->label_version, sizeof m->cfg.label_version);
      m->cfg.n_labels = before->n_labels;
      pthread_mutex_unlock(&r->mu);
      fprintf(stderr, "kiln serve: model '%s': %s\n", m->name, m->cfg_error);
      return;
    }
}

static void scan_dir_model(srv_repo *r, srv_model *m, int force) {
  srv_model_config before = m->cfg;
  read_config(r, m);
  long avail[64], want[64 + SRV_MAX_LABELS];
  int na = list_versions(m, avail, 64), nw = wanted(&m->cfg, avail, na, want);
  for (int l = 0; l < m->cfg.n_labels; l++) { /* a labelled version stays loaded */
    int have = 0, exists = 0;
    for (int i = 0; i < nw; i++) have |= want[i] == m->cfg.label_version[l];
    for (int i = 0; i < na; i++) exists |= avail[i] == m->cfg.label_version[l];
    if (!have && exists) want[nw++] = m->cfg.label_version[l];
  }
  for (int i = 0; i < nw; i++)
    if (!serving(m, want[i])) {
      char path[4300];
      snprintf(path, sizeof path, "%s/%ld/model.onnx", m->dir, want[i]);
      load_one(r, m, want[i], path, force);
    }
  int any = 0;
  for (int i = 0; i < nw; i++) any |= serving(m, want[i]) != NULL;
  for (int i = m->n_versions - 1; any && i >= 0; i--) { /* none wanted serves: keep what does */
    int keep = 0;
    for (int k = 0; k < nw; k++) keep |= m->versions[i]->version == want[k];
    for (int l = 0; l < before.n_labels; l++) keep |= m->versions[i]->version == before.label_version[l];
    if (!keep) remove_version(r, m, m->versions[i]);
  }
  check_labels(r, m, &before);
}

/* kiln serve MODEL.onnx: version 1, reloaded when the file changes (a new compiled model checked
 * and warmed up before it replaces the old one). */
static void scan_single(srv_repo *r, srv_model *m, int force) {
  struct stat st;
  if (stat(m->single_path, &st)) {
    const srv_failure *gone = failure_of(m, 1);
    if (gone && !force && !strcmp(gone->reason, strerror(errno))) return; /* counted once */
    pthread_mutex_lock(&r->mu);
    record_failure(m, 1, NULL, strerror(errno));
    pthread_mutex_unlock(&r->mu);
    return;
  }
  srv_version *old = m->n_versions ? m->versions[0] : NULL;
  const srv_failure *f = failure_of(m, 1);
  if (old && !force && old->file_size == st.st_size && old->file_mtime == st.st_mtime) return;
  if (!old && f && !force && f->size == st.st_size && f->mtime == st.st_mtime) return;
  char msg[512];
  if (old) srv_version_ref(old);
  srv_version *v = srv_version_load(m, 1, m->single_path, old, msg, sizeof msg);
  if (old) srv_version_unref(old);
  if (!v) {
    pthread_mutex_lock(&r->mu);
    record_failure(m, 1, &st, msg);
    pthread_mutex_unlock(&r->mu);
    return;
  }
  v->file_size = st.st_size;
  v->file_mtime = st.st_mtime;
  pthread_mutex_lock(&r->mu);
  m->versions[0] = v;
  m->n_versions = 1;
  clear_failure(m, 1);
  pthread_mutex_unlock(&r->mu);
  if (old) retire_later(r, old);
  fprintf(stderr, "kiln serve: model '%s' serving %s\n", m->name, m->single_path);
}

static void scan_model(srv_repo *r, srv_model *m, int force) {
  if (m->single_path[0]) scan_single(r, m, force);
  else scan_dir_model(r, m, force);
}

int srv_repo_init(srv_repo *r, const srv_config *cfg, char *msg, size_t n) {
  memset(r, 0, sizeof *r);
  r->cfg = cfg;
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->load_mu, NULL);
  if (cfg->model_path) {
    char name[SRV_NAME_MAX];
    const char *base = strrchr(cfg->model_path, '/');
    snprintf(name, sizeof name, "%s", cfg->model_name ? cfg->model_name : base ? base + 1 : cfg->model_path);
    char *dot = cfg->model_name ? NULL : strrchr(name, '.');
    if (dot && dot != name) *dot = 0;
    srv_model *m = add_model(r, name, msg, n);
    if (!m) return -1;
    m->present = 1;
    snprintf(m->single_path, sizeof m->single_path, "%s", cfg->model_path);
    return 0;
  }
  struct stat st;
  if (stat(cfg->repo_dir, &st) || !S_ISDIR(st.st_mode)) {
    srv_msg(msg, n, "model repository '%s' is not a directory", cfg->repo_dir);
    return -1;
  }
  return 0;
}

static int scan_repo_dir(srv_repo *r, const char *only, int force, char *msg, size_t n) {
  DIR *d = opendir(r->cfg->repo_dir);
  if (!d) {
    srv_msg(msg, n, "cannot read model repository '%s': %s", r->cfg->repo_dir, strerror(errno));
    return 500;
  }
  int found = 0;
  char seen[SRV_MAX_MODELS] = {0};
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", r->cfg->repo_dir, e->d_name);
    if (e->d_name[0] == '.' || stat(path, &st) || !S_ISDIR(st.st_mode)) continue;
    srv_model *m = srv_repo_find(r, e->d_name);
    if (!m && !(m = add_model(r, e->d_name, msg, n))) continue;
    for (int i = 0; i < r->n_models; i++) seen[i] |= r->models[i] == m;
    snprintf(m->dir, sizeof m->dir, "%s", path);
    pthread_mutex_lock(&r->mu);
    m->present = 1;
    if (only && !strcmp(only, m->name)) m->unloaded = 0;
    pthread_mutex_unlock(&r->mu);
    if (only && strcmp(only, m->name)) continue;
    found = 1;
    if (!m->unloaded) scan_model(r, m, force);
  }
  closedir(d);
  /* Models whose directory is gone are marked only now: while a scan runs (loading another
   * model, say), requests for the models that stay never find them absent (404). */
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n_models; i++)
    if (!seen[i]) r->models[i]->present = 0;
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; !only && i < r->n_models; i++) /* a model directory removed: unload it */
    while (!r->models[i]->present && r->models[i]->n_versions)
      remove_version(r, r->models[i], r->models[i]->versions[0]);
  if (only && !found) {
    srv_msg(msg, n, "no model '%s' in the repository", only);
    return 404;
  }
  return 0;
}

int srv_repo_scan(srv_repo *r, const char *name, int force, char *msg, size_t n) {
  pthread_mutex_lock(&r->load_mu);
  int rc = 0;
  srv_model *named = name ? srv_repo_find(r, name) : NULL;
  uint64_t failures_before = named ? named->load_failures : 0;
  if (r->cfg->model_path) {
    srv_model *m = r->models[0];
    if (name && strcmp(name, m->name)) {
      srv_msg(msg, n, "no model '%s'", name);
      rc = 404;
    } else {
      pthread_mutex_lock(&r->mu);
      m->unloaded = name ? 0 : m->unloaded;
      pthread_mutex_unlock(&r->mu);
      if (!m->unloaded) scan_model(r, m, force);
    }
  } else {
    rc = scan_repo_dir(r, name, force, msg, n);
  }
  if (!rc && name) {
    srv_model *m = srv_repo_find(r, name);
    pthread_mutex_lock(&r->mu);
    if (m && m->n_failures && (m != named || m->load_failures > failures_before)) {
      const srv_failure *f = &m->failures[m->n_failures - 1];
      srv_msg(msg, n, "model '%s' version %ld failed: %s%s", name, f->version, f->reason,
              m->n_versions ? "; the serving version keeps serving" : "");
      rc = 400;
    } else if (m && m->cfg_error[0] && (m != named || m->load_failures > failures_before)) {
      srv_msg(msg, n, "model '%s': %s", name, m->cfg_error);
      rc = 400;
    } else if (m && !m->n_versions) {
      srv_msg(msg, n, "model '%s' has no version to load", name);
      rc = 400;
    }
    pthread_mutex_unlock(&r->mu);
  }
  pthread_mutex_unlock(&r->load_mu);
  return rc;
}

int srv_repo_unload(srv_repo *r, const char *name, char *msg, size_t n) {
  pthread_mutex_lock(&r->load_mu);
  srv_model *m = srv_repo_find(r, name);
  if (!m) {
    srv_msg(msg, n, "no model '%s'", name);
    pthread_mutex_unlock(&r->load_mu);
    return 404;
  }
  pthread_mutex_lock(&r->mu);
  m->unloaded = 1;
  pthread_mutex_unlock(&r->mu);
  while (m->n_versions) remove_version(r, m, m->versions[m->n_versions - 1]);
  pthread_mutex_unlock(&r->load_mu);
  return 0;
}

void srv_repo_free(srv_repo *r) {
  for (int i = 0; i < r->n_reapers; i++) pthread_join(r->reapers[i], NULL);
  r->n_reapers = 0;
  for (int i = 0; i < r->n_models; i++) {
    srv_model *m = r->models[i];
    while (m->n_versions) {
      srv_version *v = m->versions[--m->n_versions];
      srv_version_retire(v);
    }
    free(m);
  }
  r->n_models = 0;
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->load_mu);
}

static void serving_list(const srv_model *m, char *dst, size_t n) {
  size_t off = 0;
  dst[0] = 0;
  for (int i = 0; i < m->n_versions && off < n; i++)
    off += (size_t)snprintf(dst + off, n - off, "%s%s", i ? ", " : "", m->versions[i]->vstr);
}

static srv_version *resolve(srv_model *m, const char *version, char *msg, size_t n, int *code) {
  char list[256];
  serving_list(m, list, sizeof list);
  if (!m->n_versions) {
    srv_msg(msg, n, "model '%s' has no version serving%s", m->name, m->unloaded ? " (unloaded)" : "");
    *code = 503;
    return NULL;
  }
  *code = 404;
  if (!version || !*version) return m->versions[m->n_versions - 1];
  long want = -1;
  if (all_digits(version)) {
    want = atol(version);
  } else {
    for (int i = 0; i < m->cfg.n_labels; i++)
      if (!strcmp(m->cfg.label_name[i], version)) want = m->cfg.label_version[i];
    if (want < 0) {
      srv_msg(msg, n, "model '%s' has no version or label '%s' (serving: %s)", m->name, version, list);
      return NULL;
    }
  }
  srv_version *v = serving(m, want);
  if (!v) {
    if (all_digits(version))
      srv_msg(msg, n, "model '%s' has no version %s serving (serving: %s)", m->name, version, list);
    else
      srv_msg(msg, n, "label '%s' of model '%s' points at version %ld, which is not serving (serving: %s)",
              version, m->name, want, list);
  }
  return v;
}

int srv_repo_acquire(srv_repo *r, const char *name, const char *version, srv_version **out,
                     char *msg, size_t n) {
  pthread_mutex_lock(&r->mu);
  srv_model *m = srv_repo_find(r, name);
  int code = 404;
  srv_version *v = NULL;
  if (!m || !m->present) srv_msg(msg, n, "unknown model '%s'", name);
  else v = resolve(m, version, msg, n, &code);
  if (v) srv_version_ref(v);
  pthread_mutex_unlock(&r->mu);
  *out = v;
  return v ? 0 : code;
}

int srv_repo_ready(srv_repo *r) {
  int ready = 1;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n_models; i++) {
    const srv_model *m = r->models[i];
    if (m->present && m->cfg.required && !m->n_versions) ready = 0;
  }
  pthread_mutex_unlock(&r->mu);
  return ready;
}

static void index_entry(srv_buf *b, int *first, const char *name, const char *version,
                        const char *state, const char *reason) {
  srv_buf_puts(b, *first ? "{\"name\":" : ",{\"name\":");
  *first = 0;
  srv_buf_json_str(b, name);
  if (version) srv_buf_printf(b, ",\"version\":\"%s\"", version);
  srv_buf_printf(b, ",\"state\":\"%s\"", state);
  if (reason) {
    srv_buf_puts(b, ",\"reason\":");
    srv_buf_json_str(b, reason);
  }
  srv_buf_puts(b, "}");
}

void srv_repo_index_json(srv_repo *r, srv_buf *b) {
  int first = 1;
  srv_buf_puts(b, "[");
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n_models; i++) {
    const srv_model *m = r->models[i];
    if (!m->present) continue;
    for (int k = 0; k < m->n_versions; k++)
      index_entry(b, &first, m->name, m->versions[k]->vstr, "READY", NULL);
    for (int k = 0; k < m->n_failures; k++) {
      char v[24];
      snprintf(v, sizeof v, "%ld", m->failures[k].version);
      index_entry(b, &first, m->name, v, "UNAVAILABLE", m->failures[k].reason);
    }
    if (m->cfg_error[0]) index_entry(b, &first, m->name, NULL, "UNAVAILABLE", m->cfg_error);
    if (m->unloaded) index_entry(b, &first, m->name, NULL, "UNAVAILABLE", "unloaded");
    else if (!m->n_versions && !m->n_failures && !m->cfg_error[0])
      index_entry(b, &first, m->name, NULL, "UNAVAILABLE", "no version directory with a model.onnx");
  }
  pthread_mutex_unlock(&r->mu);
  srv_buf_puts(b, "]");
}
