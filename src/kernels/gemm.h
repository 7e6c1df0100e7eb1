/* Single-precision GEMM for kiln's kernels.
 *
 *   C = act(alpha * op(A) * op(B) + beta * C + bias + residual)      (residual before act)
 *   C = act(alpha * op(A) * op(B) + beta * C + bias) + residual      (residual_after_act)
 *
 * All matrices are row-major with a leading dimension (row stride, in elements):
 *   op(A) is M x K: A is M x K (lda >= K), or with trans_a A is K x M (lda >= M);
 *   op(B) is K x N: B is K x N (ldb >= N), or with trans_b B is N x K (ldb >= K);
 *   C is M x N (ldc >= N); bias has N entries (one per column); residual is M x N (ldr >= N).
 * When beta == 0, C is not read (it may hold NaN). K == 0 or alpha == 0 gives beta * C plus
 * the epilogue (A and B are not read). C must not overlap A, B, bias or residual (to add C
 * itself, use beta = 1).
 *
 * Implementation: register-tiled micro-kernels (f32_gemm_6x64__avx512, f32_gemm_6x16__avx2,
 * f32_gemm_4x16__scalar) run over blocks sized for L1/L2: K is cut into equal blocks of up to
 * KC rows, a 6-row strip of A stays in L1 while it meets every B panel of an L2-sized block
 * (AVX-512; AVX2 keeps the B panel in L1 instead), and B panels that stream from L2 are
 * prefetched, as is each tile's residual when its last K block starts. B is packed into
 * zero-padded panels of NR columns unless it can be read in place (not transposed, rows not
 * 4 KiB apart); A is read in place unless 4 KiB-aliased (order 1),
 * transposed A in place too where the ISA has a kernel for it (f32_gemm_6x64_at__avx512),
 * else packed. Constant B (weights) is packed once with kiln_gemm_pack_b. The epilogue is
 * applied to each C tile at its last K block: from registers (AVX-512: column and row bias,
 * residual before a clamp-like activation: none, relu, clip) or through the tile in L1 (the
 * rest). Work is split into M x N blocks (N first) over a kiln_threadpool; the result does
 * not depend on the thread count. M == 1 and N == 1 take matrix-vector paths (bandwidth
 * bound).
 */
#ifndef KILN_KERNELS_GEMM_H
#define KILN_KERNELS_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/act.h"
#include "kernels/cpu.h"
#include "kiln/kiln.h"
#include "base/threadpool.h"

/* Fused epilogue; a zero-initialised struct (or NULL where accepted) means "none". */
typedef struct kiln_gemm_epilogue {
  const float *bias;      /* N values added to each row, or NULL */
  kiln_act act;           /* applied after bias (and residual unless residual_after_act) */
  const float *residual;  /* M x N matrix added element-wise, or NULL; must not overlap C */
  size_t ldr;             /* residual row stride (>= N) */
  int residual_after_act; /* 0: act(x + residual); 1: act(x) + residual */
} kiln_gemm_epilogue;

/* Where and how to run. A zero-initialised struct (or NULL) means: single thread, best ISA. */
typedef struct kiln_gemm_ctx {
  kiln_threadpool *pool; /* NULL: run on the calling thread */
  int isa;               /* a kiln_isa: KILN_ISA_AUTO (0) or a level to force (tests) */
} kiln_gemm_ctx;

/* B packed once for reuse (e.g. constant weights): panel layout of one ISA level. */
typedef struct kiln_gemm_packed_b kiln_gemm_packed_b;

/* C = alpha op(A) op(B) + beta C with the epilogue `ep` (NULL: none). ctx NULL: single
 * thread, kiln_cpu_isa(). Fails with KILN_ERR_INVALID_ARG on bad sizes/strides/NULLs or an
 * ISA the CPU lacks, KILN_ERR_NOMEM when scratch cannot be allocated. */
kiln_code kiln_gemm_f32(const kiln_gemm_ctx *ctx, int trans_a, int trans_b, size_t M, size_t N,
                        size_t K, float alpha, const float *A, size_t lda, const float *B,
                        size_t ldb, float beta, float *C, size_t ldc,
                        const kiln_gemm_epilogue *ep, kiln_error *err);

