/* kiln: command line entry point. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"info", cmd_info, "show a model's opsets, inputs, outputs, op histogram and parameter bytes"},
    {"run", cmd_run, "run a model on given or random inputs and print or save its outputs"},
    {"bench", cmd_bench, "time a model: latency percentiles, throughput, memory"},
    {"optimize", cmd_optimize, "write the optimised graph and show what each pass changed"},
    {"validate", cmd_validate, "check the optimised graph against the original on the same inputs"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: kiln COMMAND [ARGS]   (kiln COMMAND --help for details)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\nexit codes: 0 ok, 1 model or run error, 2 usage error\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("kiln %s\n", KILN_VERSION_STRING);
    return CLI_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
