/* kiln info MODEL */
#include <string.h>

#include "cli.h"

static void help(FILE *f) {
  fprintf(f, "usage: kiln info MODEL\n"
             "Loads and checks MODEL, then prints its opset imports, inputs and outputs with their\n"
             "dims (symbolic names kept), the operator histogram and the parameter bytes.\n");
}

int cmd_info(int argc, char **argv) {
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      help(stdout);
      return CLI_OK;
    }
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
