/* kiln profile MODEL: where a model's time goes, node by node, how far each node is from this
 * machine's roofline, and what to do about it.
 *
 * Runs the model WARMUP + REPEAT times on one feed with kiln_options.profile set, then hands
 * the per-node times and work (FLOPs and bytes from each op's descriptor) with this machine's
 * ceilings (kiln calibrate, measured on first use) to prof_report.c (table, JSON, advice) and
 * prof_trace.c (Chrome trace, HTML). Uses the public API only. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "prof.h"

#define MAX_INPUT_ARGS 64

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln profile MODEL [--inputs DIR] [--input NAME=FILE ...] [--dim NAME=VALUE ...]\n"
          "                    [--warmup N] [--repeat N] [--threads N] [--level N] [--top K]\n"
          "                    [--inter-op] [--strict-fp32] [--lazy-weights] [--json FILE]\n"
          "                    [--trace FILE.json] [--html FILE.html]\n"
          "Runs MODEL WARMUP untimed and REPEAT timed times with every node timed, then prints the\n"
          "time per op type, the K slowest nodes (default 15) on this machine's roofline, the fused\n"
          "nodes, and advice with the gain each change would bring.\n"
          "  --inputs DIR      read DIR/input_0.pb, input_1.pb, ... in graph-input order\n"
          "  --input NAME=FILE one input from a .pb or .npy file\n"
          "  --dim NAME=VALUE  value of a symbolic dim for random inputs (default 1)\n"
          "  --warmup N        untimed runs first (default 3)\n"
          "  --repeat N        timed runs (default 20)\n"
          "  --threads N       worker threads (default 0: one per core)\n"
          "  --level N         optimisation level 0, 1 or 2 (default 2)\n"
          "  --top K           slowest nodes to list (default 15)\n"
          CLI_SESSION_FLAGS_HELP
          "  --json FILE       also write every node's figures as JSON ('-' for stdout)\n"
          "  --trace FILE      write the latest run as a Chrome trace (chrome://tracing, Perfetto):\n"
          "                    one event per node per thread, args with shapes, FLOPs and bytes\n"
          "  --html FILE       write a self-contained HTML report: timeline, time per op type,\n"
          "                    roofline plot, the node table and the advice\n"
          "Roofline: FLOPs (a multiply-add is 2) and bytes (inputs read + outputs written) come from\n"
          "each op's descriptor; the ceilings (FMA peak, bandwidth) are those `kiln calibrate`\n"
          "cached for this CPU, measured first when there are none. A node's roof is\n"
          "min(peak, intensity x bandwidth), with the L3 bandwidth when its bytes fit in L3 and\n"
          "the DRAM bandwidth otherwise; it is compute-bound when the peak is the lower of the two.\n"
          "Timing each node costs two clock reads, so the nodes' sum is slightly below the run's\n"
          "wall time; with --inter-op, node times overlap.\n"
          "Exit codes: 0 ok, 1 model or run error, 2 usage error.\n");
}

typedef struct prof_args {
  const char *model, *inputs_dir, *json, *trace, *html;
  char *input_args[MAX_INPUT_ARGS];
  size_t n_input_args;
  cli_dims dims;
  long warmup, repeat, top;
  kiln_options opts;
} prof_args;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int parse_args(int argc, char **argv, prof_args *a) {
  memset(a, 0, sizeof *a);
  a->warmup = 3;
  a->repeat = 20;
  a->top = 15;
  kiln_options_init(&a->opts);
  a->opts.profile = 1;
  static const char *const valued[] = {"--inputs", "--input", "--dim", "--warmup", "--repeat",
                                       "--threads", "--level", "--top", "--json",
                                       "--trace", "--html"};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = 0;
    long n;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) takes |= !strcmp(o, valued[k]);
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (cli_session_flag(o, &a->opts)) {
    } else if (o[0] != '-' && !a->model) {
      a->model = o;
    } else if (o[0] != '-') {
      return cli_usage_error("profile", "unexpected argument '%s'", o);
    } else if (!takes || !v) {
      return cli_usage_error("profile", takes ? "%s needs a value" : "unknown option '%s'", o);
    } else if (!strcmp(o, "--inputs")) {
      a->inputs_dir = argv[++i];
    } else if (!strcmp(o, "--input")) {
      if (a->n_input_args == MAX_INPUT_ARGS) return cli_usage_error("profile", "too many --input options (%s)", v);
      if (!strchr(v, '=') || v[0] == '=') return cli_usage_error("profile", "--input expects NAME=FILE, got '%s'", v);
      a->input_args[a->n_input_args++] = argv[++i];
    } else if (!strcmp(o, "--dim")) {
      if (cli_parse_dim(&a->dims, argv[++i])) return cli_usage_error("profile", "--dim expects NAME=VALUE, got '%s'", v);
    } else if (!strcmp(o, "--json")) {
      a->json = argv[++i];
    } else if (!strcmp(o, "--trace")) {
      a->trace = argv[++i];
    } else if (!strcmp(o, "--html")) {
      a->html = argv[++i];
    } else {
      long lo = !strcmp(o, "--repeat") || !strcmp(o, "--top") ? 1 : 0;
      long hi = !strcmp(o, "--level") ? 2 : !strcmp(o, "--threads") ? 4096 : 100000000L;
      if (cli_parse_long(v, lo, hi, &n)) return cli_usage_error("profile", "%s expects a number in [%ld, %ld], got '%s'", o, lo, hi, v);
      i++;
      if (!strcmp(o, "--warmup")) a->warmup = n;
      else if (!strcmp(o, "--repeat")) a->repeat = n;
      else if (!strcmp(o, "--top")) a->top = n;
      else if (!strcmp(o, "--threads")) a->opts.threads = (int)n;
      else a->opts.opt_level = (int)n;
    }
  }
  if (!a->model) {
    help(stderr);
    return CLI_USAGE;
  }
  return -1;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Time the runs; fills d's run_ms (median), mean_ms and first_ms (the first run). */
