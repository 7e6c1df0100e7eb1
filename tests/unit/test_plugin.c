/* Plugins (include/kiln/kiln_op.h): every broken kind is refused with its own message and no
 * crash; good plugin ops run with their lifecycle, attributes, type checks, parallel_for and
 * scratch memory; run failures are clean and leave the session usable; plugin fusion patterns
 * fuse, fall back and survive a save; the example plugins match numpy at any thread count;
 * kiln's FusedGemm and FusedMatMul go through the same description. Runs under ASan too. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/kiln_op.h"
#include "modelgen.h"
#include "ops/registry.h"
#include "plugin/plugin.h"
#include "testutil.h"

#define PLUGIN(name) KILN_PLUGIN_DIR "/" name ".so"
#define MODELS KILN_SOURCE_DIR "/examples/plugins/models"

static const int64_t D23[] = {2, 3};

/* ---- building models with custom-domain nodes ------------------------------------------ */

typedef struct tmodel {
  mg_model mm;
  Onnx__OperatorSetIdProto extra[2];
  Onnx__OperatorSetIdProto *ops[3];
  Onnx__AttributeProto attrs[8];
  Onnx__AttributeProto *attrp[8][4];
  size_t n_attrs;
} tmodel;

static void tm_init(tmodel *t, const char *domain) {
  mg_init(&t->mm, 13);
  t->n_attrs = 0;
  t->ops[0] = &t->mm.op;
  t->mm.m.opset_import = t->ops;
  if (domain) {
    onnx__operator_set_id_proto__init(&t->extra[0]);
    t->extra[0].domain = (char *)domain;
    t->extra[0].has_version = 1;
    t->extra[0].version = 1;
    t->ops[1] = &t->extra[0];
    t->mm.m.n_opset_import = 2;
  }
}

static Onnx__NodeProto *tm_node(tmodel *t, const char *domain, const char *op, const char *const *ins,
                                const char *const *outs) {
  Onnx__NodeProto *n = mg_node(&t->mm, op, ins, outs);
  n->domain = (char *)(domain ? domain : "");
  n->name = (char *)op;
  return n;
}

static Onnx__AttributeProto *tm_attr(tmodel *t, Onnx__NodeProto *n, const char *name) {
  Onnx__AttributeProto *a = &t->attrs[t->n_attrs];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  size_t k = (size_t)(n - t->mm.nodes);
  t->attrp[k][n->n_attribute] = a;
  n->attribute = t->attrp[k];
  n->n_attribute++;
  t->n_attrs++;
  return a;
}

static void tm_attr_float(tmodel *t, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = tm_attr(t, n, name);
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a->has_f = 1;
  a->f = v;
}

static void tm_attr_int(tmodel *t, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = tm_attr(t, n, name);
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
}

/* One-op model: x[2,3] -> domain::op -> y[2,3] (float unless dtype given). */
static tmodel *one_op(const char *domain, const char *op, int32_t dtype, Onnx__NodeProto **node) {
  tmodel *t = calloc(1, sizeof *t);
  tm_init(t, domain);
  mg_input(&t->mm, "x", dtype, 2, D23);
  mg_output(&t->mm, "y", dtype, 2, D23);
  Onnx__NodeProto *n = tm_node(t, domain, op, (const char *[]){"x", NULL}, (const char *[]){"y", NULL});
  if (node) *node = n;
  return t;
}

static kiln_code create(tmodel *t, const char *const *plugins, int level, kiln_session **s, kiln_error *err) {
  size_t len;
  uint8_t *bytes = mg_pack(&t->mm, &len);
  kiln_options o;
  kiln_options_init(&o);
  o.plugins = plugins;
  o.opt_level = level;
  *s = NULL;
  kiln_code rc = kiln_session_create_from_memory(bytes, len, NULL, &o, s, err);
  free(bytes);
  return rc;
}

static kiln_tensor *floats(int rank, const int64_t *dims, const float *v) {
  kiln_tensor *x;
  kiln_tensor_create(KILN_FLOAT, rank, dims, &x, NULL);
  memcpy(kiln_tensor_data(x), v, (size_t)kiln_tensor_numel(x) * sizeof(float));
  return x;
}

