/* Kernels' per-run scratch (runtime/scratch.h, kiln_kscratch_take): the slots' take / put rules
 * and the pooling of run contexts; then the fused Attention, whose work buffers live there,
 * run by several threads at once on one session and on two sessions of one compiled model, the
 * sequence length changing from run to run (so buffers are replaced while other runs hold
 * theirs): every run gives the bytes the same session gave for that length on its own, within
 * 1e-4 of a double-precision reference. Run under ThreadSanitizer (scripts/check-tsan.sh), this is
 * the check that runs never share scratch. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "modelgen.h"
#include "runtime/scratch.h"
#include "testutil.h"

enum { H = 4, D = 32, THREADS = 4, RUNS = 12, NLEN = 3 };
static const int64_t lens[NLEN] = {16, 37, 64};

/* ---- the slots ---- */

static int freed;
static void count_free(void *v) {
  freed++;
  free(v);
}

static void test_slots(void) {
  kiln_scratch_pool *p = kiln_scratch_pool_new();
  CHECK(p != NULL);
  kiln_scratch *s = kiln_scratch_acquire(p);
  CHECK(s != NULL);
  int keys[40];
  CHECK(kiln_scratch_take(s, &keys[0]) == NULL); /* empty */
  void *a = malloc(8), *b = malloc(8);
  kiln_scratch_put(s, &keys[0], a, count_free);
  kiln_scratch_put(s, &keys[0], b, count_free); /* the slot is full: b is freed */
  CHECK(freed == 1);
  CHECK(kiln_scratch_take(s, &keys[0]) == a);
  CHECK(kiln_scratch_take(s, &keys[0]) == NULL); /* taken */
  kiln_scratch_put(s, &keys[0], a, count_free);
  for (int i = 1; i < 40; i++) kiln_scratch_put(s, &keys[i], malloc(4), count_free); /* grows */
  CHECK(freed == 1);
  for (int i = 1; i < 40; i++) {
    void *v = kiln_scratch_take(s, &keys[i]);
    CHECK(v != NULL);
    kiln_scratch_put(s, &keys[i], v, count_free);
  }
  kiln_scratch_release(p, s);
  CHECK(kiln_scratch_acquire(p) == s); /* reused, with what it holds */
  CHECK(kiln_scratch_take(s, &keys[0]) == a);
  kiln_scratch *t = kiln_scratch_acquire(p); /* s is out: a fresh one */
  CHECK(t != NULL && t != s);
  CHECK(kiln_scratch_take(t, &keys[0]) == NULL);
  kiln_scratch_put(NULL, &keys[0], a, count_free); /* no context: freed now */
  CHECK(freed == 2);
  kiln_scratch_release(p, s);
  kiln_scratch_release(p, t);
  kiln_scratch_pool_free(p); /* frees the 39 still held */
  CHECK(freed == 41);
  CHECK(kiln_scratch_acquire(NULL) == NULL);
}

/* ---- concurrent attention ---- */

