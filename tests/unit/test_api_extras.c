/* The C API a binding needs: tensors over caller memory, model metadata, what an optional
 * holds, free-dimension overrides, run cancellation, run time limits and the log hook. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"
#include "modelgen.h"
#include "testutil.h"

#define OPT_DIR "/usr/share/libonnx-testdata/data/node/"

/* Relu over x: float[N, 4] -> y, with producer, doc strings and two metadata entries. */
static uint8_t *relu_model(size_t *len) {
  static mg_model mm;
  static Onnx__StringStringEntryProto props[2];
  static Onnx__StringStringEntryProto *propp[2];
  mg_init(&mm, 13);
  int64_t dims[] = {-1, 4};
  mg_input(&mm, "x", 1, 2, dims);
  mg_output(&mm, "y", 1, 2, dims);
  mg_node(&mm, "Relu", (const char *const[]){"x", NULL}, (const char *const[]){"y", NULL});
  mm.m.producer_name = (char *)"kiln-test";
  mm.m.producer_version = (char *)"1.2";
  mm.m.domain = (char *)"ai.kiln.test";
  mm.m.doc_string = (char *)"a Relu";
  mm.m.has_model_version = 1;
  mm.m.model_version = 7;
  mm.g.name = (char *)"relu_graph";
  mm.g.doc_string = (char *)"the graph";
  for (int i = 0; i < 2; i++) {
    onnx__string_string_entry_proto__init(&props[i]);
    propp[i] = &props[i];
  }
  props[0].key = (char *)"author";
  props[0].value = (char *)"kiln";
  props[1].key = (char *)"license";
  props[1].value = (char *)"MIT";
  mm.m.n_metadata_props = 2;
  mm.m.metadata_props = propp;
  return mg_pack(&mm, len);
}

static kiln_session *relu_session(const kiln_options *o, kiln_error *err) {
  size_t len;
  uint8_t *b = relu_model(&len);
  kiln_session *s = NULL;
  kiln_session_create_from_memory(b, len, NULL, o, &s, err);
  free(b);
  return s;
}

static void test_metadata(void) {
  kiln_error err;
  kiln_session *s = relu_session(NULL, &err);
  CHECK_MSG(s != NULL, "%s", err.message);
  if (!s) return;
  kiln_model_meta m;
  CHECK(kiln_model_metadata(kiln_session_model(s), &m, &err) == KILN_OK);
  CHECK(!strcmp(m.producer_name, "kiln-test") && !strcmp(m.producer_version, "1.2"));
  CHECK(!strcmp(m.domain, "ai.kiln.test") && !strcmp(m.doc_string, "a Relu"));
  CHECK(!strcmp(m.graph_name, "relu_graph") && !strcmp(m.graph_doc_string, "the graph"));
  CHECK(m.model_version == 7);
  CHECK(m.n_custom == 2 && !strcmp(m.custom_keys[0], "author") && !strcmp(m.custom_values[1], "MIT"));
  CHECK(kiln_model_metadata(NULL, &m, &err) == KILN_ERR_INVALID_ARG);
  kiln_session_free(s);
}

static int released;
static void *released_data;
static void on_release(void *user, void *data) {
  released += *(int *)user;
  released_data = data;
}

