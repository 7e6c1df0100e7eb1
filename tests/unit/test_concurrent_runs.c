/* One session, several threads calling kiln_session_run at once (the API promises this is safe):
 * every run gives the single-threaded answer, including planned-memory runs and varying shapes. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
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
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++) {
    void *bad = NULL;
    pthread_join(t[i], &bad);
    CHECK_MSG(bad == NULL, "thread %d: %ld runs differ from the single-threaded answer", i, (long)(intptr_t)bad);
  }
  kiln_session_free(sess);
  return kt_finish("test_concurrent_runs");
}
