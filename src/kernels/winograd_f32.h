/* Winograd F(2x2, 3x3) and F(4x4, 3x3) float32 convolution (NCHW, 3x3, stride 1, dilation 1,
 * one group). With output tiles e x e and input tiles a x a (a = e + 2, np = a * a planes):
 *
 *   U[xi] = G g G^T            weights, np planes [m, c]          (kiln_wino_f32_weights_tile)
 *   V[xi] = B^T d B            a x a input tiles (stride e), np planes [c, tiles]
 *   O[xi] = U[xi] V[xi]        np GEMMs (kiln_gemm_f32) [m x c] x [c x tiles]
 *   y     = A^T O A + bias (+ residual), then the activation, per e x e output tile
 *
 * At AVX-512, on planes of more than 16 tiles with up to 64 input channels, the GEMMs run
 * transposed (kiln_wino_f32_trans): U planes [c, m], O^T = V^T U^T with tiles as rows and
 * output channels as columns, and the output transform takes 16 channels a vector.
 *
 * F(4x4) (interpolation points 0, +-1, +-2, inf) does 4x fewer multiplies than direct
 * convolution against 2.25x for F(2x2), at a larger but still small rounding error (normwise
 * relative about 1e-5 against 1e-6 on random data with realistic magnitudes; tests/unit/
 * test_winograd.c). Its weights are 2.25x larger, so it pays on large planes only (see
 * kiln_wino_f32_tile). The transformed weights carry a header naming their tile size, and
 * kiln_wino_f32_conv runs the variant the weights were made for.
 *
 * Tiles are taken in blocks of whole tile rows sized so V and O stay in L2. The input and
 * output transforms run over channels on the pool, the GEMMs one per task (or whole blocks per
 * thread when there are enough). The output transform applies bias, residual and ReLU as it
 * stores. The result does not depend on the thread count. Called by kiln_conv2d_f32 (see
 * kiln_wino_f32_pick).
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

/* The output tile size e (2 or 4) to transform the weights for when p uses Winograd. */
int kiln_wino_f32_tile(const kiln_conv2d_f32_params *p);
/* Floats of transformed weights with output tiles e x e (e = 2 or 4) for m output and c input
 * channels (a small header + (e + 2)^2 * m * c). */
int64_t kiln_wino_f32_weights_size_tile(int e, int64_t m, int64_t c);
/* 1 when p's GEMMs should run transposed at ISA level isa (a level, not KILN_ISA_AUTO;
 * kiln_wino_f32_weights_tile's trans): tiles as rows, output channels as columns. */
int kiln_wino_f32_trans(const kiln_conv2d_f32_params *p, int isa);
/* u (kiln_wino_f32_weights_size_tile floats) = the transform of w [m, c, 3, 3] for tiles e x e,
 * planes [m, c], or with trans [c, m] (the GEMMs then run transposed). */
void kiln_wino_f32_weights_tile(int e, int trans, const float *w, int64_t m, int64_t c, float *u);
/* As the two above with e = 2 (F(2x2, 3x3): the cheapest transform, for weights made per call). */
int64_t kiln_wino_f32_weights_size(int64_t m, int64_t c);
void kiln_wino_f32_weights(const float *w, int64_t m, int64_t c, float *u);

/* As kiln_conv2d_f32 for a supported p, with weights transformed by kiln_wino_f32_weights_tile
 * (or kiln_wino_f32_weights) for any tile size.
 * `isa` must be resolved (kiln_isa_resolve). */
kiln_code kiln_wino_f32_conv(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                             const float *x, const float *u, const kiln_conv2d_f32_epilogue *ep,
                             float *y);

/* The F(4x4, 3x3) tile transforms on AVX2+FMA (winograd_avx2.c), 8 tiles at a time, as
 * winograd_f32.c's portable ones: V planes (stride ps) of one tile row of tw tiles from the
 * padded input rows r (read up to 4 * round_up(tw, 8) + 8), and the output rows r (written up
 * to 4 * round_up(tw, 8)) from the O planes. Call only when kiln_cpu_isa() chose AVX2 or more. */
void kiln_wino4_in_avx2(const float *const r[6], int64_t tw, float *out, int64_t ps);
void kiln_wino4_out_avx2(const float *o, int64_t ps, int64_t tw, float *const r[4]);
/* F(2x2, 3x3) likewise: V planes of one tile row from the padded input rows r (read up to
 * 2 * round_up(tw, 8) + 2), output rows r0, r1 (written up to 2 * round_up(tw, 8)). */
void kiln_wino_in_avx2(const float *const r[4], int64_t tw, float *out, int64_t ps);
void kiln_wino_out_avx2(const float *o, int64_t ps, int64_t tw, float *r0, float *r1);

#endif
