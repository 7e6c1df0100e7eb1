/* Bad input gets a clear error naming the problem, never a crash (run under ASan/UBSan). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "modelgen.h"
#include "testutil.h"

static const int64_t D23[] = {2, 3};

/* Load bytes as a model and expect failure with `needle` in the message. */
static void expect_load_error(const char *what, const uint8_t *bytes, size_t len, const char *needle) {
  kiln_error err = {0};
  kiln_session *s = NULL;
  kiln_code rc = kiln_session_create_from_memory(bytes, len, NULL, NULL, &s, &err);
  CHECK_MSG(rc != KILN_OK, "%s: loaded", what);
  CHECK_MSG(s == NULL, "%s: session returned on failure", what);
  CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.message, needle);
  kiln_session_free(s);
}

static void model_relu(mg_model *mm, int64_t opset) {
  mg_init(mm, opset);
  mg_input(mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_output(mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_node(mm, "Relu", (const char *[]){"x", NULL}, (const char *[]){"y", NULL});
}

static void test_garbage(void) {
  mg_model mm;
  model_relu(&mm, 13);
  size_t len;
  uint8_t *good = mg_pack(&mm, &len);
  for (size_t cut = 1; cut < len; cut += 7) {
    kiln_error err = {0};
    kiln_session *s = NULL;
    kiln_code rc = kiln_session_create_from_memory(good, cut, NULL, NULL, &s, &err);
    CHECK_MSG(rc != KILN_OK || s != NULL, "truncated at %zu: inconsistent result", cut);
    if (rc != KILN_OK) CHECK_MSG(err.message[0] != 0, "truncated at %zu: empty message", cut);
    kiln_session_free(s);
  }
  uint8_t noise[4096];
  srand(1);
  for (int trial = 0; trial < 50; trial++) {
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)rand();
    kiln_error err = {0};
    kiln_session *s = NULL;
    kiln_code rc = kiln_session_create_from_memory(noise, sizeof noise, NULL, NULL, &s, &err);
    CHECK(rc != KILN_OK);
    kiln_session_free(s);
  }
  expect_load_error("random bytes", noise, sizeof noise, "not an ONNX model");
  expect_load_error("empty", noise, 0, "empty");
  free(good);
}

static void test_cycle(void) {
  mg_model mm;
  mg_init(&mm, 13);
  mg_input(&mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_output(&mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_node(&mm, "Add", (const char *[]){"x", "b", NULL}, (const char *[]){"a", NULL});
  mg_node(&mm, "Relu", (const char *[]){"a", NULL}, (const char *[]){"b", NULL});
  mg_node(&mm, "Relu", (const char *[]){"b", NULL}, (const char *[]){"y", NULL});
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  expect_load_error("cycle", b, len, "cycle");
  free(b);
}

static void test_missing_input(void) {
  mg_model mm;
  mg_init(&mm, 13);
  mg_input(&mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_output(&mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_node(&mm, "Add", (const char *[]){"x", "ghost", NULL}, (const char *[]){"y", NULL});
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  expect_load_error("never produced", b, len, "'ghost'");
  free(b);
}

static void test_unknown_op_and_opset(void) {
  mg_model mm;
  model_relu(&mm, 13);
  mm.nodes[0].op_type = (char *)"FrobnicateTensor";
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  expect_load_error("unknown op", b, len, "FrobnicateTensor");
  free(b);
  model_relu(&mm, 99);
  b = mg_pack(&mm, &len);
  expect_load_error("unknown opset", b, len, "opset 99");
  free(b);
  model_relu(&mm, 13);
  mm.nodes[0].domain = (char *)"com.example";
  b = mg_pack(&mm, &len);
  expect_load_error("unimported domain", b, len, "com.example");
  free(b);
}

static void test_overflow_and_short_raw(void) {
  mg_model mm;
  float raw[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t huge[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  model_relu(&mm, 13);
  mg_init_raw(&mm, "w", 2, huge, raw, sizeof raw);
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  expect_load_error("overflowing shape", b, len, "overflow");
  free(b);
  /* a huge declared shape over a few bytes is refused before anything is allocated */
  static const int64_t big[] = {INT64_C(1) << 20, INT64_C(1) << 20};
  model_relu(&mm, 13);
  mg_init_raw(&mm, "w", 2, big, raw, sizeof raw);
  b = mg_pack(&mm, &len);
  expect_load_error("huge shape, tiny payload", b, len, "holds 24 raw_data bytes");
  free(b);
  model_relu(&mm, 13);
  mg_init_raw(&mm, "w", 2, D23, raw, 5 * sizeof(float));
  b = mg_pack(&mm, &len);
  expect_load_error("short raw_data", b, len, "holds 20 raw_data bytes");
  free(b);
}

static void test_external_escape(void) {
  mg_model mm;
  float raw[6] = {0};
  model_relu(&mm, 13);
  Onnx__TensorProto *t = mg_init_raw(&mm, "w", 2, D23, raw, 0);
  t->has_raw_data = 0;
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  onnx__string_string_entry_proto__init(&mm.ext[0][0]);
  mm.ext[0][0].key = (char *)"location";
  mm.ext[0][0].value = (char *)"../../etc/passwd";
  mm.extp[0][0] = &mm.ext[0][0];
  t->n_external_data = 1;
  t->external_data = mm.extp[0];
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  char dir[] = "/tmp/kiln_ext_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    fwrite(b, 1, len, f);
    fclose(f);
  }
  kiln_error err = {0};
  kiln_session *s = NULL;
  CHECK(kiln_session_create(path, NULL, &s, &err) != KILN_OK);
  CHECK_MSG(strstr(err.message, "leaves the model's folder") != NULL, "message: %s", err.message);
  /* A legitimate external file in the folder loads. */
  mm.ext[0][0].value = (char *)"weights.bin";
  free(b);
  b = mg_pack(&mm, &len);
  f = fopen(path, "wb");
  if (f) {
    fwrite(b, 1, len, f);
    fclose(f);
  }
  char wpath[256];
  snprintf(wpath, sizeof wpath, "%s/weights.bin", dir);
  f = fopen(wpath, "wb");
  if (f) {
    fwrite(raw, 1, sizeof raw, f);
    fclose(f);
  }
  CHECK_MSG(kiln_session_create(path, NULL, &s, &err) == KILN_OK, "external data: %s", err.message);
  kiln_session_free(s);
  unlink(wpath);
  unlink(path);
  rmdir(dir);
  free(b);
}

static void test_wrong_feed(void) {
  mg_model mm;
  model_relu(&mm, 13);
  size_t len;
  uint8_t *b = mg_pack(&mm, &len);
  kiln_error err = {0};
  kiln_session *s = NULL;
  CHECK(kiln_session_create_from_memory(b, len, NULL, NULL, &s, &err) == KILN_OK);
  free(b);
  if (!s) return;
  const char *names[] = {"x"};
  kiln_tensor *out[1] = {NULL};
  kiln_tensor *t;
  /* wrong dtype */
  CHECK(kiln_tensor_create(KILN_INT32, 2, D23, &t, NULL) == KILN_OK);
  CHECK(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&t, 1, NULL, out, &err) != KILN_OK);
  CHECK_MSG(strstr(err.message, "element type float") != NULL, "message: %s", err.message);
  kiln_tensor_free(t);
  /* wrong shape */
  static const int64_t d32[] = {3, 2};
  CHECK(kiln_tensor_create(KILN_FLOAT, 2, d32, &t, NULL) == KILN_OK);
  CHECK(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&t, 1, NULL, out, &err) != KILN_OK);
  CHECK_MSG(strstr(err.message, "expects shape") != NULL, "message: %s", err.message);
  kiln_tensor_free(t);
  /* unknown input name, missing input */
  const char *bad[] = {"nope"};
  CHECK(kiln_tensor_create(KILN_FLOAT, 2, D23, &t, NULL) == KILN_OK);
  CHECK(kiln_session_run(s, 1, bad, (const kiln_tensor *const *)&t, 1, NULL, out, &err) != KILN_OK);
  CHECK(strstr(err.message, "'nope'") != NULL);
  CHECK(kiln_session_run(s, 0, NULL, NULL, 1, NULL, out, &err) != KILN_OK);
  CHECK(strstr(err.message, "not given") != NULL);
  /* and the session still works */
  float *x = kiln_tensor_data(t);
  for (int i = 0; i < 6; i++) x[i] = (float)i - 3.0f;
  CHECK_MSG(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&t, 1, NULL, out, &err) == KILN_OK,
            "run: %s", err.message);
  if (out[0]) {
    const float *y = kiln_tensor_cdata(out[0]);
    CHECK(y[0] == 0.0f && y[5] == 2.0f);
  }
  kiln_tensor_free(out[0]);
  kiln_tensor_free(t);
  kiln_session_free(s);
}

static void test_cli_exit_codes(void) {
  char out[4096];
  char cmd[1024];
  const char *junk = kt_write_temp("junk.onnx", "not a model at all", 18);
  snprintf(cmd, sizeof cmd, "%s/kiln run %s", KILN_BINARY_DIR, junk);
  CHECK(kt_run(cmd, out, sizeof out) == 1);
  CHECK_MSG(strstr(out, "not an ONNX model") != NULL, "output: %s", out);
  snprintf(cmd, sizeof cmd, "%s/kiln run", KILN_BINARY_DIR);
  CHECK(kt_run(cmd, out, sizeof out) == 2);
  snprintf(cmd, sizeof cmd, "%s/kiln frobnicate", KILN_BINARY_DIR);
  CHECK(kt_run(cmd, out, sizeof out) == 2);
  snprintf(cmd, sizeof cmd, "%s/kiln run --help", KILN_BINARY_DIR);
  CHECK(kt_run(cmd, out, sizeof out) == 0);
  snprintf(cmd, sizeof cmd, "%s/kiln info /nonexistent/model.onnx", KILN_BINARY_DIR);
  CHECK(kt_run(cmd, out, sizeof out) == 1);
  CHECK(strstr(out, "No such file") != NULL);
  unlink(junk);
}

int main(void) {
  test_garbage();
  test_cycle();
  test_missing_input();
  test_unknown_op_and_opset();
  test_overflow_and_short_raw();
  test_external_escape();
  test_wrong_feed();
  test_cli_exit_codes();
  return kt_finish("test_bad_input");
}
