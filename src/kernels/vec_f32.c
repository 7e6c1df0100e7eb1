/* The memory-bound float32 kernels' entry points: plain C, each calls the instance chosen once
 * from kiln_cpu_isa() (see vec_f32.h). */
#include "kernels/vec_f32.h"

#include <pthread.h>

#include "kernels/cpu.h"

static const kiln_vec_f32_kernels *g_vec = &kiln_vec_f32_scalar;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick(void) {
#if defined(__x86_64__) || defined(__i386__)
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512) g_vec = &kiln_vec_f32_avx512;
  else if (isa >= KILN_ISA_AVX2) g_vec = &kiln_vec_f32_avx2;
#endif
}

static const kiln_vec_f32_kernels *vec(void) {
  pthread_once(&g_once, pick);
  return g_vec;
}

void kiln_softmax_rows_f32(const float *x, float *y, int64_t rows, int64_t len) { vec()->softmax_rows(x, y, rows, len); }

void kiln_ln_stats_f32(const float *x, int64_t n, float eps, float *mean, float *inv) {
  vec()->ln_stats(x, n, eps, mean, inv);
}

void kiln_ln_norm_f32(float *y, const float *x, int64_t n, float mean, float inv, const float *gamma,
                      const float *beta) {
  vec()->ln_norm(y, x, n, mean, inv, gamma, beta);
}

void kiln_ln_add_stats_f32(float *s, const float *a, const float *b, int64_t n, float eps, float *mean,
                           float *inv) {
  vec()->ln_add_stats(s, a, b, n, eps, mean, inv);
}

void kiln_gelu_map_f32(float *y, const float *x, const float *bias, int64_t n, int tanh_form) {
  vec()->gelu_map(y, x, bias, n, tanh_form);
}

void kiln_gelu_erf_f32(float *x, size_t n) { vec()->gelu_erf(x, n); }

void kiln_ew_block_f32(int op, float *restrict o, const float *restrict a, const float *restrict b, int n, float p0,
                       float p1) {
  vec()->ew_block(op, o, a, b, n, p0, p1);
}
