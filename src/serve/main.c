/* kiln serve: flags and their environment variables, the signal loop (SIGHUP and --poll-s
 * rescan the repository; SIGTERM and SIGINT drain), and the shutdown sequence: readiness 503 at
 * once, requests still served for --drain-s, then new connections refused while work in flight
 * and queued finishes, up to --exit-timeout-s. A second SIGTERM or SIGINT exits at once. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_serve.h"
#include "serve.h"

enum { OPT_LONG, OPT_INT, OPT_DOUBLE, OPT_STR, OPT_FLAG, OPT_SIZES, OPT_LOG };

typedef struct opt {
  const char *flag, *env;
  int type;
  void *ptr;
  double lo, hi;
  const char *help;
} opt;

static srv_config cfg;

static const opt opts[] = {
    {"--model-repository", "KILN_MODEL_REPOSITORY", OPT_STR, &cfg.repo_dir, 0, 0,
     "DIR/NAME/VERSION/model.onnx (+ DIR/NAME/config.json)"},
    {"--model-name", "KILN_MODEL_NAME", OPT_STR, &cfg.model_name, 0, 0,
     "name of the single MODEL.onnx (default: its file name without .onnx)"},
    {"--host", "KILN_HTTP_HOST", OPT_STR, &cfg.host, 0, 0, "IPv4 address to bind (default 127.0.0.1)"},
    {"--http-port", "KILN_HTTP_PORT", OPT_LONG, &cfg.port, 0, 65535, "port (default 8000; 0: any free port)"},
    {"--http-threads", "KILN_HTTP_THREADS", OPT_LONG, &cfg.http_threads, 1, 256,
     "HTTP threads (default 4; requests in flight are not bound to threads)"},
    {"--max-connections", "KILN_MAX_CONNECTIONS", OPT_LONG, &cfg.max_connections, 1, 100000,
     "open connections at most (default 1024)"},
    {"--conn-timeout-s", "KILN_CONN_TIMEOUT_S", OPT_LONG, &cfg.conn_timeout_s, 1, 86400,
     "close a connection idle or stalled this long (default 30)"},
    {"--max-body-bytes", "KILN_MAX_BODY_BYTES", OPT_LONG, &cfg.max_body_bytes, 1024, 1L << 34,
     "larger request bodies get 413 (default 67108864)"},
    {"--max-tensor-elements", "KILN_MAX_TENSOR_ELEMENTS", OPT_LONG, &cfg.max_tensor_elements, 1, 1L << 34,
     "elements per input tensor at most (default 16777216)"},
    {"--max-json-depth", "KILN_MAX_JSON_DEPTH", OPT_LONG, &cfg.max_json_depth, 2, 1000,
     "JSON nesting at most (default 32)"},
    {"--max-header-bytes", "KILN_MAX_HEADER_BYTES", OPT_LONG, &cfg.max_header_bytes, 4096, 1L << 24,
     "memory for a connection's request line and headers (default 65536)"},
    {"--drain-s", "KILN_DRAIN_S", OPT_DOUBLE, &cfg.drain_s, 0, 3600,
     "on SIGTERM: seconds not ready but still serving (default 5)"},
    {"--exit-timeout-s", "KILN_EXIT_TIMEOUT_S", OPT_DOUBLE, &cfg.exit_timeout_s, 0, 3600,
     "then: seconds at most for work in flight to finish (default 30)"},
    {"--poll-s", "KILN_POLL_S", OPT_DOUBLE, &cfg.poll_s, 0, 86400,
     "rescan the repository every S seconds (default 0: only at start, on SIGHUP, or the load API)"},
    {"--admin-token", "KILN_ADMIN_TOKEN", OPT_STR, &cfg.admin_token, 0, 0,
     "enables /v2/repository/*, which then need 'Authorization: Bearer TOKEN'"},
    {"--log-format", "KILN_LOG_FORMAT", OPT_LOG, &cfg.log_format, 0, 0,
     "request log on stdout: text (default), json or off"},
    {"--max-batch-size", "KILN_MAX_BATCH_SIZE", OPT_INT, &cfg.defaults.max_batch_size, 0, 1024,
     "dynamic batching up to N rows (default 0: off)"},
    {"--preferred-batch-sizes", "KILN_PREFERRED_BATCH_SIZES", OPT_SIZES, &cfg.defaults, 0, 0,
     "e.g. 4,8: batch sizes to run as soon as reached"},
    {"--max-queue-delay-us", "KILN_MAX_QUEUE_DELAY_US", OPT_LONG, &cfg.defaults.max_queue_delay_us, 0, 1e7,
     "how long a request may wait for a batch to fill (default 0: a free\n"
     "                               worker takes what is queued)"},
    {"--max-queue-size", "KILN_MAX_QUEUE_SIZE", OPT_INT, &cfg.defaults.max_queue_size, 1, 1e6,
     "requests waiting per model version; more get 503 (default 256)"},
    {"--instances", "KILN_INSTANCES", OPT_INT, &cfg.defaults.instances, 1, 64,
     "sessions per model version, sharing one compiled model (default 1)"},
    {"--threads", "KILN_THREADS", OPT_INT, &cfg.defaults.threads, 0, 1024,
     "kernel threads per session (default 0: one per core)"},
    {"--level", "KILN_LEVEL", OPT_INT, &cfg.defaults.level, 0, 2, "optimisation level (default 2)"},
    {"--warmup-runs", "KILN_WARMUP_RUNS", OPT_INT, &cfg.defaults.warmup_runs, 0, 64,
     "runs of each new instance on generated inputs before it serves (default 1)"},
    {"--validate", "KILN_VALIDATE", OPT_FLAG, &cfg.defaults.validate, 0, 0,
     "a new version must agree with the serving one on generated inputs"},
    {"--run-timeout-ms", "KILN_RUN_TIMEOUT_MS", OPT_LONG, &cfg.defaults.run_timeout_ms, 0, 86400000,
     "a model run still going after this long stops and its requests get 504\n"
     "                               (default 0: no limit)"},
    {"--latency-budget-ms", "KILN_LATENCY_BUDGET_MS", OPT_DOUBLE, &cfg.defaults.latency_budget_ms, 0, 1e6,
     "a new version whose median warm-up run is slower is refused"},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

static void help(FILE *f) {
  fprintf(f, "usage: kiln serve MODEL.onnx [options]\n"
             "       kiln serve --model-repository DIR [options]\n"
             "Serves models over HTTP on the KServe v2 inference protocol (see README.md, 'kiln serve').\n"
             "Every option can also be set by its environment variable; the flag wins.\n\n");
  for (size_t i = 0; i < N_OPTS; i++) {
    const char *arg = opts[i].type == OPT_FLAG ? "" : opts[i].type == OPT_STR ? " S" : " N";
    char left[64];
    snprintf(left, sizeof left, "%s%s", opts[i].flag, arg);
    fprintf(f, "  %-26s %s\n  %-26s   env %s\n", left, opts[i].help, "", opts[i].env);
  }
  fprintf(f, "  --plugin PATH.so           load a plugin library into every model (repeatable)\n"
             "\nSignals: SIGHUP rescans the repository; SIGTERM/SIGINT drain and exit 0 (1 when work\n"
             "was still unfinished at --exit-timeout-s); a second SIGTERM/SIGINT exits 1 at once.\n"
             "Exit codes: 0 ok, 1 error, 2 usage error.\n");
}

static int set_sizes(srv_model_config *c, const char *s) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  c->n_preferred = 0;
  char *save = NULL;
  for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    long v;
    if (c->n_preferred == SRV_MAX_PREFERRED || srv_parse_long(p, 1, 1024, &v)) return -1;
    c->preferred[c->n_preferred++] = (int)v;
  }
  return 0;
}

static int set_opt(const opt *o, const char *val, const char *from) {
  long l;
  double d;
  int bad = 0;
  switch (o->type) {
  case OPT_STR: *(const char **)o->ptr = val; break;
  case OPT_FLAG: *(int *)o->ptr = !val || (strcmp(val, "0") && strcmp(val, "false") && *val); break;
  case OPT_LONG:
  case OPT_INT:
    bad = srv_parse_long(val, (long)o->lo, (long)o->hi, &l);
    if (!bad && o->type == OPT_LONG) *(long *)o->ptr = l;
    if (!bad && o->type == OPT_INT) *(int *)o->ptr = (int)l;
    break;
  case OPT_DOUBLE:
    bad = srv_parse_double(val, o->lo, o->hi, &d);
    if (!bad) *(double *)o->ptr = d;
    break;
  case OPT_SIZES: bad = set_sizes(o->ptr, val); break;
  case OPT_LOG:
    if (!strcmp(val, "text")) cfg.log_format = SRV_LOG_TEXT;
    else if (!strcmp(val, "json")) cfg.log_format = SRV_LOG_JSON;
    else if (!strcmp(val, "off")) cfg.log_format = SRV_LOG_OFF;
    else bad = 1;
    break;
  }
  if (bad) {
    fprintf(stderr, "kiln serve: %s: bad value '%s' (%s)\n", from, val, o->help);
    return -1;
  }
  return 0;
}

static void defaults(void) {
  memset(&cfg, 0, sizeof cfg);
  cfg.host = "127.0.0.1";
  cfg.port = 8000;
  cfg.http_threads = 4;
  cfg.max_connections = 1024;
  cfg.conn_timeout_s = 30;
  cfg.max_body_bytes = 64L << 20;
  cfg.max_tensor_elements = 16L << 20;
  cfg.max_json_depth = 32;
  cfg.max_header_bytes = 65536;
  cfg.drain_s = 5;
  cfg.exit_timeout_s = 30;
  srv_model_config_default(&cfg.defaults);
}

/* 0 ok, 1 --help printed, -1 usage error. */
static int parse(int argc, char **argv) {
  defaults();
  for (size_t i = 0; i < N_OPTS; i++) {
    const char *e = getenv(opts[i].env);
    if (e && *e && set_opt(&opts[i], e, opts[i].env)) return -1;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      help(stdout);
      return 1;
    }
    size_t k = 0;
    const char *eq = strchr(a, '=');
    size_t alen = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a);
    while (k < N_OPTS && (strlen(opts[k].flag) != alen || strncmp(opts[k].flag, a, alen))) k++;
    if (k < N_OPTS) {
      const char *val = eq && alen < strlen(a) ? eq + 1 : NULL;
      if (!val && opts[k].type != OPT_FLAG) {
        if (i + 1 >= argc) {
          fprintf(stderr, "kiln serve: %s needs a value\n", a);
          return -1;
        }
        val = argv[++i];
      }
      if (set_opt(&opts[k], val, opts[k].flag)) return -1;
    } else if (a[0] != '-' && !cfg.model_path) {
      cfg.model_path = a;
    } else {
      fprintf(stderr, "kiln serve: unexpected argument '%s' (kiln serve --help)\n", a);
      return -1;
    }
  }
  if (!cfg.model_path == !cfg.repo_dir) {
    fprintf(stderr, "kiln serve: give MODEL.onnx or --model-repository DIR, not %s (kiln serve --help)\n",
            cfg.model_path ? "both" : "neither");
    return -1;
  }
  return 0;
}

