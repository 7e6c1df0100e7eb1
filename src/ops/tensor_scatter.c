/* TensorScatter (opset 24): a KV cache update. present = past_cache with `update` written
 * along `axis` (default -2, never the batch axis 0) from position write_indices[b] of each
 * batch element b (0 when write_indices is omitted); mode "linear" requires the write to fit,
 * "circular" wraps positions modulo the cache length. Every other dim of update equals the
 * cache's. Any element type but strings (rows copied bytewise). */
#include <string.h>

#include "ops/op.h"

static kiln_code ts_check(kiln_kctx *c, const kiln_tensor *past, const kiln_tensor *up, int axis) {
  if (up->dtype != past->dtype || up->rank != past->rank)
    return kiln_kfail(c, "update must have past_cache's type and rank");
  if (axis == 0) return kiln_kfail(c, "axis must not be the batch axis 0");
  for (int d = 0; d < past->rank; d++)
    if (d == axis ? up->dims[d] > past->dims[d] : up->dims[d] != past->dims[d])
      return kiln_kfail(c, "update's dim %d (%lld) does not fit past_cache's (%lld)", d, (long long)up->dims[d],
                        (long long)past->dims[d]);
  return KILN_OK;
}

static kiln_code ts_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *past = kiln_in(c, 0), *up = kiln_in(c, 1), *wi = kiln_in(c, 2);
  if (past->dtype == KILN_STRING) return kiln_kunsup(c, "string caches are not supported");
  if (past->rank < 2) return kiln_kfail(c, "past_cache must have rank >= 2");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -2), past->rank);
  if (axis < 0) return c->err->code;
  if ((rc = ts_check(c, past, up, axis))) return rc;
  const char *mode = kiln_attr_str(c->node, "mode", "linear");
  bool circ = !strcmp(mode, "circular");
  if (!circ && strcmp(mode, "linear")) return kiln_kfail(c, "mode must be \"linear\" or \"circular\", not \"%s\"", mode);
  int64_t batch = past->dims[0], maxs = past->dims[axis], seq = up->dims[axis];
  if (wi && (!kiln_dtype_is_int(wi->dtype) || wi->numel != batch))
    return kiln_kfail(c, "write_indices must hold one integer per batch element (%lld)", (long long)batch);
  kiln_tensor *y = kiln_out_uninit(c, 0, past->dtype, past->rank, past->dims);
  if (!y) return c->err->code;
  memcpy(y->data, past->data, past->nbytes);
  size_t esz = kiln_dtype_size(past->dtype);
  int64_t inner = kiln_numel(past->rank - axis - 1, past->dims + axis + 1), mid = 1;
  for (int d = 1; d < axis; d++) mid *= past->dims[d];
  size_t row = (size_t)inner * esz;
  for (int64_t b = 0; b < batch; b++) {
    int64_t w = wi ? kiln_get_i64(wi, b) : 0;
    if (w < 0 || (!circ && w + seq > maxs) || (circ && maxs == 0 && seq))
      return kiln_kfail(c, "write index %lld of batch %lld: %lld rows do not fit the cache's %lld", (long long)w,
                        (long long)b, (long long)seq, (long long)maxs);
    for (int64_t m = 0; m < mid; m++)
      for (int64_t s = 0; s < seq; s++) {
        int64_t p = circ ? (w + s) % maxs : w + s;
        memcpy((char *)y->data + (size_t)(((b * mid + m) * maxs + p) * inner) * esz,
               (const char *)up->data + (size_t)(((b * mid + m) * seq + s) * inner) * esz, row);
      }
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_tensor_scatter[] = {
    {.domain = "", .name = "TensorScatter", .since = 24, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = ts_run, .flow = KILN_FLOW_SAME},
    {0},
};
