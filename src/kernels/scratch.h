/* Per-thread scratch memory for kernels: a buffer per (thread, slot) that grows as needed,
 * is reused by later calls on the same thread and is freed when the thread exits. A kernel
 * that hands parts of it to pool workers must be the one that asked for it, for the duration
 * of its call. Slots keep kernels that run at the same time on one thread apart. */
#ifndef KILN_KERNELS_SCRATCH_H
#define KILN_KERNELS_SCRATCH_H

#include <stddef.h>

enum {
  KILN_SCRATCH_GEMM = 0, /* the float32 GEMM's packing buffers */
  KILN_SCRATCH_AMX = 1,  /* the AMX GEMMs' split operands and partial sums */
  KILN_SCRATCH_CONV = 2, /* kiln_conv2d_f32's im2col blocks, C^T, padded input, Winograd V and O */
  KILN_SCRATCH_BLOCK = 3, /* kiln_conv_block_f32's bands (which call the convolutions above) */
  KILN_SCRATCH_SLOTS = 4
};

/* A 64-byte aligned buffer of at least `bytes` bytes for this thread and slot; NULL when out
 * of memory (or slot out of range). The contents are not kept when it grows. */
void *kiln_scratch_get(int slot, size_t bytes);

#endif
