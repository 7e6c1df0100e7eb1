/* Conversions between the protobuf-c ONNX messages and kiln's IR. Internal to src/onnx and the
 * value I/O of the public API. */
#ifndef KILN_ONNX_PROTO_H
#define KILN_ONNX_PROTO_H

#include "ir/graph.h"
#include "onnx-data.pb-c.h"
#include "onnx/onnx.pb-c.h"

/* Where external data lives: files are resolved under base_dir, and may not leave it. */
typedef struct kiln_ext_ctx {
  const char *base_dir; /* NULL: external data refused */
  kiln_ir_model *model;    /* receives mmap'd regions; NULL: data is copied */
} kiln_ext_ctx;

kiln_tensor *kiln_tensor_from_proto(const Onnx__TensorProto *p, const kiln_ext_ctx *ext,
                                    kiln_error *err);
/* As kiln_tensor_from_proto, but raw_data bytes move into the tensor (the message's raw_data is
 * emptied) instead of being copied. */
kiln_tensor *kiln_tensor_take_proto(Onnx__TensorProto *p, const kiln_ext_ctx *ext, kiln_error *err);
kiln_tensor *kiln_sparse_from_proto(const Onnx__SparseTensorProto *p, kiln_error *err);
/* Fills a TensorProto (init'ed by the caller) pointing into t's memory; free with
 * kiln_tensor_proto_release. */
kiln_code kiln_tensor_to_proto(const kiln_tensor *t, const char *name, Onnx__TensorProto *p,
                               kiln_error *err);
void kiln_tensor_proto_release(Onnx__TensorProto *p);
kiln_code kiln_type_from_proto(const Onnx__TypeProto *p, kiln_type *t, kiln_error *err);

#endif
