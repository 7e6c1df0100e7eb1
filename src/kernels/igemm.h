/* Integer GEMM for the quantized ops (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul):
 * C[i, j] = sum_k (A[i, k] - za_i) * (B[k, j] - zb_j) on 8-bit data, int32 sums that wrap as
 * the ONNX ops' int32 accumulation does.
 *
 * The kernels multiply bytes as they are: one operand holds unsigned bytes, the other signed
 * (vpdpbusd's u8 x s8, four products per int32 lane). The caller brings any u8 / s8 pair to that
 * form by flipping the sign bit (x ^ 0x80 turns s8 into u8 plus 128 and u8 into s8 minus 128)
 * and moving the zero point by the same 128, which leaves every x - z unchanged. The zero
 * points are folded into row and column sums:
 *   sum_k (a - za)(b - zb) = sum_k ab - za * colsum(b) - zb * rowsum(a) + K za zb,
 * which the caller passes as C = dot + r_i - u_i * cs_j + v_i * zb_j (r, u, v per row of A;
 * cs, zb per column of B); see kiln_igemm_args.
 *
 * Exactness: every product fits in 16 bits and four of them in 18; the int32 lanes add modulo
 * 2^32 (vpdpbusd, never the saturating vpdpbusds; on AVX2 vpmaddwd of the bytes widened to int16,
 * pairs of products that cannot saturate), so every ISA gives the bytes of the scalar kernel.
 *
 * Layouts. A: m rows of k4 * 4 bytes (k rounded up to 4, the padding 0). B, packed: for each
 * group of four rows of k, the four bytes of column j side by side: bp[(p * ldb + j) * 4 + q] =
 * B[4p + q, j], ldb a multiple of KILN_IGEMM_NB columns, rows past k and columns past n 0. */
#ifndef KILN_KERNELS_IGEMM_H
#define KILN_KERNELS_IGEMM_H

#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/cpu.h"

#define KILN_IGEMM_NB 32 /* column granule of packed B (and of cs and zb) */

typedef struct kiln_igemm_args {
  int64_t m, n, k4;    /* rows of A and C, columns of C (n <= ldb), groups of 4 along k */
  const uint8_t *a;    /* [m][k4 * 4] */
  const uint8_t *b;    /* packed [k4][ldb][4] */
  int64_t ldb;         /* columns of packed B, a multiple of KILN_IGEMM_NB */
  int32_t *c;          /* [m][ldc]: the results are stored, not added */
  int64_t ldc;
  int b_unsigned;      /* 1: B holds the u8 operand and A the s8 one; 0: the reverse */
  const int32_t *r;    /* [m], added to row i; NULL: none */
  const int32_t *u;    /* [m], times cs[j] subtracted; NULL: none (cs unread) */
  const int32_t *v;    /* [m], times zb[j] added; NULL: none (zb unread) */
  const int32_t *cs;   /* [n rounded up to KILN_IGEMM_NB]: column sums of B (its bytes as typed) */
  const int32_t *zb;   /* [n rounded up to KILN_IGEMM_NB] */
} kiln_igemm_args;

/* The best kernel this CPU runs: KILN_ISA_AVX512 (with VNNI: vpdpbusd), KILN_ISA_AVX2 (vpmaddwd,
 * also taken on AVX-512 without VNNI), or KILN_ISA_SCALAR. */
kiln_isa kiln_igemm_isa(void);
/* Whether isa is a kernel level this CPU runs (the levels kiln_igemm_isa may return, up to it). */
int kiln_igemm_isa_ok(kiln_isa isa);

/* One call of the kernel of level isa (which kiln_igemm_isa_ok accepts) on all of g. */
void kiln_igemm_kernel(kiln_isa isa, const kiln_igemm_args *g);

/* Packs rows [0, k) and columns [0, n) of the byte matrix src (row stride lds bytes), each byte
 * xor flip, into dst [k4][ldb][4] (k4 = ceil(k / 4)), the padding 0. */
void kiln_igemm_pack_b(int64_t k, int64_t n, const uint8_t *src, int64_t lds, uint8_t flip, uint8_t *dst,
                       int64_t ldb);
/* Copies the m rows of k bytes of src (row stride lds) into dst [m][k4 * 4], each byte xor flip,
 * and stores each row's sum (its bytes read as signed when is_signed, after the flip) in rs[i]
 * unless rs is NULL. */
void kiln_igemm_pack_a(int64_t m, int64_t k, const uint8_t *src, int64_t lds, uint8_t flip, int is_signed,
                       uint8_t *dst, int32_t *rs);
/* cs[j] = the sum over packed B's rows of column j (bytes signed when is_signed), j < ldb. */
void kiln_igemm_colsum(int64_t k4, int64_t ldb, const uint8_t *bp, int is_signed, int32_t *cs);

/* The per-row terms of the zero points (see kiln_igemm_args): A's zero point za[i] (NULL: za0
 * for every row) and row sums rs (of A's bytes as the kernel reads them), B's zero point zb0 or,
 * when zb_per_col, per column (then passed as the args' zb). Fills u and either r (zb0) or v
 * (per column), each [m]; returns whether any za is non-zero (else u can be left NULL). */
int kiln_igemm_zero_terms(int64_t m, int64_t k, const int32_t *za, int32_t za0, const int32_t *rs, int zb_per_col,
                          int32_t zb0, int32_t *r, int32_t *u, int32_t *v);

/* The most columns kiln_igemm_many puts in one chunk. */
#define KILN_IGEMM_CHUNK_MAX 2048

/* One group of packed B from four rows of n bytes: dst[4j + q] = rows[q][j] for j < n, 0 up to
 * ldb; cs[j] (unless NULL) += the sum of the four bytes as unsigned. */
void kiln_igemm_interleave4(const uint8_t *const rows[4], int64_t n, int64_t ldb, uint8_t *dst, int32_t *cs);

/* Fills a packed B chunk: columns [j0, j1) of the task's B into bp [k4][ldb][4] (ldb = the chunk
 * width rounded up to KILN_IGEMM_NB, padding 0), and their column sums into cs [ldb] when cs is
 * not NULL. */
typedef void (*kiln_igemm_pack_fn)(void *ctx, int64_t task, int64_t j0, int64_t j1, uint8_t *bp, int64_t ldb,
                                   int32_t *cs);
/* The args of one task of kiln_igemm_many: m, k4, a, c, ldc, b_unsigned, r, u, v, zb for the
 * whole width n of the task's C (b, ldb and cs are set by the driver). */
typedef void (*kiln_igemm_task_fn)(void *ctx, int64_t task, kiln_igemm_args *g);

/* n_tasks independent products of the same k4 and n, each with B made chunk by chunk by pack
 * (a convolution's im2col), on the pool's threads: the chunks of every task are shared out,
 * each thread packs its chunk into its own buffer and runs the kernel on it. Returns 0, or -1
 * when the buffers cannot be allocated (nothing computed). */
int kiln_igemm_many(kiln_threadpool *pool, kiln_isa isa, int64_t n_tasks, int64_t n, int64_t k4, int64_t m,
                    kiln_igemm_task_fn task, kiln_igemm_pack_fn pack, void *ctx);
/* One product on an already packed B (g complete), its rows and column chunks shared out over
 * the pool's threads. */
void kiln_igemm(kiln_threadpool *pool, kiln_isa isa, const kiln_igemm_args *g);

/* The ISA kernels (igemm_avx2.c, igemm_avx512.c), entered only from kiln_igemm_kernel. */
void kiln_igemm_kernel_avx2(const kiln_igemm_args *g);
void kiln_igemm_kernel_avx512(const kiln_igemm_args *g);

#endif
