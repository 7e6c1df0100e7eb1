#include "modelgen.h"

#include <stdlib.h>
#include <string.h>

void mg_init(mg_model *mm, int64_t opset) {
  memset(mm, 0, sizeof *mm);
  onnx__model_proto__init(&mm->m);
  onnx__graph_proto__init(&mm->g);
  onnx__operator_set_id_proto__init(&mm->op);
  mm->op.domain = (char *)"";
  mm->op.has_version = 1;
  mm->op.version = opset;
  mm->opp[0] = &mm->op;
  mm->m.has_ir_version = 1;
  mm->m.ir_version = 8;
  mm->m.n_opset_import = 1;
  mm->m.opset_import = mm->opp;
  mm->m.graph = &mm->g;
  mm->g.name = (char *)"test";
  mm->g.node = mm->nodep;
  mm->g.input = mm->inp;
  mm->g.output = mm->outp;
  mm->g.initializer = mm->initp;
}

Onnx__NodeProto *mg_node(mg_model *mm, const char *op, const char *const *ins, const char *const *outs) {
  size_t k = mm->g.n_node++;
  Onnx__NodeProto *n = &mm->nodes[k];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->input = mm->node_in[k];
  n->output = mm->node_out[k];
  for (; ins && *ins && n->n_input < 4; ins++) mm->node_in[k][n->n_input++] = (char *)*ins;
  for (; outs && *outs && n->n_output < 2; outs++) mm->node_out[k][n->n_output++] = (char *)*outs;
  mm->nodep[k] = n;
  return n;
}

static Onnx__ValueInfoProto *value_info(mg_model *mm, const char *name, int32_t dtype, int rank,
                                        const int64_t *dims) {
  size_t k = mm->n_vi++;
  Onnx__ValueInfoProto *v = &mm->vi[k];
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(&mm->tp[k]);
  onnx__type_proto__tensor__init(&mm->tt[k]);
  onnx__tensor_shape_proto__init(&mm->sh[k]);
  v->name = (char *)name;
  v->type = &mm->tp[k];
  mm->tp[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  mm->tp[k].tensor_type = &mm->tt[k];
  mm->tt[k].has_elem_type = 1;
  mm->tt[k].elem_type = dtype;
  mm->tt[k].shape = &mm->sh[k];
  mm->sh[k].n_dim = (size_t)rank;
  mm->sh[k].dim = mm->dimp[k];
  for (int d = 0; d < rank; d++) {
    onnx__tensor_shape_proto__dimension__init(&mm->dim[k][d]);
    if (dims[d] < 0) { /* a symbolic dim */
      mm->dim[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      mm->dim[k][d].dim_param = (char *)"N";
    } else {
      mm->dim[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      mm->dim[k][d].dim_value = dims[d];
    }
    mm->dimp[k][d] = &mm->dim[k][d];
  }
  return v;
}

void mg_input(mg_model *mm, const char *name, int32_t dtype, int rank, const int64_t *dims) {
  mm->inp[mm->g.n_input++] = value_info(mm, name, dtype, rank, dims);
}

void mg_output(mg_model *mm, const char *name, int32_t dtype, int rank, const int64_t *dims) {
  mm->outp[mm->g.n_output++] = value_info(mm, name, dtype, rank, dims);
}

Onnx__TensorProto *mg_init_raw(mg_model *mm, const char *name, int rank, const int64_t *dims,
                               const void *raw, size_t raw_len) {
  size_t k = mm->g.n_initializer++;
  Onnx__TensorProto *t = &mm->inits[k];
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->n_dims = (size_t)rank;
  t->dims = (int64_t *)(uintptr_t)dims;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  t->has_raw_data = 1;
  t->raw_data.data = (uint8_t *)(uintptr_t)raw;
  t->raw_data.len = raw_len;
  mm->initp[k] = t;
  return t;
}

uint8_t *mg_pack(mg_model *mm, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&mm->m);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (buf) onnx__model_proto__pack(&mm->m, buf);
  return buf;
}
