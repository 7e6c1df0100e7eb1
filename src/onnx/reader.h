/* ONNX model reader: protobuf bytes -> kiln_ir_model (graph IR). */
#ifndef KILN_ONNX_READER_H
#define KILN_ONNX_READER_H

#include "ir/graph.h"
#include "onnx/limits.h"

/* Read a model file. External data is resolved relative to the file's folder. The bytes are
 * checked against `lim` (NULL: defaults) before they are decoded (onnx/limits.h). */
kiln_code kiln_model_read_file(const char *path, const kiln_limits *lim, kiln_ir_model **out,
                               kiln_error *err);
/* Decode model bytes; base_dir (may be NULL) is where external data files live. */
kiln_code kiln_model_read_memory(const void *bytes, size_t len, const char *base_dir,
                                 const kiln_limits *lim, kiln_ir_model **out, kiln_error *err);

#endif
