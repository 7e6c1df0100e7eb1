/* One session, several threads calling kiln_session_run at once (the API promises this is safe):
 * every run gives the single-threaded answer, including planned-memory runs and varying shapes.
 * Also a fused MatMul whose weight packs are made during concurrent first runs: 64 rows of A
 * (the AMX GEMM where the CPU has it) and 4 rows (the float32 GEMM, whose pack is made on the
 * first call that needs it) in turn, each against a double-precision reference. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "modelgen.h"
#include "testutil.h"

enum { THREADS = 4, RUNS = 25 };

static kiln_session *sess;
static float ref[2][4 * 10]; /* batch 1 and batch 4 answers */

static kiln_tensor *make_input(int64_t n) {
  int64_t dims[] = {n, 3, 16, 16};
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(KILN_FLOAT, 4, dims, &x, NULL)) return NULL;
  float *p = kiln_tensor_data(x);
  for (int64_t i = 0; i < n * 3 * 256; i++) p[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  return x;
}

static int run(int64_t n, float *out) {
  kiln_tensor *x = make_input(n), *y = NULL;
  const char *names[] = {"image"};
  kiln_error err = {0};
  int ok = x && kiln_session_run(sess, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_OK;
  if (ok) memcpy(out, kiln_tensor_cdata(y), (size_t)n * 10 * sizeof(float));
  kiln_tensor_free(x);
  kiln_tensor_free(y);
  return ok;
}

static void *worker(void *arg) {
  long id = (long)(intptr_t)arg, bad = 0;
  for (int r = 0; r < RUNS; r++) {
    int64_t n = (id + r) % 2 ? 4 : 1;
    float out[4 * 10];
    if (!run(n, out) || memcmp(out, ref[n == 4], (size_t)n * 10 * sizeof(float))) bad++;
  }
  return (void *)(intptr_t)bad;
}

/* THREADS threads running fn(thread index) at once; each returns how many of its runs were
 * wrong. */
static void run_threads(void *(*fn)(void *), const char *what) {
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, fn, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++) {
    void *bad = NULL;
    pthread_join(t[i], &bad);
    CHECK_MSG(bad == NULL, "%s, thread %d: %ld runs wrong", what, i, (long)(intptr_t)bad);
  }
}

/* ---- fused MatMul: y = x W + b, x [N, K], W [K, M] ------------------------------------ */

enum { MK = 128, MM = 96, MROWS = 64 };
static float mw[MK * MM], mb[MM], mx[MROWS * MK];
static kiln_session *msess;

static kiln_session *matmul_session(void) {
  mg_model mm;
  mg_init(&mm, 13);
  const int64_t xd[] = {-1, MK}, wd[] = {MK, MM}, bd[] = {MM}, yd[] = {-1, MM};
  mg_input(&mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, xd);
  mg_output(&mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, yd);
  mg_init_raw(&mm, "W", 2, wd, mw, sizeof mw);
  mg_init_raw(&mm, "b", 1, bd, mb, sizeof mb);
  mg_node(&mm, "MatMul", (const char *[]){"x", "W", NULL}, (const char *[]){"a", NULL});
  mg_node(&mm, "Add", (const char *[]){"a", "b", NULL}, (const char *[]){"y", NULL});
  size_t len = 0;
  uint8_t *bytes = mg_pack(&mm, &len);
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 2;
  kiln_session *s = NULL;
  kiln_error err = {0};
  CHECK_MSG(bytes && kiln_session_create_from_memory(bytes, len, NULL, &o, &s, &err) == KILN_OK, "%s",
            err.message);
  free(bytes);
  return s;
}

/* Rows of x W + b for n rows, within 2e-5 of the output's range of a double reference. */
static int matmul_ok(int64_t n) {
  int64_t dims[] = {n, MK};
  kiln_tensor *x = NULL, *y = NULL;
  if (kiln_tensor_create(KILN_FLOAT, 2, dims, &x, NULL)) return 0;
  memcpy(kiln_tensor_data(x), mx, sizeof(float) * (size_t)(n * MK));
  const char *names[] = {"x"};
  kiln_error err = {0};
  int ok = kiln_session_run(msess, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_OK;
  const float *out = ok ? kiln_tensor_cdata(y) : NULL;
  double worst = 0, range = 0;
  for (int64_t i = 0; ok && i < n; i++)
    for (int j = 0; j < MM; j++) {
      double r = mb[j];
      for (int k = 0; k < MK; k++) r += (double)mx[i * MK + k] * mw[k * MM + j];
      worst = fmax(worst, fabs(out[i * MM + j] - r));
      range = fmax(range, fabs(r));
    }
  kiln_tensor_free(x);
  kiln_tensor_free(y);
  return ok && worst <= 2e-5 * range;
}

static void *matmul_worker(void *arg) {
  long id = (long)(intptr_t)arg, bad = 0;
  for (int r = 0; r < 6; r++) bad += !matmul_ok((id + r) % 2 ? MROWS : 4);
  return (void *)(intptr_t)bad;
}

static void check_matmul(void) {
  for (int i = 0; i < MK * MM; i++) mw[i] = kt_frand();
  for (int i = 0; i < MM; i++) mb[i] = kt_frand();
  for (int i = 0; i < MROWS * MK; i++) mx[i] = kt_frand();
  if (!(msess = matmul_session())) return;
  run_threads(matmul_worker, "fused matmul");
  kiln_session_free(msess);
}

int main(void) {
  kiln_error err = {0};
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 2;
  CHECK_MSG(kiln_session_create(KILN_SOURCE_DIR "/examples/models/tiny_cnn.onnx", &o, &sess, &err) == KILN_OK,
            "%s", err.message);
  if (!sess) return kt_finish("test_concurrent_runs");
  CHECK(run(1, ref[0]));
  CHECK(run(4, ref[1]));
  run_threads(worker, "tiny_cnn");
  kiln_session_free(sess);
  check_matmul();
  return kt_finish("test_concurrent_runs");
}
