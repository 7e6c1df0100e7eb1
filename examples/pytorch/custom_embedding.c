/* Example plugin for examples/pytorch/custom_embedding.py: my.ops::CustomEmbedding, the forward
 * of the CustomEmbedding module as PyTorch exports it (torch.onnx.export of an autograd
 * Function's symbolic).
 *
 *   out = CustomEmbedding(input_ids, weight)      out[i..., :] = weight[input_ids[i...], :]
 *
 * input_ids int32/int64 [I...] (negative ids count from the end, as Gather), weight float [V, D],
 * out float [I..., D]; rows are copied in parallel on kiln's threads. An id outside [-V, V) is
 * an error naming its position.
 *
 * Built against kiln/kiln_op.h alone:
 *   cc -std=c11 -O2 -shared -fPIC -Iinclude examples/pytorch/custom_embedding.c -o custom_embedding.so
 */
#include <string.h>

#include "kiln/kiln_op.h"

#define MAX_RANK 12

static kiln_status ce_infer(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int ri = api->infer_input_rank(c, 0), rw = api->infer_input_rank(c, 1);
  if (rw >= 0 && rw != 2) return api->infer_error(c, KILN_STATUS_INVALID_ARG, "weight must be [V, D], got rank %d", rw);
  if (ri < 0 || ri + 1 > MAX_RANK) return api->infer_set_output(c, 0, KILN_DT_FLOAT, -1, NULL);
  int64_t dims[MAX_RANK];
  for (int d = 0; d < ri; d++) dims[d] = api->infer_input_dim(c, 0, d);
  dims[ri] = rw == 2 ? api->infer_input_dim(c, 1, 1) : -1;
  return api->infer_set_output(c, 0, KILN_DT_FLOAT, ri + 1, dims);
}

typedef struct ce_job {
  const void *ids;
  int wide;
  const float *weight;
  int64_t vocab, dim;
  float *out;
  int64_t bad; /* an out-of-range id's position, or -1 */
} ce_job;

static void ce_rows(void *user, size_t begin, size_t end) {
  ce_job *j = user;
  for (size_t r = begin; r < end; r++) {
    int64_t v = j->wide ? ((const int64_t *)j->ids)[r] : ((const int32_t *)j->ids)[r];
    if (v < 0) v += j->vocab;
    if (v < 0 || v >= j->vocab) {
      __atomic_store_n(&j->bad, (int64_t)r, __ATOMIC_RELAXED);
      continue;
    }
    memcpy(j->out + (int64_t)r * j->dim, j->weight + v * j->dim, (size_t)j->dim * sizeof(float));
  }
}

static kiln_status ce_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  const kiln_op_tensor *ids = api->input(c, 0), *w = api->input(c, 1);
  int ri = api->tensor_rank(ids);
  if (api->tensor_rank(w) != 2) return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "weight must be [V, D]");
  if (ri + 1 > MAX_RANK) return api->kernel_error(c, KILN_STATUS_UNSUPPORTED, "output rank above %d", MAX_RANK);
  const int64_t *wd = api->tensor_dims(w);
  int64_t dims[MAX_RANK];
  memcpy(dims, api->tensor_dims(ids), (size_t)ri * sizeof *dims);
  dims[ri] = wd[1];
  kiln_op_tensor *out = api->allocate_output(c, 0, KILN_DT_FLOAT, ri + 1, dims);
  if (!out) return KILN_STATUS_ERROR;
  ce_job j = {api->tensor_data(ids), api->tensor_dtype(ids) == KILN_DT_INT64, api->tensor_data(w), wd[0], wd[1],
              api->tensor_mutable_data(out), -1};
  api->parallel_for(c, (size_t)api->tensor_numel(ids), ce_rows, &j);
  if (j.bad >= 0)
    return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "input id at position %lld is out of range for %lld rows",
                             (long long)j.bad, (long long)j.vocab);
  return KILN_STATUS_OK;
}

static const kiln_op_io ce_inputs[] = {
    {"input_ids", KILN_DT_BIT(KILN_DT_INT32) | KILN_DT_BIT(KILN_DT_INT64), 0},
    {"weight", KILN_DT_BIT(KILN_DT_FLOAT), 0},
};
static const kiln_op_io ce_outputs[] = {{"out", KILN_DT_BIT(KILN_DT_FLOAT), 0}};

KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api, uint32_t abi_version) {
  if (!KILN_OP_ABI_COMPATIBLE(abi_version)) return KILN_STATUS_ABI_MISMATCH;
  kiln_op_desc d = {0};
  d.size = sizeof d;
  d.abi_version = KILN_OP_ABI_VERSION;
  d.domain = "my.ops";
  d.name = "CustomEmbedding";
  d.since_version = 1;
  d.n_inputs = 2;
  d.inputs = ce_inputs;
  d.n_outputs = 1;
  d.outputs = ce_outputs;
  d.infer = ce_infer;
  d.compute = ce_compute;
  return api->register_op(reg, &d);
}