/* Run a one-input session; returns the code, *y the output (caller frees). */
static kiln_code run1(kiln_session *s, const kiln_tensor *x, kiln_tensor **y, kiln_error *err) {
  const char *names[] = {"x"};
  *y = NULL;
  return kiln_session_run(s, 1, names, &x, 1, NULL, y, err);
}

/* ---- broken plugins ---------------------------------------------------------------------- */

static void expect_refused(const char *what, const char *const *plugins, kiln_code code, const char *needle) {
  tmodel *t = one_op(NULL, "Relu", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL);
  kiln_error err = {0};
  kiln_session *s = NULL;
  kiln_code rc = create(t, plugins, 2, &s, &err);
  CHECK_MSG(rc == code, "%s: code %s, expected %s (%s)", what, kiln_code_name(rc), kiln_code_name(code), err.message);
  CHECK_MSG(s == NULL, "%s: a session came back", what);
  CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.message, needle);
  CHECK_MSG(strstr(err.message, "plugin '") != NULL, "%s: message '%s' does not name the plugin", what, err.message);
  kiln_session_free(s);
  free(t);
}

static void test_broken_plugins(void) {
  expect_refused("missing file", (const char *[]){"/nonexistent/dir/missing.so", NULL}, KILN_ERR_IO,
                 "cannot open it: No such file or directory");
  const char *text = kt_write_temp("not_a_plugin.so", "hello, I am text\n", 17);
  expect_refused("not a shared library", (const char *[]){text, NULL}, KILN_ERR_IO,
                 "is not a shared library kiln can load");
  unlink(text);
  expect_refused("a directory", (const char *[]){KILN_PLUGIN_DIR, NULL}, KILN_ERR_IO, "is a directory");
  expect_refused("no entry point", (const char *[]){PLUGIN("no_entry"), NULL}, KILN_ERR_INVALID_ARG,
                 "does not export the entry point kiln_register_ops");
  expect_refused("ABI: plugin built for a newer major", (const char *[]){PLUGIN("bad_abi_newer"), NULL},
                 KILN_ERR_UNSUPPORTED, "ABI version mismatch: an op is described for kiln op ABI 2.0");
  expect_refused("ABI: plugin refuses this kiln", (const char *[]){PLUGIN("bad_abi_refused"), NULL}, KILN_ERR_UNSUPPORTED,
                 "ABI version mismatch: the plugin does not accept this kiln's op ABI 1.0: this plugin needs kiln op ABI 1.5");
  expect_refused("duplicate of a built-in op", (const char *[]){PLUGIN("bad_dup_builtin"), NULL}, KILN_ERR_INVALID_ARG,
                 "duplicate op 'Relu': it is one of kiln's built-in ops, and a plugin may not override a built-in op");
  expect_refused("duplicate of another plugin's op",
                 (const char *[]){PLUGIN("fused_gather_add_relu"), PLUGIN("bad_dup_example"), NULL}, KILN_ERR_INVALID_ARG,
                 "duplicate op 'my.ops::FusedGatherAddRelu': it is already registered by plugin '" PLUGIN("fused_gather_add_relu") "'");
  expect_refused("duplicate within a plugin", (const char *[]){PLUGIN("bad_dup_self"), NULL}, KILN_ERR_INVALID_ARG,
                 "duplicate op 'bad.ops::Copy': registered twice by this plugin");
  expect_refused("description size", (const char *[]){PLUGIN("bad_bad_size"), NULL}, KILN_ERR_INVALID_ARG,
                 "invalid description: size 12 is smaller than kiln_op_desc");
  expect_refused("no compute", (const char *[]){PLUGIN("bad_no_compute"), NULL}, KILN_ERR_INVALID_ARG,
                 "invalid description of op 'bad.ops::Copy': compute is NULL");
  expect_refused("arity", (const char *[]){PLUGIN("bad_bad_arity"), NULL}, KILN_ERR_INVALID_ARG,
                 "required input 'b' follows an optional one");
  expect_refused("attribute type", (const char *[]){PLUGIN("bad_bad_attr"), NULL}, KILN_ERR_INVALID_ARG,
                 "attribute 'mode' has unknown type 99");
  expect_refused("reserved domain", (const char *[]){PLUGIN("bad_bad_domain"), NULL}, KILN_ERR_INVALID_ARG,
                 "domain 'ai.kiln' is reserved");
  expect_refused("pattern with an unknown op", (const char *[]){PLUGIN("bad_bad_pattern_op"), NULL}, KILN_ERR_INVALID_ARG,
                 "invalid fusion pattern 'abs_neg': its replacement op 'bad.ops::NotRegistered' is not registered by this plugin");
  expect_refused("pattern input out of range", (const char *[]){PLUGIN("bad_bad_pattern_input"), NULL},
                 KILN_ERR_INVALID_ARG, "invalid fusion pattern 'abs_neg': input 0 refers to step 5");
  expect_refused("registration fails", (const char *[]){PLUGIN("bad_register_fails"), NULL}, KILN_ERR_INVALID_ARG,
                 "kiln_register_ops failed (error): cannot find its license file");
  /* through the environment, as `kiln --plugin` passes them */
  setenv("KILN_PLUGINS", "::" PLUGIN("test_ops") ":" PLUGIN("no_entry"), 1);
  expect_refused("KILN_PLUGINS", NULL, KILN_ERR_INVALID_ARG, "plugin '" PLUGIN("no_entry") "' does not export");
  unsetenv("KILN_PLUGINS");
}

