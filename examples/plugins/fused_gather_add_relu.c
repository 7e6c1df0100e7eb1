/* Example plugin: a custom fused operator and the fusion pattern that introduces it.
 *
 *   Gather(data, indices, axis=0) -> Add(., other) -> Relu   becomes
 *   my.ops::FusedGatherAddRelu(data, indices, other)
 *
 * out[i..., k...] = max(data[indices[i...], k...] + other[broadcast], 0): one pass over the
 * output instead of three, without the two intermediate tensors, split over kiln's threads by
 * gathered row. `other` (a bias over the row, a positional table, a tensor of the output's
 * shape...) must broadcast to the gathered shape without growing it; the pattern's check makes
 * sure of that when the shapes are known at load time, and the kernel fails otherwise, which
 * makes kiln run the original Gather -> Add -> Relu instead (fallback).
 *
 * Built against kiln/kiln_op.h alone:
 *   cc -std=c11 -O2 -shared -fPIC -Iinclude examples/plugins/fused_gather_add_relu.c \
 *      -o fused_gather_add_relu.so
 */
#include <string.h>

#include "kiln/kiln_op.h"

#define MAX_RANK 12

/* indices [I...] into data [V, R...] gives [I..., R...]. */
static kiln_status gar_infer(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int rd = api->infer_input_rank(c, 0), ri = api->infer_input_rank(c, 1);
  if (rd == 0) return api->infer_error(c, KILN_STATUS_INVALID_ARG, "data must have rank >= 1");
  if (rd < 0 || ri < 0 || rd - 1 + ri > MAX_RANK) return api->infer_set_output(c, 0, KILN_DT_FLOAT, -1, NULL);
  int64_t dims[MAX_RANK];
  int n = 0;
  for (int d = 0; d < ri; d++) dims[n++] = api->infer_input_dim(c, 1, d);
  for (int d = 1; d < rd; d++) dims[n++] = api->infer_input_dim(c, 0, d);
  return api->infer_set_output(c, 0, KILN_DT_FLOAT, n, dims);
}

typedef struct gar_job {
  const float *data;
  const void *indices;
  int wide;             /* indices are int64 (else int32) */
  int64_t vocab, row;   /* data is [vocab, row] when flattened */
  const float *other;
  const int64_t *row_off; /* other's offset for element k of a row (broadcast), [row] */
  int contiguous;         /* row_off[k] == k for every k */
  int rank_i;            /* rank of indices */
  const int64_t *idims;  /* indices' dims */
  int64_t istride[MAX_RANK]; /* other's stride per indices dim (0 where broadcast) */
  float *out;
  int64_t bad;           /* first out-of-range index position, or -1 (written by one thread) */
} gar_job;

static void gar_rows(void *user, size_t begin, size_t end) {
  gar_job *j = user;
  for (size_t r = begin; r < end; r++) {
    int64_t v = j->wide ? ((const int64_t *)j->indices)[r] : ((const int32_t *)j->indices)[r];
    if (v < 0) v += j->vocab;
    float *o = j->out + (int64_t)r * j->row;
    if (v < 0 || v >= j->vocab) {
      __atomic_store_n(&j->bad, (int64_t)r, __ATOMIC_RELAXED);
      continue;
    }
    int64_t base = 0, q = (int64_t)r; /* other's offset for this gathered row */
    for (int d = j->rank_i - 1; d >= 0; d--) {
      base += (q % j->idims[d]) * j->istride[d];
      q /= j->idims[d];
    }
    const float *src = j->data + v * j->row, *oth = j->other + base;
    if (j->contiguous) { /* other covers the whole row (a bias, a positional table): vectorizes */
      for (int64_t k = 0; k < j->row; k++) {
        float x = src[k] + oth[k];
        o[k] = x > 0.0f ? x : 0.0f;
      }
    } else {
      for (int64_t k = 0; k < j->row; k++) {
        float x = src[k] + oth[j->row_off[k]];
        o[k] = x > 0.0f ? x : 0.0f;
      }
    }
  }
}