/* y = softmax(q k^T / 8) v on [1, H, N, D] inputs (N symbolic): kiln fuses it into Attention. */
static kiln_model *attention_model(void) {
  static const int64_t dims[] = {1, H, -1, D}, sdims[] = {0};
  static const float scale = 8.0f;
  mg_model mm;
  mg_init(&mm, 13);
  mg_input(&mm, "q", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, dims);
  mg_input(&mm, "k", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, dims);
  mg_input(&mm, "v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, dims);
  mg_output(&mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, dims);
  mg_init_raw(&mm, "scale", 0, sdims, &scale, sizeof scale);
  Onnx__NodeProto *tr = mg_node(&mm, "Transpose", (const char *[]){"k", NULL}, (const char *[]){"kt", NULL});
  static int64_t perm[] = {0, 1, 3, 2};
  static Onnx__AttributeProto attr, *attrs[1] = {&attr};
  onnx__attribute_proto__init(&attr);
  attr.name = (char *)"perm";
  attr.has_type = 1;
  attr.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  attr.n_ints = 4;
  attr.ints = perm;
  tr->attribute = attrs;
  tr->n_attribute = 1;
  mg_node(&mm, "MatMul", (const char *[]){"q", "kt", NULL}, (const char *[]){"s", NULL});
  mg_node(&mm, "Div", (const char *[]){"s", "scale", NULL}, (const char *[]){"sd", NULL});
  mg_node(&mm, "Softmax", (const char *[]){"sd", NULL}, (const char *[]){"p", NULL});
  mg_node(&mm, "MatMul", (const char *[]){"p", "v", NULL}, (const char *[]){"y", NULL});
  size_t len;
  uint8_t *buf = mg_pack(&mm, &len);
  kiln_model *m = NULL;
  kiln_error err = {0};
  CHECK_MSG(kiln_model_load_from_memory(buf, len, NULL, NULL, &m, &err) == KILN_OK, "%s", err.message);
  free(buf);
  return m;
}

static float *inputs[NLEN][3];
static float *want[NLEN]; /* each length's output from a run on its own */

static void make_inputs(void) {
  for (int l = 0; l < NLEN; l++)
    for (int i = 0; i < 3; i++) {
      size_t n = (size_t)(H * lens[l] * D);
      inputs[l][i] = malloc(n * sizeof(float));
      for (size_t e = 0; e < n; e++) inputs[l][i][e] = (float)((e * (7 + 4 * i) + 3 * l) % 29) / 29.0f - 0.5f;
    }
}

/* The output for length index l, or NULL. */
static kiln_tensor *run_len(kiln_session *s, int l) {
  int64_t dims[] = {1, H, lens[l], D};
  kiln_tensor *x[3] = {NULL, NULL, NULL}, *y = NULL;
  for (int i = 0; i < 3; i++) {
    if (kiln_tensor_create(KILN_FLOAT, 4, dims, &x[i], NULL)) break;
    memcpy(kiln_tensor_data(x[i]), inputs[l][i], sizeof(float) * (size_t)(H * lens[l] * D));
  }
  const char *names[] = {"q", "k", "v"};
  kiln_error err = {0};
  kiln_code rc = x[2] ? kiln_session_run(s, 3, names, (const kiln_tensor *const *)x, 1, NULL, &y, &err)
                      : KILN_ERR_NOMEM;
  CHECK_MSG(rc == KILN_OK, "run: %s", err.message);
  for (int i = 0; i < 3; i++) kiln_tensor_free(x[i]);
  return rc ? NULL : y;
}

/* Largest |y - softmax(q k^T / 8) v| over length l, computed in double. */
static double ref_error(int l, const float *y) {
  int64_t n = lens[l];
  const float *q = inputs[l][0], *k = inputs[l][1], *v = inputs[l][2];
  double err = 0, *p = malloc(sizeof(double) * (size_t)n);
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < n; i++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; j++) {
        double d = 0;
        for (int64_t e = 0; e < D; e++) d += (double)q[(h * n + i) * D + e] * k[(h * n + j) * D + e];
        p[j] = d / 8.0;
        mx = p[j] > mx ? p[j] : mx;
      }
      for (int64_t j = 0; j < n; j++) sum += p[j] = exp(p[j] - mx);
      for (int64_t e = 0; e < D; e++) {
        double o = 0;
        for (int64_t j = 0; j < n; j++) o += p[j] / sum * v[(h * n + j) * D + e];
        double diff = fabs(o - y[(h * n + i) * D + e]);
        if (!(diff <= err)) err = diff;
      }
    }
  free(p);
  return err;
}

typedef struct job {
  kiln_session *s;
  int id, bad;
} job;

static pthread_barrier_t start;

static void *worker(void *arg) {
  job *j = arg;
  pthread_barrier_wait(&start);
  for (int r = 0; r < RUNS; r++) {
    int l = (j->id + r) % NLEN;
    kiln_tensor *y = run_len(j->s, l);
    size_t bytes = sizeof(float) * (size_t)(H * lens[l] * D);
    if (!y || kiln_tensor_numel(y) != H * lens[l] * D || memcmp(kiln_tensor_cdata(y), want[l], bytes)) j->bad++;
    kiln_tensor_free(y);
  }
  return NULL;
}

static void test_concurrent_attention(void) {
  kiln_model *m = attention_model();
  if (!m) return;
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 2;
  kiln_session *s[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) CHECK(kiln_session_create_from_model(m, &o, &s[i], NULL) == KILN_OK);
  kiln_model_free(m);
  if (!s[0] || !s[1]) goto out;
  bool fused = false;
  const char *op;
  size_t count;
  for (size_t i = 0; kiln_session_op_count(s[0], i, &op, &count) == KILN_OK; i++) fused |= !strcmp(op, "Attention");
  CHECK_MSG(fused, "the pattern was fused into Attention");
  make_inputs();
  for (int l = 0; l < NLEN; l++) {
    kiln_tensor *y = run_len(s[0], l);
    if (!y) goto out;
    size_t bytes = sizeof(float) * (size_t)kiln_tensor_numel(y);
    want[l] = malloc(bytes);
    memcpy(want[l], kiln_tensor_cdata(y), bytes);
    double e = ref_error(l, want[l]);
    CHECK_MSG(e <= 1e-4, "length %lld: off the reference by %g", (long long)lens[l], e);
    kiln_tensor_free(y);
  }
  pthread_t th[THREADS];
  job jobs[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (int t = 0; t < THREADS; t++) { /* two threads on each session */
    jobs[t] = (job){s[t % 2], t, 0};
    pthread_create(&th[t], NULL, worker, &jobs[t]);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    CHECK_MSG(jobs[t].bad == 0, "thread %d: %d of %d runs differ from the run on its own", t, jobs[t].bad, RUNS);
  }
  pthread_barrier_destroy(&start);
out:
  for (int i = 0; i < 2; i++) kiln_session_free(s[i]);
  for (int l = 0; l < NLEN; l++) {
    free(want[l]);
    for (int i = 0; i < 3; i++) free(inputs[l][i]);
  }
}

int main(void) {
  test_slots();
  test_concurrent_attention();
  return kt_finish("test_scratch_runs");
}
