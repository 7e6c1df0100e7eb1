/* The memory-bound float32 kernels for the baseline ISA (SSE2 on x86-64). */
#define VEC_FN(name) name##_scalar
#include "kernels/vec_f32_tmpl.h"
