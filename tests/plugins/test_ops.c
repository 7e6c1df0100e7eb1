/* Ops for the plugin tests (domain test.ops), each exercising one part of the ABI:
 *
 *   Scale(x) -> y        y = x * scale + bias; state from create, float attrs with defaults
 *   Fail(x) -> y         copies x, but fails with a message when x[0] < 0 (run errors)
 *   NoOutput(x) -> y     returns OK without allocating y (kiln must catch it)
 *   Silent(x) -> y       fails without a message (kiln must still say something)
 *   SumAll(x...) -> y    variadic: elementwise sum of same-shape float inputs, parallel_for
 *   AbsNeg(x) -> y       y = -|x|, the replacement of the pattern Abs -> Neg; fails when some
 *                        |x| exceeds its `limit` attribute (set by the pattern's check to 100),
 *                        so kiln falls back to the original Abs -> Neg
 *
 * test_ops_live_states counts Scale states alive, so a test can see that destroy is called.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_op.h"

KILN_PLUGIN_EXPORT int test_ops_live_states;
int test_ops_live_states;

#define F32 KILN_DT_BIT(KILN_DT_FLOAT)

static kiln_status same_as_input(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int r = api->infer_input_rank(c, 0);
  int64_t dims[16];
  for (int d = 0; d < r && d < 16; d++) dims[d] = api->infer_input_dim(c, 0, d);
  return api->infer_set_output(c, 0, api->infer_input_dtype(c, 0), r, r >= 0 ? dims : NULL);
}

static kiln_op_tensor *like(kiln_kernel_ctx *c, const kiln_api *api, const kiln_op_tensor *x) {
  return api->allocate_output(c, 0, api->tensor_dtype(x), api->tensor_rank(x), api->tensor_dims(x));
}

/* ---- Scale ---- */
typedef struct scale_state {
  float scale, bias;
} scale_state;

static kiln_status scale_create(const kiln_op_attrs *a, const kiln_api *api, void *user, void **state) {
  (void)user;
  scale_state *s = malloc(sizeof *s);
  if (!s) return KILN_STATUS_NOMEM;
  api->attr_float(a, "scale", &s->scale);
  api->attr_float(a, "bias", &s->bias);
  if (!isfinite(s->scale)) {
    free(s);
    return api->attrs_error(a, KILN_STATUS_INVALID_ARG, "scale must be finite");
  }
  __atomic_add_fetch(&test_ops_live_states, 1, __ATOMIC_RELAXED);
  *state = s;
  return KILN_STATUS_OK;
}

static void scale_destroy(void *state, void *user) {
  (void)user;
  if (state) __atomic_sub_fetch(&test_ops_live_states, 1, __ATOMIC_RELAXED);
  free(state);
}

static kiln_status scale_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  const scale_state *s = state;
  const kiln_op_tensor *x = api->input(c, 0);
  kiln_op_tensor *y = like(c, api, x);
  if (!y) return KILN_STATUS_ERROR;
  const float *px = api->tensor_data(x);
  float *py = api->tensor_mutable_data(y);
  for (int64_t i = 0; i < api->tensor_numel(x); i++) py[i] = px[i] * s->scale + s->bias;
  return KILN_STATUS_OK;
}

/* ---- Fail, NoOutput, Silent ---- */
static kiln_status fail_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  const kiln_op_tensor *x = api->input(c, 0);
  const float *px = api->tensor_data(x);
  if (api->tensor_numel(x) > 0 && px[0] < 0)
    return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "deliberate failure: x[0] = %g is negative", (double)px[0]);
  kiln_op_tensor *y = like(c, api, x);
  if (!y) return KILN_STATUS_ERROR;
  memcpy(api->tensor_mutable_data(y), px, (size_t)api->tensor_numel(x) * sizeof(float));
  return KILN_STATUS_OK;
}

static kiln_status no_output_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)c;
  (void)api;
  (void)state;
  return KILN_STATUS_OK;
}

static kiln_status silent_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)c;
  (void)api;
  (void)state;
  return KILN_STATUS_ERROR;
}

/* ---- SumAll ---- */
typedef struct sum_job {
  const float *const *in;
  size_t n_in;
  float *out;
} sum_job;

static void sum_range(void *user, size_t begin, size_t end) {
  const sum_job *j = user;
  for (size_t i = begin; i < end; i++) {
    float acc = 0;
    for (size_t k = 0; k < j->n_in; k++) acc += j->in[k][i];
    j->out[i] = acc;
  }
}

