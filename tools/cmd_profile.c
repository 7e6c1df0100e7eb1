/* kiln profile MODEL: where a model's time goes, node by node, and what to do about it.
 *
 * Runs the model WARMUP + REPEAT times on one feed with kiln_options.profile set, then reports
 * the time per op type and the slowest nodes with their rate: GFLOP/s for the compute-heavy
 * ops (Conv, MatMul, Gemm, attention and the fused ops built on them) against the FMA peak this
 * process measures on one core, and GB/s (inputs + outputs per run) for the others. The
 * advice names the bottleneck: which op type dominates, compute nodes far below peak, data
 * movement, per-node overhead, unused fusion or threads. Uses the public API only. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fma_loop.h"

#define MAX_INPUT_ARGS 64

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln profile MODEL [--inputs DIR] [--input NAME=FILE ...] [--dim NAME=VALUE ...]\n"
          "                    [--warmup N] [--repeat N] [--threads N] [--level N] [--top K]\n"
          "                    [--inter-op] [--strict-fp32] [--lazy-weights] [--json FILE]\n"
          "Runs MODEL WARMUP untimed and REPEAT timed times with every node timed, then prints the\n"
          "time per op type, the K slowest nodes (default 15) with GFLOP/s or GB/s, and advice on\n"
          "the bottleneck.\n"
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
          "GFLOP/s counts a multiply-add as 2 flops; 'peak' is a register-only FMA loop timed on one\n"
          "core by this command (times the thread count for the efficiency figures). Timing each\n"
          "node costs two clock reads, so the nodes' sum is slightly below the run's wall time;\n"
          "with --inter-op, node times overlap.\n"
          "Exit codes: 0 ok, 1 model or run error, 2 usage error.\n");
}

typedef struct prof_args {
  const char *model, *inputs_dir, *json;
  char *input_args[MAX_INPUT_ARGS];
  size_t n_input_args;
  cli_dims dims;
  long warmup, repeat, top;
  kiln_options opts;
} prof_args;

typedef struct op_row {
  const char *op;
  size_t nodes;
  double ms, flops;
} op_row;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* FP32 FMA peak of one core in GFLOP/s (best of 5 short runs), 0 when unknown. */
static double fma_peak_gflops(void) {
#if defined(__x86_64__)
  const char *isa = kiln_cpu_isa_level(); /* the level the kernels run at (KILN_ISA lowers it) */
  int w = !strcmp(isa, "avx512") ? 16 : !strcmp(isa, "avx2") ? 8 : 0;
  if (!w) return 0;
  const long iters = 200000;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 5; r++) {
    double t = now_ms();
    sink += w == 16 ? fma512(iters) : fma256(iters);
    double ms = now_ms() - t;
    double g = (double)iters * 12 * w * 2 / (ms * 1e6);
    if (g > best) best = g;
  }
  (void)sink;
  return best;
#else
  return 0;
#endif
}

