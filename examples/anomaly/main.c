/* kiln-anomaly: the command line and the pipeline. The main thread reads, checks and
 * normalises rows and cuts windows into a batch; a worker thread runs the previous batch
 * (kiln or a KServe v2 server) and scores it. Two batch buffers alternate (double buffering):
 * while one is inferred the other is filled. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "anomaly.h"

static const char USAGE[] =
    "usage: kiln-anomaly MODEL_DIR --input FILE.csv|- [options]\n"
    "Stream a sensor CSV (header; first column a timestamp; the model's channels by name)\n"
    "through the autoencoder in MODEL_DIR (model.onnx + config.json, from train.py) and write\n"
    "anomaly events as JSON lines:\n"
    "  {\"start_row\":i,\"end_row\":j,\"start\":\"ts\",\"end\":\"ts\",\"channels\":[...],\"score\":x}\n"
    "(rows 0-based after the header, inclusive). Bad lines are reported and skipped.\n"
    "  --batch N          windows per inference batch (default 32)\n"
    "  --events FILE      write events there instead of stdout\n"
    "  --labels COLUMN    a 0/1 column of the input: print point-wise and event-level quality\n"
    "  --kinds FILE       anomaly kinds (kind,channel,start_row,end_row) for a per-kind table\n"
    "                     (default: INPUT's name with .kinds.csv for .csv, when it exists)\n"
    "  --serve URL        infer on a KServe v2 server (http://host:port) instead of in-process\n"
    "  --model-name NAME  the served model's name (default anomaly)\n"
    "  --binary           with --serve: tensors as raw bytes (binary tensor data extension)\n"
    "  --threads N        kiln kernel threads (default 1: inference runs beside the reader)\n"
    "  --metrics-port P   Prometheus metrics on http://localhost:P/metrics while running\n"
    "  --scores FILE      dump every row's smoothed score per channel (CSV; with the edge\n"
    "                     re-check, an edge_cleared column: 1 where it cleared the row)\n";

typedef struct row_rec {
  long file_row;
  int label;
  char *ts;
  double *raw;
} row_rec;

typedef struct batch {
  float *win, *out; /* (B, W, C) */
  long *starts;
  int n;
  row_rec *rows;
  int nrows, rows_cap;
  int eof, filled;
} batch;

typedef struct app {
  am_config cfg;
  const char *model_dir, *input, *events_path, *labels, *kinds, *serve, *model_name, *scores;
  int batch_size, threads, metrics_port, binary;
  am_backend *backend;
  am_scorer *scorer;
  am_eval *eval;
  am_metrics *metrics;
  FILE *events_out, *scores_out;
  batch bufs[2];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int failed;
  long rows, windows, events;
  double infer_s, sse; /* inference seconds; squared reconstruction error summed */
} app;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- sinks (worker thread) -------------------------------------------------------------- */
static void on_row(void *ctx, long file_row, int label, int flagged, double score) {
  app *a = ctx;
  if (a->eval) am_eval_row(a->eval, file_row, label, flagged);
  am_metrics_score(a->metrics, score);
}

static void on_event(void *ctx, const am_event *ev) {
  app *a = ctx;
  json_t *chans = json_array();
  for (int c = 0; c < a->cfg.channels && c < 64; c++)
    if (ev->channels >> c & 1) json_array_append_new(chans, json_string(a->cfg.names[c]));
  json_t *o = json_pack("{sI sI ss ss so sf}", "start_row", (json_int_t)ev->start_row, "end_row",
                        (json_int_t)ev->end_row, "start", ev->start_ts, "end", ev->end_ts,
                        "channels", chans, "score", ev->score);
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  fprintf(a->events_out, "%s\n", s);
  fflush(a->events_out);
  free(s);
  json_decref(o);
  a->events++;
  if (a->eval) am_eval_event(a->eval, ev->start_row, ev->end_row);
  am_metrics_event(a->metrics);
}

/* ---- the worker ------------------------------------------------------------------------- */
static int process(app *a, batch *b) {
  size_t wc = (size_t)a->cfg.window * (size_t)a->cfg.channels;
  char err[AM_ERR_LEN];
  for (int i = 0; i < b->nrows; i++) {
    row_rec *r = &b->rows[i];
    if (am_scorer_add_row(a->scorer, r->file_row, r->ts, r->label, r->raw)) {
      fprintf(stderr, "kiln-anomaly: internal error: the scorer's ring is full\n");
      return -1;
    }
  }
  if (b->n > 0) {
    double t0 = now_s();
    if (am_backend_run(a->backend, b->win, b->n, b->out, err)) {
      fprintf(stderr, "kiln-anomaly: inference failed: %s\n", err);
      return -1;
    }
    double dt = now_s() - t0;
    a->infer_s += dt;
    am_metrics_batch(a->metrics, b->n, dt);
    for (int i = 0; i < b->n; i++)
      am_scorer_add_window(a->scorer, b->starts[i], b->win + (size_t)i * wc, b->out + (size_t)i * wc);
    for (size_t i = 0; i < (size_t)b->n * wc; i++) {
      double d = (double)b->win[i] - (double)b->out[i];
      a->sse += d * d;
    }
    a->windows += b->n;
  }
  am_scorer_flush(a->scorer, b->eof);
  return 0;
}