/* Wait up to `s` seconds for a signal in `set`; returns it, or 0 on timeout. */
static int wait_signal(const sigset_t *set, double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  int sig = sigtimedwait(set, NULL, &ts);
  return sig > 0 ? sig : 0;
}

static void rescan(srv_repo *r) {
  char msg[1024];
  if (srv_repo_scan(r, NULL, 0, msg, sizeof msg)) fprintf(stderr, "kiln serve: %s\n", msg);
}

/* Serve until SIGTERM/SIGINT; SIGHUP and the poll timer rescan. */
static void serve_loop(srv_repo *r, const sigset_t *set) {
  double next_poll = cfg.poll_s > 0 ? srv_now() + cfg.poll_s : 0;
  for (;;) {
    double wait = 1.0;
    if (next_poll) wait = next_poll - srv_now() < wait ? next_poll - srv_now() : wait;
    int sig = wait_signal(set, wait > 0 ? wait : 0);
    if (sig == SIGTERM || sig == SIGINT) return;
    if (sig == SIGHUP) rescan(r);
    if (next_poll && srv_now() >= next_poll) {
      rescan(r);
      next_poll = srv_now() + cfg.poll_s;
    }
  }
}

static void exit_now(int sig) {
  fprintf(stderr, "kiln serve: second %s: exiting at once\n", strsignal(sig));
  fflush(stdout);
  _exit(1);
}

