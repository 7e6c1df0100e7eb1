#ifndef KILN_RUNTIME_DIMS_H
#define KILN_RUNTIME_DIMS_H

#include "ir/graph.h"

/* Apply "NAME=VALUE" overrides (NULL-terminated list, may be NULL) to the model's declared
 * types; fails naming an override that is malformed or that no graph input uses. */
kiln_code kiln_dims_override(kiln_ir_model *m, const char *const *overrides, kiln_error *err);

#endif