static void *worker(void *arg) {
  app *a = arg;
  for (int k = 0;; k ^= 1) {
    batch *b = &a->bufs[k];
    pthread_mutex_lock(&a->mu);
    while (!b->filled) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    int rc = a->failed ? 0 : process(a, b);
    int eof = b->eof;
    pthread_mutex_lock(&a->mu);
    if (rc) a->failed = 1;
    b->filled = 0;
    b->n = 0;
    b->nrows = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (eof) return NULL;
  }
}

/* ---- the reader (main thread) ----------------------------------------------------------- */
static void submit(app *a, batch *b) {
  pthread_mutex_lock(&a->mu);
  b->filled = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* Wait until `b` is free again; 0, or -1 when the worker failed. */
static int acquire(app *a, batch *b) {
  pthread_mutex_lock(&a->mu);
  while (b->filled) pthread_cond_wait(&a->cv, &a->mu);
  int failed = a->failed;
  pthread_mutex_unlock(&a->mu);
  return failed ? -1 : 0;
}

static void add_row(app *a, batch *b, const am_csv_row *r) {
  if (b->nrows == b->rows_cap) {
    int old = b->rows_cap;
    b->rows_cap = old ? old * 2 : 256;
    b->rows = realloc(b->rows, (size_t)b->rows_cap * sizeof(row_rec));
    for (int i = old; i < b->rows_cap; i++) {
      b->rows[i].ts = NULL;
      b->rows[i].raw = malloc((size_t)a->cfg.channels * sizeof(double));
    }
  }
  row_rec *q = &b->rows[b->nrows++];
  q->file_row = r->file_row;
  q->label = r->label;
  free(q->ts);
  q->ts = strdup(r->ts);
  memcpy(q->raw, r->values, (size_t)a->cfg.channels * sizeof(double));
}

static int read_stream(app *a, am_csv *csv) {
  const am_config *cfg = &a->cfg;
  int W = cfg->window, C = cfg->channels, k = 0;
  float *hist = calloc((size_t)W * (size_t)C, sizeof(float)); /* ring of the last W rows */
  batch *b = &a->bufs[0];
  am_csv_row r;
  int rc = 0;
  while (rc == 0 && am_csv_next(csv, &r)) {
    long seq = a->rows++;
    float *h = hist + (seq % W) * C;
    for (int c = 0; c < C; c++) h[c] = (float)((r.values[c] - cfg->mean[c]) / cfg->std[c]);
    add_row(a, b, &r);
    if ((seq + 1) % 100000 == 0) {
      fprintf(stderr, "kiln-anomaly: %ld rows\n", seq + 1);
      am_metrics_rows(a->metrics, a->rows, am_csv_bad_lines(csv));
    }
    long start = seq + 1 - W;
    if (start < 0 || start % cfg->stride != 0) continue;
    float *dst = b->win + (size_t)b->n * (size_t)W * (size_t)C;
    for (int t = 0; t < W; t++) memcpy(dst + t * C, hist + ((start + t) % W) * C, C * sizeof(float));
    b->starts[b->n++] = start;
    if (b->n == a->batch_size) {
      submit(a, b);
      b = &a->bufs[k ^= 1];
      rc = acquire(a, b);
    }
  }
  am_metrics_rows(a->metrics, a->rows, am_csv_bad_lines(csv));
  b->eof = 1;
  submit(a, b);
  free(hist);
  return rc;
}

/* ---- setup and the summary -------------------------------------------------------------- */
static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_args(app *a, int argc, char **argv) {
  a->batch_size = 32;
  a->threads = 1;
  a->model_name = "anomaly";
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
      fputs(USAGE, stdout);
      exit(0);
    } else if (strcmp(o, "--binary") == 0) {
      a->binary = 1;
      continue;
    } else if (o[0] != '-' || strcmp(o, "-") == 0) {
      if (a->model_dir) bad = 1;
      a->model_dir = o;
      continue;
    } else if (!v) {
      fprintf(stderr, "kiln-anomaly: %s needs a value\n", o);
      return -1;
    } else if (strcmp(o, "--input") == 0) a->input = v;
    else if (strcmp(o, "--events") == 0) a->events_path = v;
    else if (strcmp(o, "--labels") == 0) a->labels = v;
    else if (strcmp(o, "--kinds") == 0) a->kinds = v;
    else if (strcmp(o, "--serve") == 0) a->serve = v;
    else if (strcmp(o, "--model-name") == 0) a->model_name = v;
    else if (strcmp(o, "--scores") == 0) a->scores = v;
    else if (strcmp(o, "--batch") == 0) bad = parse_int(v, 1, 4096, &a->batch_size);
    else if (strcmp(o, "--threads") == 0) bad = parse_int(v, 0, 1024, &a->threads);
    else if (strcmp(o, "--metrics-port") == 0) bad = parse_int(v, 1, 65535, &a->metrics_port);
    else bad = 1;
    if (bad) {
      fprintf(stderr, "kiln-anomaly: bad argument %s%s%s\n", o, bad && v ? " " : "", v ? v : "");
      return -1;
    }
    i++;
  }
  if (!a->model_dir || !a->input) {
    fputs(USAGE, stderr);
    return -1;
  }
  return 0;
}

