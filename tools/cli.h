/* Shared pieces of the `kiln` command line. The tools use only the public API. */
#ifndef KILN_TOOLS_CLI_H
#define KILN_TOOLS_CLI_H

#include <stdio.h>

#include "kiln/kiln.h"

enum { CLI_OK = 0, CLI_ERR = 1, CLI_USAGE = 2 };

typedef struct cli_feed {
  size_t n;
  const char **names;   /* borrowed from the session */
  kiln_tensor **values;
} cli_feed;

typedef struct cli_dims {
  int64_t fallback;     /* value of symbolic dims not named (0 means 1) */
  size_t n;
  const char *names[32];
  int64_t values[32];
} cli_dims;

/* A whole decimal number in [lo, hi]; returns 0 on success. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
/* --level's value: 0, 1 or 2 into *level and CLI_OK, else a usage error (CLI_USAGE). */
int cli_parse_level(const char *cmd, const char *s, int *level);
/* --limit NAME=N: one of the model limits of kiln_options (max_subgraph_depth, max_nodes,
 * max_string_bytes, max_attribute_bytes, max_memory_bytes, and the run time limit max_run_ms;
 * N may end in K, M or G). */
int cli_parse_limit(const char *cmd, const char *arg, kiln_options *opts);
#define CLI_LIMIT_HELP \
  "  --limit NAME=N    raise or lower a model limit: max_subgraph_depth, max_nodes,\n" \
  "                    max_string_bytes, max_attribute_bytes, max_memory_bytes (N: 1G, 512M...),\n" \
  "                    max_run_ms (each run's time limit in ms)\n"
/* Print "kiln CMD: <message>" and a pointer to --help on stderr; returns CLI_USAGE. */
__attribute__((format(printf, 2, 3))) int cli_usage_error(const char *cmd, const char *fmt, ...);
/* The session flags that run, bench and profile share (--inter-op, --strict-fp32): sets the
 * option in opts and returns 1 when `arg` is one of them, else 0. */
int cli_session_flag(const char *arg, kiln_options *opts);
/* Their --help lines. */
#define CLI_SESSION_FLAGS_HELP                                                                  \
  "  --inter-op        run independent nodes at the same time (one thread each)\n"             \
  "  --strict-fp32     every float GEMM in IEEE float32 FMA (default: AMX bf16x3 where the CPU\n" \
  "                    has it, within about 1e-5 of float32 relative to an output's range)\n" \
  "  --lazy-weights    pack constant weights on each node's first run, not at load\n"
/* Parse NAME=VALUE into dims; returns 0 on success. */
int cli_parse_dim(cli_dims *d, const char *arg);
/* Build the feed for every session input: from --inputs DIR, --input NAME=FILE, or random
 * (deterministic, seeded). Returns KILN_OK or an error in err. */
kiln_code cli_make_feed(kiln_session *s, const char *inputs_dir, size_t n_input_args,
                        char **input_args, const cli_dims *dims, unsigned seed, cli_feed *feed,
                        kiln_error *err);
void cli_feed_free(cli_feed *feed);
/* One-line description "float[1,3,224,224]" of a declared input/output. */
const char *cli_info_str(const kiln_io_info *info, char *buf, size_t n);
/* Print a value: shape and a short summary of its contents. */
void cli_print_value(FILE *f, const char *name, const kiln_tensor *v);

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* One batch size's sorted latencies (ms) for kiln bench --plot. */
typedef struct bench_series {
  int64_t batch;
  const double *sorted;
  size_t n;
} bench_series;
/* Write the latency distributions of n batch sizes as one SVG; returns a CLI exit code. */
int bench_plot_svg(FILE *f, const char *model, const bench_series *s, int n);

#endif
