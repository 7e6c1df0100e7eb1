/* Lookup of operator descriptions by (domain, name, opset). */
#ifndef KILN_OPS_REGISTRY_H
#define KILN_OPS_REGISTRY_H

#include "ops/op.h"

/* The entry for (domain, name) with the highest `since` <= opset, or NULL.
 * "ai.onnx" is treated as "". */
const kiln_op_schema *kiln_op_find(const char *domain, const char *name, int opset);
/* Whether any version of (domain, name) is known (to tell "unknown op" from "opset too old"). */
bool kiln_op_known(const char *domain, const char *name);

/* Entry i of every op kiln knows (the families' tables in order, then the registered extra
 * ones), or NULL past the end: for listing what is supported. */
const kiln_op_schema *kiln_op_at(size_t i);

/* Schemas the lookups above also search, registered once by the layer above before it looks
 * anything up: kiln's own ops described through the plugin ABI (kiln_op.h), FusedGemm and
 * FusedMatMul (plugin/builtin.c, kiln_builtin_ops_init). `schemas` must stay valid. */
void kiln_op_register_extra(const kiln_op_schema *const *schemas, size_t n);

/* One of kiln's own ops described through the plugin ABI (kiln_op.h), with the facts the ABI
 * does not carry: `facts` gives flags, prepare, cost and flow (its other members are unused). */
struct kiln_op_desc;
typedef struct kiln_described_op {
  const struct kiln_op_desc *desc;
  kiln_op_schema facts;
} kiln_described_op;

#endif
