#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int kt_failures, kt_checks;

int kt_finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, kt_checks, kt_failures);
  if (kt_checks == 0) fprintf(stderr, "%s: no checks ran: a test must assert something\n", name);
  return kt_failures || kt_checks == 0 ? 1 : 0;
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

uint64_t kt_rng = 0x9e3779b97f4a7c15ull;

uint32_t kt_rand(void) {
  kt_rng ^= kt_rng << 13;
  kt_rng ^= kt_rng >> 7;
  kt_rng ^= kt_rng << 17;
  return (uint32_t)(kt_rng >> 11);
}

float kt_frand(void) { return (float)((double)kt_rand() / 2147483648.0 - 1.0); }

int64_t kt_rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)(kt_rand() % (uint32_t)(hi - lo + 1)); }

kiln_act kt_act(int k) {
  kiln_act a = {KILN_ACT_NONE, 0, 0};
  if (k == 1) a.kind = KILN_ACT_RELU;
  if (k == 2) a.kind = KILN_ACT_CLIP, a.alpha = 0.0f, a.beta = 6.0f;
  if (k == 3) a.kind = KILN_ACT_HARD_SWISH;
  return a;
}
