/* Transpose/Reshape/Slice/Concat chain simplification (to be written). */
#include "opt/opt.h"

kiln_code kiln_pass_fuse_transpose(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  (void)ctx;
  (void)g;
  (void)count;
  return KILN_OK;
}
