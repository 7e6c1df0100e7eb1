/* kiln bench MODEL: load time, latency percentiles, throughput and peak memory of one model.
 *
 * Each timed iteration is one kiln_session_run on the same feed, measured with
 * CLOCK_MONOTONIC; freeing the outputs happens outside the timed region. With --batch the
 * symbolic batch dim (dim 0 of every input whose dim 0 is symbolic) takes each value in turn
 * and every value gets its own result; inputs read from files are repeated along dim 0 to fill
 * the batch. The tool uses the public API only. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define MAX_BATCHES 32
#define MAX_INPUT_ARGS 64

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln bench MODEL [--inputs DIR] [--input NAME=FILE.pb|.npy ...] [--dim NAME=VALUE ...]\n"
          "                  [--batch B1,B2,...] [--warmup N] [--repeat N] [--threads N] [--level N]\n"
          "                  [--seed N] [--inter-op] [--strict-fp32] [--lazy-weights] [--json FILE]\n"
          "                  [--quiet] [--profile] [--plot FILE.svg]\n"
          "Times MODEL: load time, then WARMUP untimed and REPEAT timed runs on the same inputs.\n"
          "Reports median/p90/p99/min/mean latency, throughput (batch * 1000 / median ms, inferences\n"
          "per second), the first run's latency and the process's peak RSS.\n"
          "  --inputs DIR      read DIR/input_0.pb, input_1.pb, ... in graph-input order\n"
          "  --input NAME=FILE one input from a .pb (TensorProto, SequenceProto, OptionalProto) or .npy\n"
          "  --dim NAME=VALUE  value of a symbolic dim for random inputs (default 1)\n"
          "  --batch LIST      comma-separated batch sizes, one result each: sets dim 0 of every input\n"
          "                    whose dim 0 is symbolic (inputs from files are repeated along dim 0)\n"
          "  --warmup N        untimed runs before timing (default 10)\n"
          "  --repeat N        timed runs (default 100)\n"
          "  --threads N       worker threads (default 0: one per core)\n"
          "  --level N         optimisation level 0, 1 or 2 (default 2)\n"
          "  --seed N          seed of the deterministic random inputs (default 0)\n"
          CLI_SESSION_FLAGS_HELP
          "  --json FILE       also write the results as JSON ('-' for stdout): one object, or a\n"
          "                    list of one object per batch size when --batch is given\n"
          "  --quiet           no report on stdout and no progress bar\n"
          "  --plot FILE.svg   draw each batch size's latency distribution (quantile plot, p50/p99)\n"
          "  --profile         time every node while benchmarking (what kiln profile costs a run)\n"
          "Inputs not given are random. Latencies are wall-clock (CLOCK_MONOTONIC) per run;\n"
          "percentiles interpolate linearly between order statistics. peak_rss_bytes is the\n"
          "process's high-water mark (getrusage ru_maxrss) so far, so it never falls across batch\n"
          "sizes. A progress bar is drawn on stderr when stderr is a terminal.\n"
          "Exit codes: 0 ok, 1 model or run error, 2 usage error.\n");
}

typedef struct bench_result {
  int64_t batch;
  double median, p90, p99, min, max, mean, stddev;
  double first; /* the first run of this batch size (warmup or not), ms */
  long long peak_rss;
  size_t arena, intermediates; /* memory plan of this batch size's shapes */
  char inputs[1024]; /* JSON array of the fed inputs' names, dtypes and shapes */
  char shapes[256];  /* the same, short, for the text report */
  double *sorted;    /* the timed latencies, sorted (for --plot), or NULL */
} bench_result;

typedef struct bench_args {
  const char *model, *inputs_dir, *json, *plot;
  char *input_args[MAX_INPUT_ARGS];
  size_t n_input_args;
  cli_dims dims;
  int64_t batches[MAX_BATCHES];
  int n_batches;
  long warmup, repeat, seed;
  int quiet;
  kiln_options opts;
} bench_args;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static long long peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (long long)ru.ru_maxrss * 1024; /* Linux reports kilobytes */
}

