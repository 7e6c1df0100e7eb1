/* fused_attention kernels (domain ai.kiln), to be written. */
#include "ops/fused.h"

const kiln_op_schema kiln_ops_fused_attention[] = {
    {0},
};
