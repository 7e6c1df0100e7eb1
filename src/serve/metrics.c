/* kiln serve: metrics in the Prometheus text format (histograms with cumulative buckets, counters,
 * gauges) and one log line per request on stdout. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve.h"

const double srv_time_buckets[SRV_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                   0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                   1,      2.5,     5,      10};
const double srv_batch_buckets[SRV_HIST_BUCKETS] = {1,  2,  3,  4,   6,   8,   12,  16,
                                                    24, 32, 48, 64, 128, 256, 512, 1024};

static unsigned long http_codes[600];
long srv_inflight;

void srv_hist_add(srv_hist *h, const double *bounds, double v) {
  int i = 0;
  while (i < SRV_HIST_BUCKETS && v > bounds[i]) i++;
  h->counts[i]++;
  h->sum += v;
  h->n++;
}

void srv_metrics_http_code(int code) {
  if (code >= 100 && code < 600) __atomic_add_fetch(&http_codes[code], 1, __ATOMIC_RELAXED);
}

static void hist_render(srv_buf *b, const char *name, const char *labels, const srv_hist *h,
                        const double *bounds) {
  uint64_t cum = 0;
  for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
    cum += h->counts[i];
    srv_buf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i],
                   (unsigned long long)cum);
  }
  cum += h->counts[SRV_HIST_BUCKETS];
  srv_buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
  srv_buf_printf(b, "%s_sum{%s} %.9g\n", name, labels, h->sum);
  srv_buf_printf(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->n);
}

typedef struct snap {
  char labels[SRV_NAME_MAX + 64];
  srv_stats st;
  int depth, running;
  size_t fallbacks;
} snap;

/* Copy every serving version's statistics under the locks, then render without them. */
static int take_snaps(srv_repo *r, snap *out, int max) {
  int n = 0;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n_models; i++) {
    srv_model *m = r->models[i];
    for (int k = 0; k < m->n_versions && n < max; k++) {
      srv_version *v = m->versions[k];
      snap *s = &out[n++];
      snprintf(s->labels, sizeof s->labels, "model=\"%s\",version=\"%s\"", m->name, v->vstr);
      pthread_mutex_lock(&v->mu);
      s->st = v->stats;
      s->depth = v->depth;
      s->running = v->running;
      pthread_mutex_unlock(&v->mu);
      s->fallbacks = srv_version_fallbacks(v);
    }
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

static void render_versions(srv_buf *b, const snap *s, int n) {
  static const struct {
    const char *name, *help;
    size_t off;
    int batch;
  } hists[] = {
      {"kiln_request_duration_seconds", "Time from arrival to response of inference requests",
       offsetof(srv_stats, request), 0},
      {"kiln_queue_duration_seconds", "Time inference requests waited in the queue",
       offsetof(srv_stats, queue), 0},
      {"kiln_compute_duration_seconds", "Time of the model run that served a request",
       offsetof(srv_stats, compute), 0},
      {"kiln_batch_size", "Rows per model run (dynamic batching)", offsetof(srv_stats, batch), 1},
  };
  for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", hists[h].name, hists[h].help,
                   hists[h].name);
    for (int i = 0; i < n; i++)
      hist_render(b, hists[h].name, s[i].labels,
                  (const srv_hist *)((const char *)&s[i].st + hists[h].off),
                  hists[h].batch ? srv_batch_buckets : srv_time_buckets);
  }
  srv_buf_puts(b, "# HELP kiln_inference_requests_total Inference requests by outcome\n"
                  "# TYPE kiln_inference_requests_total counter\n");
  for (int i = 0; i < n; i++) {
    srv_buf_printf(b, "kiln_inference_requests_total{%s,outcome=\"success\"} %llu\n", s[i].labels,
                   (unsigned long long)s[i].st.success);
    srv_buf_printf(b, "kiln_inference_requests_total{%s,outcome=\"failure\"} %llu\n", s[i].labels,
                   (unsigned long long)s[i].st.failure);
    srv_buf_printf(b, "kiln_inference_requests_total{%s,outcome=\"rejected\"} %llu\n", s[i].labels,
                   (unsigned long long)s[i].st.rejected);
  }
  srv_buf_puts(b, "# HELP kiln_queue_depth Requests waiting in the queue\n"
                  "# TYPE kiln_queue_depth gauge\n");
  for (int i = 0; i < n; i++) srv_buf_printf(b, "kiln_queue_depth{%s} %d\n", s[i].labels, s[i].depth);
  srv_buf_puts(b, "# HELP kiln_running_requests Requests in a model run now\n"
                  "# TYPE kiln_running_requests gauge\n");
  for (int i = 0; i < n; i++)
    srv_buf_printf(b, "kiln_running_requests{%s} %d\n", s[i].labels, s[i].running);
  srv_buf_puts(b, "# HELP kiln_fused_node_fallbacks Fused nodes running the chain they replaced "
                  "(kiln_session_fallback_count)\n# TYPE kiln_fused_node_fallbacks gauge\n");
  for (int i = 0; i < n; i++)
    srv_buf_printf(b, "kiln_fused_node_fallbacks{%s} %zu\n", s[i].labels, s[i].fallbacks);
}