static int parse_batches(const char *s, bench_args *a) {
  a->n_batches = 0;
  for (const char *p = s;; p++) {
    char tok[32];
    size_t len = strcspn(p, ",");
    long v;
    if (!len || len >= sizeof tok || a->n_batches == MAX_BATCHES) return -1;
    memcpy(tok, p, len);
    tok[len] = 0;
    if (cli_parse_long(tok, 1, 1L << 30, &v)) return -1;
    a->batches[a->n_batches++] = v;
    p += len;
    if (!*p) return 0;
  }
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Quantile q of sorted[0..n) by linear interpolation between order statistics (numpy's
 * default), so median <= p90 <= p99 <= max always holds. */
static double quantile(const double *sorted, size_t n, double q) {
  double pos = q * (double)(n - 1);
  size_t i = (size_t)pos;
  if (i + 1 >= n) return sorted[n - 1];
  return sorted[i] + (pos - (double)i) * (sorted[i + 1] - sorted[i]);
}

static void compute_stats(double *t, size_t n, bench_result *r) {
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; i++) sum += t[i];
  r->mean = sum / (double)n;
  for (size_t i = 0; i < n; i++) sq += (t[i] - r->mean) * (t[i] - r->mean);
  r->stddev = n > 1 ? sqrt(sq / (double)(n - 1)) : 0.0;
  qsort(t, n, sizeof *t, cmp_double);
  r->min = t[0];
  r->max = t[n - 1];
  r->median = quantile(t, n, 0.5);
  r->p90 = quantile(t, n, 0.9);
  r->p99 = quantile(t, n, 0.99);
}

/* Is dim 0 of input info symbolic (so --batch applies to it)? */
static int batched_input(const kiln_io_info *info) {
  return info->kind == KILN_KIND_TENSOR && info->rank >= 1 && info->dims[0] < 0;
}

/* user dims plus NAME=batch for the named symbolic dim 0 of every input (replacing a --dim of
 * the same name). */
static void batch_dims(kiln_session *s, const cli_dims *user, int64_t batch, cli_dims *out) {
  *out = *user;
  for (size_t i = 0; i < kiln_session_input_count(s); i++) {
    kiln_io_info info;
    if (kiln_session_input_info(s, i, &info, NULL) || !batched_input(&info) || !info.dim_names[0])
      continue;
    size_t k = 0;
    while (k < out->n && strcmp(out->names[k], info.dim_names[0])) k++;
    if (k == out->n) {
      if (out->n == 32) continue;
      out->names[out->n++] = info.dim_names[0];
    }
    out->values[k] = batch;
  }
}

/* A copy of v with dim 0 = batch, rows repeated cyclically (for inputs read from files). */
static kiln_code tile_rows(const kiln_tensor *v, int64_t batch, kiln_tensor **out, kiln_error *err) {
  int rank = kiln_tensor_rank(v);
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, kiln_tensor_dims(v), (size_t)rank * sizeof *dims);
  int64_t rows = dims[0];
  if (rows <= 0) {
    err->code = KILN_ERR_INVALID_ARG;
    snprintf(err->message, sizeof err->message, "cannot fill batch %lld from an input with dim 0 = 0",
             (long long)batch);
    return err->code;
  }
  dims[0] = batch;
  kiln_code rc = kiln_tensor_create(kiln_tensor_dtype(v), rank, dims, out, err);
  if (rc) return rc;
  int64_t per_row = kiln_tensor_numel(v) / rows;
  if (kiln_tensor_dtype(v) == KILN_STRING) {
    char *const *src = kiln_tensor_cdata(v);
    for (int64_t i = 0; i < batch * per_row && !rc; i++)
      rc = kiln_tensor_set_string(*out, i, src[(i / per_row % rows) * per_row + i % per_row], err);
    if (rc) kiln_tensor_free(*out);
    return rc;
  }
  size_t row_bytes = (size_t)per_row * kiln_dtype_size(kiln_tensor_dtype(v));
  const char *src = kiln_tensor_cdata(v);
  char *dst = kiln_tensor_data(*out);
  for (int64_t b = 0; b < batch; b++) memcpy(dst + (size_t)b * row_bytes, src + (size_t)(b % rows) * row_bytes, row_bytes);
  return KILN_OK;
}