static size_t op_count(const kiln_session *s, const char *op);

/* ---- good plugin ops --------------------------------------------------------------------- */

static int *live_states(void *h) { return h ? dlsym(h, "test_ops_live_states") : NULL; }

static void test_scale_lifecycle(void *h) {
  int *live = live_states(h);
  CHECK(live != NULL);
  Onnx__NodeProto *n;
  tmodel *t = one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, &n);
  tm_attr_float(t, n, "scale", 2.0f); /* bias takes its declared default 0 */
  kiln_error err = {0};
  kiln_session *s, *s2;
  const char *plugins[] = {PLUGIN("test_ops"), PLUGIN("test_ops"), NULL}; /* named twice: loaded once */
  kiln_code rc = create(t, plugins, 2, &s, &err);
  CHECK_MSG(rc == KILN_OK, "Scale session: %s", err.message);
  if (rc) {
    free(t);
    return;
  }
  CHECK_MSG(live && *live == 1, "one state per node, made at session creation: %d", live ? *live : -1);
  rc = create(t, plugins, 2, &s2, &err); /* a second session: its own states, same library */
  CHECK_MSG(rc == KILN_OK && live && *live == 2, "second session: %s", err.message);
  float v[6] = {1, -2, 3, 4, 5, 6};
  kiln_tensor *x = floats(2, D23, v), *y;
  kiln_session_free(s2); /* must not unload what s still uses */
  CHECK(live && *live == 1);
  rc = run1(s, x, &y, &err);
  CHECK_MSG(rc == KILN_OK, "Scale run: %s", err.message);
  if (!rc) {
    const float *p = kiln_tensor_cdata(y);
    for (int i = 0; i < 6; i++) CHECK_MSG(p[i] == 2 * v[i], "Scale y[%d] = %g", i, (double)p[i]);
    kiln_tensor_free(y);
  }
  kiln_tensor_free(x);
  kiln_session_free(s);
  CHECK_MSG(live && *live == 0, "states destroyed at session free: %d", live ? *live : -1);
  free(t);
}

/* A plugin op on constants is folded at load time: its kernel runs with a state made just for
 * that call (the node is gone before kernel states are made). */
