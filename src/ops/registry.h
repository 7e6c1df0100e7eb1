/* Lookup of operator descriptions by (domain, name, opset). */
#ifndef KILN_OPS_REGISTRY_H
#define KILN_OPS_REGISTRY_H

#include "ops/op.h"

/* The entry for (domain, name) with the highest `since` <= opset, or NULL.
 * "ai.onnx" is treated as "". */
const kiln_op_schema *kiln_op_find(const char *domain, const char *name, int opset);
/* Whether any version of (domain, name) is known (to tell "unknown op" from "opset too old"). */
bool kiln_op_known(const char *domain, const char *name);

/* kiln_op_find, then the ops of a session's plugin set (may be NULL). Built-in ops include
 * those kiln describes through the plugin ABI (kiln_op.h), e.g. FusedGemm and FusedMatMul. */
struct kiln_plugin_set;
const kiln_op_schema *kiln_op_find_in(const struct kiln_plugin_set *ps, const char *domain,
                                      const char *name, int opset);

/* One of kiln's own ops described through the plugin ABI (kiln_op.h), with the facts the ABI
 * does not carry: `facts` gives flags, prepare, cost and flow (its other members are unused). */
struct kiln_op_desc;
typedef struct kiln_described_op {
  const struct kiln_op_desc *desc;
  kiln_op_schema facts;
} kiln_described_op;

#endif
