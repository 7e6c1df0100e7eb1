/* Compiled models shared by sessions (kiln_model_load, kiln_session_create_from_model): sessions
 * of one model run at the same time from several threads and give the bytes a session of its
 * own gives; with lazy weights and fusion verification, the first runs of several threads race
 * to pack the shared weights and to verify the shared fused nodes (the compiled model's
 * per-node state) and still agree; the model outlives the caller's reference while sessions
 * use it; bad arguments get errors. Run under ThreadSanitizer (KILN_SANITIZE=thread), this is
 * the check that the shared state is only touched atomically. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/kiln.h>

#include "testutil.h"

#define MODEL KILN_SOURCE_DIR "/examples/models/tiny_cnn.onnx"
enum { SESSIONS = 3, RUNS = 20 };

static kiln_tensor *make_input(void) {
  int64_t dims[] = {2, 3, 16, 16};
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(KILN_FLOAT, 4, dims, &x, NULL)) return NULL;
  float *p = kiln_tensor_data(x);
  for (int64_t i = 0; i < kiln_tensor_numel(x); i++) p[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
  return x;
}

static kiln_tensor *run_once(kiln_session *s, const kiln_tensor *x) {
  kiln_io_info in;
  if (kiln_session_input_info(s, 0, &in, NULL)) return NULL;
  const char *names[] = {in.name};
  kiln_tensor *y = NULL;
  kiln_error err;
  if (kiln_session_run(s, 1, names, &x, 1, NULL, &y, &err)) {
    fprintf(stderr, "run: %s\n", err.message);
    return NULL;
  }
  return y;
}

static bool same(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || kiln_tensor_numel(a) != kiln_tensor_numel(b)) return false;
  return !memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), (size_t)kiln_tensor_numel(a) * sizeof(float));
}

/* Within 1e-4 + 1e-4 |b| elementwise (a verifying run answers with the chain it replaced). */
static bool close_to(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || kiln_tensor_numel(a) != kiln_tensor_numel(b)) return false;
  const float *x = kiln_tensor_cdata(a), *y = kiln_tensor_cdata(b);
  for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
    float d = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
    if (!(d <= 1e-4f + 1e-4f * (y[i] < 0 ? -y[i] : y[i]))) return false;
  }
  return true;
}

typedef struct job {
  kiln_session *s;
  const kiln_tensor *x, *want;
  bool exact;
  int mismatches;
} job;

static pthread_barrier_t start; /* the threads' first runs begin together */

static void *worker(void *arg) {
  job *j = arg;
  pthread_barrier_wait(&start);
  for (int r = 0; r < RUNS; r++) {
    kiln_tensor *y = run_once(j->s, j->x);
    j->mismatches += j->exact ? !same(y, j->want) : !close_to(y, j->want);
    kiln_tensor_free(y);
  }
  return NULL;
}

/* Run every session on its own thread, all at once; each run's answer checked. */
static void run_all(kiln_session *const *s, const kiln_tensor *x, const kiln_tensor *want, bool exact) {
  pthread_t t[SESSIONS];
  job jobs[SESSIONS];
  pthread_barrier_init(&start, NULL, SESSIONS);
  for (int i = 0; i < SESSIONS; i++) {
    jobs[i] = (job){s[i], x, want, exact, 0};
    CHECK(!pthread_create(&t[i], NULL, worker, &jobs[i]));
  }
  for (int i = 0; i < SESSIONS; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(jobs[i].mismatches == 0, "session %d: %d of %d runs differ", i, jobs[i].mismatches, RUNS);
  }
  pthread_barrier_destroy(&start);
}

static void test_shared_sessions(void) {
  kiln_tensor *x = make_input();
  kiln_session *alone = NULL;
  kiln_error err;
  CHECK_MSG(!kiln_session_create(MODEL, NULL, &alone, &err), "%s", err.message);
  kiln_tensor *want = alone ? run_once(alone, x) : NULL;
  CHECK(want != NULL);

  kiln_options o;
  kiln_options_init(&o);
  o.threads = 1;
  kiln_model *m = NULL;
  CHECK_MSG(!kiln_model_load(MODEL, &o, &m, &err), "%s", err.message);
  if (!m || !want) goto out;
  kiln_session *s[SESSIONS] = {0};
  for (int i = 0; i < SESSIONS; i++) {
    CHECK_MSG(!kiln_session_create_from_model(m, &o, &s[i], &err), "%s", err.message);
    CHECK(kiln_session_model(s[i]) == m);
  }
  kiln_model_free(m); /* the sessions keep it alive */
  size_t pa = 0, pb = 0;
  kiln_session_prepacked(alone, &pa);
  kiln_session_prepacked(s[0], &pb);
  CHECK_MSG(pa == pb, "prepacked nodes %zu alone, %zu shared", pa, pb);
  run_all(s, x, want, true);
  for (int i = 0; i < SESSIONS; i++) kiln_session_free(s[i]);

  /* lazy weights, fusions verified: the shared per-node state is made by the racing runs */
  o.lazy_weights = 1;
  o.verify_fusions = 1;
  CHECK_MSG(!kiln_model_load(MODEL, &o, &m, &err), "%s", err.message);
  if (!m) goto out;
  for (int i = 0; i < SESSIONS; i++)
    CHECK_MSG(!kiln_session_create_from_model(m, &o, &s[i], &err), "%s", err.message);
  run_all(s, x, want, false);
  size_t fused = 0, verified = 0;
  kiln_fusion_info fi;
  for (; !kiln_session_fusion_info(s[SESSIONS - 1], fused, &fi); fused++) verified += fi.verified && !fi.fallen_back;
  CHECK_MSG(fused > 0 && verified == fused, "%zu of %zu fused nodes verified once for all sessions", verified, fused);
  for (int i = 0; i < SESSIONS; i++) kiln_session_free(s[i]);
  kiln_model_free(m);
out:
  kiln_tensor_free(want);
  kiln_tensor_free(x);
  kiln_session_free(alone);
}

static void test_bad_arguments(void) {
  kiln_model *m = (kiln_model *)&m;
  kiln_error err;
  CHECK(kiln_model_load("/nonexistent/model.onnx", NULL, &m, &err) == KILN_ERR_IO);
  CHECK(m == NULL);
  CHECK(kiln_model_load(NULL, NULL, &m, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_model_load_from_memory("\xff\xff", 2, NULL, NULL, &m, &err) != KILN_OK);
  kiln_session *s = NULL;
  CHECK(kiln_session_create_from_model(NULL, NULL, &s, &err) == KILN_ERR_INVALID_ARG);
  CHECK_MSG(!kiln_model_load(MODEL, NULL, &m, &err), "%s", err.message);
  kiln_options o;
  kiln_options_init(&o);
  o.threads = -1;
  CHECK(kiln_session_create_from_model(m, &o, &s, &err) == KILN_ERR_INVALID_ARG);
  CHECK(s == NULL && strstr(err.message, "threads"));
  kiln_model_free(m);
  kiln_model_free(NULL);
  CHECK(kiln_session_model(NULL) == NULL);
}

int main(void) {
  test_shared_sessions();
  test_bad_arguments();
  return kt_finish("test_model_share");
}
