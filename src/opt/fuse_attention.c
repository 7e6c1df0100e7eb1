/* Attention fusion (to be written). */
#include "opt/opt.h"

kiln_code kiln_pass_fuse_attention(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  (void)ctx;
  (void)g;
  (void)count;
  return KILN_OK;
}