static void render_models(srv_repo *r, srv_buf *b) {
  pthread_mutex_lock(&r->mu);
  srv_buf_puts(b, "# HELP kiln_model_load_failures_total Versions that failed to load or pass "
                  "their checks\n# TYPE kiln_model_load_failures_total counter\n");
  for (int i = 0; i < r->n_models; i++)
    srv_buf_printf(b, "kiln_model_load_failures_total{model=\"%s\"} %llu\n", r->models[i]->name,
                   (unsigned long long)r->models[i]->load_failures);
  srv_buf_puts(b, "# HELP kiln_model_ready Whether a model has a version serving\n"
                  "# TYPE kiln_model_ready gauge\n");
  for (int i = 0; i < r->n_models; i++)
    srv_buf_printf(b, "kiln_model_ready{model=\"%s\"} %d\n", r->models[i]->name,
                   r->models[i]->n_versions > 0);
  pthread_mutex_unlock(&r->mu);
}

static long resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * sysconf(_SC_PAGESIZE);
}

void srv_metrics_render(srv_repo *r, srv_buf *b) {
  snap *s = calloc(SRV_MAX_MODELS * SRV_MAX_VERSIONS, sizeof *s);
  int n = s ? take_snaps(r, s, SRV_MAX_MODELS * SRV_MAX_VERSIONS) : 0;
  render_versions(b, s, n);
  free(s);
  render_models(r, b);
  srv_buf_puts(b, "# HELP kiln_http_responses_total HTTP responses by status code\n"
                  "# TYPE kiln_http_responses_total counter\n");
  for (int c = 100; c < 600; c++) {
    unsigned long k = __atomic_load_n(&http_codes[c], __ATOMIC_RELAXED);
    if (k) srv_buf_printf(b, "kiln_http_responses_total{code=\"%d\"} %lu\n", c, k);
  }
  srv_buf_printf(b, "# HELP kiln_inflight_requests Inference requests queued or running\n"
                    "# TYPE kiln_inflight_requests gauge\nkiln_inflight_requests %ld\n",
                 __atomic_load_n(&srv_inflight, __ATOMIC_RELAXED));
  srv_buf_printf(b, "# HELP process_resident_memory_bytes Resident memory size in bytes\n"
                    "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %ld\n",
                 resident_bytes());
}

void srv_log_request(int format, const char *method, const char *url, int code, size_t bytes,
                     double ms, const char *model, const char *version, const char *id) {
  if (format == SRV_LOG_OFF) return;
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  char ts[32];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  srv_buf b = {0};
  if (format == SRV_LOG_JSON) {
    srv_buf_printf(&b, "{\"time\":\"%s\",\"method\":", ts);
    srv_buf_json_str(&b, method);
    srv_buf_puts(&b, ",\"path\":");
    srv_buf_json_str(&b, url);
    srv_buf_printf(&b, ",\"status\":%d,\"bytes\":%zu,\"duration_ms\":%.3f", code, bytes, ms);
    if (model) {
      srv_buf_puts(&b, ",\"model\":");
      srv_buf_json_str(&b, model);
    }
    if (version) {
      srv_buf_puts(&b, ",\"version\":");
      srv_buf_json_str(&b, version);
    }
    if (id) {
      srv_buf_puts(&b, ",\"id\":");
      srv_buf_json_str(&b, id);
    }
    srv_buf_puts(&b, "}\n");
  } else {
    srv_buf_printf(&b, "%s %s %s %d %zu %.3fms", ts, method, url, code, bytes, ms);
    if (model) srv_buf_printf(&b, " model=%s version=%s", model, version ? version : "-");
    srv_buf_puts(&b, "\n");
  }
  if (b.data) fwrite(b.data, 1, b.len, stdout);
  fflush(stdout);
  srv_buf_free(&b);
}
