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
