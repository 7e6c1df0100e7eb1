/* A tiny test harness: CHECK records a failure and continues; main returns non-zero if any. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/act.h"

extern int kt_failures, kt_checks;

#define CHECK(cond)                                                              \
  do {                                                                           \
    kt_checks++;                                                                 \
    if (!(cond)) {                                                               \
      kt_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
    }                                                                            \
  } while (0)

#define CHECK_MSG(cond, ...)                                                     \
  do {                                                                           \
    kt_checks++;                                                                 \
    if (!(cond)) {                                                               \
      kt_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                              \
      fprintf(stderr, "\n");                                                     \
    }                                                                            \
  } while (0)

/* Deterministic xorshift random numbers shared by the kernel tests; kt_rng is the state (set it
 * to seed a test, save and restore it to replay the same data). */
extern uint64_t kt_rng;
uint32_t kt_rand(void);
/* Uniform in [-1, 1). */
float kt_frand(void);
/* Uniform integer in [lo, hi]. */
int64_t kt_rand_in(int64_t lo, int64_t hi);

/* The convolution tests' activations by number: 0 none, 1 relu, 2 clip to [0, 6] (both applied
 * in registers by the kernels), 3 hard-swish (applied after). */
kiln_act kt_act(int k);

/* Print the summary and return the exit code: non-zero if a check failed or none ran. */
int kt_finish(const char *name);
/* Write `len` bytes to a new temporary file; returns its path (static buffer per call slot). */
const char *kt_write_temp(const char *tag, const void *bytes, size_t len);
/* Run a shell command, capture up to cap-1 bytes of stdout+stderr; returns the exit status. */
int kt_run(const char *cmd, char *out, size_t cap);

#endif
