/* Element-wise activations shared by fused epilogues (GEMM, convolution, ...).
 *
 * Each ISA level has a vectorised array form; results agree with the libm-based scalar form
 * to a few ulp (sigmoid/tanh/gelu/silu/elu use a polynomial exp, erfc within 1.2e-7 relative).
 */
#ifndef KILN_KERNELS_ACT_H
#define KILN_KERNELS_ACT_H

#include <stddef.h>

#include "kernels/cpu.h"

typedef enum kiln_act_kind {
  KILN_ACT_NONE = 0,
  KILN_ACT_RELU,         /* max(x, 0) */
  KILN_ACT_LEAKY_RELU,   /* x >= 0 ? x : alpha * x */
  KILN_ACT_CLIP,         /* min(max(x, alpha), beta)   (alpha = min, beta = max) */
  KILN_ACT_SIGMOID,      /* 1 / (1 + exp(-x)) */
  KILN_ACT_TANH,         /* tanh(x) */
  KILN_ACT_GELU,         /* 0.5 x (1 + erf(x / sqrt 2)) */
  KILN_ACT_GELU_TANH,    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  KILN_ACT_SILU,         /* x * sigmoid(x)  (Swish with beta 1) */
  KILN_ACT_HARD_SIGMOID, /* max(0, min(1, alpha x + beta))  (ONNX defaults 0.2, 0.5) */
  KILN_ACT_HARD_SWISH,   /* x * max(0, min(1, x / 6 + 0.5)) */
  KILN_ACT_ELU,          /* x >= 0 ? x : alpha (exp(x) - 1) */
  KILN_ACT_COUNT
} kiln_act_kind;

typedef struct kiln_act {
  kiln_act_kind kind;
  float alpha, beta; /* parameters, per kind above */
} kiln_act;

/* "none", "relu", "leaky_relu", ... */
const char *kiln_act_name(kiln_act_kind k);
/* x[i] = act(x[i]) for i < n, with the given ISA level (AUTO: kiln_cpu_isa(); a level the
 * CPU lacks falls back to the best one it has). */
void kiln_f32_act(int isa, float *x, size_t n, const kiln_act *act);
/* One value, scalar libm form (the reference the vector forms are tested against). */
float kiln_act_ref(float x, const kiln_act *act);

#endif