/* Build the feed for one batch size (batch < 0: no --batch, the inputs as given). */
static kiln_code make_feed(kiln_session *s, const bench_args *a, int64_t batch, cli_feed *feed,
                           kiln_error *err) {
  cli_dims dims = a->dims;
  if (batch > 0) batch_dims(s, &a->dims, batch, &dims);
  kiln_code rc = cli_make_feed(s, a->inputs_dir, a->n_input_args, (char **)a->input_args, &dims,
                               (unsigned)a->seed, feed, err);
  for (size_t i = 0; i < feed->n && !rc && batch > 0; i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, NULL);
    const kiln_tensor *v = feed->values[i];
    if (!batched_input(&info) || kiln_tensor_kind(v) != KILN_KIND_TENSOR || kiln_tensor_rank(v) < 1 ||
        kiln_tensor_dims(v)[0] == batch)
      continue;
    kiln_tensor *t;
    rc = tile_rows(v, batch, &t, err);
    if (!rc) {
      kiln_tensor_free(feed->values[i]);
      feed->values[i] = t;
    }
  }
  return rc;
}

/* The batch of a feed without --batch: dim 0 of the first input whose dim 0 is symbolic, else 1. */
static int64_t feed_batch(kiln_session *s, const cli_feed *feed) {
  for (size_t i = 0; i < feed->n; i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, NULL);
    const kiln_tensor *v = feed->values[i];
    if (batched_input(&info) && kiln_tensor_kind(v) == KILN_KIND_TENSOR && kiln_tensor_rank(v) >= 1)
      return kiln_tensor_dims(v)[0];
  }
  return 1;
}

static void describe_feed(const cli_feed *feed, bench_result *r) {
  size_t off = 0, soff = 0;
  off += (size_t)snprintf(r->inputs + off, sizeof r->inputs - off, "[");
  for (size_t i = 0; i < feed->n; i++) {
    const kiln_tensor *v = feed->values[i];
    int tensor = kiln_tensor_kind(v) == KILN_KIND_TENSOR;
    if (off < sizeof r->inputs)
      off += (size_t)snprintf(r->inputs + off, sizeof r->inputs - off, "%s{\"name\": \"", i ? ", " : "");
    for (const char *p = feed->names[i]; *p && off + 8 < sizeof r->inputs; p++) {
      if ((unsigned char)*p < 0x20) continue;
      if (*p == '"' || *p == '\\') r->inputs[off++] = '\\';
      r->inputs[off++] = *p;
    }
    if (off < sizeof r->inputs)
      off += (size_t)snprintf(r->inputs + off, sizeof r->inputs - off, "\", \"dtype\": \"%s\", \"shape\": [",
                              kiln_dtype_name(kiln_tensor_dtype(v)));
    if (soff < sizeof r->shapes)
      soff += (size_t)snprintf(r->shapes + soff, sizeof r->shapes - soff, "%s%s[", i ? " " : "",
                               tensor ? "" : "seq");
    for (int d = 0; tensor && d < kiln_tensor_rank(v); d++) {
      long long dim = (long long)kiln_tensor_dims(v)[d];
      if (off < sizeof r->inputs) off += (size_t)snprintf(r->inputs + off, sizeof r->inputs - off, d ? ", %lld" : "%lld", dim);
      if (soff < sizeof r->shapes) soff += (size_t)snprintf(r->shapes + soff, sizeof r->shapes - soff, d ? ",%lld" : "%lld", dim);
    }
    if (off < sizeof r->inputs) off += (size_t)snprintf(r->inputs + off, sizeof r->inputs - off, "]}");
    if (soff < sizeof r->shapes) soff += (size_t)snprintf(r->shapes + soff, sizeof r->shapes - soff, "]");
  }
  if (off + 2 <= sizeof r->inputs) {
    r->inputs[off++] = ']';
    r->inputs[off] = 0;
  } else {
    snprintf(r->inputs, sizeof r->inputs, "[]"); /* too many inputs to list */
  }
}

