/* kiln info MODEL | kiln info --ops */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *f) {
  fprintf(f, "usage: kiln info MODEL\n"
             "       kiln info --ops\n"
             "Loads and checks MODEL, then prints its opset imports, inputs and outputs with their\n"
             "dims (symbolic names kept), the operator histogram and the parameter bytes.\n"
             "--ops  print the ai.onnx opsets kiln supports and every operator it implements, by\n"
             "       domain, with the opsets where kiln's entries for the op begin\n");
}

typedef struct op_row {
  const char *domain, *name;
  int since;
} op_row;

static int row_cmp(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  int c = strcmp(x->domain, y->domain);
  if (!c) c = strcmp(x->name, y->name);
  return c ? c : x->since - y->since;
}

/* kiln info --ops: the supported range and the operators, one line per op. */
static int print_ops(void) {
  size_t n = 0;
  while (kiln_supported_op(n, NULL, NULL, NULL) == KILN_OK) n++;
  op_row *rows = calloc(n ? n : 1, sizeof *rows);
  if (!rows) {
    fprintf(stderr, "kiln info: out of memory\n");
    return CLI_ERR;
  }
  for (size_t i = 0; i < n; i++) kiln_supported_op(i, &rows[i].domain, &rows[i].name, &rows[i].since);
  qsort(rows, n, sizeof *rows, row_cmp);
  printf("ai.onnx opsets: 1 to %d\n", kiln_max_opset());
  size_t ops = 0;
  for (size_t i = 0; i < n; i++) {
    bool first_of_domain = i == 0 || strcmp(rows[i].domain, rows[i - 1].domain);
    bool first_of_op = first_of_domain || strcmp(rows[i].name, rows[i - 1].name);
    if (first_of_domain) {
      size_t k = 0;
      for (size_t j = i; j < n && !strcmp(rows[j].domain, rows[i].domain); j++)
        k += j == i || strcmp(rows[j].name, rows[j - 1].name);
      printf("%s%s (%zu operators)%s\n", i ? "\n" : "", *rows[i].domain ? rows[i].domain : "ai.onnx", k,
             strcmp(rows[i].domain, "ai.kiln") ? "" : ": kiln's fused operators, made by the optimizer");
    }
    if (first_of_op) {
      ops++;
      printf("  %-32s %d", rows[i].name, rows[i].since);
    } else if (rows[i].since != rows[i - 1].since) {
      printf(", %d", rows[i].since);
    }
    if (i + 1 == n || strcmp(rows[i + 1].name, rows[i].name) || strcmp(rows[i + 1].domain, rows[i].domain))
      printf("\n");
  }
  printf("\n%zu operators. The numbers are the opsets where kiln's entries for an op begin; each entry\n"
         "runs every later opset up to %d (the kernel follows the op's later versions itself).\n"
         "A model that imports a newer opset or uses another op is refused at load, naming both.\n",
         ops, kiln_max_opset());
  free(rows);
  return CLI_OK;
}

int cmd_info(int argc, char **argv) {
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      help(stdout);
      return CLI_OK;
    }
    if (!strcmp(argv[i], "--ops") && argc == 2) return print_ops();
    if (argv[i][0] == '-' || model) {
      fprintf(stderr, "kiln info: unexpected argument '%s'\n", argv[i]);
      help(stderr);
      return CLI_USAGE;
    }
    model = argv[i];
  }
  if (!model) {
    help(stderr);
    return CLI_USAGE;
  }
  kiln_error err = {0};
  kiln_options o;
  kiln_options_init(&o);
  o.opt_level = 0; /* describe the model as written */
  kiln_session *s;
  if (kiln_session_create(model, &o, &s, &err)) {
    fprintf(stderr, "kiln info: %s\n", err.message);
    return CLI_ERR;
  }
  kiln_model_stats st;
  kiln_session_stats(s, &st);
  printf("model: %s\nir_version: %lld\nopsets:", model, (long long)st.ir_version);
  for (size_t i = 0; i < st.n_opsets; i++) {
    const char *dom;
    int64_t v;
    kiln_session_opset(s, i, &dom, &v);
    printf(" %s=%lld", *dom ? dom : "ai.onnx", (long long)v);
  }
  char buf[512];
  printf("\ninputs (%zu):\n", kiln_session_input_count(s));
  for (size_t i = 0; i < kiln_session_input_count(s); i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, NULL);
    printf("  %-24s %s\n", info.name, cli_info_str(&info, buf, sizeof buf));
  }
  printf("outputs (%zu):\n", kiln_session_output_count(s));
  for (size_t i = 0; i < kiln_session_output_count(s); i++) {
    kiln_io_info info;
    kiln_session_output_info(s, i, &info, NULL);
    printf("  %-24s %s\n", info.name, cli_info_str(&info, buf, sizeof buf));
  }
  printf("nodes: %zu\nops:\n", st.n_nodes);
  const char *op;
  size_t cnt;
  for (size_t i = 0; kiln_session_op_count(s, i, &op, &cnt) == KILN_OK; i++) printf("  %-24s %zu\n", op, cnt);
  printf("initializers: %zu\nparameter bytes: %llu (%.2f MiB)\n", st.n_initializers,
         (unsigned long long)st.param_bytes, (double)st.param_bytes / 1048576.0);
  kiln_session_free(s);
  return CLI_OK;
}
