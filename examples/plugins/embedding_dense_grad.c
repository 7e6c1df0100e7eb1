/* Example plugin: my.ops::EmbeddingDenseGrad, the gradient of an embedding lookup.
 *
 *   table = EmbeddingDenseGrad(grad, indices)   num_weights=V, padding_idx=-1, scale_grad_by_freq=0
 *
 * grad is float [..., D], indices int32/int64 [...] (grad's shape without its last dim); table is
 * float [V, D] with table[v] = sum of grad rows whose index is v (a scatter-add), as PyTorch's
 * embedding_dense_backward: rows of padding_idx (when >= 0) get no gradient, and with
 * scale_grad_by_freq each row's contribution is divided by how often its index occurs.
 *
 * Deterministic at any thread count: the indices are bucketed by value first (a stable counting
 * sort, in scratch memory from kiln), then kiln's parallel_for splits the table rows between
 * threads; each row is owned by one thread and sums its gradient rows in index-position order,
 * so no two threads ever write the same row and the summation order never changes.
 *
 * Built against kiln/kiln_op.h alone:
 *   cc -std=c11 -O2 -shared -fPIC -Iinclude examples/plugins/embedding_dense_grad.c \
 *      -o embedding_dense_grad.so
 */
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_op.h"

typedef struct edg_state {
  int64_t num_weights;
  int64_t padding_idx;
  int64_t scale_by_freq;
} edg_state;

static kiln_status edg_create(const kiln_op_attrs *attrs, const kiln_api *api, void *user, void **state) {
  (void)user;
  edg_state *s = calloc(1, sizeof *s);
  if (!s) return KILN_STATUS_NOMEM;
  api->attr_int(attrs, "num_weights", &s->num_weights);
  api->attr_int(attrs, "padding_idx", &s->padding_idx);
  api->attr_int(attrs, "scale_grad_by_freq", &s->scale_by_freq);
  if (s->num_weights <= 0) {
    long long v = (long long)s->num_weights;
    free(s);
    return api->attrs_error(attrs, KILN_STATUS_INVALID_ARG, "num_weights must be positive, got %lld", v);
  }
  *state = s;
  return KILN_STATUS_OK;
}

static void edg_destroy(void *state, void *user) {
  (void)user;
  free(state);
}

/* grad [..., D] and indices [...] -> table [num_weights, D] */
static kiln_status edg_infer(kiln_infer_ctx *c, const kiln_api *api, void *user) {
  (void)user;
  int64_t v = 0;
  api->attr_int(api->infer_attrs(c), "num_weights", &v);
  int rg = api->infer_input_rank(c, 0), ri = api->infer_input_rank(c, 1);
  if (rg == 0) return api->infer_error(c, KILN_STATUS_INVALID_ARG, "grad must have rank >= 1 (its last dim is D)");
  if (rg > 0 && ri >= 0 && ri != rg - 1)
    return api->infer_error(c, KILN_STATUS_INVALID_ARG,
                            "indices (rank %d) must have grad's shape without its last dim (grad has rank %d)", ri, rg);
  for (int d = 0; rg > 0 && ri == rg - 1 && d < ri; d++) {
    int64_t a = api->infer_input_dim(c, 0, d), b = api->infer_input_dim(c, 1, d);
    if (a >= 0 && b >= 0 && a != b)
      return api->infer_error(c, KILN_STATUS_INVALID_ARG, "grad dim %d is %lld but indices dim %d is %lld", d,
                              (long long)a, d, (long long)b);
  }
  int64_t dims[2] = {v > 0 ? v : -1, rg > 0 ? api->infer_input_dim(c, 0, rg - 1) : -1};
  return api->infer_set_output(c, 0, KILN_DT_FLOAT, 2, dims);
}

typedef struct edg_job {
  const float *grad;
  float *table;
  const int64_t *start; /* [V + 1]: positions of index v are order[start[v] .. start[v+1]) */
  const int64_t *order;
  int64_t dim;
  int scale;
} edg_job;

/* Rows [begin, end) of the table: each written by this call only. */
static void edg_rows(void *user, size_t begin, size_t end) {
  const edg_job *j = user;
  for (size_t v = begin; v < end; v++) {
    float *row = j->table + (int64_t)v * j->dim;
    int64_t n = j->start[v + 1] - j->start[v];
    float s = j->scale && n > 0 ? 1.0f / (float)n : 1.0f;
    for (int64_t k = j->start[v]; k < j->start[v + 1]; k++) {
      const float *g = j->grad + j->order[k] * j->dim;
      if (j->scale)
        for (int64_t d = 0; d < j->dim; d++) row[d] += g[d] * s;
      else
        for (int64_t d = 0; d < j->dim; d++) row[d] += g[d];
    }
  }
}

