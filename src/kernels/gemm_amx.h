/* float32 GEMM on AMX tiles, "bf16x3", with bias, residual and activation fused:
 *  - kiln_amx_gemm: C = W X for constant weights W (m x k, packed once) and activations X
 *    (k x n, split per call), bias per row: convolutions (gemm_amx.c);
 *  - kiln_amx_gemm_ab: C = A op(B) for activations A (split per call) and constant B (packed
 *    once), bias per column: MatMul and Gemm (gemm_amx_ab.c).
 *
 * AMX multiplies bfloat16 tiles (8-bit mantissa) into float32 sums. Each operand is split
 * into hi = bf16(v) and lo = bf16(v - hi), and C = Whi Xhi + Whi Xlo + Wlo Xhi: what is left
 * out (Wlo Xlo and the rounding of lo) is about 2^-16 of each product, so a result is within
 * a few 1e-6 of float32 relative to the largest output (bench/gemm/amx_bench measures it), at
 * 1.5-2x the AVX-512 float32 rate on one core.
 *
 * Available when the CPU has AMX-BF16, the OS saves the tile state and lets this process use
 * it (Linux 5.16+), and the environment does not say KILN_AMX=0. Each thread that runs a part
 * of these GEMMs loads its own tile configuration and releases the tiles when done: a tile
 * configuration the calling thread held before is not kept. */
#ifndef KILN_KERNELS_GEMM_AMX_H
#define KILN_KERNELS_GEMM_AMX_H

#include <stddef.h>

#include "base/status.h"
#include "kernels/act.h"

struct kiln_threadpool;

/* 1 when the AMX path may run in this process (checked once). */
int kiln_amx_available(void);

/* W split and packed for kiln_amx_gemm. */
typedef struct kiln_amx_w kiln_amx_w;

/* Pack W (m x k, rows ldw apart). NULL when out of memory or AMX is not available. */
kiln_amx_w *kiln_amx_pack_w(const float *w, size_t m, size_t k, size_t ldw);
void kiln_amx_w_free(kiln_amx_w *w);
size_t kiln_amx_w_rows(const kiln_amx_w *w);
size_t kiln_amx_w_cols(const kiln_amx_w *w);

/* C[i][j] = act(sum_k W[i][k] X[k][j] + bias[i] + res[i * ldr + j]) for i < rows(W), j < n,
 * with X[k][j] at x[k * ldx + j] for k < cols(W). bias and res may be NULL; res must not
 * overlap C. Work is spread over `pool` (NULL: this thread). */
kiln_code kiln_amx_gemm(struct kiln_threadpool *pool, const kiln_amx_w *w, size_t n,
                        const float *x, size_t ldx, float *c, size_t ldc, const float *bias,
                        const float *res, size_t ldr, const kiln_act *act);

/* op(B) (k x n: b[k * ldb + j], or with trans b[j * ldb + k]) packed for kiln_amx_gemm_ab.
 * NULL when out of memory or AMX is not available. */
typedef struct kiln_amx_b kiln_amx_b;
kiln_amx_b *kiln_amx_pack_b(const float *b, size_t k, size_t n, size_t ldb, int trans);
void kiln_amx_b_free(kiln_amx_b *b);
size_t kiln_amx_b_k(const kiln_amx_b *b);
size_t kiln_amx_b_n(const kiln_amx_b *b);

/* C[i][j] = act(sum_k A[i][k] B[k][j] + bias[j] + res[i * ldr + j]) for i < m, j < n(B),
 * with A[i][k] at a[i * lda + k] for k < k(B) (MatMul and Gemm with constant weights). bias
 * and res may be NULL; res must not overlap C. */
kiln_code kiln_amx_gemm_ab(struct kiln_threadpool *pool, size_t m, const float *a, size_t lda,
                           const kiln_amx_b *b, float *c, size_t ldc, const float *bias,
                           const float *res, size_t ldr, const kiln_act *act);

#endif