/* The shutdown sequence; returns the exit code. */
static int drain(srv_server *s, const sigset_t *set) {
  srv_http_set_draining(s);
  fprintf(stderr, "kiln serve: draining: not ready, still serving for %.1f s\n", cfg.drain_s);
  double end = srv_now() + cfg.drain_s;
  while (srv_now() < end) {
    int sig = wait_signal(set, end - srv_now() < 0.1 ? end - srv_now() : 0.1);
    if (sig == SIGTERM || sig == SIGINT) exit_now(sig);
  }
  srv_http_quiesce(s);
  end = srv_now() + cfg.exit_timeout_s;
  while (srv_http_active(s) > 0 && srv_now() < end) {
    int sig = wait_signal(set, 0.01);
    if (sig == SIGTERM || sig == SIGINT) exit_now(sig);
  }
  long left = srv_http_active(s);
  if (left > 0) {
    fprintf(stderr, "kiln serve: %ld requests unfinished after --exit-timeout-s %.1f: exiting\n", left,
            cfg.exit_timeout_s);
    fflush(stdout);
    _exit(1);
  }
  fprintf(stderr, "kiln serve: drained, exiting\n");
  return 0;
}

int kiln_serve_main(int argc, char **argv) {
  int p = parse(argc, argv);
  if (p) return p > 0 ? 0 : 2;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts: all inherit it */
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  static srv_repo repo;
  char msg[1024];
  if (srv_repo_init(&repo, &cfg, msg, sizeof msg)) {
    fprintf(stderr, "kiln serve: %s\n", msg);
    return 1;
  }
  rescan(&repo);
  if (cfg.model_path && !repo.models[0]->n_versions) {
    fprintf(stderr, "kiln serve: cannot serve %s\n", cfg.model_path);
    srv_repo_free(&repo);
    return 1;
  }
  srv_server *s = srv_http_start(&repo, &cfg, msg, sizeof msg);
  if (!s) {
    fprintf(stderr, "kiln serve: %s\n", msg);
    srv_repo_free(&repo);
    return 1;
  }
  fprintf(stderr, "kiln serve: listening on http://%s:%d\n", cfg.host, srv_http_port(s));
  serve_loop(&repo, &set);
  int rc = drain(s, &set);
  srv_http_stop(s);
  srv_repo_free(&repo);
  return rc;
}