static kiln_status gar_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  (void)state;
  const kiln_op_tensor *data = api->input(c, 0), *idx = api->input(c, 1), *other = api->input(c, 2);
  int rd = api->tensor_rank(data), ri = api->tensor_rank(idx), ro = api->tensor_rank(other);
  if (rd < 1) return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "data must have rank >= 1");
  if (ri + rd - 1 > MAX_RANK) return api->kernel_error(c, KILN_STATUS_UNSUPPORTED, "output rank above %d", MAX_RANK);
  const int64_t *dd = api->tensor_dims(data), *id = api->tensor_dims(idx), *od = api->tensor_dims(other);
  int64_t dims[MAX_RANK];
  int r = 0;
  for (int d = 0; d < ri; d++) dims[r++] = id[d];
  for (int d = 1; d < rd; d++) dims[r++] = dd[d];
  /* other must broadcast to dims (right-aligned) without growing it */
  if (ro > r)
    return api->kernel_error(c, KILN_STATUS_UNSUPPORTED, "other has rank %d, above the gathered rank %d", ro, r);
  int64_t ostride[MAX_RANK], s = 1;
  for (int d = r - 1; d >= 0; d--) {
    int k = d - (r - ro);
    int64_t od_k = k >= 0 ? od[k] : 1;
    if (od_k != 1 && od_k != dims[d])
      return api->kernel_error(c, KILN_STATUS_UNSUPPORTED,
                               "other's dim %d (%lld) does not broadcast to the gathered dim %d (%lld)", k,
                               (long long)od_k, d, (long long)dims[d]);
    ostride[d] = od_k == 1 ? 0 : s;
    s *= od_k;
  }
  kiln_op_tensor *out = api->allocate_output(c, 0, KILN_DT_FLOAT, r, dims);
  if (!out) return KILN_STATUS_ERROR;
  int64_t row = 1, rows = api->tensor_numel(idx);
  for (int d = 1; d < rd; d++) row *= dd[d];
  gar_job j;
  memset(&j, 0, sizeof j);
  j.data = api->tensor_data(data);
  j.indices = api->tensor_data(idx);
  j.wide = api->tensor_dtype(idx) == KILN_DT_INT64;
  j.vocab = dd[0];
  j.row = row;
  j.other = api->tensor_data(other);
  j.rank_i = ri;
  j.idims = id;
  for (int d = 0; d < ri; d++) j.istride[d] = ostride[d];
  j.out = api->tensor_mutable_data(out);
  j.bad = -1;
  int64_t *row_off = api->allocate(c, (size_t)(row > 0 ? row : 1) * sizeof *row_off);
  if (!row_off) return api->kernel_error(c, KILN_STATUS_NOMEM, "out of scratch memory");
  for (int64_t k = 0; k < row; k++) { /* offset of row element k in other */
    int64_t off = 0, q = k;
    for (int d = r - 1; d >= ri; d--) {
      off += (q % dims[d]) * ostride[d];
      q /= dims[d];
    }
    row_off[k] = off;
  }
  j.row_off = row_off;
  j.contiguous = 1;
  for (int64_t k = 0; k < row; k++) j.contiguous &= row_off[k] == k;
  api->parallel_for(c, (size_t)rows, gar_rows, &j);
  if (j.bad >= 0)
    return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "index at position %lld is out of range for %lld rows",
                             (long long)j.bad, (long long)j.vocab);
  return KILN_STATUS_OK;
}

/* Accept a Gather -> Add -> Relu match only where the fused kernel computes the same thing:
 * a float Gather over axis 0, and an Add whose other side broadcasts to the gathered shape
 * without growing it. Dims unknown at load time are checked by the kernel (which falls back). */
static int gar_check(kiln_fusion_match *m, const kiln_api *api, void *user) {
  (void)user;
  int64_t axis = 0;
  kiln_status st = api->attr_int(api->match_attrs(m, 0), "axis", &axis);
  if (st != KILN_STATUS_OK && st != KILN_STATUS_NOT_FOUND) return 0;
  int rd = api->match_input_rank(m, 0, 0);
  if (axis != 0 && !(rd > 0 && axis == -rd)) return 0;
  if (api->match_input_dtype(m, 0, 0) != KILN_DT_FLOAT) return 0;
  size_t other = 1 - api->match_chain_input(m, 1); /* the Add input Gather does not feed */
  if (api->match_input_dtype(m, 1, other) != KILN_DT_FLOAT) return 0;
  int rg = api->match_output_rank(m, 0), ro = api->match_input_rank(m, 1, other);
  if (rg < 0 || ro < 0 || ro > rg) return 0;
  for (int k = 0; k < ro; k++) {
    int64_t o = api->match_input_dim(m, 1, other, k), g = api->match_output_dim(m, 0, k + rg - ro);
    if (o >= 0 && g >= 0 && o != 1 && o != g) return 0;
  }
  return 1;
}

static const kiln_op_io gar_inputs[] = {
    {"data", KILN_DT_BIT(KILN_DT_FLOAT), 0},
    {"indices", KILN_DT_BIT(KILN_DT_INT32) | KILN_DT_BIT(KILN_DT_INT64), 0},
    {"other", KILN_DT_BIT(KILN_DT_FLOAT), 0},
};
static const kiln_op_io gar_outputs[] = {{"out", KILN_DT_BIT(KILN_DT_FLOAT), 0}};

static const kiln_fusion_step gar_steps[] = {{"Gather", -1}, {"Add", -1}, {"Relu", 0}};
static const kiln_fusion_input gar_fused_inputs[] = {{0, 0}, {0, 1}, {1, KILN_FUSION_OTHER}};

KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api, uint32_t abi_version) {
  if (!KILN_OP_ABI_COMPATIBLE(abi_version)) return KILN_STATUS_ABI_MISMATCH;
  kiln_op_desc d = {0};
  d.size = sizeof d;
  d.abi_version = KILN_OP_ABI_VERSION;
  d.domain = "my.ops";
  d.name = "FusedGatherAddRelu";
  d.since_version = 1;
  d.n_inputs = 3;
  d.inputs = gar_inputs;
  d.n_outputs = 1;
  d.outputs = gar_outputs;
  d.infer = gar_infer;
  d.compute = gar_compute;
  kiln_status st = api->register_op(reg, &d);
  if (st != KILN_STATUS_OK) return st;
  kiln_fusion_desc f = {0};
  f.size = sizeof f;
  f.abi_version = KILN_OP_ABI_VERSION;
  f.name = "gather_add_relu";
  f.domain = "my.ops";
  f.op_type = "FusedGatherAddRelu";
  f.n_steps = 3;
  f.steps = gar_steps;
  f.n_inputs = 3;
  f.inputs = gar_fused_inputs;
  f.check = gar_check;
  return api->register_fusion(reg, &f);
}