static void test_constant_folding(void *h) {
  int *live = live_states(h);
  static const float c[6] = {1, 2, 3, 4, 5, 6};
  tmodel *t = calloc(1, sizeof *t);
  tm_init(t, "test.ops");
  mg_input(&t->mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_output(&t->mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_init_raw(&t->mm, "c", 2, D23, c, sizeof c);
  Onnx__NodeProto *n = tm_node(t, "test.ops", "Scale", (const char *[]){"c", NULL}, (const char *[]){"t", NULL});
  tm_attr_float(t, n, "scale", 3.0f);
  tm_attr_float(t, n, "bias", 1.0f);
  tm_node(t, NULL, "Add", (const char *[]){"t", "x", NULL}, (const char *[]){"y", NULL});
  kiln_error err = {0};
  kiln_session *s;
  kiln_code rc = create(t, (const char *[]){PLUGIN("test_ops"), NULL}, 1, &s, &err);
  CHECK_MSG(rc == KILN_OK, "fold model: %s", err.message);
  if (!rc) {
    CHECK_MSG(op_count(s, "Scale") == 0 && op_count(s, "Add") == 1, "Scale on a constant is folded");
    CHECK_MSG(live && *live == 0, "the folding state was destroyed: %d", live ? *live : -1);
    float v[6] = {0};
    kiln_tensor *x = floats(2, D23, v), *y;
    rc = run1(s, x, &y, &err);
    CHECK_MSG(rc == KILN_OK, "fold run: %s", err.message);
    for (int i = 0; !rc && i < 6; i++) CHECK(((const float *)kiln_tensor_cdata(y))[i] == 3 * c[i] + 1);
    kiln_tensor_free(y);
    kiln_tensor_free(x);
    kiln_session_free(s);
  }
  free(t);
}

static void expect_load_error(const char *what, tmodel *t, const char *needle) {
  kiln_error err = {0};
  kiln_session *s;
  kiln_code rc = create(t, (const char *[]){PLUGIN("test_ops"), NULL}, 2, &s, &err);
  CHECK_MSG(rc != KILN_OK && !s, "%s: loaded", what);
  CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.message, needle);
  kiln_session_free(s);
  free(t);
}

static void test_load_checks(void) {
  Onnx__NodeProto *n;
  expect_load_error("input type", one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, NULL),
                    "input 0 ('x') is int64; test.ops::Scale takes float there");
  tmodel *t = one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, &n);
  tm_attr_float(t, n, "scael", 2.0f);
  expect_load_error("undeclared attribute", t, "attribute 'scael' is not declared by test.ops::Scale (declared: scale, bias)");
  t = one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, &n);
  tm_attr_int(t, n, "scale", 2);
  expect_load_error("attribute type", t, "attribute 'scale' is int; test.ops::Scale declares it float");
  t = one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, &n);
  tm_attr_float(t, n, "scale", INFINITY);
  expect_load_error("create fails", t, "node 'Scale' (test.ops::Scale): scale must be finite");
  /* the op without its plugin */
  t = one_op("test.ops", "Scale", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL);
  kiln_error err = {0};
  kiln_session *s;
  kiln_code rc = create(t, NULL, 2, &s, &err);
  CHECK_MSG(rc == KILN_ERR_UNSUPPORTED && strstr(err.message, "unknown operator 'Scale' in domain 'test.ops'") &&
                strstr(err.message, "--plugin"),
            "without the plugin: %s", err.message);
  free(t);
}

