#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int kt_failures, kt_checks;

int kt_finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, kt_checks, kt_failures);
  return kt_failures ? 1 : 0;
}

const char *kt_write_temp(const char *tag, const void *bytes, size_t len) {
  static char paths[16][256];
  static int next;
  char *p = paths[next++ % 16];
  snprintf(p, 256, "/tmp/kiln_test_%d_%s", (int)getpid(), tag);
  FILE *f = fopen(p, "wb");
  if (!f) return NULL;
  if (len) fwrite(bytes, 1, len, f);
  fclose(f);
  return p;
}

int kt_run(const char *cmd, char *out, size_t cap) {
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