static int timed_runs(kiln_session *s, const prof_args *a, const cli_feed *feed, prof_data *d) {
  size_t n_out = kiln_session_output_count(s);
  kiln_tensor **outs = calloc(n_out ? n_out : 1, sizeof *outs);
  double *t = malloc((size_t)a->repeat * sizeof *t);
  int rc = outs && t ? CLI_OK : CLI_ERR;
  kiln_error err = {0};
  for (long i = 0; rc == CLI_OK && i < a->warmup + a->repeat; i++) {
    if (i == a->warmup) kiln_session_profile_reset(s);
    double t0 = now_ms();
    if (kiln_session_run(s, feed->n, feed->names, (const kiln_tensor *const *)feed->values, 0, NULL, outs, &err)) {
      fprintf(stderr, "kiln profile: %s\n", err.message);
      rc = CLI_ERR;
      break;
    }
    if (i == 0) d->first_ms = now_ms() - t0;
    if (i >= a->warmup) t[i - a->warmup] = now_ms() - t0;
    for (size_t k = 0; k < n_out; k++) kiln_tensor_free(outs[k]);
  }
  if (rc == CLI_OK) {
    for (long k = 0; k < a->repeat; k++) d->mean_ms += t[k] / (double)a->repeat;
    qsort(t, (size_t)a->repeat, sizeof *t, cmp_double);
    d->run_ms = a->repeat % 2 ? t[a->repeat / 2] : 0.5 * (t[a->repeat / 2 - 1] + t[a->repeat / 2]);
  }
  free(outs);
  free(t);
  return rc;
}

