/* BitCast (opset 26): the input's bytes reinterpreted as element type `to` of the same bit
 * width (little endian, as kiln stores every type), same shape. Strings are refused, and so are
 * the sub-byte types, whose storage kiln packs differently from one element per byte. */
#include <string.h>

#include "ops/op.h"

/* The `to` attribute when it names a type BitCast can produce, else UNDEFINED. */
static kiln_dtype bitcast_target(const kiln_node *n) {
  int64_t to = kiln_attr_int(n, "to", 0);
  if (to <= 0 || to > 64 || to == KILN_STRING) return KILN_UNDEFINED;
  /* 21 uint4, 22 int4, 23 float4e2m1, 25 uint2, 26 int2 (ONNX's numbering): packed */
  if (to == 21 || to == 22 || to == 23 || to == 25 || to == 26) return KILN_UNDEFINED;
  return kiln_dtype_size((kiln_dtype)to) ? (kiln_dtype)to : KILN_UNDEFINED;
}

static kiln_code bitcast_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0);
  kiln_dtype to = bitcast_target(c->node);
  if (!to) return kiln_kfail(c, "attribute 'to' (%lld) is missing or not a fixed-width element type kiln has",
                             (long long)kiln_attr_int(c->node, "to", 0));
  if (x->dtype == KILN_STRING || kiln_dtype_size(x->dtype) != kiln_dtype_size(to))
    return kiln_kfail(c, "%s and %s differ in bit width", kiln_dtype_name(x->dtype), kiln_dtype_name(to));
  kiln_tensor *y = kiln_out_uninit(c, 0, to, x->rank, x->dims);
  if (!y) return c->err->code;
  if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
  return KILN_OK;
}

static kiln_code bitcast_infer(kiln_ictx *c) {
  kiln_dtype to = bitcast_target(c->node);
  if (!to) return kiln_ifail(c, "attribute 'to' is missing or not a fixed-width element type kiln has");
  const kiln_type *x = kiln_itype(c, 0);
  if (x && x->dtype && (x->dtype == KILN_STRING || kiln_dtype_size(x->dtype) != kiln_dtype_size(to)))
    return kiln_ifail(c, "%s and %s differ in bit width", kiln_dtype_name(x->dtype), kiln_dtype_name(to));
  if (x) {
    kiln_infer_same(c, 0, 0);
    c->out[0]->dtype = to;
  } else {
    kiln_infer_tensor(c, 0, to, -1, NULL);
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_bitcast[] = {
    {.domain = "", .name = "BitCast", .since = 26, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = bitcast_infer, .run = bitcast_run, .flow = KILN_FLOW_SAME},
    {0},
};
