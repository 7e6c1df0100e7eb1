/* fused_norm kernels (domain ai.kiln), to be written. */
#include "ops/fused.h"

const kiln_op_schema kiln_ops_fused_norm[] = {
    {0},
};