/* As kiln_gemm_f32, plus a bias per row: bias_row (M values, or NULL) adds bias_row[i] to
 * every entry of row i, after ep->bias and before the residual and activation. */
kiln_code kiln_gemm_f32_rows(const kiln_gemm_ctx *ctx, int trans_a, int trans_b, size_t M,
                             size_t N, size_t K, float alpha, const float *A, size_t lda,
                             const float *B, size_t ldb, float beta, float *C, size_t ldc,
                             const kiln_gemm_epilogue *ep, const float *bias_row,
                             kiln_error *err);

/* Pack op(B) (K x N, see above) for the ISA level `isa` (KILN_ISA_AUTO: kiln_cpu_isa()). The
 * handle does not refer to B afterwards and is read-only: several threads may use it at once.
 * Free with kiln_gemm_packed_b_free. */
kiln_code kiln_gemm_pack_b(int isa, int trans_b, size_t K, size_t N, const float *B, size_t ldb,
                           kiln_gemm_packed_b **out, kiln_error *err);
void kiln_gemm_packed_b_free(kiln_gemm_packed_b *pb);
size_t kiln_gemm_packed_b_k(const kiln_gemm_packed_b *pb);
size_t kiln_gemm_packed_b_n(const kiln_gemm_packed_b *pb);
int kiln_gemm_packed_b_isa(const kiln_gemm_packed_b *pb);
size_t kiln_gemm_packed_b_bytes(const kiln_gemm_packed_b *pb);

/* As kiln_gemm_f32 with op(B) prepacked: N and K come from `pb`, and the packed ISA level is
 * used (ctx->isa must be AUTO or equal to it). */
kiln_code kiln_gemm_f32_packed(const kiln_gemm_ctx *ctx, int trans_a, size_t M, float alpha,
                               const float *A, size_t lda, const kiln_gemm_packed_b *pb,
                               float beta, float *C, size_t ldc, const kiln_gemm_epilogue *ep,
                               kiln_error *err);

/* 1 when the packed ISA level of kiln_gemm_f32_packed_gather has its gathered-A kernel. */
int kiln_gemm_has_gather(int isa);

/* 1 when kiln_gemm_f32_packed_gather of M rows on n_threads threads (n_threads > 1) cuts A by
 * rows only, each thread every column of B (strips enough per thread); else it may cut B's
 * columns too. */
int kiln_gemm_gather_rows_only(int isa, size_t M, int n_threads);

/* C = A * B with B prepacked and A gathered: element (i, k) of A [M x pb's K] is
 * a[arow[i] + koff[k]] (an implicit im2col: rows are output pixels, k = (channel, tap) steps
 * into a zero-padded input), alpha 1, beta 0, with the epilogue's column bias, residual and
 * activation. Each element sums in the order and K blocks of kiln_gemm_f32_packed on the
 * same A written out, whatever the thread count. KILN_ERR_UNSUPPORTED where the packed level
 * has no such kernel (kiln_gemm_has_gather). */
kiln_code kiln_gemm_f32_packed_gather(const kiln_gemm_ctx *ctx, size_t M, const float *a,
                                      const int32_t *arow, const int32_t *koff,
                                      const kiln_gemm_packed_b *pb, float *C, size_t ldc,
                                      const kiln_gemm_epilogue *ep, kiln_error *err);

/* Block sizes in use for an ISA level (for benchmarks and tuning); 0 leaves one unchanged.
 * mc: rows per A block (rounded up to MR); kc: the cap on a K block; nc: the N block at that
 * K block (rounded up to NR; smaller K blocks get a wider N block with the same KC x NC).
 * Setting is not thread-safe with running GEMMs. */
typedef struct kiln_gemm_blocking {
  size_t mc, kc, nc;
  int order; /* loop order in a block: 1 B panel outside A strips, 2 A strip outside */
} kiln_gemm_blocking;
kiln_gemm_blocking kiln_gemm_get_blocking(int isa);
void kiln_gemm_set_blocking(int isa, kiln_gemm_blocking b);
/* Name of the main micro-kernel for an ISA level, e.g. "f32_gemm_6x64__avx512". */
const char *kiln_gemm_kernel_name(int isa);

#endif
