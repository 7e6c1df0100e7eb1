/* kiln serve: one loaded model version. Loading compiles the model once (kiln_model_load) and
 * creates `instances` sessions on it (one copy of the weights), then checks the version before
 * it may take traffic: a warm-up run of every instance on generated inputs (which also measures
 * each session's memory plan), an optional latency budget (median of the warm-up runs of
 * instance 0), and optionally a comparison with the version serving now on the same inputs.
 * Any failure frees everything and names the reason; the caller keeps the old version. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static void version_free(srv_version *v) {
  if (!v) return;
  for (int i = 0; v->inst && i < v->n_inst; i++) kiln_session_free(v->inst[i]);
  kiln_model_free(v->compiled);
  free(v->inst);
  free(v->workers);
  free(v->in);
  free(v->out);
  pthread_mutex_destroy(&v->mu);
  pthread_cond_destroy(&v->cv);
  pthread_cond_destroy(&v->refs_cv);
  free(v);
}

static int copy_io(kiln_session *s, int input, size_t n, srv_io *dst, char *msg, size_t mn) {
  for (size_t i = 0; i < n; i++) {
    kiln_io_info info;
    kiln_error err = {0};
    if ((input ? kiln_session_input_info(s, i, &info, &err)
               : kiln_session_output_info(s, i, &info, &err)) != KILN_OK) {
      srv_msg(msg, mn, "%s", err.message);
      return -1;
    }
    if (info.kind == KILN_KIND_TENSOR && !strcmp(srv_v2_dtype(info.dtype), "UNDEFINED")) {
      srv_msg(msg, mn, "%s '%s' is %s, which the KServe v2 protocol has no datatype for (it has "
              "BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64 and BYTES): cast it in the model",
              input ? "input" : "output", info.name, kiln_dtype_name(info.dtype));
      return -1;
    }
    dst[i].name = info.name;
    dst[i].kind = info.kind;
    dst[i].dtype = info.dtype;
    dst[i].rank = info.rank;
    for (int d = 0; d < info.rank && d < KILN_MAX_RANK; d++) dst[i].dims[d] = info.dims[d];
  }
  return 0;
}

static int is_batchable(const srv_version *v) {
  if (v->cfg.max_batch_size <= 0 || !v->n_in) return 0;
  for (size_t i = 0; i < v->n_in; i++)
    if (v->in[i].kind != KILN_KIND_TENSOR || v->in[i].rank < 1 || v->in[i].dims[0] >= 0) return 0;
  return 1;
}

/* An input filled with generated values: floats uniform in [-1, 1), integers and booleans 0
 * (always a valid index), strings empty; unknown dims are 1. */
static kiln_tensor *gen_input(const srv_io *io, uint64_t *rng) {
  int64_t dims[KILN_MAX_RANK];
  int rank = io->rank < 0 ? 0 : io->rank;
  for (int d = 0; d < rank; d++) dims[d] = io->dims[d] < 0 ? 1 : io->dims[d];
  kiln_dtype t = io->dtype == KILN_UNDEFINED ? KILN_FLOAT : io->dtype;
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(t, rank, dims, &x, NULL) != KILN_OK) return NULL;
  int64_t n = kiln_tensor_numel(x);
  void *p = kiln_tensor_data(x);
  for (int64_t i = 0; i < n; i++) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    float f = (float)((double)(*rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    if (t == KILN_FLOAT) ((float *)p)[i] = f;
    else if (t == KILN_DOUBLE) ((double *)p)[i] = f;
    else if (t == KILN_FLOAT16) ((uint16_t *)p)[i] = srv_f32_to_f16(f);
    else if (t == KILN_BFLOAT16) ((uint16_t *)p)[i] = srv_f32_to_bf16(f);
  }
  return x;
}