static int parse_args(int argc, char **argv, prof_args *a) {
  memset(a, 0, sizeof *a);
  a->warmup = 3;
  a->repeat = 20;
  a->top = 15;
  kiln_options_init(&a->opts);
  a->opts.profile = 1;
  static const char *const valued[] = {"--inputs", "--input", "--dim", "--warmup", "--repeat",
                                       "--threads", "--level", "--top", "--json"};
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

static kiln_node_profile *g_nodes; /* for the qsort comparators below */

static int cmp_node_ms(const void *x, const void *y) {
  double a = g_nodes[*(const size_t *)x].total_ms, b = g_nodes[*(const size_t *)y].total_ms;
  return a < b ? 1 : a > b ? -1 : 0;
}

static int cmp_op_ms(const void *x, const void *y) {
  double a = ((const op_row *)x)->ms, b = ((const op_row *)y)->ms;
  return a < b ? 1 : a > b ? -1 : 0;
}

static int is_data_movement(const char *op) {
  static const char *const ops[] = {"Transpose", "Reshape", "Concat", "Slice", "Split", "Pad",
                                    "Gather", "Expand", "Tile", "Cast", "Identity", "Squeeze",
                                    "Unsqueeze", "Flatten", "Shape", "ConcatFromSequence"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(op, ops[i])) return 1;
  return 0;
}

static const char *rate_str(const kiln_node_profile *p, double ms_run, char *buf, size_t n) {
  if (ms_run <= 0) snprintf(buf, n, "%9s %8s", "-", "-");
  else if (p->flops > 0) snprintf(buf, n, "%9.1f %8s", p->flops / (ms_run * 1e6), "-");
  else snprintf(buf, n, "%9s %8.1f", "-", p->bytes / (ms_run * 1e6));
  return buf;
}

typedef struct prof_summary {
  double run_ms, node_ms, peak;
  int threads;
  size_t n;
  size_t fallbacks;
} prof_summary;

static void advise(FILE *f, const prof_args *a, const prof_summary *s, const kiln_node_profile *p,
                   const size_t *order, const op_row *ops, size_t n_ops) {
  fprintf(f, "\nadvice\n");
  int said = 0;
  double reps = (double)a->repeat;
  if (n_ops && ops[0].ms / s->node_ms > 0.5) {
    fprintf(f, "  - %s takes %.0f%% of the time (%zu nodes): it decides this model's speed.\n", ops[0].op,
            100 * ops[0].ms / s->node_ms, ops[0].nodes);
    said++;
  }
  double cap = s->peak * s->threads;
  int slow_compute = 0;
  for (size_t k = 0; k < s->n && slow_compute < 3 && cap > 0; k++) {
    const kiln_node_profile *q = &p[order[k]];
    double ms = q->total_ms / reps;
    if (q->flops <= 0 || ms <= 0 || q->total_ms < 0.02 * s->node_ms * reps / reps) continue;
    double eff = q->flops / (ms * 1e6) / cap;
    double intensity = q->bytes > 0 ? q->flops / q->bytes : 0;
    if (eff < 0.35 && intensity > 8) {
      fprintf(f, "  - %s '%s' (%s) runs at %.0f%% of the FMA peak of %d thread(s) although it does %.0f "
                 "flops per byte moved: a compute kernel below its limit (%.1f%% of the time).\n",
              q->op_type, q->name, q->shape, 100 * eff, s->threads, intensity, 100 * q->total_ms / reps / s->node_ms);
      slow_compute++;
      said++;
    }
  }
  double move = 0, tiny = 0;
  size_t n_tiny = 0;
  for (size_t i = 0; i < s->n; i++) {
    double ms = p[i].total_ms / reps;
    if (is_data_movement(p[i].op_type)) move += ms;
    if (ms < 0.005) tiny += ms, n_tiny++;
  }
  if (move > 0.1 * s->node_ms) {
    fprintf(f, "  - data movement (Transpose, Reshape, Concat, Slice, Gather, Cast ...) takes %.0f%% of the "
               "time: %s\n", 100 * move / s->node_ms,
            a->opts.opt_level < 2 ? "--level 2 folds and fuses such chains." :
            "look for layout changes the model could avoid, or fuse them with a plugin pattern.");
    said++;
  }
  if (n_tiny > 20 && s->run_ms - s->node_ms + tiny > 0.15 * s->run_ms) {
    fprintf(f, "  - %zu nodes take under 5 us each; per-node overhead and gaps are %.0f%% of the run: "
               "fewer, larger nodes (--level 2, batching) amortise it.\n", n_tiny,
            100 * (s->run_ms - s->node_ms + tiny) / s->run_ms);
    said++;
  }
  if (a->opts.opt_level < 2) {
    fprintf(f, "  - this run used --level %d; --level 2 fuses operator chains into single kernels.\n",
            a->opts.opt_level);
    said++;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (s->threads == 1 && cores > 1) {
    fprintf(f, "  - 1 thread of %ld logical CPUs: --threads %ld may cut latency.\n", cores, cores);
    said++;
  }
  if (s->fallbacks) {
    fprintf(f, "  - %zu fused node(s) fell back to their original chain (see the messages above): "
               "those run unfused.\n", s->fallbacks);
    said++;
  }
  if (!said) fprintf(f, "  - no single bottleneck: time is spread over many nodes near their limits.\n");
}

static void report(FILE *f, const prof_args *a, const prof_summary *s, const kiln_node_profile *p,
                   const size_t *order, op_row *ops, size_t n_ops) {
  double reps = (double)a->repeat;
  fprintf(f, "kiln profile %s: %d thread(s), level %d, %ld timed runs after %ld warm-up\n", a->model,
          s->threads, a->opts.opt_level, a->repeat, a->warmup);
  fprintf(f, "median run %.3f ms; nodes %.3f ms per run (%.1f%%); FMA peak %.1f GFLOP/s per core\n",
          s->run_ms, s->node_ms, s->run_ms > 0 ? 100 * s->node_ms / s->run_ms : 0, s->peak);
  fprintf(f, "\n%-24s %6s %10s %7s %9s\n", "op type", "nodes", "ms/run", "share", "GFLOP/s");
  for (size_t i = 0; i < n_ops; i++) {
    double ms = ops[i].ms;
    char g[16] = "-";
    if (ops[i].flops > 0 && ms > 0) snprintf(g, sizeof g, "%.1f", ops[i].flops / (ms * 1e6));
    fprintf(f, "%-24s %6zu %10.3f %6.1f%% %9s\n", ops[i].op, ops[i].nodes, ms, 100 * ms / s->node_ms, g);
  }
  size_t top = (size_t)a->top < s->n ? (size_t)a->top : s->n;
  fprintf(f, "\nslowest nodes\n%9s %7s %9s %8s  %-18s %-28s %s\n", "ms/run", "share", "GFLOP/s", "GB/s",
          "op", "node", "output");
  for (size_t k = 0; k < top; k++) {
    const kiln_node_profile *q = &p[order[k]];
    double ms = q->total_ms / reps;
    char r[40];
    fprintf(f, "%9.3f %6.1f%% %s  %-18s %-28.28s %s\n", ms, 100 * ms / s->node_ms, rate_str(q, ms, r, sizeof r),
            q->op_type, q->name, q->shape);
  }
  advise(f, a, s, p, order, ops, n_ops);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static int write_json(FILE *f, const prof_args *a, const prof_summary *s, const kiln_node_profile *p) {
  fprintf(f, "{\"model\": ");
  json_str(f, a->model);
  fprintf(f, ", \"threads\": %d, \"level\": %d, \"runs\": %ld, \"median_ms\": %.6f, \"fma_peak_gflops\": %.1f,"
             " \"nodes\": [", s->threads, a->opts.opt_level, a->repeat, s->run_ms, s->peak);
  for (size_t i = 0; i < s->n; i++) {
    fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
    json_str(f, p[i].name);
    fprintf(f, ", \"op_type\": ");
    json_str(f, p[i].op_type);
    fprintf(f, ", \"domain\": ");
    json_str(f, p[i].domain);
    fprintf(f, ", \"output\": ");
    json_str(f, p[i].shape);
    fprintf(f, ", \"ms_per_run\": %.6f, \"flops\": %.0f, \"bytes\": %.0f}",
            p[i].runs ? p[i].total_ms / (double)p[i].runs : 0.0, p[i].flops, p[i].bytes);
  }
  fprintf(f, "\n]}\n");
  return ferror(f) ? CLI_ERR : CLI_OK;
}

/* Time the runs; fills run_ms with the median. */
static int timed_runs(kiln_session *s, const prof_args *a, const cli_feed *feed, double *run_ms) {
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
    if (i >= a->warmup) t[i - a->warmup] = now_ms() - t0;
    for (size_t k = 0; k < n_out; k++) kiln_tensor_free(outs[k]);
  }
  if (rc == CLI_OK) {
    qsort(t, (size_t)a->repeat, sizeof *t, cmp_double);
    *run_ms = a->repeat % 2 ? t[a->repeat / 2] : 0.5 * (t[a->repeat / 2 - 1] + t[a->repeat / 2]);
  }
  free(outs);
  free(t);
  return rc;
}

/* Sum node times per op type, slowest first; returns the number of rows. */
static size_t by_op(const kiln_node_profile *p, size_t n, double reps, op_row *ops) {
  size_t n_ops = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < n_ops && strcmp(ops[k].op, p[i].op_type)) k++;
    if (k == n_ops) ops[n_ops++] = (op_row){p[i].op_type, 0, 0, 0};
    ops[k].nodes++;
    ops[k].ms += p[i].total_ms / reps;
    ops[k].flops += p[i].flops;
  }
  qsort(ops, n_ops, sizeof *ops, cmp_op_ms);
  return n_ops;
}