/* Every node's profile, per-run time, per-thread shares and fusion facts. */
static int collect(kiln_session *s, prof_data *d) {
  d->n = kiln_session_profile_count(s);
  d->nodes = calloc(d->n ? d->n : 1, sizeof *d->nodes);
  if (!d->nodes) return CLI_ERR;
  for (size_t i = 0; i < d->n; i++) {
    prof_node *q = &d->nodes[i];
    kiln_session_profile(s, i, &q->p);
    if (!q->p.name || !*q->p.name) {
      snprintf(q->label, sizeof q->label, "#%zu", i);
      q->p.name = q->label;
    }
    q->ms = q->p.runs ? q->p.total_ms / (double)q->p.runs : 0; /* per run, whatever the count */
    d->node_ms += q->ms;
    if (q->p.threads > 0 && (q->thr = calloc((size_t)q->p.threads, sizeof *q->thr)))
      for (int t = 0; t < q->p.threads; t++) kiln_session_profile_thread(s, i, t, &q->thr[t]);
  }
  kiln_fusion_info fi;
  for (size_t k = 0; kiln_session_fusion_info(s, k, &fi) == KILN_OK; k++)
    for (size_t i = 0; i < d->n; i++)
      if (!strcmp(d->nodes[i].p.name, fi.name)) {
        d->nodes[i].replaced = fi.replaced;
        d->nodes[i].saved_bytes = (double)fi.intermediate_bytes;
        d->nodes[i].fallen_back = fi.fallen_back;
      }
  d->fallbacks = kiln_session_fallback_count(s);
  return CLI_OK;
}

static void prof_free(prof_data *d) {
  for (size_t i = 0; i < d->n && d->nodes; i++) free(d->nodes[i].thr);
  free(d->nodes);
  free(d->order);
  free(d->ops);
}

/* Open an output named by an option ('-': stdout); NULL with a message when it cannot be. */
static FILE *open_out(const char *path) {
  if (!path) return NULL;
  FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
  if (!f) fprintf(stderr, "kiln profile: cannot write '%s': %s\n", path, strerror(errno));
  return f;
}

static int close_out(FILE *f, const char *path, int rc) {
  if (!f) return rc;
  if (ferror(f) && rc == CLI_OK) rc = CLI_ERR;
  if (f != stdout) {
    fclose(f);
    if (rc != CLI_OK) remove(path);
  }
  return rc;
}

static int write_outputs(const prof_args *a, const prof_data *d, FILE *json) {
  int rc = CLI_OK;
  FILE *text = json == stdout ? stderr : stdout;
  prof_report(text, d, a->top);
  prof_advise(text, d);
  if (json) rc = prof_json(json, d);
  FILE *f;
  if (rc == CLI_OK && a->trace) {
    if (!(f = open_out(a->trace))) return CLI_ERR;
    rc = close_out(f, a->trace, prof_trace(f, d));
  }
  if (rc == CLI_OK && a->html) {
    if (!(f = open_out(a->html))) return CLI_ERR;
    rc = close_out(f, a->html, prof_html(f, d));
  }
  return rc;
}

static int profile_session(kiln_session *s, const prof_args *a, double load_ms, FILE *json) {
  kiln_error err = {0};
  cli_feed feed = {0};
  if (cli_make_feed(s, a->inputs_dir, a->n_input_args, (char **)a->input_args, &a->dims, 0, &feed, &err)) {
    fprintf(stderr, "kiln profile: %s\n", err.message);
    return CLI_ERR;
  }
  prof_data d = {.model = a->model, .level = a->opts.opt_level, .threads = kiln_session_threads(s),
                 .inter_op = a->opts.inter_op, .warmup = a->warmup, .repeat = a->repeat, .load_ms = load_ms};
  if (ceilings_get(&d.ceil, stderr)) {
    fprintf(stderr, "kiln profile: could not measure this machine's ceilings\n");
    cli_feed_free(&feed);
    return CLI_ERR;
  }
  int rc = timed_runs(s, a, &feed, &d);
  cli_feed_free(&feed);
  if (rc == CLI_OK) rc = collect(s, &d);
  if (rc == CLI_OK) {
    prof_analyze(&d);
    rc = d.order && d.ops ? write_outputs(a, &d, json) : CLI_ERR;
  }
  prof_free(&d);
  return rc;
}

int cmd_profile(int argc, char **argv) {
  prof_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  FILE *json = NULL;
  if (a.json && !(json = open_out(a.json))) return CLI_ERR;
  kiln_error err = {0};
  kiln_session *s = NULL;
  double t0 = now_ms();
  if (kiln_session_create(a.model, &a.opts, &s, &err)) {
    fprintf(stderr, "kiln profile: %s\n", err.message);
    rc = CLI_ERR;
  } else {
    rc = profile_session(s, &a, now_ms() - t0, json);
  }
  kiln_session_free(s);
  return close_out(json, a.json, rc);
}