static void test_wrap(void) {
  kiln_error err;
  kiln_session *s = relu_session(NULL, &err);
  if (!s) return;
  float buf[8] = {-1, 2, -3, 4, 5, -6, 7, -8};
  int64_t dims[] = {2, 4};
  kiln_tensor *x = NULL, *y = NULL;
  int one = 1;
  CHECK(kiln_tensor_create_from_data(KILN_FLOAT, 2, dims, buf, sizeof buf, on_release, &one, &x, &err) == KILN_OK);
  CHECK(x && kiln_tensor_data(x) == buf); /* no copy */
  const char *names[] = {"x"};
  CHECK_MSG(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_OK, "%s", err.message);
  CHECK(y && ((const float *)kiln_tensor_cdata(y))[1] == 2 && ((const float *)kiln_tensor_cdata(y))[2] == 0);
  CHECK(buf[0] == -1); /* the input is only read */
  CHECK(released == 0);
  kiln_tensor_free(x);
  CHECK(released == 1 && released_data == buf);
  kiln_tensor_free(y);
  /* errors: nothing taken, no release */
  CHECK(kiln_tensor_create_from_data(KILN_FLOAT, 2, dims, buf, sizeof buf - 1, on_release, &one, &x, &err) == KILN_ERR_INVALID_ARG);
  CHECK(strstr(err.message, "32 bytes") != NULL);
  CHECK(kiln_tensor_create_from_data(KILN_STRING, 2, dims, buf, sizeof buf, NULL, NULL, &x, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_tensor_create_from_data(KILN_FLOAT, 1, dims, (char *)buf + 1, 16, NULL, NULL, &x, &err) == KILN_ERR_INVALID_ARG);
  CHECK(strstr(err.message, "aligned") != NULL);
  CHECK(kiln_tensor_create_from_data(KILN_FLOAT, 13, dims, buf, sizeof buf, NULL, NULL, &x, &err) == KILN_ERR_INVALID_ARG);
  CHECK(released == 1);
  kiln_session_free(s);
}

static void test_optional_content(void) {
  kiln_error err;
  const char *m[] = {OPT_DIR "test_optional_get_element_sequence/model.onnx", OPT_DIR "test_optional_get_element/model.onnx"};
  kiln_kind want[] = {KILN_KIND_SEQUENCE, KILN_KIND_TENSOR};
  for (int i = 0; i < 2; i++) {
    kiln_session *s = NULL;
    CHECK_MSG(kiln_session_create(m[i], NULL, &s, &err) == KILN_OK, "%s", err.message);
    if (!s) continue;
    kiln_io_info info;
    kiln_kind k = KILN_KIND_NONE;
    CHECK(kiln_session_input_info(s, 0, &info, &err) == KILN_OK && info.kind == KILN_KIND_NONE);
    CHECK(kiln_session_io_content(s, 0, 0, &k, &err) == KILN_OK && k == want[i]);
    CHECK(kiln_session_io_content(s, 1, 0, &k, &err) == KILN_OK && k == want[i]);
    CHECK(kiln_session_io_content(s, 0, 1, &k, &err) == KILN_ERR_INVALID_ARG && strstr(err.message, "input 1"));
    kiln_session_free(s);
  }
}

static void test_dim_overrides(void) {
  kiln_error err;
  kiln_options o;
  kiln_options_init(&o);
  const char *ov[] = {"N=3", NULL};
  o.dim_overrides = ov;
  kiln_session *s = relu_session(&o, &err);
  CHECK_MSG(s != NULL, "%s", err.message);
  if (s) {
    kiln_io_info info;
    CHECK(kiln_session_input_info(s, 0, &info, &err) == KILN_OK && info.dims[0] == 3 && !info.dim_names[0]);
    int64_t dims[] = {2, 4};
    kiln_tensor *x, *y = NULL;
    kiln_tensor_create(KILN_FLOAT, 2, dims, &x, &err);
    const char *names[] = {"x"};
    CHECK(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.message, "float[3,4]") != NULL, "%s", err.message);
    kiln_tensor_free(x);
    kiln_session_free(s);
  }
  const char *bad[][2] = {{"M=2", NULL}, {"N=x", NULL}, {"N", NULL}, {"N=-1", NULL}};
  const char *why[] = {"no input has a dim named 'M'", "integer", "NAME=VALUE", "integer"};
  for (int i = 0; i < 4; i++) {
    o.dim_overrides = bad[i];
    s = relu_session(&o, &err);
    CHECK(s == NULL && err.code == KILN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.message, why[i]) != NULL, "%s", err.message);
    kiln_session_free(s);
  }
}

typedef struct log_seen {
  int n, max_level;
  char last[512];
  kiln_run_options *cancel; /* set terminate on the first message */
} log_seen;

static void on_log(void *user, int level, const char *msg) {
  log_seen *l = user;
  l->n++;
  if (level > l->max_level) l->max_level = level;
  snprintf(l->last, sizeof l->last, "%s", msg);
  if (l->cancel) kiln_run_options_set_terminate(l->cancel, 1);
}

