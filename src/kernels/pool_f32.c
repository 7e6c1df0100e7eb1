/* kiln_pool_simd_get: plain C, chosen once from kiln_cpu_isa(). */
#include "kernels/pool_f32.h"

#include <pthread.h>

#include "kernels/cpu.h"

static const kiln_pool_simd g_none = {0};
static const kiln_pool_simd *g_pool = &g_none;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_cpu_isa() >= KILN_ISA_AVX512)
    g_pool = &kiln_pool_simd_avx512;
  else if (kiln_cpu_isa() == KILN_ISA_AVX2)
    g_pool = &kiln_pool_simd_avx2;
#endif
}

const kiln_pool_simd *kiln_pool_simd_get(void) {
  pthread_once(&g_once, pick);
  return g_pool;
}

/* One row in gavg4's order (see kiln_sum_rows_f32). */
static double sum8_f32(const float *x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, acc = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) lane[l] += x[i + l];
  for (; i < n; i++) lane[0] += x[i];
  for (int l = 0; l < 8; l++) acc += lane[l];
  return acc;
}

void kiln_sum_rows_f32(const float *x, int64_t rows, int64_t n, double *out) {
  const kiln_pool_simd *simd = kiln_pool_simd_get();
  int64_t r = 0;
  for (; simd->gavg4 && r + 4 <= rows; r += 4) simd->gavg4(x + r * n, n, out + r);
  for (; r < rows; r++) out[r] = sum8_f32(x + r * n, n);
}
