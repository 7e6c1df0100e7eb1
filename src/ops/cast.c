/* cast operators. */
#include "ops/op.h"

const kiln_op_schema kiln_ops_cast[] = {
    {0},
};
