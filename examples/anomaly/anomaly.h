/*
 * kiln-anomaly: streaming anomaly detection on sensor CSVs with an autoencoder run by kiln.
 *
 * The pipeline: csvin.c reads and checks lines (main thread), main.c normalises rows and cuts
 * windows into batches; a worker thread runs each batch (backend.c: kiln in-process or a KServe
 * v2 server) while the next is prepared, and feeds the reconstructions to the scorer
 * (scorer.c), which turns them into per-row scores, flags and events exactly as scoring.py
 * defines them; eval.c compares flags and events with labels; metrics.c serves Prometheus text.
 */
#ifndef KILN_ANOMALY_H
#define KILN_ANOMALY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AM_ERR_LEN 2048

/* ---- config.json (written by train.py) --------------------------------------------------- */
typedef struct am_config {
  int channels;          /* C */
  char **names;          /* C channel names, in the model's order */
  int window, stride;    /* W rows per window, step between window starts */
  int smooth, merge_gap; /* rows of score smoothing; flagged runs this close join */
  int smooth_min;        /* 1: smallest mean over the stretches holding a row; 0: centred mean */
  double *mean, *std;    /* normalisation, per channel */
  double *threshold;     /* per channel, on the smoothed squared error */
  int *flat_limit;       /* per channel: identical consecutive values that count as stuck */
  double *edge_head, *edge_tail; /* (W, C) edge re-check thresholds (scoring.edge_recheck), or
                                  * NULL: no re-check (models from before it, stride > 1) */
  char *model_path;      /* absolute or relative to the current directory */
  char *input_name, *output_name;
} am_config;

int am_config_load(const char *model_dir, am_config *cfg, char *err);
void am_config_free(am_config *cfg);

/* ---- CSV input --------------------------------------------------------------------------- */
#define AM_MAX_LINE (1 << 20) /* longer lines are reported and skipped */

typedef struct am_csv am_csv;
/* A row as read: the timestamp text, the channel values in the model's order, the label. */
typedef struct am_csv_row {
  const char *ts;   /* borrowed until the next am_csv_next */
  double *values;   /* C values, borrowed likewise */
  int label;        /* -1 without a label column */
  long line;        /* 1-based line number in the input */
  long file_row;    /* 0-based data row: line - 2 */
} am_csv_row;

/* Open `path` ("-" for stdin) and read its header; `label_column` may be NULL. Header problems
 * that can be worked around (channels by position) are reported on stderr. */
am_csv *am_csv_open(const char *path, const am_config *cfg, const char *label_column, char *err);
/* Next good row: 1, or 0 at the end. Bad lines are reported on `log` and skipped. */
int am_csv_next(am_csv *c, am_csv_row *row);
long am_csv_bad_lines(const am_csv *c);
void am_csv_close(am_csv *c);

/* ---- the scorer ------------------------------------------------------------------------- */
typedef struct am_event {
  long start_row, end_row; /* file rows, inclusive */
  char *start_ts, *end_ts;
  uint64_t channels;       /* bit c: channel c took part (first 64 channels) */
  double score;            /* largest score / threshold over the event's rows */
} am_event;

typedef struct am_scorer am_scorer;
/* Called for every finalised row (in order) and every closed event. */
typedef struct am_sink {
  void (*row)(void *ctx, long file_row, int label, int flagged, double score);
  void (*event)(void *ctx, const am_event *ev);
  void *ctx;
} am_sink;

/* max_batch: the most windows added between two flushes. */
am_scorer *am_scorer_create(const am_config *cfg, const am_sink *sink, FILE *scores_dump,
                            int max_batch);
/* Append a row (accepted-row order): its file row, timestamp, label and raw values. */
int am_scorer_add_row(am_scorer *s, long file_row, const char *ts, int label, const double *raw);
/* Reconstruction of the window starting at accepted row `start`: x and xhat are (W, C). */
void am_scorer_add_window(am_scorer *s, long start, const float *x, const float *xhat);
/* Finalise whatever is ready (all rows when `eof`). */
void am_scorer_flush(am_scorer *s, int eof);
void am_scorer_free(am_scorer *s);

/* ---- evaluation against labels ---------------------------------------------------------- */
typedef struct am_eval am_eval;
am_eval *am_eval_create(void);
void am_eval_row(am_eval *e, long file_row, int label, int flagged);
void am_eval_event(am_eval *e, long start_row, long end_row);
/* Anomalies with kinds (kind,channel,start_row,end_row CSV); replaces label runs as truth. */
int am_eval_load_kinds(am_eval *e, const char *path, char *err);
void am_eval_report(const am_eval *e, FILE *out);
void am_eval_free(am_eval *e);

/* ---- inference backends ------------------------------------------------------------------ */
typedef struct am_backend am_backend;
/* In-process kiln session (threads: kernel threads, 1 by default). */
am_backend *am_backend_kiln(const am_config *cfg, int threads, char *err);
/* A KServe v2 server: base URL http://host[:port][/prefix], model name; binary: tensors as raw
 * bytes (the binary tensor data extension) instead of JSON numbers. */
am_backend *am_backend_http(const am_config *cfg, const char *url, const char *model, int binary,
                            char *err);
/* Reconstruct n windows (n, W, C) into out (n, W, C). 0 on success. */
int am_backend_run(am_backend *b, const float *in, int n, float *out, char *err);
/* Optimisation summary (passes that rewrote, fused nodes by type) to `out`. */
void am_backend_summary(const am_backend *b, FILE *out);
void am_backend_free(am_backend *b);

/* HTTP/1.1 client of one server, one kept-alive connection (opened on the first POST). */
typedef struct am_http am_http;
am_http *am_http_open(const char *host, int port);
/* POST to path of a JSON body, or with json_len >= 0 of a binary tensor data body whose first
 * json_len bytes are JSON. The response body (malloc'd) and its
 * Inference-Header-Content-Length (-1 when absent). */
int am_http_post(am_http *h, const char *path, const char *body, size_t len, long json_len,
                 char **resp, size_t *resp_len, int *status, long *resp_json_len, char *err);
long am_http_connections(const am_http *h); /* connections opened so far */
void am_http_close(am_http *h);

/* ---- Prometheus metrics ------------------------------------------------------------------ */
typedef struct am_metrics am_metrics;
am_metrics *am_metrics_start(int port, char *err);
void am_metrics_rows(am_metrics *m, long rows, long bad_lines);
void am_metrics_batch(am_metrics *m, int windows, double seconds);
void am_metrics_score(am_metrics *m, double score);
void am_metrics_event(am_metrics *m);
/* The exposition text (malloc'd), what GET /metrics returns. */
char *am_metrics_text(am_metrics *m);
void am_metrics_stop(am_metrics *m);

#endif