int srv_version_run_random(srv_version *v, int inst, kiln_tensor ***outs, char *msg, size_t n) {
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  kiln_tensor **in = calloc(v->n_in + 1, sizeof *in);
  kiln_tensor **out = calloc(v->n_out + 1, sizeof *out);
  const char **names = calloc(v->n_in + 1, sizeof *names);
  int rc = -1;
  if (!in || !out || !names) {
    srv_msg(msg, n, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < v->n_in; i++) {
    names[i] = v->in[i].name;
    if (v->in[i].kind != KILN_KIND_TENSOR || !(in[i] = gen_input(&v->in[i], &rng))) {
      srv_msg(msg, n, "cannot generate a value for input '%s'", v->in[i].name);
      goto done;
    }
  }
  kiln_error err = {0};
  if (kiln_session_run(v->inst[inst], v->n_in, names, (const kiln_tensor *const *)in, v->n_out,
                       NULL, out, &err) != KILN_OK) {
    srv_msg(msg, n, "%s", err.message);
    goto done;
  }
  rc = 0;
done:
  for (size_t i = 0; in && i < v->n_in; i++) kiln_tensor_free(in[i]);
  free(in);
  free(names);
  if (!rc && outs) {
    *outs = out;
  } else {
    for (size_t i = 0; out && i < v->n_out; i++) kiln_tensor_free(out[i]);
    free(out);
  }
  return rc;
}

static void free_outs(kiln_tensor **o, size_t n) {
  for (size_t i = 0; o && i < n; i++) kiln_tensor_free(o[i]);
  free(o);
}

static double elem_f64(const kiln_tensor *t, int64_t i) {
  const void *p = kiln_tensor_cdata(t);
  switch (kiln_tensor_dtype(t)) {
  case KILN_FLOAT: return ((const float *)p)[i];
  case KILN_DOUBLE: return ((const double *)p)[i];
  case KILN_FLOAT16: return srv_f16_to_f32(((const uint16_t *)p)[i]);
  case KILN_BFLOAT16: return srv_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return 0;
  }
}

/* a and b agree: same type and dims; floats within atol + rtol |b|, everything else exact. */
static int same_value(const kiln_tensor *a, const kiln_tensor *b, double atol, double rtol,
                      char *why, size_t n) {
  if (kiln_tensor_kind(a) != KILN_KIND_TENSOR || kiln_tensor_kind(b) != KILN_KIND_TENSOR) return 1;
  kiln_dtype t = kiln_tensor_dtype(a);
  if (t != kiln_tensor_dtype(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b) ||
      (kiln_tensor_rank(a) &&
       memcmp(kiln_tensor_dims(a), kiln_tensor_dims(b), sizeof(int64_t) * (size_t)kiln_tensor_rank(a)))) {
    srv_msg(why, n, "type or shape differs");
    return 0;
  }
  int64_t numel = kiln_tensor_numel(a);
  int fl = t == KILN_FLOAT || t == KILN_DOUBLE || t == KILN_FLOAT16 || t == KILN_BFLOAT16;
  for (int64_t i = 0; i < numel; i++) {
    if (fl) {
      double x = elem_f64(a, i), y = elem_f64(b, i);
      if ((isnan(x) && isnan(y)) || x == y) continue;
      if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
        srv_msg(why, n, "element %lld is %.9g, the serving version gives %.9g", (long long)i, x, y);
        return 0;
      }
    } else if (t == KILN_STRING) {
      if (strcmp(((char *const *)kiln_tensor_cdata(a))[i], ((char *const *)kiln_tensor_cdata(b))[i])) {
        srv_msg(why, n, "string element %lld differs", (long long)i);
        return 0;
      }
    }
  }
  if (!fl && t != KILN_STRING && numel &&
      memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), (size_t)numel * kiln_dtype_size(t))) {
    srv_msg(why, n, "values differ");
    return 0;
  }
  return 1;
}

