/* Integer GEMM for the quantized ops (ConvInteger, QLinearConv): c[m, n] += a[m, k] * b[k, n]
 * with int16 operands whose values are 8-bit data minus an 8-bit zero point (|v| <= 255) and
 * int32 accumulators that wrap as the ONNX ops' int32 accumulation does.
 *
 * Exactness: every kernel multiplies pairs of int16 along k and adds the pair into int32
 * (vpmaddwd on AVX2, vpdpwssd on AVX-512 VNNI); a pair is at most 2 * 255 * 255 = 130050, so
 * no step saturates and every ISA gives the bytes of the scalar reference (int32 sums modulo
 * 2^32). kiln_igemm_s16 picks the kernel from kiln_cpu_isa() (AVX-512 with VNNI, AVX2,
 * scalar). */
#ifndef KILN_KERNELS_IGEMM_H
#define KILN_KERNELS_IGEMM_H

#include <stdint.h>

#include "kernels/cpu.h"

/* c += a @ b; a row-major [m, k], b row-major [k, n], c row-major [m, n]. Returns 0, or -1 when
 * the packing buffer cannot be allocated (c is then unchanged). */
int kiln_igemm_s16(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b, int32_t *c);
/* The same with the kernel of a given level (tests): KILN_ISA_SCALAR, KILN_ISA_AVX2, or
 * KILN_ISA_AVX512 (the VNNI kernel; it needs avx512_vnni). -1 also when the level is not
 * runnable here. */
int kiln_igemm_s16_isa(kiln_isa isa, int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b,
                       int32_t *c);
/* Whether the AVX-512 VNNI kernel can run here (kiln_cpu_isa() >= AVX512 and the CPU has VNNI). */
int kiln_igemm_has_vnni(void);

/* Kernels on packed operands (igemm_avx2.c, igemm_avx512.c): ap [m, k2 * 2] (rows of k padded
 * with a zero to even), bp [k2, n, 2] (the pair of rows 2p, 2p+1 interleaved per column), n a
 * multiple of KILN_IGEMM_NBLOCK; they store the sums into c [m, n]. */
#define KILN_IGEMM_NBLOCK 32
void kiln_igemm_packed_avx2(int64_t m, int64_t n, int64_t k2, const int16_t *ap, const int16_t *bp, int32_t *c);
void kiln_igemm_packed_avx512(int64_t m, int64_t n, int64_t k2, const int16_t *ap, const int16_t *bp, int32_t *c);

#endif
