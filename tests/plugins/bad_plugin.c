/* One broken plugin per kind, chosen by a BAD_<kind> definition (see tests/CMakeLists.txt):
 * kiln must refuse each with its own message, never crash. */
#include <stddef.h>

#include "kiln/kiln_op.h"

static kiln_status copy_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  const kiln_op_tensor *x = api->input(c, 0);
  return api->allocate_output(c, 0, api->tensor_dtype(x), api->tensor_rank(x), api->tensor_dims(x))
             ? KILN_STATUS_OK : KILN_STATUS_ERROR;
}

static const kiln_op_io one[] = {{"x", 0, 0}};
static const kiln_op_io opt_then_req[] = {{"a", 0, KILN_OP_IO_OPTIONAL}, {"b", 0, 0}};
static const kiln_op_attr bad_attrs[] = {{"mode", 99, 0, 0, 0, NULL}};

static kiln_op_desc base(const char *domain, const char *name) {
  kiln_op_desc d = {0};
  d.size = sizeof d;
  d.abi_version = KILN_OP_ABI_VERSION;
  d.domain = domain;
  d.name = name;
  d.since_version = 1;
  d.n_inputs = 1;
  d.inputs = one;
  d.n_outputs = 1;
  d.outputs = one;
  d.compute = copy_compute;
  return d;
}

KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api, uint32_t abi_version) {
  (void)opt_then_req;
  (void)bad_attrs;
#if defined(BAD_abi_refused)
  /* a plugin that needs a newer kiln than this one (ABI 1.5) */
  if (abi_version < ((1u << 16) | 5u)) {
    api->registry_error(reg, KILN_STATUS_ABI_MISMATCH, "this plugin needs kiln op ABI 1.5 or newer");
    return KILN_STATUS_ABI_MISMATCH;
  }
#endif
  if (!KILN_OP_ABI_COMPATIBLE(abi_version)) return KILN_STATUS_ABI_MISMATCH;
  kiln_op_desc d = base("bad.ops", "Copy");
#if defined(BAD_abi_newer)
  d.abi_version = (uint32_t)(KILN_OP_ABI_MAJOR + 1) << 16; /* built for a future major */
#elif defined(BAD_dup_builtin)
  d = base("", "Relu");
#elif defined(BAD_dup_example)
  d = base("my.ops", "FusedGatherAddRelu");
#elif defined(BAD_dup_self)
  api->register_op(reg, &d);
#elif defined(BAD_bad_size)
  d.size = 12;
#elif defined(BAD_no_compute)
  d.compute = NULL;
#elif defined(BAD_bad_arity)
  d.n_inputs = 2;
  d.inputs = opt_then_req;
#elif defined(BAD_bad_attr)
  d.n_attrs = 1;
  d.attrs = bad_attrs;
#elif defined(BAD_bad_domain)
  d.domain = "ai.kiln";
#elif defined(BAD_register_fails)
  api->registry_error(reg, KILN_STATUS_ERROR, "cannot find its license file");
  return KILN_STATUS_ERROR;
#endif
  kiln_status st = api->register_op(reg, &d);
  if (st != KILN_STATUS_OK) return st;
#if defined(BAD_bad_pattern_op) || defined(BAD_bad_pattern_input)
  static const kiln_fusion_step steps[] = {{"Abs", -1}, {"Neg", 0}};
  static const kiln_fusion_input inputs[] = {{0, 0}};
  kiln_fusion_desc f = {0};
  f.size = sizeof f;
  f.abi_version = KILN_OP_ABI_VERSION;
  f.name = "abs_neg";
  f.domain = "bad.ops";
  f.op_type = "Copy";
  f.n_steps = 2;
  f.steps = steps;
  f.n_inputs = 1;
  f.inputs = inputs;
#if defined(BAD_bad_pattern_op)
  f.op_type = "NotRegistered";
#else
  static const kiln_fusion_input bad_inputs[] = {{5, 0}}; /* there is no step 5 */
  f.inputs = bad_inputs;
#endif
  return api->register_fusion(reg, &f);
#else
  return KILN_STATUS_OK;
#endif
}
