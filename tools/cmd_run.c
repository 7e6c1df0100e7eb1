/* kiln run MODEL [options] */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln run MODEL [--inputs DIR] [--input NAME=FILE.pb|.npy ...] [--output-dir DIR]\n"
          "                [--dim NAME=VALUE ...] [--seed N] [--level N] [--threads N] [--runs N]\n"
          "                [--inter-op] [--strict-fp32] [--lazy-weights] [--limit NAME=N] [--quiet]\n"
          "Runs MODEL and prints each output's shape and a summary of its values.\n"
          "  --inputs DIR      read DIR/input_0.pb, input_1.pb, ... in graph-input order\n"
          "                    (initializers skipped), as the ONNX test data lays them out\n"
          "  --input NAME=FILE one input from a TensorProto/SequenceProto/OptionalProto .pb or .npy\n"
          "  --output-dir DIR  write output_0.pb, output_1.pb, ... in graph-output order\n"
          "  --dim NAME=VALUE  value of a symbolic dim for random inputs (default 1)\n"
          "  --seed N          seed of the deterministic random inputs (default 0)\n"
          "  --level N         optimisation level 0, 1 or 2 (default 2)\n"
          "  --threads N       worker threads (default: one per core)\n"
          CLI_SESSION_FLAGS_HELP
          CLI_LIMIT_HELP
          "  --runs N          run N times (default 1) and fail unless every run's tensor outputs\n"
          "                    are bytewise those of the first: the first run measures the memory\n"
          "                    plan, later runs use it; the last run's outputs are reported\n"
          "Inputs not given are random. Exit codes: 0 ok, 1 model or run error, 2 usage error.\n");
}

/* Same dense non-string tensor contents byte for byte (other kinds of value compare equal). */
static int same_bytes(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || kiln_tensor_kind(a) != KILN_KIND_TENSOR || kiln_tensor_kind(b) != KILN_KIND_TENSOR ||
      kiln_tensor_dtype(a) == KILN_STRING)
    return 1;
  if (kiln_tensor_dtype(a) != kiln_tensor_dtype(b) || kiln_tensor_numel(a) != kiln_tensor_numel(b)) return 0;
  size_t bytes = (size_t)kiln_tensor_numel(a) * kiln_dtype_size(kiln_tensor_dtype(a));
  return !bytes || !memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), bytes);
}

