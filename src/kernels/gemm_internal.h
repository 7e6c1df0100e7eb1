/* GEMM internals shared by the driver (gemm.c) and the per-ISA kernels (gemm_<isa>.c). */
#ifndef KILN_KERNELS_GEMM_INTERNAL_H
#define KILN_KERNELS_GEMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/act.h"
#include "kernels/gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#define KILN_HAVE_X86_KERNELS 1
#define KILN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define KILN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

#define KILN_INLINE static inline __attribute__((always_inline))

/* Tile flags. */
#define KILN_GT_FIRST 1 /* first K block: C = alpha*acc + beta*C (C unread when beta == 0) */
#define KILN_GT_LAST 2  /* last K block: apply bias, residual and activation */

/* What a micro-kernel needs to finish a tile; pointers are already offset to the tile. */
typedef struct kiln_gemm_tile {
  float alpha, beta;
  int flags;
  const float *bias; /* per column, or NULL */
  const float *bias_row; /* per row: bias_row[i] is added to row i of the tile; or NULL */
  const float *res;  /* residual at the tile's (0,0), or NULL */
  size_t ldr;
  int res_after;
  kiln_act act;
  int pf_b; /* B does not stay in L1 between calls: the kernel prefetches it ahead */
  int pf_c; /* the kernel prefetches its C tile when it starts */
  /* A read in place, row-major: the next strip's rows at this K block (pf_a_rows of them,
   * lda apart), which the AVX-512 kernel brings into L2 as it walks its own K steps; NULL:
   * none. (The AVX2 kernel, at half the FMA rate, hid the misses of cold A anyway: the same
   * prefetch there measured 0.98-1.04x on whole models at KILN_ISA=avx2, AMD EPYC Zen 5.) */
  const float *pf_a;
  int pf_a_rows;
  /* Cache lines [0, pf_l2_lines) from pf_l2 that the AVX-512 kernel brings into L2, spread
   * evenly over its K steps (the next panel of weights streamed from memory); NULL: none. */
  const char *pf_l2;
  size_t pf_l2_lines;
  /* Gathered A (kiln_gemm_isa_ops.ukernel_gather): element (i, k) of the tile's A at
   * a[arow[i] + koff[k]]; both already offset to the tile's first row and K step. */
  const int32_t *arow, *koff;
} kiln_gemm_tile;

/* C[mr x nc] (+)= A[mr x kc] * B[kc x nc]: A row i at a + i*lda, B row k at b + k*ldb.
 * mr <= MR, nc <= NR. B may be a packed panel (ldb = its width, zero padded to the vector
 * width, so B rows may be read past nc up to the padded width) or the caller's matrix
 * (loads past nc are masked). */
typedef void (*kiln_f32_ukernel)(size_t mr, size_t nc, size_t kc, const float *a, size_t lda,
                                 const float *b, size_t ldb, float *c, size_t ldc,
                                 const kiln_gemm_tile *t);
/* y[j] = sum_k x[k] * B[k*ldb + j] for j < nc (B packed or not; reads masked to nc). */
typedef void (*kiln_f32_gemv_n)(size_t kc, size_t nc, const float *x, const float *b,
                                size_t ldb, float *y);
/* y[j] = sum_k x[k] * R[j*ldr + k] for j < nr (rows dot vector). */
typedef void (*kiln_f32_gemv_t)(size_t kc, size_t nr, const float *x, const float *r,
                                size_t ldr, float *y);
/* c[j] = epilogue(acc[j]) for j < n, with t's bias/res read at [j] (contiguous) and the row
 * bias at bias_row[0]. */
typedef void (*kiln_f32_epilogue_row)(float *c, const float *acc, size_t n,
                                      const kiln_gemm_tile *t);
typedef void (*kiln_f32_act_fn)(float *x, size_t n, const kiln_act *act);

typedef struct kiln_gemm_isa_ops {
  int isa;
  const char *name;    /* main micro-kernel */
  size_t mr, nr, gran; /* tile rows, panel width, vector width (panels pad to it) */
  kiln_f32_ukernel ukernel;
  kiln_f32_ukernel ukernel_at; /* A transposed in place: (i, k) at a[k*lda + i]; NULL: pack A */
  kiln_f32_gemv_n gemv_n;
  kiln_f32_gemv_t gemv_t;
  kiln_f32_epilogue_row epilogue_row;
  kiln_f32_act_fn act;
  /* A gathered: (i, k) at a[t->arow[i] + t->koff[k]] (lda unused); NULL where not provided */
  kiln_f32_ukernel ukernel_gather;
} kiln_gemm_isa_ops;

extern const kiln_gemm_isa_ops kiln_gemm_ops_scalar;
/* The ops of a resolved level (SCALAR..AVX512). */
const kiln_gemm_isa_ops *kiln_gemm_ops_for(int isa);
#ifdef KILN_HAVE_X86_KERNELS
extern const kiln_gemm_isa_ops kiln_gemm_ops_avx2;
extern const kiln_gemm_isa_ops kiln_gemm_ops_avx512;
#endif

/* Activations that a micro-kernel applies in registers; the rest run over the tile's rows
 * after it is stored (still in L1). */
KILN_INLINE int kiln_act_is_simple(kiln_act_kind k) {
  return k == KILN_ACT_NONE || k == KILN_ACT_RELU || k == KILN_ACT_LEAKY_RELU ||
         k == KILN_ACT_CLIP;
}

/* How a micro-kernel may write its tile: 1 plain store (C = acc), 2 plain accumulate
 * (C += acc), 0 anything else (alpha, beta or the epilogue: through the general path). */
KILN_INLINE int kiln_tile_fast_mode(const kiln_gemm_tile *t) {
  if (t->alpha != 1.0f) return 0;
  if ((t->flags & KILN_GT_LAST) && (t->bias || t->bias_row || t->res || t->act.kind != KILN_ACT_NONE)) return 0;
  if (!(t->flags & KILN_GT_FIRST)) return 2;
  return t->beta == 0.0f ? 1 : t->beta == 1.0f ? 2 : 0;
}

/* Whether the last K block's epilogue fits in registers after the accumulators: alpha 1,
 * C stored (beta 0) or accumulated (beta 1 or a later K block), then column bias, row bias,
 * residual before the activation, and an activation that is a clamp (none, relu, clip). */
KILN_INLINE int kiln_tile_reg_epilogue(const kiln_gemm_tile *t) {
  if (t->alpha != 1.0f || !(t->flags & KILN_GT_LAST)) return 0;
  if ((t->flags & KILN_GT_FIRST) && t->beta != 0.0f && t->beta != 1.0f) return 0;
  if (t->res && t->res_after) return 0;
  return t->act.kind == KILN_ACT_NONE || t->act.kind == KILN_ACT_RELU || t->act.kind == KILN_ACT_CLIP;
}

#endif
