/* kiln serve: an inference server on the KServe v2 (Open Inference) protocol.
 *
 * Internal header of the kiln_serve library. The server is a client of the public API
 * (kiln/kiln.h) only: a compiled model (kiln_model_load) per model version, one session per
 * instance created from it, so instances share one copy of the weights.
 *
 * Pieces, one file each:
 *   main.c     flags and environment, signals, graceful shutdown (kiln_serve_main)
 *   http.c     libmicrohttpd callbacks, routing, limits, responses
 *   codec.c    v2 tensors from JSON / binary requests and back
 *   repo.c     the model repository: scan, config.json, version policy, labels, index
 *   version.c  one loaded version: load, check, warm up, its instances' workers
 *   batch.c    per-version request queue and dynamic batching
 *   metrics.c  counters and histograms in the Prometheus text format, request logs
 *   util.c     growable buffers, clocks, small helpers
 */
#ifndef KILN_SERVE_SERVE_H
#define KILN_SERVE_SERVE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "kiln/kiln.h"

#define SRV_MAX_MODELS 64
#define SRV_MAX_VERSIONS 16
#define SRV_MAX_LABELS 8
#define SRV_MAX_PREFERRED 8
#define SRV_MAX_PLUGINS 8
#define SRV_MAX_FAILURES 8
#define SRV_NAME_MAX 128
#define SRV_MAX_IO 256 /* inputs or outputs of a served model */
#define SRV_MAX_REAPERS 64

/* ---- util.c -------------------------------------------------------------------------- */

typedef struct srv_buf {
  char *data;
  size_t len, cap;
  int failed; /* an allocation failed: the contents are incomplete */
} srv_buf;

void srv_buf_put(srv_buf *b, const void *p, size_t n);
__attribute__((format(printf, 2, 3))) void srv_buf_printf(srv_buf *b, const char *fmt, ...);
void srv_buf_puts(srv_buf *b, const char *s);
/* A JSON string literal, quotes included. */
void srv_buf_json_str(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);
double srv_now(void); /* CLOCK_MONOTONIC seconds */
__attribute__((format(printf, 3, 4))) void srv_msg(char *dst, size_t n, const char *fmt, ...);
/* A whole decimal number in [lo, hi]; 0 on success. */
int srv_parse_long(const char *s, long lo, long hi, long *out);
int srv_parse_double(const char *s, double lo, double hi, double *out);

/* ---- configuration ------------------------------------------------------------------- */

enum { SRV_POLICY_LATEST = 0, SRV_POLICY_ALL = 1, SRV_POLICY_SPECIFIC = 2 };

/* One model's settings: DIR/NAME/config.json, or the command line's for a single model. */
typedef struct srv_model_config {
  int max_batch_size;                 /* 0: no batching */
  int preferred[SRV_MAX_PREFERRED];   /* preferred batch sizes */
  int n_preferred;
  long max_queue_delay_us;
  int max_queue_size;                 /* requests waiting per version */
  int instances;                      /* sessions per version */
  int threads;                        /* kernel threads per session, 0: kiln's default */
  int level;                          /* optimisation level */
  char plugins[SRV_MAX_PLUGINS][512];
  int n_plugins;
  int policy;                         /* SRV_POLICY_* */
  int latest_n;
  long specific[SRV_MAX_VERSIONS];
  int n_specific;
  char label_name[SRV_MAX_LABELS][32];
  long label_version[SRV_MAX_LABELS];
  int n_labels;
  int required;                       /* readiness waits for this model */
  int validate;                       /* compare a new version with the serving one */
  double validate_atol, validate_rtol;
  double latency_budget_ms;           /* 0: no budget */
  int warmup_runs;
  long run_timeout_ms;                /* a run's time limit (kiln_options.max_run_ms), 0: none */
} srv_model_config;

void srv_model_config_default(srv_model_config *c);
/* Parse config.json over `c` (fields absent keep their values). 0 or -1 with msg. */
int srv_model_config_parse(const char *path, srv_model_config *c, char *msg, size_t n);

typedef struct srv_config {
  const char *model_path;   /* kiln serve MODEL.onnx */
  const char *model_name;   /* its name (default: the file's stem) */
  const char *repo_dir;     /* --model-repository */
  const char *host;
  long port;
  long http_threads;
  long max_connections;
  long conn_timeout_s;
  long max_body_bytes;
  long max_tensor_elements;
  long max_json_depth;
  long max_header_bytes;
  double drain_s, exit_timeout_s, poll_s;
  const char *admin_token;
  int log_format;           /* SRV_LOG_* */
  srv_model_config defaults; /* settings of models that do not say otherwise */
} srv_config;