int cmd_run(int argc, char **argv) {
  const char *model = NULL, *inputs_dir = NULL, *out_dir = NULL;
  char *input_args[64];
  size_t n_input_args = 0;
  cli_dims dims = {0};
  unsigned seed = 0;
  int quiet = 0;
  long runs = 1;
  kiln_options o;
  kiln_options_init(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = 1;
    } else if (cli_session_flag(a, &o)) {
    } else if (next && !strcmp(a, "--inputs")) {
      inputs_dir = argv[++i];
    } else if (next && !strcmp(a, "--input") && n_input_args < 64) {
      input_args[n_input_args++] = argv[++i];
    } else if (next && !strcmp(a, "--output-dir")) {
      out_dir = argv[++i];
    } else if (next && !strcmp(a, "--dim")) {
      if (cli_parse_dim(&dims, argv[++i])) {
        fprintf(stderr, "kiln run: --dim expects NAME=VALUE, got '%s'\n", argv[i]);
        return CLI_USAGE;
      }
    } else if (next && !strcmp(a, "--seed")) {
      seed = (unsigned)strtoul(argv[++i], NULL, 10);
    } else if (next && !strcmp(a, "--limit")) {
      if (cli_parse_limit("run", argv[++i], &o)) return CLI_USAGE;
    } else if (next && !strcmp(a, "--level")) {
      if (cli_parse_level("run", argv[++i], &o.opt_level)) return CLI_USAGE;
    } else if (next && !strcmp(a, "--runs")) {
      char *end;
      runs = strtol(argv[++i], &end, 10);
      if (*end || runs < 1 || runs > 1000000) {
        fprintf(stderr, "kiln run: --runs expects a count >= 1, got '%s'\n", argv[i]);
        return CLI_USAGE;
      }
    } else if (next && !strcmp(a, "--threads")) {
      long n;
      if (cli_parse_long(argv[++i], 0, 4096, &n)) return cli_usage_error("run", "--threads expects a count >= 0, got '%s'", argv[i]);
      o.threads = (int)n;
    } else if (a[0] != '-' && !model) {
      model = a;
    } else {
      fprintf(stderr, "kiln run: unexpected argument '%s'\n", a);
      help(stderr);
      return CLI_USAGE;
    }
  }
  if (!model) {
    help(stderr);
    return CLI_USAGE;
  }
  kiln_error err = {0};
  kiln_session *s;
  if (kiln_session_create(model, &o, &s, &err)) {
    fprintf(stderr, "kiln run: %s\n", err.message);
    return CLI_ERR;
  }
  cli_feed feed;
  int rc = CLI_ERR;
  size_t nout = kiln_session_output_count(s);
  kiln_tensor **outs = calloc(nout + 1, sizeof *outs), **first = calloc(nout + 1, sizeof *first);
  if (cli_make_feed(s, inputs_dir, n_input_args, input_args, &dims, seed, &feed, &err)) {
    fprintf(stderr, "kiln run: %s\n", err.message);
    goto done;
  }
  if (!quiet) {
    printf("inputs:\n");
    for (size_t i = 0; i < feed.n; i++) cli_print_value(stdout, feed.names[i], feed.values[i]);
  }
  struct timespec t0, t1;
  for (long r = 0; r < runs; r++) {
    for (size_t i = 0; i < nout; i++) {
      if (r == 1) first[i] = outs[i];
      else kiln_tensor_free(outs[i]);
      outs[i] = NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (kiln_session_run(s, feed.n, feed.names, (const kiln_tensor *const *)feed.values, nout, NULL, outs, &err)) {
      fprintf(stderr, "kiln run: run %ld: %s\n", r + 1, err.message);
      goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (size_t i = 0; r > 0 && i < nout; i++)
      if (!same_bytes(first[i], outs[i])) {
        kiln_io_info info;
        kiln_session_output_info(s, i, &info, NULL);
        fprintf(stderr, "kiln run: run %ld's output '%s' differs from run 1's\n", r + 1, info.name);
        goto done;
      }
  }
  if (!quiet) {
    printf("outputs:\n");
    for (size_t i = 0; i < nout; i++) {
      kiln_io_info info;
      kiln_session_output_info(s, i, &info, NULL);
      cli_print_value(stdout, info.name, outs[i]);
    }
    printf("time: %.3f ms\n", (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    size_t arena = 0, inter = 0;
    kiln_session_memory(s, &arena, &inter);
    if (inter)
      printf("memory plan: %.2f MiB arena for %.2f MiB of intermediates (%.0f%% saved)\n",
             (double)arena / 1048576.0, (double)inter / 1048576.0, 100.0 * (1.0 - (double)arena / (double)inter));
  }
  if (out_dir) {
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "kiln run: cannot create '%s': %s\n", out_dir, strerror(errno));
      goto done;
    }
    for (size_t i = 0; i < nout; i++) {
      kiln_io_info info;
      kiln_session_output_info(s, i, &info, NULL);
      char path[4096];
      snprintf(path, sizeof path, "%s/output_%zu.pb", out_dir, i);
      if (kiln_value_save_pb(path, outs[i], info.name, info.kind == KILN_KIND_NONE, &err)) {
        fprintf(stderr, "kiln run: %s\n", err.message);
        goto done;
      }
    }
  }
  rc = CLI_OK;
done:
  for (size_t i = 0; i < nout; i++) {
    kiln_tensor_free(outs[i]);
    kiln_tensor_free(first[i]);
  }
  free(outs);
  free(first);
  cli_feed_free(&feed);
  kiln_session_free(s);
  return rc;
}
