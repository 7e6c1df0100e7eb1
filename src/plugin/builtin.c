/* kiln's own ops described through the plugin ABI (kiln/kiln_op.h): FusedGemm and FusedMatMul.
 * The same description a plugin gives, adapted to a schema by adapter.c once per process and
 * registered with the op registry (kiln_op_register_extra), with the facts the ABI does not
 * carry (prepare, cost, dim-flow rule). Arity, element types, attributes with defaults and
 * shape inference use only the ABI's functions; compute hands the internal kernel context to
 * the kernels in src/ops/fused.c. What we ask plugin authors to do, we do ourselves. */
#include <pthread.h>
#include <stdint.h>

#include "kiln/kiln_op.h"
#include "ops/cost.h"
#include "ops/fused.h"
#include "ops/registry.h"
#include "plugin/plugin.h"


static kiln_status fused_matmul_compute(kiln_kernel_ctx *ctx, const kiln_api *api, void *state) {
  (void)api;
  (void)state;
  return kiln_status_from_code(kiln_fused_matmul_run(kiln_kernel_ctx_internal(ctx)));
}

static kiln_status fused_gemm_compute(kiln_kernel_ctx *ctx, const kiln_api *api, void *state) {
  (void)api;
  (void)state;
  return kiln_status_from_code(kiln_fused_gemm_run(kiln_kernel_ctx_internal(ctx)));
}

/* Broadcast two batch dims where -1 is unknown. */
static int64_t batch_dim(int64_t a, int64_t b) {
  if (a == 1) return b;
  if (b == 1 || a == b) return a;
  if (a < 0) return b;
  return b < 0 ? a : -1;
}

/* numpy matmul: A[..., M, K] x B[..., K, N] -> [..., M, N]; 1-D operands lose their dim. */
static kiln_status fused_matmul_infer(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int32_t dt = api->infer_input_dtype(c, 0);
  int ra = api->infer_input_rank(c, 0), rb = api->infer_input_rank(c, 1);
  if (ra < 1 || rb < 1) return api->infer_set_output(c, 0, dt, -1, NULL);
  int64_t a[KILN_MAX_RANK + 1], b[KILN_MAX_RANK + 1], out[KILN_MAX_RANK + 1];
  int na = ra == 1 ? 2 : ra, nb = rb == 1 ? 2 : rb;
  for (int d = 0; d < ra; d++) a[d + (ra == 1)] = api->infer_input_dim(c, 0, d);
  if (ra == 1) a[0] = 1;
  for (int d = 0; d < rb; d++) b[d] = api->infer_input_dim(c, 1, d);
  if (rb == 1) b[1] = 1;
  int ba = na - 2, bb = nb - 2, r = ba > bb ? ba : bb, n = 0;
  for (int d = 0; d < r; d++) {
    int ia = d - (r - ba), ib = d - (r - bb);
    out[n++] = batch_dim(ia < 0 ? 1 : a[ia], ib < 0 ? 1 : b[ib]);
  }
  if (ra > 1) out[n++] = a[na - 2];
  if (rb > 1) out[n++] = b[nb - 1];
  if (n > KILN_MAX_RANK) return api->infer_set_output(c, 0, dt, -1, NULL);
  return api->infer_set_output(c, 0, dt, n, out);
}

static kiln_status fused_gemm_infer(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int32_t dt = api->infer_input_dtype(c, 0);
  int64_t ta = 0, tb = 0;
  const kiln_op_attrs *at = api->infer_attrs(c);
  api->attr_int(at, "transA", &ta);
  api->attr_int(at, "transB", &tb);
  if (api->infer_input_rank(c, 0) != 2 || api->infer_input_rank(c, 1) != 2)
    return api->infer_set_output(c, 0, dt, -1, NULL);
  int64_t dims[2] = {api->infer_input_dim(c, 0, ta ? 1 : 0), api->infer_input_dim(c, 1, tb ? 0 : 1)};
  return api->infer_set_output(c, 0, dt, 2, dims);
}

#define F32 KILN_DT_BIT(KILN_DT_FLOAT)
static const kiln_op_io matmul_inputs[] = {
    {"A", F32, 0}, {"B", F32, 0}, {"bias", F32, KILN_OP_IO_OPTIONAL}, {"R", F32, KILN_OP_IO_OPTIONAL}};
