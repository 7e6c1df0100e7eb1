/* DynamicQuantizeLinear's two passes over float32 data (src/ops/quant.c is the operator), per
 * ISA from kiln_cpu_isa(). Every level gives exactly the scalar loop's bytes: the division,
 * the round-to-nearest-even and the clamp are the same IEEE operations lane by lane. */
#ifndef KILN_KERNELS_QUANT_U8_H
#define KILN_KERNELS_QUANT_U8_H

#include <stdint.h>

/* *mn = min(0, x[0..n)), *mx = max(0, x[0..n)); NaN elements are skipped. */
void kiln_minmax_f32(const float *x, int64_t n, float *mn, float *mx);
/* y[i] = clamp(rint(x[i] / scale) + zp, 0, 255) (NaN gives 0); scale > 0. */
void kiln_quantize_u8_f32(const float *x, int64_t n, float scale, float zp, uint8_t *y);

/* The ISA variants (quant_u8_avx2.c, quant_u8_avx512.c), entered only from the two above. */
void kiln_minmax_f32_avx2(const float *x, int64_t n, float *mn, float *mx);
void kiln_quantize_u8_f32_avx2(const float *x, int64_t n, float scale, float zp, uint8_t *y);
void kiln_minmax_f32_avx512(const float *x, int64_t n, float *mn, float *mx);
void kiln_quantize_u8_f32_avx512(const float *x, int64_t n, float scale, float zp, uint8_t *y);

#endif
