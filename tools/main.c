/* kiln: command line entry point. */
#include <stdio.h>
#include <stdlib.h>
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
    {"profile", cmd_profile, "time every node: op-type shares, slowest nodes, bottleneck advice"},
    {"calibrate", cmd_calibrate, "measure this machine's FMA peak, cache/DRAM bandwidth and pool latency"},
    {"optimize", cmd_optimize, "write the optimised graph and show what each pass changed"},
    {"validate", cmd_validate, "check the optimised graph against the original on the same inputs"},
    {"serve", cmd_serve, "serve models over HTTP (KServe v2 protocol): batching, versions, metrics"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: kiln COMMAND [ARGS]   (kiln COMMAND --help for details)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\nevery command also takes --plugin PATH.so (repeatable): load custom operators and\n"
             "fusion patterns from a plugin library (see docs/custom-ops.md); KILN_PLUGINS=A.so:B.so\n"
             "does the same\n");
  fprintf(f, "\nexit codes: 0 ok, 1 model or run error, 2 usage error\n");
}

/* Take every --plugin PATH / --plugin=PATH out of argv and add the paths to KILN_PLUGINS
 * (colon-separated), which every session reads. Returns the new argc, or -1 on a usage error. */
static int take_plugins(int argc, char **argv) {
  size_t len = 0;
  const char *env = getenv("KILN_PLUGINS");
  for (int i = 1; i < argc; i++) len += strlen(argv[i]) + 1;
  char *list = malloc(len + (env ? strlen(env) : 0) + 2);
  if (!list) return -1;
  list[0] = 0;
  if (env && *env) strcat(list, env);
  int out = 1, found = 0;
  for (int i = 1; i < argc; i++) {
    const char *path = NULL;
    if (!strcmp(argv[i], "--plugin")) {
      if (i + 1 >= argc || !*argv[i + 1]) {
        fprintf(stderr, "kiln: --plugin expects a path to a plugin library (PATH.so)\n");
        free(list);
        return -1;
      }
      path = argv[++i];
    } else if (!strncmp(argv[i], "--plugin=", 9)) {
      path = argv[i] + 9;
      if (!*path) {
        fprintf(stderr, "kiln: --plugin expects a path to a plugin library (PATH.so)\n");
        free(list);
        return -1;
      }
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (strchr(path, ':')) {
      fprintf(stderr, "kiln: --plugin path '%s' contains ':', which KILN_PLUGINS uses as separator\n", path);
      free(list);
      return -1;
    }
    if (*list) strcat(list, ":");
    strcat(list, path);
    found = 1;
  }
  argv[out] = NULL;
  if (found) setenv("KILN_PLUGINS", list, 1);
  free(list);
  return out;
}

int main(int argc, char **argv) {
  argc = take_plugins(argc, argv);
  if (argc < 0) return CLI_USAGE;
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    char cpu[256];
    kiln_cpu_describe_line(cpu, sizeof cpu);
    printf("kiln %s\ncpu: %s; amx %s\n", KILN_VERSION_STRING, cpu, kiln_cpu_amx() ? "on" : "off");
    return CLI_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
