/* DynamicQuantizeLinear's passes: dispatch and the scalar loops (see quant_u8.h). */
#include "kernels/quant_u8.h"

#include <math.h>

#include "kernels/cpu.h"

static void minmax_scalar(const float *x, int64_t n, float *mn, float *mx) {
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  *mn = lo;
  *mx = hi;
}

static void quantize_scalar(const float *x, int64_t n, float scale, float zp, uint8_t *y) {
  for (int64_t i = 0; i < n; i++) {
    float v = rintf(x[i] / scale) + zp;
    y[i] = (uint8_t)(v > 0 ? (v < 255 ? v : 255) : 0);
  }
}

void kiln_minmax_f32(const float *x, int64_t n, float *mn, float *mx) {
#if defined(__x86_64__) || defined(__i386__)
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512) {
    kiln_minmax_f32_avx512(x, n, mn, mx);
    return;
  }
  if (isa == KILN_ISA_AVX2) {
    kiln_minmax_f32_avx2(x, n, mn, mx);
    return;
  }
#endif
  minmax_scalar(x, n, mn, mx);
}

void kiln_quantize_u8_f32(const float *x, int64_t n, float scale, float zp, uint8_t *y) {
#if defined(__x86_64__) || defined(__i386__)
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512) {
    kiln_quantize_u8_f32_avx512(x, n, scale, zp, y);
    return;
  }
  if (isa == KILN_ISA_AVX2) {
    kiln_quantize_u8_f32_avx2(x, n, scale, zp, y);
    return;
  }
#endif
  quantize_scalar(x, n, scale, zp, y);
}