static void test_run_failures(void) {
  const char *plugins[] = {PLUGIN("test_ops"), NULL};
  kiln_error err = {0};
  kiln_session *s;
  tmodel *t = one_op("test.ops", "Fail", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL);
  kiln_code rc = create(t, plugins, 2, &s, &err);
  CHECK_MSG(rc == KILN_OK, "Fail session: %s", err.message);
  if (!rc) {
    float bad[6] = {-1, 2, 3, 4, 5, 6}, good[6] = {1, 2, 3, 4, 5, 6};
    kiln_tensor *xb = floats(2, D23, bad), *xg = floats(2, D23, good), *y;
    rc = run1(s, xb, &y, &err);
    CHECK_MSG(rc == KILN_ERR_RUN && !y, "failing compute gives a run error: %s", kiln_code_name(rc));
    CHECK_MSG(strstr(err.message, "node 'Fail' (test.ops::Fail): deliberate failure: x[0] = -1 is negative"),
              "message: %s", err.message);
    rc = run1(s, xg, &y, &err); /* the session is still usable */
    CHECK_MSG(rc == KILN_OK && y && ((const float *)kiln_tensor_cdata(y))[5] == 6, "run after a failure: %s", err.message);
    kiln_tensor_free(y);
    rc = run1(s, xb, &y, NULL); /* no error struct: still a clean failure */
    CHECK(rc == KILN_ERR_RUN && !y);
    kiln_tensor_free(xb);
    kiln_tensor_free(xg);
    kiln_session_free(s);
  }
  free(t);
  static const struct {
    const char *op, *needle;
  } cases[] = {{"NoOutput", "compute of test.ops::NoOutput returned OK without producing output 0 ('y')"},
               {"Silent", "compute of test.ops::Silent failed (error) without a message"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    t = one_op("test.ops", cases[i].op, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL);
    rc = create(t, plugins, 2, &s, &err);
    CHECK_MSG(rc == KILN_OK, "%s session: %s", cases[i].op, err.message);
    if (!rc) {
      float v[6] = {0};
      kiln_tensor *x = floats(2, D23, v), *y;
      rc = run1(s, x, &y, &err);
      CHECK_MSG(rc == KILN_ERR_RUN && strstr(err.message, cases[i].needle), "%s: %s", cases[i].op, err.message);
      kiln_tensor_free(y);
      kiln_tensor_free(x);
      kiln_session_free(s);
    }
    free(t);
  }
}

/* SumAll over three inputs, at 1 and 4 threads (parallel_for, scratch memory, variadic). */
static void test_variadic_parallel(void) {
  static const int64_t big[] = {1000, 37};
  for (int threads = 1; threads <= 4; threads += 3) {
    tmodel *t = calloc(1, sizeof *t);
    tm_init(t, "test.ops");
    mg_input(&t->mm, "a", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big);
    mg_input(&t->mm, "b", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big);
    mg_input(&t->mm, "c", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big);
    mg_output(&t->mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big);
    tm_node(t, "test.ops", "SumAll", (const char *[]){"a", "b", "c", NULL}, (const char *[]){"y", NULL});
    size_t len;
    uint8_t *bytes = mg_pack(&t->mm, &len);
    kiln_options o;
    kiln_options_init(&o);
    o.plugins = (const char *[]){PLUGIN("test_ops"), NULL};
    o.threads = threads;
    kiln_error err = {0};
    kiln_session *s = NULL;
    kiln_code rc = kiln_session_create_from_memory(bytes, len, NULL, &o, &s, &err);
    CHECK_MSG(rc == KILN_OK, "SumAll session: %s", err.message);
    if (!rc) {
      kiln_tensor *in[3], *y = NULL;
      for (int k = 0; k < 3; k++) {
        kiln_tensor_create(KILN_FLOAT, 2, big, &in[k], NULL);
        float *p = kiln_tensor_data(in[k]);
        for (int i = 0; i < 37000; i++) p[i] = (float)(i % 97) * (float)(k + 1);
      }
      const char *names[] = {"a", "b", "c"};
      rc = kiln_session_run(s, 3, names, (const kiln_tensor *const *)in, 1, NULL, &y, &err);
      CHECK_MSG(rc == KILN_OK, "SumAll run: %s", err.message);
      int bad = 0;
      for (int i = 0; !rc && i < 37000; i++) bad += ((const float *)kiln_tensor_cdata(y))[i] != (float)(i % 97) * 6;
      CHECK_MSG(bad == 0, "SumAll at %d threads: %d wrong", threads, bad);
      kiln_tensor_free(y);
      for (int k = 0; k < 3; k++) kiln_tensor_free(in[k]);
      kiln_session_free(s);
    }
    free(bytes);
    free(t);
  }
}

/* ---- plugin fusion patterns ------------------------------------------------------------- */

static tmodel *abs_neg_model(void) {
  tmodel *t = calloc(1, sizeof *t);
  tm_init(t, NULL); /* the pass imports test.ops itself */
  mg_input(&t->mm, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  mg_output(&t->mm, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, D23);
  tm_node(t, NULL, "Abs", (const char *[]){"x", NULL}, (const char *[]){"a", NULL});
  tm_node(t, NULL, "Neg", (const char *[]){"a", NULL}, (const char *[]){"y", NULL});
  return t;
}

static size_t op_count(const kiln_session *s, const char *op) {
  const char *name;
  size_t count;
  for (size_t i = 0; kiln_session_op_count(s, i, &name, &count) == KILN_OK; i++)
    if (!strcmp(name, op)) return count;
  return 0;
}

static void check_abs_neg(kiln_session *s, const float *v, const char *what) {
  kiln_tensor *x = floats(2, D23, v), *y;
  kiln_error err = {0};
  kiln_code rc = run1(s, x, &y, &err);
  CHECK_MSG(rc == KILN_OK, "%s: %s", what, err.message);
  for (int i = 0; !rc && i < 6; i++)
    CHECK_MSG(((const float *)kiln_tensor_cdata(y))[i] == -fabsf(v[i]), "%s: y[%d]", what, i);
  kiln_tensor_free(y);
  kiln_tensor_free(x);
}

static void test_fusion_pattern(void) {
  const char *plugins[] = {PLUGIN("test_ops"), NULL};
  tmodel *t = abs_neg_model();
  kiln_error err = {0};
  kiln_session *s;
  kiln_code rc = create(t, plugins, 2, &s, &err);
  CHECK_MSG(rc == KILN_OK, "abs_neg session: %s", err.message);
  if (rc) {
    free(t);
    return;
  }
  CHECK_MSG(op_count(s, "AbsNeg") == 1 && op_count(s, "Abs") == 0, "Abs -> Neg fused into test.ops::AbsNeg");
  const char *pass;
  size_t rewrites = 0, i = 0;
  while (kiln_session_pass_stat(s, i, &pass, &rewrites) == KILN_OK && strcmp(pass, KILN_PLUGIN_PASS)) i++;
  CHECK_MSG(rewrites == 1, "the plugin pass is logged with its rewrite");
  float small[6] = {1, -2, 3, -4, 5, -6}, large[6] = {1, -2, 300, -4, 5, -6};
  check_abs_neg(s, small, "fused kernel");
  CHECK(kiln_session_fallback_count(s) == 0);
  check_abs_neg(s, large, "fallback after the kernel fails"); /* |300| > limit 100: the chain runs */
  CHECK_MSG(kiln_session_fallback_count(s) == 1, "one fallback");
  check_abs_neg(s, small, "stays on the chain");
  CHECK(kiln_session_fallback_count(s) == 1);
  /* the optimised graph saves and loads again (with the plugin) */
  char path[256];
  snprintf(path, sizeof path, "/tmp/kiln_test_%d_absneg.onnx", (int)getpid());
  rc = kiln_session_save(s, path, &err);
  CHECK_MSG(rc == KILN_OK, "save: %s", err.message);
  kiln_session_free(s);
  kiln_options o;
  kiln_options_init(&o);
  o.plugins = plugins;
  o.opt_level = 0;
  rc = kiln_session_create(path, &o, &s, &err);
  CHECK_MSG(rc == KILN_OK, "saved fused graph loads: %s", err.message);
  if (!rc) {
    CHECK(op_count(s, "AbsNeg") == 1);
    check_abs_neg(s, large, "saved graph falls back too");
    kiln_session_free(s);
  }
  o.plugins = NULL;
  rc = kiln_session_create(path, &o, &s, &err);
  CHECK_MSG(rc == KILN_ERR_UNSUPPORTED && strstr(err.message, "test.ops"), "saved graph needs its plugin: %s", err.message);
  unlink(path);
  /* level 0: no fusion; forced failure: fallback from the start */
  rc = create(t, plugins, 0, &s, &err);
  CHECK_MSG(rc == KILN_OK && op_count(s, "AbsNeg") == 0, "level 0 does not fuse");
  kiln_session_free(s);
  setenv("KILN_FUSION_FAIL", "AbsNeg", 1);
  rc = create(t, plugins, 2, &s, &err);
  if (!rc) {
    check_abs_neg(s, small, "forced fallback");
    CHECK(kiln_session_fallback_count(s) == 1);
    kiln_session_free(s);
  }
  unsetenv("KILN_FUSION_FAIL");
  free(t);
}

/* ---- the example plugins ---------------------------------------------------------------- */

static kiln_tensor *npy(const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", MODELS, rel);
  kiln_tensor *t = NULL;
  kiln_error err = {0};
  CHECK_MSG(kiln_tensor_load_npy(path, &t, &err) == KILN_OK, "%s: %s", path, err.message);
  return t;
}

static double max_diff(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || kiln_tensor_numel(a) != kiln_tensor_numel(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b)) return INFINITY;
  double m = 0;
  const float *pa = kiln_tensor_cdata(a), *pb = kiln_tensor_cdata(b);
  for (int64_t i = 0; i < kiln_tensor_numel(a); i++) m = fmax(m, fabs((double)pa[i] - pb[i]));
  return m;
}

static kiln_code run_example(const char *model, const char *plugin, int level, int threads, size_t n_in,
                             const char *const *names, const kiln_tensor *const *in, size_t n_out, kiln_tensor **out,
                             kiln_session **keep, kiln_error *err) {
  kiln_options o;
  kiln_options_init(&o);
  o.plugins = (const char *[]){plugin, NULL};
  o.opt_level = level;
  o.threads = threads;
  kiln_session *s;
  kiln_code rc = kiln_session_create(model, &o, &s, err);
  if (rc) return rc;
  rc = kiln_session_run(s, n_in, names, in, n_out, NULL, out, err);
  if (keep)
    *keep = s;
  else
    kiln_session_free(s);
  return rc;
}

static void test_embedding_dense_grad(void) {
  kiln_tensor *grad = npy("embedding_dense_grad/grad.npy"), *idx = npy("embedding_dense_grad/indices.npy");
  kiln_tensor *want[2] = {npy("embedding_dense_grad/table.npy"), npy("embedding_dense_grad/table_scaled.npy")};
  const char *names[] = {"grad", "indices"};
  const kiln_tensor *in[] = {grad, idx};
  kiln_tensor *first[2] = {0};
  static const int threads[] = {1, 2, 3, 8, 0};
  for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
    kiln_tensor *out[2] = {0};
    kiln_error err = {0};
    kiln_code rc = run_example(MODELS "/embedding_dense_grad.onnx", PLUGIN("embedding_dense_grad"), 2, threads[k], 2,
                               names, in, 2, out, NULL, &err);
    CHECK_MSG(rc == KILN_OK, "EmbeddingDenseGrad at %d threads: %s", threads[k], err.message);
    for (int j = 0; !rc && j < 2; j++) {
      CHECK_MSG(max_diff(out[j], want[j]) <= 1e-6, "output %d vs numpy at %d threads: %g", j, threads[k],
                max_diff(out[j], want[j]));
      if (!first[j]) {
        first[j] = out[j];
        out[j] = NULL;
      } else {
        CHECK_MSG(!memcmp(kiln_tensor_cdata(first[j]), kiln_tensor_cdata(out[j]), (size_t)kiln_tensor_numel(out[j]) * 4),
                  "output %d at %d threads is bitwise the one at 1 thread", j, threads[k]);
      }
    }
    kiln_tensor_free(out[0]);
    kiln_tensor_free(out[1]);
  }
  /* an index out of range: a clean run error naming it */
  int64_t *p = kiln_tensor_data(idx);
  p[4] = 12;
  kiln_tensor *out[2] = {0};
  kiln_error err = {0};
  kiln_code rc = run_example(MODELS "/embedding_dense_grad.onnx", PLUGIN("embedding_dense_grad"), 2, 2, 2, names, in, 2,
                             out, NULL, &err);
  CHECK_MSG(rc == KILN_ERR_RUN && strstr(err.message, "index 12 at position 4 is out of range [0, 10)"), "bad index: %s",
            err.message);
  kiln_tensor_free(out[0]);
  kiln_tensor_free(out[1]);
  for (int j = 0; j < 2; j++) {
    kiln_tensor_free(first[j]);
    kiln_tensor_free(want[j]);
  }
  kiln_tensor_free(grad);
  kiln_tensor_free(idx);
}

