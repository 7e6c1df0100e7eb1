/* signal operators. */
#include "ops/op.h"

const kiln_op_schema kiln_ops_signal[] = {
    {0},
};