enum { SRV_LOG_TEXT = 0, SRV_LOG_JSON = 1, SRV_LOG_OFF = 2 };

/* ---- metrics.c ----------------------------------------------------------------------- */

#define SRV_HIST_BUCKETS 16
typedef struct srv_hist {
  uint64_t counts[SRV_HIST_BUCKETS + 1]; /* last: +Inf */
  double sum;
  uint64_t n;
} srv_hist;

extern const double srv_time_buckets[SRV_HIST_BUCKETS];  /* seconds */
extern const double srv_batch_buckets[SRV_HIST_BUCKETS]; /* rows */
void srv_hist_add(srv_hist *h, const double *bounds, double v);

/* Per-version statistics, under the version's queue lock. */
typedef struct srv_stats {
  srv_hist request, queue, compute, batch;
  uint64_t success, failure, rejected;
} srv_stats;

struct srv_repo;
void srv_metrics_http_code(int code);
void srv_metrics_render(struct srv_repo *r, srv_buf *b);
void srv_log_request(int format, const char *method, const char *url, int code, size_t bytes,
                     double ms, const char *model, const char *version, const char *id);

/* ---- version.c / batch.c ------------------------------------------------------------- */

struct srv_model;
struct srv_version;

typedef struct srv_job {
  struct srv_job *next;
  struct srv_version *v;
  kiln_tensor **inputs;   /* model input order, all present; owned */
  size_t n_out;
  int *out_idx;           /* requested outputs (indices into the model's outputs); owned */
  int64_t rows;           /* dim 0 of every input when batchable, else -1 */
  double t_enqueue, t_start, t_end;
  kiln_tensor **outputs;  /* n_out results, owned */
  int status;             /* HTTP status once done */
  char error[512];
  void (*done)(struct srv_job *j, void *ctx);
  void *ctx;
} srv_job;

typedef struct srv_io {
  const char *name;       /* borrowed from instance 0 */
  kiln_kind kind;
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
} srv_io;

typedef struct srv_version {
  struct srv_model *model;
  long version;
  char vstr[24];
  kiln_model *compiled;
  int n_inst;
  kiln_session **inst;
  pthread_t *workers;
  int n_workers;
  size_t n_in, n_out;
  srv_io *in, *out;
  int batchable;           /* every input has a free dim 0 and max_batch_size > 0 */
  srv_model_config cfg;    /* copy taken at load */
  off_t file_size;         /* of the model file, for reloading a single model */
  time_t file_mtime;
  /* queue */
  pthread_mutex_t mu;
  pthread_cond_t cv, refs_cv;
  srv_job *head, *tail;
  int depth, running;
  int retiring;
  int refs;
  int next_idx;            /* instance of the next worker to start */
  srv_stats stats;
} srv_version;

/* Load, check against `current` (may be NULL), warm up. NULL with msg on failure. */
srv_version *srv_version_load(struct srv_model *m, long version, const char *path,
                              const srv_version *current, char *msg, size_t n);
/* Stop taking jobs, finish queued ones, wait for every reference, free. */
void srv_version_retire(srv_version *v);
void srv_version_ref(srv_version *v);
void srv_version_unref(srv_version *v);
size_t srv_version_fallbacks(srv_version *v);
/* Run inputs once on instance `inst` (outputs freed); used by checks and warm-up. */
int srv_version_run_random(srv_version *v, int inst, kiln_tensor ***outs, char *msg, size_t n);

enum { SRV_SUBMIT_OK = 0, SRV_SUBMIT_FULL = 1, SRV_SUBMIT_RETIRING = 2 };
int srv_submit(srv_version *v, srv_job *j);
void *srv_worker_main(void *arg);
void srv_job_free(srv_job *j);

/* ---- repo.c -------------------------------------------------------------------------- */

typedef struct srv_failure {
  long version;
  char reason[512];
  off_t size;
  time_t mtime;
} srv_failure;

typedef struct srv_model {
  char name[SRV_NAME_MAX];
  char dir[4096];          /* DIR/NAME, or empty for a single model file */
  char single_path[4096];  /* the model file of `kiln serve MODEL.onnx` */
  srv_model_config cfg;
  char cfg_error[512];
  srv_version *versions[SRV_MAX_VERSIONS]; /* serving, ascending */
  int n_versions;
  srv_failure failures[SRV_MAX_FAILURES];
  int n_failures;
  uint64_t load_failures;
  int unloaded;            /* by the unload API: not reloaded until loaded again */
  int present;             /* seen in the last scan */
} srv_model;