static void test_gather_add_relu(void) {
  kiln_tensor *idx = npy("gather_add_relu/indices.npy");
  kiln_tensor *want[2] = {npy("gather_add_relu/out.npy"), npy("gather_add_relu/out_bias.npy")};
  const char *names[] = {"indices"};
  const kiln_tensor *in[] = {idx};
  for (int level = 0; level <= 2; level += 2)
    for (int threads = 1; threads <= 3; threads += 2) {
      kiln_tensor *out[2] = {0};
      kiln_error err = {0};
      kiln_session *s = NULL;
      kiln_code rc = run_example(MODELS "/gather_add_relu.onnx", PLUGIN("fused_gather_add_relu"), level, threads, 1,
                                 names, in, 2, out, &s, &err);
      CHECK_MSG(rc == KILN_OK, "gather_add_relu level %d: %s", level, err.message);
      for (int j = 0; !rc && j < 2; j++)
        CHECK_MSG(max_diff(out[j], want[j]) == 0, "output %d at level %d, %d threads: %g", j, level, threads,
                  max_diff(out[j], want[j]));
      if (s) {
        CHECK_MSG(op_count(s, "FusedGatherAddRelu") == (level == 2 ? 2u : 0u), "fused at level %d: %zu", level,
                  op_count(s, "FusedGatherAddRelu"));
        CHECK(kiln_session_fallback_count(s) == 0);
      }
      kiln_session_free(s);
      kiln_tensor_free(out[0]);
      kiln_tensor_free(out[1]);
    }
  kiln_tensor_free(want[0]);
  kiln_tensor_free(want[1]);
  kiln_tensor_free(idx);
}

