/* Build small ONNX models in memory for tests (protobuf-c), so bad-input cases are explicit. */
#ifndef KILN_TEST_MODELGEN_H
#define KILN_TEST_MODELGEN_H

#include <stddef.h>
#include <stdint.h>

#include "onnx/onnx.pb-c.h"

typedef struct mg_model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto op;
  Onnx__OperatorSetIdProto *opp[1];
  Onnx__NodeProto nodes[8];
  Onnx__NodeProto *nodep[8];
  char *node_in[8][4], *node_out[8][2];
  Onnx__ValueInfoProto vi[8];
  Onnx__ValueInfoProto *inp[4], *outp[4];
  Onnx__TypeProto tp[8];
  Onnx__TypeProto__Tensor tt[8];
  Onnx__TensorShapeProto sh[8];
  Onnx__TensorShapeProto__Dimension dim[8][4];
  Onnx__TensorShapeProto__Dimension *dimp[8][4];
  Onnx__TensorProto inits[4];
  Onnx__TensorProto *initp[4];
  Onnx__StringStringEntryProto ext[4][2];
  Onnx__StringStringEntryProto *extp[4][2];
  size_t n_vi;
} mg_model;

void mg_init(mg_model *mm, int64_t opset);
/* Add a node with up to 4 inputs / 2 outputs (NULL-terminated name lists). */
Onnx__NodeProto *mg_node(mg_model *mm, const char *op, const char *const *ins, const char *const *outs);
/* Declare a graph input/output of the given dims (a negative dim is the symbolic dim "N"). */
void mg_input(mg_model *mm, const char *name, int32_t dtype, int rank, const int64_t *dims);
void mg_output(mg_model *mm, const char *name, int32_t dtype, int rank, const int64_t *dims);
/* Add a float initializer with raw_data of `raw_len` bytes (may differ from what dims need). */
Onnx__TensorProto *mg_init_raw(mg_model *mm, const char *name, int rank, const int64_t *dims,
                               const void *raw, size_t raw_len);
/* Serialise; caller frees. */
uint8_t *mg_pack(mg_model *mm, size_t *len);

#endif
