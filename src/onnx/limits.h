/* Limits on a model's structure and size, checked before anything is built from it, so that a
 * hostile or corrupt model gets an error naming the limit instead of exhausting the stack or
 * memory. Each has a session option of the same name in kiln_options (0 there: the default). */
#ifndef KILN_ONNX_LIMITS_H
#define KILN_ONNX_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

enum {
  KILN_DEFAULT_MAX_SUBGRAPH_DEPTH = 64,    /* graphs in attributes of nodes, and nested types */
  KILN_DEFAULT_MAX_NODES = 1000000,         /* nodes in the model, all graphs together */
};
#define KILN_DEFAULT_MAX_STRING_BYTES ((int64_t)16 << 20)    /* one name, string or string element */
#define KILN_DEFAULT_MAX_ATTRIBUTE_BYTES ((int64_t)64 << 20) /* one attribute's values, encoded */

typedef struct kiln_limits {
  int64_t max_subgraph_depth;
  int64_t max_nodes;
  int64_t max_string_bytes;
  int64_t max_attribute_bytes;
  int64_t max_memory_bytes; /* 0: the machine's physical memory */
} kiln_limits;

/* The limits `opts` asks for (NULL or 0 fields: defaults). */
void kiln_limits_from_options(const kiln_options *opts, kiln_limits *lim);
/* max_memory_bytes, the default resolved (physical memory). */
int64_t kiln_limits_memory(const kiln_limits *lim);

/* Scan serialised ModelProto bytes without recursion and check them against `lim` (NULL:
 * defaults): subgraph and type nesting, node count, string and attribute sizes. KILN_OK, or
 * KILN_ERR_MODEL with a message naming the limit, its value and the option that raises it. */
kiln_code kiln_wire_check(const uint8_t *bytes, size_t len, const kiln_limits *lim,
                          kiln_error *err);

/* The same for a serialised value (SequenceProto / OptionalProto / MapProto / TensorProto):
 * nesting of sequences, optionals and maps within the default max_subgraph_depth. Bytes it
 * cannot follow are left to the decoder. */
kiln_code kiln_wire_check_value(const uint8_t *bytes, size_t len, kiln_error *err);

#endif
