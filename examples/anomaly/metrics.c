/* Prometheus text metrics on GET /metrics (libmicrohttpd, its own thread): rows, bad lines,
 * windows, events, batch latency and row score histograms. */
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "anomaly.h"

static const double LAT_BUCKETS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05, 0.1, 0.25, 1};
static const double SCORE_BUCKETS[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 100};
#define N_LAT (sizeof(LAT_BUCKETS) / sizeof(double))
#define N_SCORE (sizeof(SCORE_BUCKETS) / sizeof(double))

typedef struct hist {
  unsigned long long counts[16];
  unsigned long long n;
  double sum;
} hist;

struct am_metrics {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  long rows, bad, windows, batches, events;
  hist lat, score;
};

static void observe(hist *h, const double *b, size_t nb, double v) {
  for (size_t i = 0; i < nb; i++)
    if (v <= b[i]) h->counts[i]++;
  h->n++;
  h->sum += v;
}

static size_t put_hist(char *p, size_t cap, const char *name, const char *help, const hist *h,
                       const double *b, size_t nb) {
  size_t n = (size_t)snprintf(p, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  for (size_t i = 0; i < nb; i++)
    n += (size_t)snprintf(p + n, cap - n, "%s_bucket{le=\"%g\"} %llu\n", name, b[i], h->counts[i]);
  n += (size_t)snprintf(p + n, cap - n, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n",
                        name, h->n, name, h->sum, name, h->n);
  return n;
}

char *am_metrics_text(am_metrics *m) {
  size_t cap = 8192, n = 0;
  char *p = malloc(cap);
  pthread_mutex_lock(&m->mu);
  n += (size_t)snprintf(p + n, cap - n,
      "# HELP kiln_anomaly_rows_total Rows read and accepted.\n# TYPE kiln_anomaly_rows_total counter\n"
      "kiln_anomaly_rows_total %ld\n"
      "# HELP kiln_anomaly_bad_lines_total Input lines reported and skipped.\n"
      "# TYPE kiln_anomaly_bad_lines_total counter\nkiln_anomaly_bad_lines_total %ld\n"
      "# HELP kiln_anomaly_windows_total Windows scored.\n# TYPE kiln_anomaly_windows_total counter\n"
      "kiln_anomaly_windows_total %ld\n"
      "# HELP kiln_anomaly_events_total Anomaly events written.\n"
      "# TYPE kiln_anomaly_events_total counter\nkiln_anomaly_events_total %ld\n",
      m->rows, m->bad, m->windows, m->events);
  n += put_hist(p + n, cap - n, "kiln_anomaly_batch_seconds", "Inference time per batch.",
                &m->lat, LAT_BUCKETS, N_LAT);
  put_hist(p + n, cap - n, "kiln_anomaly_row_score", "Row score (1 = threshold).", &m->score,
           SCORE_BUCKETS, N_SCORE);
  pthread_mutex_unlock(&m->mu);
  return p;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **req) {
  (void)version, (void)data, (void)data_size, (void)req;
  int ok = strcmp(method, "GET") == 0 && strcmp(url, "/metrics") == 0;
  char *text = ok ? am_metrics_text(cls) : strdup("not found: GET /metrics\n");
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
  enum MHD_Result rc = MHD_queue_response(conn, ok ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, r);
  MHD_destroy_response(r);
  return rc;
}

am_metrics *am_metrics_start(int port, char *err) {
  am_metrics *m = calloc(1, sizeof(*m));
  pthread_mutex_init(&m->mu, NULL);
  m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, handle, m,
                          MHD_OPTION_END);
  if (!m->d) {
    snprintf(err, AM_ERR_LEN, "--metrics-port %d: cannot listen", port);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return NULL;
  }
  return m;
}

void am_metrics_rows(am_metrics *m, long rows, long bad_lines) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->rows = rows;
  m->bad = bad_lines;
  pthread_mutex_unlock(&m->mu);
}

void am_metrics_batch(am_metrics *m, int windows, double seconds) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->windows += windows;
  m->batches++;
  observe(&m->lat, LAT_BUCKETS, N_LAT, seconds);
  pthread_mutex_unlock(&m->mu);
}

void am_metrics_score(am_metrics *m, double score) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  observe(&m->score, SCORE_BUCKETS, N_SCORE, score);
  pthread_mutex_unlock(&m->mu);
}

void am_metrics_event(am_metrics *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->events++;
  pthread_mutex_unlock(&m->mu);
}

void am_metrics_stop(am_metrics *m) {
  if (!m) return;
  MHD_stop_daemon(m->d);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
