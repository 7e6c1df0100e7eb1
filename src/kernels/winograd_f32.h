/* Winograd F(2x2, 3x3) float32 convolution (NCHW, 3x3, stride 1, dilation 1, one group).
 *
 *   U[xi] = G g G^T            weights, 16 planes [m, c]          (kiln_wino_f32_weights)
 *   V[xi] = B^T d B            4x4 input tiles (stride 2), 16 planes [c, tiles]
 *   O[xi] = U[xi] V[xi]        16 GEMMs (kiln_gemm_f32) [m x c] x [c x tiles]
 *   y     = A^T O A + bias (+ residual), then the activation, per 2x2 output tile
 *
 * Tiles are taken in blocks of whole tile rows sized so V and O stay in L2. The input and
 * output transforms run over channels on the pool, the 16 GEMMs one per task. The result does
 * not depend on the thread count. Called by kiln_conv2d_f32 (see kiln_wino_f32_pick).
 */
#ifndef KILN_KERNELS_WINOGRAD_F32_H
#define KILN_KERNELS_WINOGRAD_F32_H

#include <stdint.h>

#include "kernels/conv2d_f32.h"

/* 1 when the Winograd path applies to p and is expected to be faster than im2col + GEMM,
 * with the weights transformed beforehand (cached) or per call (not cached). */
int kiln_wino_f32_pick(const kiln_conv2d_f32_params *p, int cached);
/* 1 when the Winograd path can compute p at all (3x3, stride 1, dilation 1, group 1, c > 1). */
int kiln_wino_f32_supported(const kiln_conv2d_f32_params *p);

/* Floats of transformed weights for m output and c input channels (16 * m * c). */
int64_t kiln_wino_f32_weights_size(int64_t m, int64_t c);
/* u (kiln_wino_f32_weights_size floats) = the transform of w [m, c, 3, 3]. */
void kiln_wino_f32_weights(const float *w, int64_t m, int64_t c, float *u);

/* As kiln_conv2d_f32 for a supported p, with weights transformed by kiln_wino_f32_weights.
 * `isa` must be resolved (kiln_isa_resolve). */
kiln_code kiln_wino_f32_conv(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                             const float *x, const float *u, const kiln_conv2d_f32_epilogue *ep,
                             float *y);

#endif