/* INPUT.csv -> INPUT.kinds.csv when it exists and --kinds was not given. */
static char *default_kinds(const char *input) {
  size_t n = strlen(input);
  if (n < 4 || strcmp(input + n - 4, ".csv") != 0) return NULL;
  char *p = malloc(n + 8);
  snprintf(p, n + 8, "%.*s.kinds.csv", (int)(n - 4), input);
  struct stat st;
  if (stat(p, &st) == 0) return p;
  free(p);
  return NULL;
}

static int setup(app *a, char *err) {
  if (am_config_load(a->model_dir, &a->cfg, err)) return -1;
  if ((long)a->batch_size * a->cfg.stride > 16384) {
    snprintf(err, AM_ERR_LEN, "--batch %d: at most %d windows at stride %d", a->batch_size,
             16384 / a->cfg.stride, a->cfg.stride);
    return -1;
  }
  a->backend = a->serve ? am_backend_http(&a->cfg, a->serve, a->model_name, a->binary, err)
                        : am_backend_kiln(&a->cfg, a->threads, err);
  if (!a->backend) return -1;
  a->events_out = a->events_path ? fopen(a->events_path, "w") : stdout;
  a->scores_out = a->scores ? fopen(a->scores, "w") : NULL;
  if (!a->events_out || (a->scores && !a->scores_out)) {
    snprintf(err, AM_ERR_LEN, "cannot write %s", a->events_out ? a->scores : a->events_path);
    return -1;
  }
  if (a->metrics_port && !(a->metrics = am_metrics_start(a->metrics_port, err))) return -1;
  if (a->labels) {
    a->eval = am_eval_create();
    char *k = a->kinds ? strdup(a->kinds) : default_kinds(a->input);
    int rc = k ? am_eval_load_kinds(a->eval, k, err) : 0;
    free(k);
    if (rc) return -1;
  }
  am_sink sink = {on_row, on_event, a};
  a->scorer = am_scorer_create(&a->cfg, &sink, a->scores_out, a->batch_size);
  size_t wc = (size_t)a->batch_size * (size_t)a->cfg.window * (size_t)a->cfg.channels;
  for (int i = 0; i < 2; i++) {
    a->bufs[i].win = malloc(wc * sizeof(float));
    a->bufs[i].out = malloc(wc * sizeof(float));
    a->bufs[i].starts = malloc((size_t)a->batch_size * sizeof(long));
  }
  return 0;
}

static void summary(app *a, long bad, double wall) {
  fprintf(stderr, "kiln-anomaly: rows %ld (bad lines skipped %ld), windows %ld, events %ld\n",
          a->rows, bad, a->windows, a->events);
  fprintf(stderr, "throughput: %.0f windows/s end to end (%.3f s); inference alone %.0f windows/s "
          "(%.3f s, batch %d, %s)\n", wall > 0 ? (double)a->windows / wall : 0, wall,
          a->infer_s > 0 ? (double)a->windows / a->infer_s : 0, a->infer_s, a->batch_size,
          a->serve ? "served" : "in-process");
  if (a->windows)
    fprintf(stderr, "mean squared reconstruction error over all windows: %.6g\n",
            a->sse / ((double)a->windows * a->cfg.window * a->cfg.channels));
  am_backend_summary(a->backend, stderr);
  if (a->eval) am_eval_report(a->eval, stderr);
}

static void teardown(app *a) {
  for (int i = 0; i < 2; i++) {
    batch *b = &a->bufs[i];
    for (int j = 0; j < b->rows_cap; j++) free(b->rows[j].ts), free(b->rows[j].raw);
    free(b->rows);
    free(b->win);
    free(b->out);
    free(b->starts);
  }
  am_scorer_free(a->scorer);
  am_eval_free(a->eval);
  am_metrics_stop(a->metrics);
  am_backend_free(a->backend);
  if (a->events_out && a->events_out != stdout) fclose(a->events_out);
  if (a->scores_out) fclose(a->scores_out);
  am_config_free(&a->cfg);
}

int main(int argc, char **argv) {
  static app a;
  char err[AM_ERR_LEN] = "";
  if (parse_args(&a, argc, argv)) return 2;
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  am_csv *csv = NULL;
  int rc = 1;
  if (setup(&a, err) || !(csv = am_csv_open(a.input, &a.cfg, a.labels, err))) {
    fprintf(stderr, "kiln-anomaly: %s\n", err);
  } else {
    double t0 = now_s();
    pthread_t th;
    pthread_create(&th, NULL, worker, &a);
    int rr = read_stream(&a, csv);
    pthread_join(th, NULL);
    double wall = now_s() - t0;
    rc = rr || a.failed;
    summary(&a, am_csv_bad_lines(csv), wall);
  }
  am_csv_close(csv);
  teardown(&a);
  pthread_cond_destroy(&a.cv);
  pthread_mutex_destroy(&a.mu);
  return rc;
}