static kiln_status sum_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  size_t n = api->input_count(c);
  const kiln_op_tensor *x0 = api->input(c, 0);
  const float **ins = api->allocate(c, n * sizeof *ins);
  if (!ins) return api->kernel_error(c, KILN_STATUS_NOMEM, "no scratch memory");
  for (size_t k = 0; k < n; k++) {
    const kiln_op_tensor *x = api->input(c, k);
    if (api->tensor_numel(x) != api->tensor_numel(x0))
      return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "input %zu has %lld elements, input 0 has %lld", k,
                               (long long)api->tensor_numel(x), (long long)api->tensor_numel(x0));
    ins[k] = api->tensor_data(x);
  }
  kiln_op_tensor *y = like(c, api, x0);
  if (!y) return KILN_STATUS_ERROR;
  sum_job j = {ins, n, api->tensor_mutable_data(y)};
  api->parallel_for(c, (size_t)api->tensor_numel(x0), sum_range, &j);
  return KILN_STATUS_OK;
}

/* ---- AbsNeg and its pattern ---- */
static kiln_status absneg_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  float limit = 0;
  api->attr_float(api->kernel_attrs(c), "limit", &limit);
  const kiln_op_tensor *x = api->input(c, 0);
  const float *px = api->tensor_data(x);
  kiln_op_tensor *y = like(c, api, x);
  if (!y) return KILN_STATUS_ERROR;
  float *py = api->tensor_mutable_data(y);
  for (int64_t i = 0; i < api->tensor_numel(x); i++) {
    if (fabsf(px[i]) > limit)
      return api->kernel_error(c, KILN_STATUS_UNSUPPORTED, "|x[%lld]| = %g is above the limit %g", (long long)i,
                               (double)fabsf(px[i]), (double)limit);
    py[i] = -fabsf(px[i]);
  }
  return KILN_STATUS_OK;
}

static int absneg_check(kiln_fusion_match *m, const kiln_api *api, void *user) {
  (void)user;
  if (api->match_step_count(m) != 2 || strcmp(api->match_op_type(m, 1), "Neg")) return 0;
  if (api->match_input_dtype(m, 0, 0) != KILN_DT_FLOAT) return 0;
  if (api->match_chain_input(m, 1) != 0) return 0;
  return api->match_set_attr_float(m, "limit", 100.0f) == KILN_STATUS_OK &&
         api->match_set_attr_float(m, "undeclared", 1.0f) == KILN_STATUS_INVALID_ARG;
}

static const kiln_op_io x_in[] = {{"x", F32, 0}};
static const kiln_op_io x_var[] = {{"x", F32, KILN_OP_IO_VARIADIC}};
static const kiln_op_io y_out[] = {{"y", F32, 0}};
static const kiln_op_attr scale_attrs[] = {{"scale", KILN_OP_ATTR_FLOAT, 0, 0, 1.0, NULL},
                                           {"bias", KILN_OP_ATTR_FLOAT, 0, 0, 0.0, NULL}};
static const kiln_op_attr absneg_attrs[] = {{"limit", KILN_OP_ATTR_FLOAT, 0, 0, 1e30, NULL}};

static kiln_status add(kiln_registry *reg, const kiln_api *api, const char *name, kiln_op_compute_fn compute,
                       const kiln_op_io *inputs, uint32_t n_attrs, const kiln_op_attr *attrs) {
  kiln_op_desc d = {0};
  d.size = sizeof d;
  d.abi_version = KILN_OP_ABI_VERSION;
  d.domain = "test.ops";
  d.name = name;
  d.since_version = 1;
  d.n_inputs = 1;
  d.inputs = inputs;
  d.n_outputs = 1;
  d.outputs = y_out;
  d.n_attrs = n_attrs;
  d.attrs = attrs;
  d.infer = same_as_input;
  d.compute = compute;
  if (compute == scale_compute) {
    d.create = scale_create;
    d.destroy = scale_destroy;
  }
  return api->register_op(reg, &d);
}

KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api, uint32_t abi_version) {
  if (!KILN_OP_ABI_COMPATIBLE(abi_version)) return KILN_STATUS_ABI_MISMATCH;
  kiln_status st = KILN_STATUS_OK;
  if (!st) st = add(reg, api, "Scale", scale_compute, x_in, 2, scale_attrs);
  if (!st) st = add(reg, api, "Fail", fail_compute, x_in, 0, NULL);
  if (!st) st = add(reg, api, "NoOutput", no_output_compute, x_in, 0, NULL);
  if (!st) st = add(reg, api, "Silent", silent_compute, x_in, 0, NULL);
  if (!st) st = add(reg, api, "SumAll", sum_compute, x_var, 0, NULL);
  if (!st) st = add(reg, api, "AbsNeg", absneg_compute, x_in, 1, absneg_attrs);
  if (st) return st;
  static const kiln_fusion_step steps[] = {{"Abs", -1}, {"Neg", 0}};
  static const kiln_fusion_input inputs[] = {{0, 0}};
  kiln_fusion_desc f = {0};
  f.size = sizeof f;
  f.abi_version = KILN_OP_ABI_VERSION;
  f.name = "abs_neg";
  f.domain = "test.ops";
  f.op_type = "AbsNeg";
  f.n_steps = 2;
  f.steps = steps;
  f.n_inputs = 1;
  f.inputs = inputs;
  f.check = absneg_check;
  return api->register_fusion(reg, &f);
}