static int profile_session(kiln_session *s, const prof_args *a, FILE *json) {
  kiln_error err = {0};
  cli_feed feed = {0};
  if (cli_make_feed(s, a->inputs_dir, a->n_input_args, (char **)a->input_args, &a->dims, 0, &feed, &err)) {
    fprintf(stderr, "kiln profile: %s\n", err.message);
    return CLI_ERR;
  }
  prof_summary sum = {.threads = kiln_session_threads(s), .n = kiln_session_profile_count(s)};
  int rc = timed_runs(s, a, &feed, &sum.run_ms);
  cli_feed_free(&feed);
  kiln_node_profile *p = calloc(sum.n ? sum.n : 1, sizeof *p);
  size_t *order = calloc(sum.n ? sum.n : 1, sizeof *order);
  op_row *ops = calloc(sum.n ? sum.n : 1, sizeof *ops);
  if (!p || !order || !ops) rc = CLI_ERR;
  if (rc == CLI_OK) {
    sum.peak = fma_peak_gflops();
    sum.fallbacks = kiln_session_fallback_count(s);
    for (size_t i = 0; i < sum.n; i++) {
      kiln_session_profile(s, i, &p[i]);
      sum.node_ms += p[i].total_ms / (double)a->repeat;
      order[i] = i;
    }
    g_nodes = p;
    qsort(order, sum.n, sizeof *order, cmp_node_ms);
    size_t n_ops = by_op(p, sum.n, (double)a->repeat, ops);
    report(json == stdout ? stderr : stdout, a, &sum, p, order, ops, n_ops);
    if (json) rc = write_json(json, a, &sum, p);
  }
  free(p);
  free(order);
  free(ops);
  return rc;
}

int cmd_profile(int argc, char **argv) {
  prof_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  FILE *json = NULL;
  if (a.json && !(json = strcmp(a.json, "-") ? fopen(a.json, "w") : stdout)) {
    fprintf(stderr, "kiln profile: cannot write '%s': %s\n", a.json, strerror(errno));
    return CLI_ERR;
  }
  kiln_error err = {0};
  kiln_session *s = NULL;
  if (kiln_session_create(a.model, &a.opts, &s, &err)) {
    fprintf(stderr, "kiln profile: %s\n", err.message);
    rc = CLI_ERR;
  } else {
    rc = profile_session(s, &a, json);
  }
  kiln_session_free(s);
  if (json && json != stdout) {
    fclose(json);
    if (rc != CLI_OK) remove(a.json);
  }
  return rc;
}
