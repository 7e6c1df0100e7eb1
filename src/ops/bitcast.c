/* BitCast (opset 26): the input's bits reinterpreted as element type `to` of the same bit width
 * (little endian, as kiln stores every type), same shape. The 4-bit types (uint4, int4,
 * float4e2m1), which kiln keeps one per byte (docs/element-types.md), cast among themselves
 * through their low nibble (int4 sign-extended). Strings are refused. */
#include <string.h>

#include "ops/op.h"

static bool four_bit(kiln_dtype t) { return t == KILN_UINT4 || t == KILN_INT4 || t == KILN_FLOAT4E2M1; }

/* Bits per element (0: not a type BitCast takes). */
static int type_bits(kiln_dtype t) {
  if (t == KILN_UNDEFINED || t == KILN_STRING) return 0;
  return four_bit(t) ? 4 : (int)kiln_dtype_size(t) * 8;
}

/* The `to` attribute when it names a type BitCast can produce, else UNDEFINED. */
static kiln_dtype bitcast_target(const kiln_node *n) {
  int64_t to = kiln_attr_int(n, "to", 0);
  if (to <= 0 || to > 64) return KILN_UNDEFINED;
  return type_bits((kiln_dtype)to) ? (kiln_dtype)to : KILN_UNDEFINED;
}

static kiln_code bitcast_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0);
  kiln_dtype to = bitcast_target(c->node);
  if (!to) return kiln_kfail(c, "attribute 'to' (%lld) is missing or not a fixed-width element type kiln has",
                             (long long)kiln_attr_int(c->node, "to", 0));
  if (!type_bits(x->dtype) || type_bits(x->dtype) != type_bits(to))
    return kiln_kfail(c, "%s and %s differ in bit width", kiln_dtype_name(x->dtype), kiln_dtype_name(to));
  kiln_tensor *y = kiln_out_uninit(c, 0, to, x->rank, x->dims);
  if (!y) return c->err->code;
  if (four_bit(to)) {
    const uint8_t *xs = x->data;
    uint8_t *ys = y->data;
    for (int64_t i = 0; i < x->numel; i++) {
      uint8_t nib = xs[i] & 0xf;
      ys[i] = to == KILN_INT4 && (nib & 8) ? (uint8_t)(nib | 0xf0) : nib;
    }
  } else if (x->nbytes) {
    memcpy(y->data, x->data, x->nbytes);
  }
  return KILN_OK;
}

static kiln_code bitcast_infer(kiln_ictx *c) {
  kiln_dtype to = bitcast_target(c->node);
  if (!to) return kiln_ifail(c, "attribute 'to' is missing or not a fixed-width element type kiln has");
  const kiln_type *x = kiln_itype(c, 0);
  if (x && x->dtype && type_bits(x->dtype) != type_bits(to))
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
