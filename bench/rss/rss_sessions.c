/* Resident memory of several sessions of one model: do they share the weights?
 *
 *   build/bench/kiln_rss_sessions MODEL.onnx [--sessions N] [--threads T]
 *
 * Measures VmRSS (/proc/self/status) after loading and running one session, then after N
 * sessions, twice: N sessions created from one compiled model (kiln_model_load +
 * kiln_session_create_from_model) and, for comparison, N sessions each compiling the model
 * alone (kiln_session_create). Every session runs once on deterministic inputs (symbolic dims
 * 1) so its weights are packed and its plan made. Prints both figures and the ratios; exits 1
 * when the shared sessions take 1.3x the memory of one or more. Uses the public API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/kiln.h>

enum { MAX_SESSIONS = 64, MAX_INPUTS = 16 };

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kib;
}

/* One run on deterministic inputs; 0 on success. */
static int run_once(kiln_session *s) {
  kiln_io_info info;
  const char *names[MAX_INPUTS];
  kiln_tensor *in[MAX_INPUTS] = {0}, *out[MAX_INPUTS] = {0};
  size_t n = 0;
  kiln_error err;
  int rc = 0;
  for (; n < MAX_INPUTS && !kiln_session_input_info(s, n, &info, NULL); n++) {
    int64_t dims[8];
    for (int d = 0; d < info.rank && d < 8; d++) dims[d] = info.dims[d] > 0 ? info.dims[d] : 1;
    names[n] = info.name;
    if (kiln_tensor_create(info.dtype, info.rank, dims, &in[n], &err)) {
      fprintf(stderr, "input %s: %s\n", info.name, err.message);
      rc = 1;
      break;
    }
    if (info.dtype == KILN_FLOAT) {
      float *p = kiln_tensor_data(in[n]);
      for (int64_t i = 0; i < kiln_tensor_numel(in[n]); i++) p[i] = (float)(i % 17) / 17.0f;
    }
  }
  size_t n_out = 0;
  while (n_out < MAX_INPUTS && !kiln_session_output_info(s, n_out, &info, NULL)) n_out++;
  if (!rc && kiln_session_run(s, n, names, (const kiln_tensor *const *)in, n_out, NULL, out, &err)) {
    fprintf(stderr, "run: %s\n", err.message);
    rc = 1;
  }
  for (size_t i = 0; i < MAX_INPUTS; i++) {
    kiln_tensor_free(in[i]);
    kiln_tensor_free(out[i]);
  }
  return rc;
}

/* VmRSS with one session (*one) and with n (*all), shared or separately compiled. */
static int measure(const char *path, int n, int threads, int shared, long *one, long *all) {
  kiln_options o;
  kiln_options_init(&o);
  o.threads = threads;
  kiln_model *m = NULL;
  kiln_session *s[MAX_SESSIONS] = {0};
  kiln_error err;
  int rc = 0;
  if (shared && kiln_model_load(path, &o, &m, &err)) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  for (int i = 0; i < n && !rc; i++) {
    kiln_code c = shared ? kiln_session_create_from_model(m, &o, &s[i], &err) : kiln_session_create(path, &o, &s[i], &err);
    if (c) fprintf(stderr, "%s\n", err.message);
    rc = c || run_once(s[i]);
    if (i == 0) *one = rss_kib();
  }
  *all = rss_kib();
  for (int i = 0; i < n; i++) kiln_session_free(s[i]);
  kiln_model_free(m);
  return rc;
}

int main(int argc, char **argv) {
  int n = 4, threads = 1;
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: %s MODEL.onnx [--sessions N] [--threads T]\n"
             "VmRSS of one session and of N (default 4) sessions of one compiled model, and of N\n"
             "separately compiled sessions; fails when the shared ones take 1.3x one or more.\n", argv[0]);
      return 0;
    }
    if (!strcmp(argv[i], "--sessions") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else path = argv[i];
  }
  if (!path || n < 1 || n > MAX_SESSIONS) {
    fprintf(stderr, "usage: %s MODEL.onnx [--sessions N (1..%d)] [--threads T]\n", argv[0], MAX_SESSIONS);
    return 2;
  }
  long base = rss_kib(), one = 0, all = 0, sep_one = 0, sep_all = 0;
  fprintf(stderr, "measuring %d shared sessions...\n", n);
  if (measure(path, n, threads, 1, &one, &all)) return 1;
  fprintf(stderr, "measuring %d separately compiled sessions...\n", n);
  if (measure(path, n, threads, 0, &sep_one, &sep_all)) return 1;
  printf("VmRSS before loading: %ld KiB\n", base);
  printf("shared model:   1 session %ld KiB, %d sessions %ld KiB (%.2fx)\n", one, n, all, (double)all / (double)one);
  printf("separate loads: 1 session %ld KiB, %d sessions %ld KiB (%.2fx)\n", sep_one, n, sep_all,
         (double)sep_all / (double)sep_one);
  return (double)all < 1.3 * (double)one ? 0 : 1;
}