/* The new version against the serving one on the same generated inputs. */
static int validate(srv_version *v, const srv_version *cur, char *msg, size_t n) {
  if (cur->n_in != v->n_in) {
    srv_msg(msg, n, "validation: %zu inputs, the serving version %s has %zu", v->n_in, cur->vstr, cur->n_in);
    return -1;
  }
  for (size_t i = 0; i < v->n_in; i++)
    if (strcmp(v->in[i].name, cur->in[i].name) || v->in[i].dtype != cur->in[i].dtype) {
      srv_msg(msg, n, "validation: input %zu is '%s' %s, the serving version's is '%s' %s", i,
              v->in[i].name, kiln_dtype_name(v->in[i].dtype), cur->in[i].name,
              kiln_dtype_name(cur->in[i].dtype));
      return -1;
    }
  kiln_tensor **a = NULL, **b = NULL;
  char why[256];
  if (srv_version_run_random(v, 0, &a, why, sizeof why)) {
    srv_msg(msg, n, "validation run failed: %s", why);
    return -1;
  }
  int rc = 0;
  if (srv_version_run_random((srv_version *)cur, 0, &b, why, sizeof why)) {
    free_outs(a, v->n_out); /* the serving version cannot run these inputs: nothing to compare */
    return 0;
  }
  for (size_t i = 0; i < v->n_out && !rc; i++)
    for (size_t k = 0; k < cur->n_out; k++)
      if (!strcmp(v->out[i].name, cur->out[k].name) &&
          !same_value(a[i], b[k], v->cfg.validate_atol, v->cfg.validate_rtol, why, sizeof why)) {
        srv_msg(msg, n, "validation against version %s: output '%s': %s", cur->vstr, v->out[i].name, why);
        rc = -1;
      }
  free_outs(a, v->n_out);
  free_outs(b, cur->n_out);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Warm-up runs on every instance; the median of instance 0's against the latency budget. */
static int warm_up(srv_version *v, char *msg, size_t n) {
  int runs = v->cfg.warmup_runs;
  if (v->cfg.latency_budget_ms > 0 && runs < 3) runs = 3;
  double times[64];
  if (runs > 64) runs = 64;
  char why[512];
  for (int i = 0; i < v->n_inst; i++)
    for (int r = 0; r < runs; r++) {
      double t0 = srv_now();
      if (srv_version_run_random(v, i, NULL, why, sizeof why)) {
        srv_msg(msg, n, "warm-up run failed: %s", why);
        return -1;
      }
      if (i == 0) times[r] = (srv_now() - t0) * 1e3;
    }
  if (v->cfg.latency_budget_ms > 0) {
    qsort(times, (size_t)runs, sizeof times[0], cmp_double);
    double med = times[runs / 2];
    if (med > v->cfg.latency_budget_ms) {
      srv_msg(msg, n, "median warm-up latency %.3f ms is over the budget of %.3f ms", med,
              v->cfg.latency_budget_ms);
      return -1;
    }
  }
  return 0;
}

static int start_workers(srv_version *v, char *msg, size_t n) {
  v->workers = calloc((size_t)v->n_inst, sizeof *v->workers);
  if (!v->workers) return -1;
  for (int i = 0; i < v->n_inst; i++) {
    if (pthread_create(&v->workers[i], NULL, srv_worker_main, v)) {
      srv_msg(msg, n, "cannot start a worker thread");
      return -1;
    }
    v->n_workers++;
  }
  return 0;
}

static int open_instances(srv_version *v, const char *path, char *msg, size_t n) {
  kiln_options o;
  kiln_options_init(&o);
  o.opt_level = v->cfg.level;
  o.threads = v->cfg.threads;
  o.max_run_ms = v->cfg.run_timeout_ms;
  const char *plugins[SRV_MAX_PLUGINS + 1] = {0};
  for (int i = 0; i < v->cfg.n_plugins; i++) plugins[i] = v->cfg.plugins[i];
  o.plugins = v->cfg.n_plugins ? plugins : NULL;
  kiln_error err = {0};
  if (kiln_model_load(path, &o, &v->compiled, &err) != KILN_OK) {
    srv_msg(msg, n, "%s", err.message);
    return -1;
  }
  v->inst = calloc((size_t)v->n_inst, sizeof *v->inst);
  if (!v->inst) return -1;
  for (int i = 0; i < v->n_inst; i++)
    if (kiln_session_create_from_model(v->compiled, &o, &v->inst[i], &err) != KILN_OK) {
      srv_msg(msg, n, "instance %d: %s", i, err.message);
      return -1;
    }
  v->n_in = kiln_session_input_count(v->inst[0]);
  v->n_out = kiln_session_output_count(v->inst[0]);
  if (v->n_in > SRV_MAX_IO || v->n_out > SRV_MAX_IO) {
    srv_msg(msg, n, "%zu inputs and %zu outputs: kiln serve takes at most %d of each", v->n_in,
            v->n_out, SRV_MAX_IO);
    return -1;
  }
  v->in = calloc(v->n_in + 1, sizeof *v->in);
  v->out = calloc(v->n_out + 1, sizeof *v->out);
  if (!v->in || !v->out) return -1;
  if (copy_io(v->inst[0], 1, v->n_in, v->in, msg, n) || copy_io(v->inst[0], 0, v->n_out, v->out, msg, n))
    return -1;
  return 0;
}

srv_version *srv_version_load(srv_model *m, long version, const char *path,
                              const srv_version *current, char *msg, size_t n) {
  srv_version *v = calloc(1, sizeof *v);
  if (!v) {
    srv_msg(msg, n, "out of memory");
    return NULL;
  }
  v->model = m;
  v->version = version;
  snprintf(v->vstr, sizeof v->vstr, "%ld", version);
  v->cfg = m->cfg;
  v->n_inst = v->cfg.instances < 1 ? 1 : v->cfg.instances;
  pthread_mutex_init(&v->mu, NULL);
  pthread_cond_init(&v->cv, NULL);
  pthread_cond_init(&v->refs_cv, NULL);
  srv_msg(msg, n, "out of memory");
  if (open_instances(v, path, msg, n) || warm_up(v, msg, n) ||
      (v->cfg.validate && current && validate(v, current, msg, n))) {
    version_free(v);
    return NULL;
  }
  v->batchable = is_batchable(v);
  if (start_workers(v, msg, n)) {
    srv_version_retire(v);
    return NULL;
  }
  msg[0] = 0;
  return v;
}

void srv_version_ref(srv_version *v) {
  pthread_mutex_lock(&v->mu);
  v->refs++;
  pthread_mutex_unlock(&v->mu);
}

void srv_version_unref(srv_version *v) {
  pthread_mutex_lock(&v->mu);
  if (--v->refs == 0) pthread_cond_broadcast(&v->refs_cv);
  pthread_mutex_unlock(&v->mu);
}

void srv_version_retire(srv_version *v) {
  if (!v) return;
  pthread_mutex_lock(&v->mu);
  v->retiring = 1;
  pthread_cond_broadcast(&v->cv);
  pthread_mutex_unlock(&v->mu);
  for (int i = 0; i < v->n_workers; i++) pthread_join(v->workers[i], NULL);
  pthread_mutex_lock(&v->mu);
  while (v->refs > 0) pthread_cond_wait(&v->refs_cv, &v->mu);
  pthread_mutex_unlock(&v->mu);
  version_free(v);
}

size_t srv_version_fallbacks(srv_version *v) {
  /* a fused node falls back for every session of the model: instance 0 tells */
  return v->n_inst ? kiln_session_fallback_count(v->inst[0]) : 0;
}