typedef struct srv_repo {
  const srv_config *cfg;
  pthread_mutex_t mu;      /* the tables below */
  pthread_mutex_t load_mu; /* one scan or load at a time */
  srv_model *models[SRV_MAX_MODELS];
  int n_models;
  uint64_t scan_failures;
  pthread_t reapers[SRV_MAX_REAPERS]; /* versions retiring (repo.c, retire_later) */
  int n_reapers;
} srv_repo;

int srv_repo_init(srv_repo *r, const srv_config *cfg, char *msg, size_t n);
/* Rescan: every model, or only `name` (load API); "force" retries failed versions. */
int srv_repo_scan(srv_repo *r, const char *name, int force, char *msg, size_t n);
int srv_repo_unload(srv_repo *r, const char *name, char *msg, size_t n);
void srv_repo_free(srv_repo *r);
/* Find a model and a version ("" / NULL: the newest; a number; or a label) and take a
 * reference. Returns 0, or the HTTP status (404) with msg. */
int srv_repo_acquire(srv_repo *r, const char *name, const char *version, srv_version **out,
                     char *msg, size_t n);
srv_model *srv_repo_find(srv_repo *r, const char *name); /* under r->mu */
int srv_repo_ready(srv_repo *r);
void srv_repo_index_json(srv_repo *r, srv_buf *b);

/* ---- codec.c ------------------------------------------------------------------------- */

typedef struct srv_limits {
  long max_tensor_elements;
  long max_json_depth;
} srv_limits;

/* A decoded infer request. */
typedef struct srv_request {
  char id[256];
  int has_id;
  kiln_tensor **inputs;    /* model input order; owned */
  size_t n_out;
  int *out_idx;            /* owned */
  int *out_binary;         /* per requested output: send as binary data; owned */
} srv_request;

/* Parse `body` (JSON header of `json_len` bytes, then binary data) against version v. Returns 0,
 * or an HTTP status (400) with msg. */
int srv_decode_request(const srv_version *v, const char *body, size_t len, size_t json_len,
                       const srv_limits *lim, srv_request *req, char *msg, size_t n);
void srv_request_free(srv_request *req, size_t n_in);
/* The response body; *json_len is the JSON header's length when binary data follows, else 0. */
int srv_encode_response(const srv_version *v, const srv_request *req, kiln_tensor **outs,
                        srv_buf *b, size_t *json_len, char *msg, size_t n);
const char *srv_v2_dtype(kiln_dtype t);
uint16_t srv_f32_to_f16(float f);
float srv_f16_to_f32(uint16_t h);
uint16_t srv_f32_to_bf16(float f);
float srv_bf16_to_f32(uint16_t h);
/* Deepest nesting of [ and { outside strings. */
long srv_json_depth(const char *s, size_t n);

/* ---- datascan.c: the fast path for numeric data in JSON ------------------------------ */

typedef struct srv_span {
  size_t input;       /* index in the request's "inputs" array */
  size_t start, end;  /* the "data" array's text, brackets included */
} srv_span;

enum { SRV_SC_INT, SRV_SC_BIGINT, SRV_SC_REAL, SRV_SC_BOOL, SRV_SC_STR, SRV_SC_OTHER };
typedef struct srv_scalar {
  int kind;
  long long i;       /* SRV_SC_INT, SRV_SC_BOOL */
  double d;          /* every number */
  const char *s;     /* SRV_SC_STR */
} srv_scalar;

/* Find the inputs[k].data arrays of s[0, n) holding only numbers, true/false and arrays. */
int srv_find_data_spans(const char *s, size_t n, srv_span *out, int max);
/* Read one such array, calling put for every scalar in order. 0 ok; -1 malformed (at
 * *err_off); 1 when put failed. */
int srv_scan_numbers(const char *s, size_t n, int (*put)(void *ctx, const srv_scalar *v), void *ctx,
                     size_t *err_off);

/* ---- http.c -------------------------------------------------------------------------- */

typedef struct srv_server srv_server;
srv_server *srv_http_start(srv_repo *r, const srv_config *cfg, char *msg, size_t n);
int srv_http_port(srv_server *s);
void srv_http_set_draining(srv_server *s);
void srv_http_quiesce(srv_server *s);  /* refuse new connections */
long srv_http_active(srv_server *s);   /* requests between arrival and completion */
void srv_http_stop(srv_server *s);

/* Process-wide gauges (atomics). */
extern long srv_inflight;

#endif
