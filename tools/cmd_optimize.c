/* kiln optimize IN OUT: write the optimised graph and show what changed. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln optimize IN.onnx OUT.onnx [--level N] [--disable PASS,PASS...]\n"
          "Loads IN, optimises it at --level (1 basic, 2 fusion; default 2) without the passes\n"
          "named by --disable, writes the result to OUT, checks that OUT loads again, and prints\n"
          "a before/after table of node counts by op type and the rewrites each pass made.\n");
}

static size_t count_of(const kiln_session *s, const char *op) {
  const char *o;
  size_t c;
  for (size_t i = 0; kiln_session_op_count(s, i, &o, &c) == KILN_OK; i++)
    if (!strcmp(o, op)) return c;
  return 0;
}

static void print_table(const kiln_session *before, const kiln_session *after) {
  printf("%-28s %8s %8s\n", "op", "before", "after");
  const char *op;
  size_t c;
  for (size_t i = 0; kiln_session_op_count(before, i, &op, &c) == KILN_OK; i++)
    printf("%-28s %8zu %8zu\n", op, c, count_of(after, op));
  for (size_t i = 0; kiln_session_op_count(after, i, &op, &c) == KILN_OK; i++)
    if (!count_of(before, op)) printf("%-28s %8d %8zu\n", op, 0, c);
  kiln_model_stats sb, sa;
  kiln_session_stats(before, &sb);
  kiln_session_stats(after, &sa);
  printf("%-28s %8zu %8zu\n", "total nodes", sb.n_nodes, sa.n_nodes);
  printf("%-28s %8zu %8zu\n", "initializers", sb.n_initializers, sa.n_initializers);
  printf("\n%-28s %8s\n", "pass", "rewrites");
  const char *pass;
  size_t n;
  for (size_t i = 0; kiln_session_pass_stat(after, i, &pass, &n) == KILN_OK; i++) printf("%-28s %8zu\n", pass, n);
  kiln_fusion_info fi;
  uint64_t saved = 0;
  size_t nf = 0;
  for (; kiln_session_fusion_info(after, nf, &fi) == KILN_OK; nf++) {
    if (nf == 0) printf("\n%-48s %-16s %8s %14s\n", "fused node", "op", "replaced", "interm. bytes");
    printf("%-48.48s %-16s %8zu %14llu\n", fi.name, fi.op_type, fi.replaced, (unsigned long long)fi.intermediate_bytes);
    saved += fi.intermediate_bytes;
  }
  if (nf) printf("%zu fused nodes; intermediates no longer stored: %.2f MiB (symbolic dims as 1)\n", nf,
                 (double)saved / 1048576.0);
}

int cmd_optimize(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *disable = NULL;
  int level = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (next && !strcmp(a, "--level")) {
      if (cli_parse_level("optimize", argv[++i], &level)) return CLI_USAGE;
    } else if (next && !strcmp(a, "--disable")) {
      disable = argv[++i];
    } else if (a[0] != '-' && !in) {
      in = a;
    } else if (a[0] != '-' && !out) {
      out = a;
    } else {
      fprintf(stderr, "kiln optimize: unexpected argument '%s'\n", a);
      help(stderr);
      return CLI_USAGE;
    }
  }
  if (!in || !out || level < 0 || level > 2) {
    help(stderr);
    return CLI_USAGE;
  }
  kiln_error err = {0};
  kiln_options o0, on;
  kiln_options_init(&o0);
  kiln_options_init(&on);
  o0.opt_level = 0;
  on.opt_level = level;
  on.disabled_passes = disable;
  kiln_session *before = NULL, *after = NULL, *check = NULL;
  int rc = CLI_ERR;
  if (kiln_session_create(in, &o0, &before, &err) || kiln_session_create(in, &on, &after, &err) ||
      kiln_session_save(after, out, &err) || kiln_session_create(out, &o0, &check, &err)) {
    fprintf(stderr, "kiln optimize: %s\n", err.message);
  } else {
    print_table(before, after);
    printf("\nwrote %s\n", out);
    rc = CLI_OK;
  }
  kiln_session_free(before);
  kiln_session_free(after);
  kiln_session_free(check);
  return rc;
}
