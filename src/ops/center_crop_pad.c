/* CenterCropPad (opset 18): each listed axis is cropped or zero-padded to the size the `shape`
 * input gives, centred: a crop starts at (dim - size) / 2 and a pad puts (size - dim) / 2
 * zeros before the data (both floored, as ONNX's function body does). */
#include <string.h>

#include "ops/op.h"

/* The axes the shape input addresses (all of them, or the `axes` attribute), normalised;
 * NULL on an error written to msg. */
static const char *ccp_axes(const kiln_node *nd, int rank, size_t nshape, int *axes) {
  size_t na = 0;
  const int64_t *a = kiln_attr_ints(nd, "axes", &na);
  if (!a) {
    if (nshape != (size_t)rank) return "shape must hold one size per axis of the input";
    for (int d = 0; d < rank; d++) axes[d] = d;
    return NULL;
  }
  if (na != nshape) return "shape must hold one size per entry of axes";
  bool seen[KILN_MAX_RANK] = {0};
  for (size_t i = 0; i < na; i++) {
    int64_t v = a[i] < 0 ? a[i] + rank : a[i];
    if (v < 0 || v >= rank) return "an axis is out of range";
    if (seen[v]) return "an axis is repeated";
    seen[v] = true;
    axes[i] = (int)v;
  }
  return NULL;
}

/* Output dims from the input dims (-1 unknown) and the target sizes. */
static const char *ccp_dims(const kiln_node *nd, int rank, const int64_t *in, const int64_t *shape,
                            size_t nshape, int64_t *out) {
  int axes[KILN_MAX_RANK];
  if (nshape > KILN_MAX_RANK) return "shape has more entries than the input has axes";
  const char *e = ccp_axes(nd, rank, nshape, axes);
  if (e) return e;
  memcpy(out, in, (size_t)rank * sizeof *out);
  for (size_t i = 0; i < nshape; i++) {
    if (shape[i] < 0) return "shape holds a negative size";
    out[axes[i]] = shape[i];
  }
  return NULL;
}

static kiln_code ccp_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  if (!x || x->rank < 0) return KILN_OK;
  int64_t shape[KILN_MAX_RANK], out[KILN_MAX_RANK];
  size_t n = 0;
  if (!kiln_iconst_ints(c, 1, shape, KILN_MAX_RANK, &n)) {
    /* the sizes are not known: with `axes`, the other axes keep their dims */
    size_t na = 0;
    const int64_t *a = kiln_attr_ints(c->node, "axes", &na);
    for (int d = 0; d < x->rank; d++) out[d] = a ? x->dims[d] : -1;
    for (size_t i = 0; a && i < na; i++) {
      int64_t v = a[i] < 0 ? a[i] + x->rank : a[i];
      if (v >= 0 && v < x->rank) out[v] = -1;
    }
    kiln_infer_tensor(c, 0, x->dtype, x->rank, out);
    return KILN_OK;
  }
  const char *e = ccp_dims(c->node, x->rank, x->dims, shape, n, out);
  if (e) return kiln_ifail(c, "%s", e);
  kiln_infer_tensor(c, 0, x->dtype, x->rank, out);
  return KILN_OK;
}

static kiln_code ccp_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (x->dtype == KILN_STRING) return kiln_kunsup(c, "string tensors are not supported");
  int64_t shape[KILN_MAX_RANK * 4], out[KILN_MAX_RANK];
  size_t n = 0;
  if ((rc = kiln_read_ints(c, c->in[1], shape, KILN_MAX_RANK * 4, &n))) return rc;
  const char *e = ccp_dims(c->node, x->rank, x->dims, shape, n, out);
  if (e) return kiln_kfail(c, "%s", e);
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, out); /* zero: the padding */
  if (!y) return c->err->code;
  if (!y->numel || !x->numel) return KILN_OK;
  /* input index = output index + shift per axis (crop: +start, pad: -before) */
  int64_t shift[KILN_MAX_RANK], lo[KILN_MAX_RANK], hi[KILN_MAX_RANK], xs[KILN_MAX_RANK];
  const int rank = x->rank;
  for (int d = rank - 1; d >= 0; d--) {
    shift[d] = x->dims[d] >= out[d] ? (x->dims[d] - out[d]) / 2 : -((out[d] - x->dims[d]) / 2);
    lo[d] = shift[d] < 0 ? -shift[d] : 0;                           /* first output index read */
    hi[d] = x->dims[d] - shift[d] < out[d] ? x->dims[d] - shift[d] : out[d];
    xs[d] = d == rank - 1 ? 1 : xs[d + 1] * x->dims[d + 1];
  }
  const size_t esz = kiln_dtype_size(x->dtype);
  const int last = rank - 1;
  const int64_t run = rank ? hi[last] - lo[last] : 1;
  /* walk the output rows that hold data; copy each row's data span at once */
  int64_t idx[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) idx[d] = lo[d];
  for (;;) {
    int64_t yo = 0, xo = 0;
    for (int d = 0; d < rank; d++) {
      yo = yo * out[d] + idx[d];
      xo += (idx[d] + shift[d]) * xs[d];
    }
    memcpy((char *)y->data + (size_t)yo * esz, (const char *)x->data + (size_t)xo * esz,
           (size_t)run * esz);
    int d = last - 1;
    while (d >= 0 && ++idx[d] >= hi[d]) idx[d] = lo[d], d--;
    if (d < 0) break;
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_center_crop_pad[] = {
    {.domain = "", .name = "CenterCropPad", .since = 18, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = ccp_infer, .run = ccp_run},
    {0},
};
