/* kiln bench MODEL (to be written). */
#include "cli.h"

int cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "kiln bench: not built yet\n");
  return CLI_ERR;
}