static void test_cancel_and_log(void) {
  kiln_error err;
  kiln_run_options *ro = NULL;
  CHECK(kiln_run_options_create(&ro, &err) == KILN_OK && !kiln_run_options_terminate(ro));
  kiln_session *s = relu_session(NULL, &err);
  if (!s || !ro) return;
  int64_t dims[] = {1, 4};
  kiln_tensor *x, *y = NULL;
  kiln_tensor_create(KILN_FLOAT, 2, dims, &x, &err);
  const char *names[] = {"x"};
  kiln_run_options_set_terminate(ro, 1);
  CHECK(kiln_session_run_with(s, ro, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_ERR_CANCELLED);
  CHECK(y == NULL && strstr(err.message, "terminate"));
  kiln_run_options_set_terminate(ro, 0);
  CHECK(kiln_session_run_with(s, ro, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_OK);
  kiln_tensor_free(y);
  kiln_tensor_free(x);
  kiln_session_free(s);
  CHECK(!strcmp(kiln_code_name(KILN_ERR_CANCELLED), "cancelled"));

  /* a fused node forced to fail logs a warning through the hook; the hook sets terminate, so
   * the executor stops the run at the next node */
  setenv("KILN_FUSION_FAIL", "FusedConv", 1);
  kiln_options o;
  kiln_options_init(&o);
  log_seen seen = {0};
  o.log_fn = on_log;
  o.log_user = &seen;
  o.log_level = KILN_LOG_ERROR; /* warnings filtered out */
  CHECK_MSG(kiln_session_create(KILN_SOURCE_DIR "/examples/models/tiny_cnn.onnx", &o, &s, &err) == KILN_OK, "%s", err.message);
  int64_t idims[] = {1, 3, 16, 16};
  kiln_tensor_create(KILN_FLOAT, 4, idims, &x, &err);
  const char *in[] = {"image"};
  CHECK(kiln_session_run(s, 1, in, (const kiln_tensor *const *)&x, 1, NULL, &y, &err) == KILN_OK);
  kiln_tensor_free(y);
  CHECK(seen.n == 0);
  kiln_session_free(s);

  o.log_level = 0; /* warning */
  o.verbose = 1;   /* and info */
  seen.cancel = ro;
  CHECK(kiln_session_create(KILN_SOURCE_DIR "/examples/models/tiny_cnn.onnx", &o, &s, &err) == KILN_OK);
  CHECK_MSG(seen.n > 0 && strstr(seen.last, "model compiled"), "%d '%s'", seen.n, seen.last);
  CHECK(seen.max_level == KILN_LOG_INFO);
  kiln_run_options_set_terminate(ro, 0);
  seen.n = 0;
  y = NULL;
  kiln_code rc = kiln_session_run_with(s, ro, 1, in, (const kiln_tensor *const *)&x, 1, NULL, &y, &err);
  CHECK_MSG(rc == KILN_ERR_CANCELLED, "%s", err.message);
  CHECK_MSG(seen.n == 1 && seen.max_level == KILN_LOG_WARNING && strstr(seen.last, "FusedConv"), "%s", seen.last);
  CHECK(y == NULL);
  kiln_tensor_free(x);
  kiln_session_free(s);
  unsetenv("KILN_FUSION_FAIL");
  kiln_run_options_free(ro);
}

/* y = Loop(M = trip, x) whose body passes x through, with an Identity (body_node) or with no
 * node at all; the session's max_run_ms is `max_run_ms`. */
static kiln_session *loop_session(int64_t trip, int body_node, int64_t max_run_ms, kiln_error *err) {
  static mg_model mm, body;
  static Onnx__AttributeProto attr;
  static Onnx__AttributeProto *attrp[1] = {&attr};
  static int64_t m;
  static const int64_t d1[] = {1};
  m = trip;
  mg_init(&body, 17);
  mg_input(&body, "i", 7, 0, NULL);
  mg_input(&body, "c", 9, 0, NULL);
  mg_input(&body, "x_in", 1, 1, d1);
  mg_output(&body, "c", 9, 0, NULL);
  if (body_node) mg_node(&body, "Identity", (const char *const[]){"x_in", NULL}, (const char *const[]){"x_out", NULL});
  mg_output(&body, body_node ? "x_out" : "x_in", 1, 1, d1);
  mg_init(&mm, 17);
  mg_input(&mm, "x", 1, 1, d1);
  mg_output(&mm, "y", 1, 1, d1);
  mg_init_raw(&mm, "M", 0, NULL, &m, sizeof m)->data_type = 7;
  Onnx__NodeProto *n = mg_node(&mm, "Loop", (const char *const[]){"M", "", "x", NULL}, (const char *const[]){"y", NULL});
  onnx__attribute_proto__init(&attr);
  attr.name = (char *)"body";
  attr.has_type = 1;
  attr.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  attr.g = &body.g;
  n->n_attribute = 1;
  n->attribute = attrp;
  size_t len;
  uint8_t *buf = mg_pack(&mm, &len);
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 1;
  o.max_run_ms = max_run_ms;
  kiln_session *s = NULL;
  if (kiln_session_create_from_memory(buf, len, NULL, &o, &s, err) != KILN_OK) s = NULL;
  free(buf);
  return s;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run the loop session once (with `ro`, may be NULL); the code, and y's value in *y0 on success. */
static kiln_code run_loop(kiln_session *s, const kiln_run_options *ro, float *y0, double *secs, kiln_error *err) {
  int64_t d1[] = {1};
  kiln_tensor *x, *y = NULL;
  kiln_tensor_create(KILN_FLOAT, 1, d1, &x, err);
  ((float *)kiln_tensor_data(x))[0] = 2.5f;
  const char *names[] = {"x"};
  double t0 = seconds();
  kiln_code rc = kiln_session_run_with(s, ro, 1, names, (const kiln_tensor *const *)&x, 1, NULL, &y, err);
  *secs = seconds() - t0;
  if (rc == KILN_OK) *y0 = ((const float *)kiln_tensor_data(y))[0];
  else if (y) rc = KILN_ERR_RUN; /* a failed run must leave no output */
  kiln_tensor_free(y);
  kiln_tensor_free(x);
  return rc;
}

/* A Loop of 2^63 - 1 iterations is a valid model: the session's max_run_ms or the run options'
 * timeout stops it with KILN_ERR_CANCELLED and a message naming the limit, with or without a
 * node in the body; a short loop under the same limit runs. */
static void test_time_limit(void) {
  kiln_error err;
  float y = 0;
  double secs;
  for (int body_node = 0; body_node < 2; body_node++) {
    kiln_session *s = loop_session(3, body_node, 5000, &err);
    CHECK_MSG(s, "%s", err.message);
    if (!s) return;
    CHECK(run_loop(s, NULL, &y, &secs, &err) == KILN_OK && y == 2.5f);
    kiln_session_free(s);

    s = loop_session(INT64_MAX, body_node, 100, &err);
    CHECK_MSG(s, "%s", err.message);
    if (!s) return;
    kiln_code rc = run_loop(s, NULL, &y, &secs, &err);
    CHECK_MSG(rc == KILN_ERR_CANCELLED && strstr(err.message, "time limit of 100 ms") &&
                  strstr(err.message, "max_run_ms"), "body_node %d: %d %s", body_node, rc, err.message);
    CHECK_MSG(secs >= 0.1 && secs < 10, "stopped after %.3f s", secs);
    kiln_session_free(s);

    /* no session limit: the run options' timeout stops it */
    kiln_run_options *ro = NULL;
    s = loop_session(INT64_MAX, body_node, 0, &err);
    CHECK(s && kiln_run_options_create(&ro, &err) == KILN_OK);
    if (!s || !ro) return;
    kiln_run_options_set_timeout_ms(ro, 50);
    rc = run_loop(s, ro, &y, &secs, &err);
    CHECK_MSG(rc == KILN_ERR_CANCELLED && strstr(err.message, "time limit of 50 ms"), "%d %s", rc, err.message);
    /* the same options again: the limit counts from each run's start */
    rc = run_loop(s, ro, &y, &secs, &err);
    CHECK_MSG(rc == KILN_ERR_CANCELLED && secs >= 0.05 && secs < 10, "%d %.3f s", rc, secs);
    kiln_run_options_free(ro);
    kiln_session_free(s);
  }
}

int main(void) {
  test_metadata();
  test_wrap();
  test_optional_content();
  test_dim_overrides();
  test_cancel_and_log();
  test_time_limit();
  return kt_finish("test_api_extras");
}