static const kiln_op_io gemm_inputs[] = {{"A", F32, 0}, {"B", F32, 0}, {"C", F32, KILN_OP_IO_OPTIONAL}};
static const kiln_op_io fused_outputs[] = {{"Y", F32, 0}};
static const kiln_op_attr matmul_attrs[] = {
    {"activation", KILN_OP_ATTR_STRING, 0, 0, 0, ""},
    {"act_alpha", KILN_OP_ATTR_FLOAT, 0, 0, 0.01, NULL},
    {"act_beta", KILN_OP_ATTR_FLOAT, 0, 0, 0.0, NULL}};
static const kiln_op_attr gemm_attrs[] = {
    {"transA", KILN_OP_ATTR_INT, 0, 0, 0, NULL},  {"transB", KILN_OP_ATTR_INT, 0, 0, 0, NULL},
    {"alpha", KILN_OP_ATTR_FLOAT, 0, 0, 1.0, NULL}, {"beta", KILN_OP_ATTR_FLOAT, 0, 0, 1.0, NULL},
    {"activation", KILN_OP_ATTR_STRING, 0, 0, 0, ""},
    {"act_alpha", KILN_OP_ATTR_FLOAT, 0, 0, 0.01, NULL}, {"act_beta", KILN_OP_ATTR_FLOAT, 0, 0, 0.0, NULL}};

static const kiln_op_desc fused_matmul_desc = {
    .size = sizeof(kiln_op_desc), .abi_version = KILN_OP_ABI_VERSION,
    .domain = KILN_FUSED_DOMAIN, .name = "FusedMatMul", .since_version = 1,
    .n_inputs = 4, .inputs = matmul_inputs, .n_outputs = 1, .outputs = fused_outputs,
    .n_attrs = 3, .attrs = matmul_attrs, .infer = fused_matmul_infer,
    .compute = fused_matmul_compute, .flags = KILN_OP_FLAG_OPEN_ATTRS};

static const kiln_op_desc fused_gemm_desc = {
    .size = sizeof(kiln_op_desc), .abi_version = KILN_OP_ABI_VERSION,
    .domain = KILN_FUSED_DOMAIN, .name = "FusedGemm", .since_version = 1,
    .n_inputs = 3, .inputs = gemm_inputs, .n_outputs = 1, .outputs = fused_outputs,
    .n_attrs = 7, .attrs = gemm_attrs, .infer = fused_gemm_infer,
    .compute = fused_gemm_compute, .flags = KILN_OP_FLAG_OPEN_ATTRS};

static const kiln_described_op fused_described[] = {
    {&fused_gemm_desc, {.prepare = kiln_fused_gemm_prepare, .cost = kiln_cost_gemm, .flow = KILN_FLOW_GEMM}},
    {&fused_matmul_desc,
     {.prepare = kiln_fused_matmul_prepare, .cost = kiln_cost_matmul, .flow = KILN_FLOW_MATMUL}},
    {0},
};

enum { MAX_DESCRIBED = 16 };
static kiln_adapted_op described[MAX_DESCRIBED]; /* written once, under described_once */
static const kiln_op_schema *schemas[MAX_DESCRIBED];
static pthread_once_t described_once = PTHREAD_ONCE_INIT;

static void adapt_described(void) {
  size_t n = 0;
  for (const kiln_described_op *d = fused_described; d->desc && n < MAX_DESCRIBED; d++) {
    kiln_error e;
    kiln_adapted_op *a = &described[n];
    if (kiln_adapt_op(d->desc, false, a, &e) == KILN_OK) {
      a->schema.flags = d->facts.flags;
      a->schema.prepare = d->facts.prepare;
      a->schema.cost = d->facts.cost;
      a->schema.flow = d->facts.flow;
      schemas[n++] = &a->schema;
    } else { /* a bug in kiln's own description; the unit tests catch it */
      kiln_log(NULL, KILN_LOG_ERROR, "built-in op description rejected: %s", e.message);
    }
  }
  kiln_op_register_extra(schemas, n);
}

void kiln_builtin_ops_init(void) { pthread_once(&described_once, adapt_described); }

const kiln_op_schema *kiln_op_find_in(const struct kiln_plugin_set *ps, const char *domain,
                                      const char *name, int opset) {
  kiln_builtin_ops_init();
  const kiln_op_schema *s = kiln_op_find(domain, name, opset);
  return s ? s : kiln_plugins_find(ps, domain, name, opset);
}