/* ---- kiln's own fused ops through the same description ------------------------------------ */

static void test_builtin_described(void) {
  kiln_builtin_ops_init();
  const kiln_op_schema *mm = kiln_op_find("ai.kiln", "FusedMatMul", 1), *gm = kiln_op_find("ai.kiln", "FusedGemm", 1);
  CHECK_MSG(mm && kiln_adapted_from_schema(mm), "FusedMatMul is described through kiln_op.h");
  CHECK_MSG(gm && kiln_adapted_from_schema(gm), "FusedGemm is described through kiln_op.h");
  CHECK(mm && mm->inputs.min == 2 && mm->inputs.max == 4 && mm->outputs.min == 1 && mm->outputs.max == 1);
  CHECK(gm && gm->inputs.min == 2 && gm->inputs.max == 3);
  CHECK(kiln_op_known("ai.kiln", "FusedGemm"));
  const kiln_op_schema *conv = kiln_op_find("ai.kiln", "FusedConv", 1);
  CHECK(conv && !kiln_adapted_from_schema(conv));
  /* shape inference through the ABI: FusedGemm(transB=1) A[3,4] B[5,4] -> [3,5], output undeclared */
  static const int64_t a[] = {3, 4}, b[] = {5, 4};
  tmodel *t = calloc(1, sizeof *t);
  tm_init(t, "ai.kiln");
  mg_input(&t->mm, "A", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, a);
  mg_input(&t->mm, "B", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, b);
  mg_output(&t->mm, "y", 0, 0, NULL);
  t->mm.tt[t->mm.n_vi - 1].has_elem_type = 0;
  t->mm.tp[t->mm.n_vi - 1].tensor_type->shape = NULL;
  Onnx__NodeProto *n = tm_node(t, "ai.kiln", "FusedGemm", (const char *[]){"A", "B", NULL}, (const char *[]){"y", NULL});
  tm_attr_int(t, n, "transB", 1);
  kiln_error err = {0};
  kiln_session *s;
  kiln_code rc = create(t, NULL, 0, &s, &err);
  CHECK_MSG(rc == KILN_OK, "FusedGemm model: %s", err.message);
  if (!rc) {
    kiln_io_info info;
    kiln_session_output_info(s, 0, &info, NULL);
    CHECK_MSG(info.dtype == KILN_FLOAT && info.rank == 2 && info.dims[0] == 3 && info.dims[1] == 5,
              "FusedGemm output inferred as float[3,5]: rank %d", info.rank);
    kiln_tensor *x[2], *y = NULL;
    kiln_tensor_create(KILN_FLOAT, 2, a, &x[0], NULL);
    kiln_tensor_create(KILN_FLOAT, 2, b, &x[1], NULL);
    for (int i = 0; i < 12; i++) ((float *)kiln_tensor_data(x[0]))[i] = 1, ((float *)kiln_tensor_data(x[1]))[i + 8] = 2;
    const char *names[] = {"A", "B"};
    rc = kiln_session_run(s, 2, names, (const kiln_tensor *const *)x, 1, NULL, &y, &err);
    CHECK_MSG(rc == KILN_OK && kiln_tensor_numel(y) == 15, "FusedGemm runs: %s", err.message);
    if (!rc) CHECK(((const float *)kiln_tensor_cdata(y))[14] == 8 && ((const float *)kiln_tensor_cdata(y))[0] == 0);
    kiln_tensor_free(y);
    kiln_tensor_free(x[0]);
    kiln_tensor_free(x[1]);
    kiln_session_free(s);
  }
  free(t);
}

int main(void) {
  test_broken_plugins();
  void *h = dlopen(PLUGIN("test_ops"), RTLD_NOW | RTLD_LOCAL); /* keeps its counter readable */
  CHECK_MSG(h != NULL, "dlopen test_ops: %s", dlerror());
  test_scale_lifecycle(h);
  test_constant_folding(h);
  test_load_checks();
  test_run_failures();
  test_variadic_parallel();
  test_fusion_pattern();
  test_embedding_dense_grad();
  test_gather_add_relu();
  test_builtin_described();
  if (h) dlclose(h);
  return kt_finish("test_plugin");
}
