/* Time one model at given optimisation levels: median and best of N runs on random float
 * inputs (every input must be float with static dims), through the public API.
 *
 *   cc -O2 -Iinclude bench/micro/time_model.c build/libkiln.a -lprotobuf-c -lm -lpthread -ldl \
 *      -o build/time_model
 *   build/time_model MODEL [ITERS] [LEVEL...]      (default 20 iterations, levels 0 and 2)
 *
 * CPU time is shown next to wall time because shared machines make wall time noisy.
 * Stop-gap until `kiln bench` exists; used for the attention numbers in the fusion report. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

static double now_ms(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int time_level(const char *path, int level, int iters) {
  kiln_error err = {0};
  kiln_options o;
  kiln_options_init(&o);
  o.opt_level = level;
  kiln_session *s;
  if (kiln_session_create(path, &o, &s, &err)) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  size_t n = kiln_session_input_count(s);
  const char *names[16];
  kiln_tensor *ins[16];
  unsigned seed = 1;
  for (size_t i = 0; i < n && i < 16; i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, &err);
    names[i] = info.name;
    if (kiln_tensor_create(KILN_FLOAT, info.rank, info.dims, &ins[i], &err)) {
      fprintf(stderr, "%s: %s\n", info.name, err.message);
      return 1;
    }
    float *p = kiln_tensor_data(ins[i]);
    for (int64_t k = 0; k < kiln_tensor_numel(ins[i]); k++) {
      seed = seed * 1103515245u + 12345u;
      p[k] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
  }
  double *t = calloc((size_t)iters, sizeof *t), *cpu = calloc((size_t)iters, sizeof *cpu);
  for (int it = -2; it < iters; it++) {
    kiln_tensor *out[8] = {0};
    double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (kiln_session_run(s, n, names, (const kiln_tensor *const *)ins, kiln_session_output_count(s), NULL, out,
                         &err)) {
      fprintf(stderr, "run: %s\n", err.message);
      return 1;
    }
    if (it >= 0) {
      t[it] = now_ms(CLOCK_MONOTONIC) - t0;
      cpu[it] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    for (size_t k = 0; k < kiln_session_output_count(s) && k < 8; k++) kiln_tensor_free(out[k]);
  }
  qsort(t, (size_t)iters, sizeof *t, cmp);
  qsort(cpu, (size_t)iters, sizeof *cpu, cmp);
  printf("%-40s level %d  wall median %8.3f best %8.3f ms  cpu median %8.3f best %8.3f ms  (%d runs)\n", path,
         level, t[iters / 2], t[0], cpu[iters / 2], cpu[0], iters);
  free(t);
  free(cpu);
  for (size_t i = 0; i < n; i++) kiln_tensor_free(ins[i]);
  kiln_session_free(s);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: time_model MODEL [ITERS] [LEVEL...]\n");
    return 2;
  }
  int iters = argc > 2 ? atoi(argv[2]) : 20, rc = 0;
  if (iters < 1) iters = 1;
  if (argc > 3)
    for (int i = 3; i < argc; i++) rc |= time_level(argv[1], atoi(argv[i]), iters);
  else
    rc = time_level(argv[1], 0, iters) | time_level(argv[1], 2, iters);
  return rc;
}
