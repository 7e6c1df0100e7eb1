/* The register-only FMA loops that measure a core's float32 FMA peak, shared by `kiln profile`
 * and bench/gemm/gemm_bench (header-only: each includes it once). fma512(iters) and
 * fma256(iters) each run iters x 12 vector FMAs and return a value that depends on all of
 * them. x86-64 only. */
#ifndef KILN_TOOLS_FMA_LOOP_H
#define KILN_TOOLS_FMA_LOOP_H

#if defined(__x86_64__)
#include <immintrin.h>

/* 12 independent chains cover 2 FMA ports x 4 cycles of latency; named accumulators (not an
 * array) keep them in registers, and the empty asm keeps every chain live. */
#define FMA_LOOP(T, FMADD, SET1, ZERO, CONSTRAINT)                                              \
  T c0 = ZERO(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0, \
    c10 = c0, c11 = c0;                                                                         \
  const T a = SET1(0.999999f), b = SET1(1e-7f);                                                 \
  for (long i = 0; i < iters; i++) {                                                            \
    c0 = FMADD(c0, a, b); c1 = FMADD(c1, a, b); c2 = FMADD(c2, a, b); c3 = FMADD(c3, a, b);     \
    c4 = FMADD(c4, a, b); c5 = FMADD(c5, a, b); c6 = FMADD(c6, a, b); c7 = FMADD(c7, a, b);     \
    c8 = FMADD(c8, a, b); c9 = FMADD(c9, a, b); c10 = FMADD(c10, a, b); c11 = FMADD(c11, a, b); \
    __asm__ volatile("" : CONSTRAINT(c0), CONSTRAINT(c1), CONSTRAINT(c2), CONSTRAINT(c3),        \
                     CONSTRAINT(c4), CONSTRAINT(c5), CONSTRAINT(c6), CONSTRAINT(c7),              \
                     CONSTRAINT(c8), CONSTRAINT(c9), CONSTRAINT(c10), CONSTRAINT(c11));           \
  }
#define V_REG(x) "+v"(x)
#define X_REG(x) "+x"(x)

__attribute__((target("avx512f"), noinline)) static float fma512(long iters) {
  FMA_LOOP(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps, V_REG)
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline)) static float fma256(long iters) {
  FMA_LOOP(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_setzero_ps, X_REG)
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  float r[8];
  _mm256_storeu_ps(r, s);
  return r[0] + r[1] + r[2] + r[3] + r[4] + r[5] + r[6] + r[7];
}
#endif

#endif
