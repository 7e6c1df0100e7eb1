/* ONNX model writer: kiln_ir_model (graph IR) -> protobuf bytes, the inverse of onnx/reader.h.
 * Used to save a graph after optimisation. The IR is only read, never changed. */
#ifndef KILN_ONNX_WRITER_H
#define KILN_ONNX_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"

/* Serialise `m` into `path` (created or truncated; removed again if writing fails).
 * Every initializer is written inline: external data is not produced. */
kiln_code kiln_model_write_file(const kiln_ir_model *m, const char *path, kiln_error *err);
/* Serialise `m` into a new malloc'd buffer of *len bytes; the caller frees *bytes. */
kiln_code kiln_model_write_memory(const kiln_ir_model *m, uint8_t **bytes, size_t *len,
                                  kiln_error *err);

#endif