typedef struct progress {
  int on;
  double last;
  int width;
} progress;

static void progress_draw(progress *p, int64_t batch, long i, long warmup, long total, int force) {
  if (!p->on) return;
  double t = now_ms();
  if (!force && t - p->last < 100.0) return;
  p->last = t;
  int fill = total ? (int)((double)i * 30.0 / (double)total) : 30;
  char bar[31];
  for (int k = 0; k < 30; k++) bar[k] = k < fill ? '#' : '-';
  bar[30] = 0;
  p->width = fprintf(stderr, "\r  batch %lld [%s] %ld/%ld%s", (long long)batch, bar, i, total,
                     i < warmup ? " (warmup)" : "          ");
  fflush(stderr);
}

static void progress_clear(progress *p) {
  if (!p->on || !p->width) return;
  fprintf(stderr, "\r%*s\r", p->width, "");
  fflush(stderr);
  p->width = 0;
}

/* Time one feed: warmup + repeat runs. Returns a CLI exit code. */
static int bench_one(kiln_session *s, const bench_args *a, int64_t batch, progress *prog,
                     bench_result *r) {
  kiln_error err = {0};
  cli_feed feed;
  size_t nout = kiln_session_output_count(s);
  kiln_tensor **outs = calloc(nout + 1, sizeof *outs);
  double *times = calloc((size_t)a->repeat, sizeof *times);
  int rc = CLI_ERR;
  if (!outs || !times) {
    fprintf(stderr, "kiln bench: out of memory\n");
    free(outs);
    free(times);
    return CLI_ERR;
  }
  if (make_feed(s, a, batch, &feed, &err)) {
    fprintf(stderr, "kiln bench: %s\n", err.message);
    goto done;
  }
  r->batch = batch > 0 ? batch : feed_batch(s, &feed);
  describe_feed(&feed, r);
  long total = a->warmup + a->repeat;
  for (long i = 0; i < total; i++) {
    progress_draw(prog, r->batch, i, a->warmup, total, i == 0);
    double t0 = now_ms();
    kiln_code c = kiln_session_run(s, feed.n, feed.names, (const kiln_tensor *const *)feed.values, nout, NULL,
                                   outs, &err);
    double t1 = now_ms();
    if (c) {
      progress_clear(prog);
      fprintf(stderr, "kiln bench: batch %lld: %s\n", (long long)r->batch, err.message);
      goto done;
    }
    for (size_t k = 0; k < nout; k++) {
      kiln_tensor_free(outs[k]);
      outs[k] = NULL;
    }
    if (i == 0) r->first = t1 - t0;
    if (i >= a->warmup) times[i - a->warmup] = t1 - t0;
  }
  progress_draw(prog, r->batch, total, a->warmup, total, 1);
  progress_clear(prog);
  compute_stats(times, (size_t)a->repeat, r);
  if (a->plot) { /* keep the sorted latencies */
    r->sorted = times;
    times = NULL;
  }
  r->peak_rss = peak_rss_bytes();
  kiln_session_memory(s, &r->arena, &r->intermediates);
  rc = CLI_OK;
done:
  free(outs);
  free(times);
  cli_feed_free(&feed);
  return rc;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* Facts about the prepared graph: node count after optimisation, and rewrites by all passes. */
typedef struct graph_facts {
  size_t nodes, rewrites;
  size_t prepacked; /* nodes that packed their weights at load */
  int threads; /* resolved thread count */
} graph_facts;

static graph_facts graph_facts_of(const kiln_session *s) {
  graph_facts g = {0, 0, 0, kiln_session_threads(s)};
  kiln_session_prepacked(s, &g.prepacked);
  kiln_model_stats st;
  if (kiln_session_stats(s, &st) == KILN_OK) g.nodes = st.n_nodes;
  const char *pass;
  size_t n;
  for (size_t i = 0; kiln_session_pass_stat(s, i, &pass, &n) == KILN_OK; i++) g.rewrites += n;
  return g;
}

static void json_result(FILE *f, const bench_args *a, double load_ms, long long load_rss, graph_facts g,
                        const bench_result *r, const char *indent) {
  fprintf(f, "%s{\"model\": ", indent);
  json_string(f, a->model);
  fprintf(f, ", \"kiln_version\": \"%s\", \"batch\": %lld, \"threads\": %d, \"level\": %d,\n",
          KILN_VERSION_STRING, (long long)r->batch, a->opts.threads, a->opts.opt_level);
  fprintf(f, "%s \"threads_used\": %d, \"warmup\": %ld, \"repeat\": %ld, \"load_ms\": %.4f,\n", indent, g.threads,
          a->warmup, a->repeat, load_ms);
  fprintf(f, "%s \"median_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, \"min_ms\": %.6f, \"max_ms\": %.6f,\n",
          indent, r->median, r->p90, r->p99, r->min, r->max);
  fprintf(f, "%s \"mean_ms\": %.6f, \"stddev_ms\": %.6f, \"throughput\": %.6f,\n", indent, r->mean, r->stddev,
          r->median > 0 ? (double)r->batch * 1000.0 / r->median : 0.0);
  fprintf(f, "%s \"peak_rss_bytes\": %lld, \"load_peak_rss_bytes\": %lld, \"arena_bytes\": %zu,\n", indent,
          r->peak_rss, load_rss, r->arena);
  fprintf(f, "%s \"intermediate_bytes\": %zu, \"first_run_ms\": %.6f, \"prepacked_nodes\": %zu,\n", indent,
          r->intermediates, r->first, g.prepacked);
  fprintf(f, "%s \"nodes\": %zu, \"rewrites\": %zu, \"inputs\": %s}", indent, g.nodes, g.rewrites, r->inputs);
}

static int write_json(FILE *f, const bench_args *a, double load_ms, long long load_rss, graph_facts g,
                      const bench_result *res, int n) {
  int to_stdout = f == stdout;
  int list = a->n_batches > 0;
  if (list) fprintf(f, "[\n");
  for (int i = 0; i < n; i++) {
    json_result(f, a, load_ms, load_rss, g, &res[i], list ? "  " : "");
    fprintf(f, "%s\n", list && i + 1 < n ? "," : "");
  }
  if (list) fprintf(f, "]\n");
  int bad = ferror(f);
  if (to_stdout ? fflush(f) != 0 : fclose(f) != 0) bad = 1;
  if (bad) {
    fprintf(stderr, "kiln bench: error writing '%s'\n", a->json);
    return CLI_ERR;
  }
  return CLI_OK;
}

static void print_report(FILE *f, const bench_args *a, double load_ms, long long load_rss, graph_facts g,
                         const bench_result *res, int n) {
  fprintf(f, "model      %s (%zu node%s after %zu optimizer rewrite%s)\n", a->model, g.nodes, g.nodes == 1 ? "" : "s",
          g.rewrites, g.rewrites == 1 ? "" : "s");
  fprintf(f, "load       %.2f ms (level %d, %d thread%s%s), peak RSS after load %.1f MiB\n", load_ms,
          a->opts.opt_level, g.threads, g.threads == 1 ? "" : "s", a->opts.threads ? "" : ": one per core",
          (double)load_rss / 1048576.0);
  fprintf(f, "weights    %zu node%s packed at load%s\n", g.prepacked, g.prepacked == 1 ? "" : "s",
          a->opts.lazy_weights ? " (--lazy-weights: on first run)" : "");
  fprintf(f, "runs       %ld warmup + %ld timed per batch size\n", a->warmup, a->repeat);
  for (int i = 0; i < n; i++)
    fprintf(f, "first run  batch %lld: %.3f ms\n", (long long)res[i].batch, res[i].first);
  for (int i = 0; i < n; i++)
    fprintf(f, "arena      batch %lld: %.2f MiB planned for %.2f MiB of intermediates\n", (long long)res[i].batch,
            (double)res[i].arena / 1048576.0, (double)res[i].intermediates / 1048576.0);
  for (int i = 0; i < n; i++) fprintf(f, "inputs     batch %lld: %s\n", (long long)res[i].batch, res[i].shapes);
  fprintf(f, "\n%6s %11s %11s %11s %11s %11s %13s %14s\n", "batch", "median ms", "p90 ms", "p99 ms", "min ms",
          "mean ms", "inferences/s", "peak RSS MiB");
  for (int i = 0; i < n; i++) {
    const bench_result *r = &res[i];
    fprintf(f, "%6lld %11.3f %11.3f %11.3f %11.3f %11.3f %13.2f %14.1f\n", (long long)r->batch, r->median, r->p90,
            r->p99, r->min, r->mean, r->median > 0 ? (double)r->batch * 1000.0 / r->median : 0.0,
            (double)r->peak_rss / 1048576.0);
  }
}

static int takes_value(const char *o) {
  static const char *const opts[] = {"--inputs", "--input", "--dim", "--batch", "--warmup", "--repeat",
                                     "--threads", "--level", "--seed", "--json", "--plot"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    if (!strcmp(o, opts[i])) return 1;
  return 0;
}

/* Parse the command line into a; returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, bench_args *a) {
  memset(a, 0, sizeof *a);
  a->warmup = 10;
  a->repeat = 100;
  kiln_options_init(&a->opts);
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n;
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
      a->quiet = 1;
    } else if (!strcmp(o, "--profile")) {
      a->opts.profile = 1;
    } else if (cli_session_flag(o, &a->opts)) {
    } else if (o[0] != '-' && !a->model) {
      a->model = o;
    } else if (o[0] != '-') {
      return cli_usage_error("bench", "unexpected argument '%s'", o);
    } else if (!v || !takes_value(o)) {
      return cli_usage_error("bench", takes_value(o) ? "%s needs a value" : "unknown option '%s'", o);
    } else if (!strcmp(o, "--inputs")) {
      a->inputs_dir = argv[++i];
    } else if (!strcmp(o, "--input")) {
      if (a->n_input_args == MAX_INPUT_ARGS) return cli_usage_error("bench", "too many --input options (%s)", v);
      if (!strchr(v, '=') || v[0] == '=') return cli_usage_error("bench", "--input expects NAME=FILE, got '%s'", v);
      a->input_args[a->n_input_args++] = argv[++i];
    } else if (!strcmp(o, "--dim")) {
      if (cli_parse_dim(&a->dims, v)) return cli_usage_error("bench", "--dim expects NAME=VALUE, got '%s'", v);
      i++;
    } else if (!strcmp(o, "--batch")) {
      if (parse_batches(v, a)) return cli_usage_error("bench", "--batch expects positive sizes like 1,4,16, got '%s'", v);
      i++;
    } else if (!strcmp(o, "--warmup")) {
      if (cli_parse_long(v, 0, 1000000000L, &a->warmup)) return cli_usage_error("bench", "--warmup expects a count >= 0, got '%s'", v);
      i++;
    } else if (!strcmp(o, "--repeat")) {
      if (cli_parse_long(v, 1, 100000000L, &a->repeat)) return cli_usage_error("bench", "--repeat expects a count >= 1, got '%s'", v);
      i++;
    } else if (!strcmp(o, "--threads")) {
      if (cli_parse_long(v, 0, 4096, &n)) return cli_usage_error("bench", "--threads expects a count >= 0, got '%s'", v);
      a->opts.threads = (int)n;
      i++;
    } else if (!strcmp(o, "--level")) {
      if (cli_parse_level("bench", v, &a->opts.opt_level)) return CLI_USAGE;
      i++;
    } else if (!strcmp(o, "--seed")) {
      if (cli_parse_long(v, 0, 0x7fffffffL, &a->seed)) return cli_usage_error("bench", "--seed expects a number >= 0, got '%s'", v);
      i++;
    } else if (!strcmp(o, "--json")) {
      a->json = argv[++i];
    } else if (!strcmp(o, "--plot")) {
      a->plot = argv[++i];
    }
  }
  if (!a->model) {
    help(stderr);
    return CLI_USAGE;
  }
  return -1;
}

static int write_plot(const bench_args *a, const bench_result *res, int n) {
  bench_series series[MAX_BATCHES];
  for (int i = 0; i < n; i++) series[i] = (bench_series){res[i].batch, res[i].sorted, res[i].sorted ? (size_t)a->repeat : 0};
  FILE *f = fopen(a->plot, "w");
  if (!f) {
    fprintf(stderr, "kiln bench: cannot write '%s': %s\n", a->plot, strerror(errno));
    return CLI_ERR;
  }
  int rc = bench_plot_svg(f, a->model, series, n);
  if (fclose(f) && rc == CLI_OK) rc = CLI_ERR;
  return rc;
}

int cmd_bench(int argc, char **argv) {
  bench_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  progress prog = {isatty(STDERR_FILENO) && !a.quiet, 0.0, 0};
  kiln_error err = {0};
  kiln_session *s = NULL;
  /* Open the JSON file first so that an unwritable path fails before a long run. */
  FILE *json = NULL;
  if (a.json) {
    json = strcmp(a.json, "-") ? fopen(a.json, "w") : stdout;
    if (!json) {
      fprintf(stderr, "kiln bench: cannot write '%s': %s\n", a.json, strerror(errno));
      return CLI_ERR;
    }
  }
  double t0 = now_ms();
  if (kiln_session_create(a.model, &a.opts, &s, &err)) {
    fprintf(stderr, "kiln bench: %s\n", err.message);
    if (json && json != stdout) {
      fclose(json);
      remove(a.json);
    }
    return CLI_ERR;
  }
  double load_ms = now_ms() - t0;
  long long load_rss = peak_rss_bytes();
  if (a.n_batches) {
    int any = 0;
    for (size_t i = 0; i < kiln_session_input_count(s); i++) {
      kiln_io_info info;
      any |= kiln_session_input_info(s, i, &info, NULL) == KILN_OK && batched_input(&info);
    }
    if (!any) {
      fprintf(stderr, "kiln bench: --batch: no input of '%s' has a symbolic dim 0\n", a.model);
      kiln_session_free(s);
      if (json && json != stdout) {
        fclose(json);
        remove(a.json);
      }
      return CLI_ERR;
    }
  }
  int n = a.n_batches ? a.n_batches : 1;
  bench_result *res = calloc((size_t)n, sizeof *res);
  rc = res ? CLI_OK : CLI_ERR;
  for (int i = 0; i < n && rc == CLI_OK; i++) rc = bench_one(s, &a, a.n_batches ? a.batches[i] : -1, &prog, &res[i]);
  graph_facts g = graph_facts_of(s);
  if (rc == CLI_OK && !a.quiet) print_report(json == stdout ? stderr : stdout, &a, load_ms, load_rss, g, res, n);
  if (rc == CLI_OK && json) {
    rc = write_json(json, &a, load_ms, load_rss, g, res, n);
  } else if (json && json != stdout) {
    fclose(json); /* no results: leave no empty file behind */
    remove(a.json);
  }
  if (rc == CLI_OK && a.plot) rc = write_plot(&a, res, n);
  for (int i = 0; i < n && res; i++) free(res[i].sorted);
  free(res);
  kiln_session_free(s);
  return rc;
}
