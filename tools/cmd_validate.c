/* kiln validate MODEL: the optimised graph against the unoptimised one on the same inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln validate MODEL [--inputs DIR] [--input NAME=FILE ...] [--dim NAME=VALUE ...]\n"
          "                     [--seeds N] [--level N] [--atol A] [--rtol R] [--range-tol T]\n"
          "                     [--per-fusion] [--inter-op] [--strict-fp32] [--lazy-weights]\n"
          "Runs MODEL at optimisation level 0 and at --level (default 2) on the same inputs\n"
          "(random, one set per seed, default 3 seeds, unless inputs are given; symbolic dims default\n"
          "to 8 so that sequence models are checked beyond length 1) and reports per\n"
          "output the max absolute and relative error. An output disagrees when\n"
          "|opt - ref| > atol + rtol * |ref| + T * max |ref| anywhere (defaults 1e-3, 1e-3, 1e-4;\n"
          "the last term, relative to the output's range, admits the AMX bf16x3 GEMM's rounding,\n"
          "about 1e-5 of the range, on near-zero elements of a wide output).\n"
          "These session flags apply to both runs:\n"
          CLI_SESSION_FLAGS_HELP
          "--per-fusion: also run each fused node against the chain it replaced, on the same\n"
          "inputs it sees in the optimised graph, and report the error each fusion adds on its own.\n"
          "Exit codes: 0 agree, 1 disagree or error, 2 usage error.\n");
}

static double elem(const kiln_tensor *t, int64_t i) {
  const void *p = kiln_tensor_cdata(t);
  switch (kiln_tensor_dtype(t)) {
    case KILN_FLOAT: return ((const float *)p)[i];
    case KILN_DOUBLE: return ((const double *)p)[i];
    case KILN_INT64: return (double)((const int64_t *)p)[i];
    case KILN_INT32: return ((const int32_t *)p)[i];
    case KILN_UINT8: case KILN_BOOL: return ((const uint8_t *)p)[i];
    case KILN_INT8: return ((const int8_t *)p)[i];
    default: return 0;
  }
}

/* Compare one output; returns 1 when it agrees. */
static int compare(const char *name, const kiln_tensor *ref, const kiln_tensor *opt, double atol,
                   double rtol, double range_tol) {
  if (kiln_tensor_kind(ref) != KILN_KIND_TENSOR || kiln_tensor_kind(opt) != KILN_KIND_TENSOR) {
    int same = kiln_tensor_kind(ref) == kiln_tensor_kind(opt);
    printf("  %-28s %s\n", name, same ? "non-tensor output (kind matches)" : "KIND DIFFERS");
    return same;
  }
  int r = kiln_tensor_rank(ref);
  if (kiln_tensor_dtype(ref) != kiln_tensor_dtype(opt) || kiln_tensor_rank(opt) != r ||
      memcmp(kiln_tensor_dims(ref), kiln_tensor_dims(opt), (size_t)r * sizeof(int64_t))) {
    printf("  %-28s TYPE OR SHAPE DIFFERS\n", name);
    return 0;
  }
  double max_abs = 0, max_rel = 0, range = 0;
  int ok = 1;
  for (int64_t i = 0; i < kiln_tensor_numel(ref); i++) {
    double a = fabs(elem(ref, i));
    if (a > range && a < INFINITY) range = a;
  }
  for (int64_t i = 0; i < kiln_tensor_numel(ref); i++) {
    double a = elem(ref, i), b = elem(opt, i);
    if (isnan(a) && isnan(b)) continue;
    double d = fabs(a - b);
    if (isnan(d)) d = INFINITY;
    if (d > max_abs) max_abs = d;
    double rel = d / (fabs(a) > 1e-12 ? fabs(a) : 1e-12);
    if (rel > max_rel && fabs(a) > atol) max_rel = rel;
    if (d > atol + rtol * fabs(a) + range_tol * range) ok = 0;
  }
  printf("  %-28s max abs %.3g  max rel %.3g  %s\n", name, max_abs, max_rel, ok ? "ok" : "DISAGREE");
  return ok;
}

/* The per-fusion table (verify_fusions ran each fused node against its chain); 1 when all agree. */
static int report_fusions(const kiln_session *s) {
  kiln_fusion_info fi;
  int ok = 1;
  printf("\nper fusion (each fused node against the chain it replaced):\n");
  printf("  %-44s %-18s %8s %11s %11s\n", "node", "op", "replaced", "max abs", "max rel");
  size_t i = 0;
  for (; kiln_session_fusion_info(s, i, &fi) == KILN_OK; i++) {
    printf("  %-44.44s %-18s %8zu %11.3g %11.3g  %s\n", fi.name, fi.op_type, fi.replaced, fi.max_abs,
           fi.max_rel, !fi.verified ? "not run" : fi.fallen_back ? "DISAGREES (disabled)" : "ok");
    if (fi.verified && fi.fallen_back) ok = 0;
  }
  if (i == 0) printf("  (no fused nodes)\n");
  return ok;
}