static kiln_status edg_compute(kiln_kernel_ctx *c, const kiln_api *api, void *state) {
  const edg_state *s = state;
  const kiln_op_tensor *grad = api->input(c, 0), *idx = api->input(c, 1);
  int rg = api->tensor_rank(grad), ri = api->tensor_rank(idx);
  const int64_t *gd = api->tensor_dims(grad), *id = api->tensor_dims(idx);
  if (rg < 1 || ri != rg - 1 || memcmp(gd, id, (size_t)ri * sizeof *gd))
    return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "indices must have grad's shape without its last dim");
  int64_t dim = gd[rg - 1], n = api->tensor_numel(idx), vocab = s->num_weights;
  int64_t out_dims[2] = {vocab, dim};
  kiln_op_tensor *table = api->allocate_output(c, 0, KILN_DT_FLOAT, 2, out_dims); /* zero-filled */
  if (!table) return KILN_STATUS_ERROR;
  int64_t *start = api->allocate(c, (size_t)(vocab + 1) * sizeof *start);
  int64_t *order = api->allocate(c, (size_t)(n > 0 ? n : 1) * sizeof *order);
  int64_t *fill = api->allocate(c, (size_t)(vocab + 1) * sizeof *fill);
  if (!start || !order || !fill) return api->kernel_error(c, KILN_STATUS_NOMEM, "out of scratch memory");
  const void *ip = api->tensor_data(idx);
  int wide = api->tensor_dtype(idx) == KILN_DT_INT64;
  memset(start, 0, (size_t)(vocab + 1) * sizeof *start);
  /* Count each index (bounds-checked), skipping padding_idx. */
  for (int64_t i = 0; i < n; i++) {
    int64_t v = wide ? ((const int64_t *)ip)[i] : ((const int32_t *)ip)[i];
    if (v < 0 || v >= vocab)
      return api->kernel_error(c, KILN_STATUS_INVALID_ARG, "index %lld at position %lld is out of range [0, %lld)",
                               (long long)v, (long long)i, (long long)vocab);
    if (v != s->padding_idx) start[v + 1]++;
  }
  for (int64_t v = 0; v < vocab; v++) start[v + 1] += start[v];
  memcpy(fill, start, (size_t)(vocab + 1) * sizeof *fill);
  for (int64_t i = 0; i < n; i++) { /* stable: positions in increasing order per index */
    int64_t v = wide ? ((const int64_t *)ip)[i] : ((const int32_t *)ip)[i];
    if (v != s->padding_idx) order[fill[v]++] = i;
  }
  edg_job job = {api->tensor_data(grad), api->tensor_mutable_data(table), start, order, dim, s->scale_by_freq != 0};
  api->parallel_for(c, (size_t)vocab, edg_rows, &job);
  api->release(c, fill);
  return KILN_STATUS_OK; /* start and order are freed by kiln when compute returns */
}

static const kiln_op_io edg_inputs[] = {
    {"grad", KILN_DT_BIT(KILN_DT_FLOAT), 0},
    {"indices", KILN_DT_BIT(KILN_DT_INT32) | KILN_DT_BIT(KILN_DT_INT64), 0},
};
static const kiln_op_io edg_outputs[] = {{"table", KILN_DT_BIT(KILN_DT_FLOAT), 0}};
static const kiln_op_attr edg_attrs[] = {
    {"num_weights", KILN_OP_ATTR_INT, 1, 0, 0, NULL},
    {"padding_idx", KILN_OP_ATTR_INT, 0, -1, 0, NULL},
    {"scale_grad_by_freq", KILN_OP_ATTR_INT, 0, 0, 0, NULL},
};

KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api, uint32_t abi_version) {
  if (!KILN_OP_ABI_COMPATIBLE(abi_version)) return KILN_STATUS_ABI_MISMATCH;
  kiln_op_desc d = {0};
  d.size = sizeof d;
  d.abi_version = KILN_OP_ABI_VERSION;
  d.domain = "my.ops";
  d.name = "EmbeddingDenseGrad";
  d.since_version = 1;
  d.n_inputs = 2;
  d.inputs = edg_inputs;
  d.n_outputs = 1;
  d.outputs = edg_outputs;
  d.n_attrs = 3;
  d.attrs = edg_attrs;
  d.infer = edg_infer;
  d.create = edg_create;
  d.compute = edg_compute;
  d.destroy = edg_destroy;
  return api->register_op(reg, &d);
}
