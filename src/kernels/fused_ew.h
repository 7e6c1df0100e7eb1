/* ai.kiln::FusedElementwise: a chain (or tree) of float32 elementwise ops evaluated in one
 * loop over the output, as a tiny program.
 *
 * Inputs x0..x(n-1): the chain's external operands (tensors or constants), each broadcast
 * (numpy rule) to the output shape, which is the broadcast of all inputs.
 * Attributes:
 *   program  ints, 3 per instruction: opcode, operand a, operand b (-1 for unary ops). Operand
 *            k < n is input k; k >= n is the result of instruction k - n (an earlier one).
 *            The last instruction's result is the output.
 *   params   floats, 2 per instruction (alpha/min, beta/max where the op has them).
 *   original the replaced chain (fallback and validation).
 * The kernel works in blocks of elements: each instruction is one tight loop over the block,
 * so nothing but the output is written to memory. It handles inputs whose broadcast to the
 * output is "index = (i / inner) % n" (same shape, scalar, trailing dims, per-channel...);
 * anything else fails with "unsupported" and the executor runs the original chain. */
#ifndef KILN_KERNELS_FUSED_EW_H
#define KILN_KERNELS_FUSED_EW_H

#include <stdbool.h>

typedef enum kiln_ew_op {
  /* binary (numpy broadcast) */
  KILN_EW_ADD = 0, KILN_EW_SUB, KILN_EW_MUL, KILN_EW_DIV, KILN_EW_POW, KILN_EW_MAX, KILN_EW_MIN,
  KILN_EW_PRELU,
  /* unary */
  KILN_EW_RELU = 16, KILN_EW_SIGMOID, KILN_EW_TANH, KILN_EW_EXP, KILN_EW_LOG, KILN_EW_ABS,
  KILN_EW_NEG, KILN_EW_SQRT, KILN_EW_ERF, KILN_EW_RECIPROCAL, KILN_EW_FLOOR, KILN_EW_CEIL,
  KILN_EW_CLIP, KILN_EW_LEAKYRELU, KILN_EW_ELU, KILN_EW_HARDSIGMOID, KILN_EW_HARDSWISH,
  KILN_EW_SOFTPLUS, KILN_EW_SOFTSIGN, KILN_EW_SIN, KILN_EW_COS,
  KILN_EW_END
} kiln_ew_op;

/* The standard op name of an opcode, or NULL. */
const char *kiln_ew_op_name(int op);
/* The opcode of a standard op name, or -1. */
int kiln_ew_op_code(const char *name);
static inline bool kiln_ew_is_binary(int op) { return op >= KILN_EW_ADD && op <= KILN_EW_PRELU; }

#endif