int cmd_validate(int argc, char **argv) {
  const char *model = NULL, *inputs_dir = NULL;
  char *input_args[64];
  size_t n_input_args = 0;
  cli_dims dims = {.fallback = 8};
  int seeds = 3, level = 2, per_fusion = 0;
  double atol = 1e-3, rtol = 1e-3, range_tol = 1e-4;
  kiln_options base; /* the session flags, for both runs */
  kiln_options_init(&base);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--per-fusion")) {
      per_fusion = 1;
    } else if (cli_session_flag(a, &base)) {
    } else if (next && !strcmp(a, "--inputs")) {
      inputs_dir = argv[++i];
    } else if (next && !strcmp(a, "--input") && n_input_args < 64) {
      input_args[n_input_args++] = argv[++i];
    } else if (next && !strcmp(a, "--dim")) {
      if (cli_parse_dim(&dims, argv[++i])) {
        fprintf(stderr, "kiln validate: --dim expects NAME=VALUE\n");
        return CLI_USAGE;
      }
    } else if (next && !strcmp(a, "--seeds")) {
      long n;
      if (cli_parse_long(argv[++i], 1, 1000000, &n)) return cli_usage_error("validate", "--seeds expects a count >= 1, got '%s'", argv[i]);
      seeds = (int)n;
    } else if (next && !strcmp(a, "--level")) {
      if (cli_parse_level("validate", argv[++i], &level)) return CLI_USAGE;
    } else if (next && !strcmp(a, "--atol")) {
      atol = atof(argv[++i]);
    } else if (next && !strcmp(a, "--rtol")) {
      rtol = atof(argv[++i]);
    } else if (next && !strcmp(a, "--range-tol")) {
      range_tol = atof(argv[++i]);
    } else if (a[0] != '-' && !model) {
      model = a;
    } else {
      fprintf(stderr, "kiln validate: unexpected argument '%s'\n", a);
      help(stderr);
      return CLI_USAGE;
    }
  }
  if (!model || seeds < 1) {
    help(stderr);
    return CLI_USAGE;
  }
  if (inputs_dir || n_input_args) seeds = 1;
  kiln_error err = {0};
  kiln_options o0 = base, o2 = base;
  o0.opt_level = 0;
  o2.opt_level = level;
  o2.verify_fusions = per_fusion;
  kiln_session *ref = NULL, *opt = NULL;
  if (kiln_session_create(model, &o0, &ref, &err) || kiln_session_create(model, &o2, &opt, &err)) {
    fprintf(stderr, "kiln validate: %s\n", err.message);
    kiln_session_free(ref);
    return CLI_ERR;
  }
  size_t nout = kiln_session_output_count(ref);
  kiln_tensor **a = calloc(nout + 1, sizeof *a), **b = calloc(nout + 1, sizeof *b);
  int agree = 1, rc = CLI_OK;
  if (per_fusion) {
    /* The verifying run: each fused node meets its chain; its outputs are the chains', so the
     * comparison below uses the runs after it. */
    cli_feed feed;
    if (cli_make_feed(opt, inputs_dir, n_input_args, input_args, &dims, 0, &feed, &err) ||
        kiln_session_run(opt, feed.n, feed.names, (const kiln_tensor *const *)feed.values, nout, NULL, b, &err)) {
      fprintf(stderr, "kiln validate: %s\n", err.message);
      rc = CLI_ERR;
    }
    for (size_t i = 0; i < nout; i++) {
      kiln_tensor_free(b[i]);
      b[i] = NULL;
    }
    cli_feed_free(&feed);
  }
  for (int seed = 0; seed < seeds && rc == CLI_OK; seed++) {
    cli_feed feed;
    if (cli_make_feed(ref, inputs_dir, n_input_args, input_args, &dims, (unsigned)seed, &feed, &err) ||
        kiln_session_run(ref, feed.n, feed.names, (const kiln_tensor *const *)feed.values, nout, NULL, a, &err) ||
        kiln_session_run(opt, feed.n, feed.names, (const kiln_tensor *const *)feed.values, nout, NULL, b, &err)) {
      fprintf(stderr, "kiln validate: %s\n", err.message);
      rc = CLI_ERR;
    } else {
      printf("seed %d: level 0 vs level %d\n", seed, level);
      for (size_t i = 0; i < nout; i++) {
        kiln_io_info info;
        kiln_session_output_info(ref, i, &info, NULL);
        agree &= compare(info.name, a[i], b[i], atol, rtol, range_tol);
      }
    }
    for (size_t i = 0; i < nout; i++) {
      kiln_tensor_free(a[i]);
      kiln_tensor_free(b[i]);
      a[i] = b[i] = NULL;
    }
    cli_feed_free(&feed);
  }
  free(a);
  free(b);
  if (per_fusion && rc == CLI_OK) agree &= report_fusions(opt);
  kiln_session_free(ref);
  kiln_session_free(opt);
  if (rc == CLI_OK) printf("%s\n", agree ? "validate: outputs agree" : "validate: OUTPUTS DISAGREE");
  return rc != CLI_OK ? rc : agree ? CLI_OK : CLI_ERR;
}
