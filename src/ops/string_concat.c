/* StringConcat (opset 20): element-wise X + Y of two string tensors, numpy broadcasting. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

static kiln_code concat_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0), *y = kiln_in(c, 1);
  if (x->dtype != KILN_STRING || y->dtype != KILN_STRING)
    return kiln_kfail(c, "inputs must be string tensors, not %s and %s", kiln_dtype_name(x->dtype),
                      kiln_dtype_name(y->dtype));
  int rank;
  int64_t dims[KILN_MAX_RANK];
  if (!kiln_broadcast_shape(x->rank, x->dims, y->rank, y->dims, &rank, dims))
    return kiln_kfail(c, "shapes %s and %s do not broadcast", kiln_shape_str(x, (char[128]){0}, 128),
                      kiln_shape_str(y, (char[128]){0}, 128));
  kiln_tensor *z = kiln_out(c, 0, KILN_STRING, rank, dims);
  if (!z) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  kiln_bcast bx, by;
  kiln_bcast_init(&bx, rank, dims, x);
  kiln_bcast_init(&by, rank, dims, y);
  char *const *xs = x->data, *const *ys = y->data;
  char **zs = z->data;
  for (int64_t i = 0; i < z->numel; i++) {
    const char *a = xs[kiln_bcast_index(&bx, i)], *b = ys[kiln_bcast_index(&by, i)];
    a = a ? a : "";
    b = b ? b : "";
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return kiln_kfail(c, "out of memory");
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    free(zs[i]);
    zs[i] = s;
  }
  return KILN_OK;
}

static kiln_code concat_infer(kiln_ictx *c) { return kiln_infer_broadcast(c, KILN_STRING); }

const kiln_op_schema kiln_ops_string_concat[] = {
    {.domain = "", .name = "StringConcat", .since = 20, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = concat_infer, .run = concat_run, .flow = KILN_FLOW_BROADCAST},
    {0},
};
