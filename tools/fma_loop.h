/* The register-only FMA loops that measure a core's float32 FMA peak, shared by `kiln calibrate`
 * and bench/gemm/gemm_bench (header-only: each includes it once). fma512(iters),
 * fma256(iters) and fma128(iters) each run iters x 12 vector FMAs (16, 8 and 4 lanes) and
 * return a value that depends on all of them. x86-64 only. */
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

__attribute__((target("avx512f"), noinline, unused)) static float fma512(long iters) {
  FMA_LOOP(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps, V_REG)
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline, unused)) static float fma256(long iters) {
  FMA_LOOP(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_setzero_ps, X_REG)
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  float r[8];
  _mm256_storeu_ps(r, s);
  return r[0] + r[1] + r[2] + r[3] + r[4] + r[5] + r[6] + r[7];
}

__attribute__((target("fma"), noinline, unused)) static float fma128(long iters) {
  FMA_LOOP(__m128, _mm_fmadd_ps, _mm_set1_ps, _mm_setzero_ps, X_REG)
  __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(c0, c1), _mm_add_ps(c2, c3)),
                        _mm_add_ps(_mm_add_ps(c4, c5), _mm_add_ps(c6, c7)));
  s = _mm_add_ps(s, _mm_add_ps(_mm_add_ps(c8, c9), _mm_add_ps(c10, c11)));
  float r[4];
  _mm_storeu_ps(r, s);
  return r[0] + r[1] + r[2] + r[3];
}

/* The instruction mix of a 6x64 GEMM micro-kernel step (4 vector loads of B, 6 broadcasts of
 * A, 24 FMAs into 24 accumulators) over operands that stay in L1: a[kc * 6] packed A,
 * b[kc * 64] packed B, both advanced each step and rewound every kc steps. Written in asm so
 * that it measures the machine, not a compiler: the rate of any float32 GEMM whose data must
 * stream through the load ports is bounded by it. Runs reps x kc steps of 768 flop. */
__attribute__((target("avx512f"), noinline, unused)) static void gemm_mix512(long reps, long kc,
                                                                      const float *a,
                                                                      const float *b) {
  for (long r = 0; r < reps; r++) {
    const float *pa = a, *pb = b;
    long n = kc;
    __asm__ volatile(
    "1:\n\t"
    "vmovups 0(%[b]), %%zmm24\n\t" "vmovups 64(%[b]), %%zmm25\n\t" "vmovups 128(%[b]), %%zmm26\n\t" "vmovups 192(%[b]), %%zmm27\n\t"
    "vbroadcastss 0(%[a]), %%zmm28\n\t"
    "vfmadd231ps %%zmm24, %%zmm28, %%zmm0\n\t" "vfmadd231ps %%zmm25, %%zmm28, %%zmm1\n\t" "vfmadd231ps %%zmm26, %%zmm28, %%zmm2\n\t" "vfmadd231ps %%zmm27, %%zmm28, %%zmm3\n\t"
    "vbroadcastss 4(%[a]), %%zmm29\n\t"
    "vfmadd231ps %%zmm24, %%zmm29, %%zmm4\n\t" "vfmadd231ps %%zmm25, %%zmm29, %%zmm5\n\t" "vfmadd231ps %%zmm26, %%zmm29, %%zmm6\n\t" "vfmadd231ps %%zmm27, %%zmm29, %%zmm7\n\t"
    "vbroadcastss 8(%[a]), %%zmm28\n\t"
    "vfmadd231ps %%zmm24, %%zmm28, %%zmm8\n\t" "vfmadd231ps %%zmm25, %%zmm28, %%zmm9\n\t" "vfmadd231ps %%zmm26, %%zmm28, %%zmm10\n\t" "vfmadd231ps %%zmm27, %%zmm28, %%zmm11\n\t"
    "vbroadcastss 12(%[a]), %%zmm29\n\t"
    "vfmadd231ps %%zmm24, %%zmm29, %%zmm12\n\t" "vfmadd231ps %%zmm25, %%zmm29, %%zmm13\n\t" "vfmadd231ps %%zmm26, %%zmm29, %%zmm14\n\t" "vfmadd231ps %%zmm27, %%zmm29, %%zmm15\n\t"
    "vbroadcastss 16(%[a]), %%zmm28\n\t"
    "vfmadd231ps %%zmm24, %%zmm28, %%zmm16\n\t" "vfmadd231ps %%zmm25, %%zmm28, %%zmm17\n\t" "vfmadd231ps %%zmm26, %%zmm28, %%zmm18\n\t" "vfmadd231ps %%zmm27, %%zmm28, %%zmm19\n\t"
    "vbroadcastss 20(%[a]), %%zmm29\n\t"
    "vfmadd231ps %%zmm24, %%zmm29, %%zmm20\n\t" "vfmadd231ps %%zmm25, %%zmm29, %%zmm21\n\t" "vfmadd231ps %%zmm26, %%zmm29, %%zmm22\n\t" "vfmadd231ps %%zmm27, %%zmm29, %%zmm23\n\t"
    "add $256, %[b]\n\t" "add $24, %[a]\n\t" "dec %[n]\n\t" "jnz 1b\n\t"
    : [n] "+r"(n), [a] "+r"(pa), [b] "+r"(pb)
    :
    : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29");
  }
}
/* The same for a 6x16 AVX2 micro-kernel step (2 vector loads of B, 6 broadcasts of A, 12 FMAs
 * into 12 accumulators): reps x kc steps of 192 flop over a[kc * 6], b[kc * 16]. */
__attribute__((target("avx2,fma"), noinline, unused)) static void gemm_mix256(long reps, long kc,
                                                                      const float *a,
                                                                      const float *b) {
  for (long r = 0; r < reps; r++) {
    const float *pa = a, *pb = b;
    long n = kc;
    __asm__ volatile(
    "1:\n\t"
    "vmovups 0(%[b]), %%ymm12\n\t" "vmovups 32(%[b]), %%ymm13\n\t"
    "vbroadcastss 0(%[a]), %%ymm14\n\t"
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm0\n\t" "vfmadd231ps %%ymm13, %%ymm14, %%ymm1\n\t"
    "vbroadcastss 4(%[a]), %%ymm15\n\t"
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm2\n\t" "vfmadd231ps %%ymm13, %%ymm15, %%ymm3\n\t"
    "vbroadcastss 8(%[a]), %%ymm14\n\t"
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm4\n\t" "vfmadd231ps %%ymm13, %%ymm14, %%ymm5\n\t"
    "vbroadcastss 12(%[a]), %%ymm15\n\t"
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm6\n\t" "vfmadd231ps %%ymm13, %%ymm15, %%ymm7\n\t"
    "vbroadcastss 16(%[a]), %%ymm14\n\t"
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm8\n\t" "vfmadd231ps %%ymm13, %%ymm14, %%ymm9\n\t"
    "vbroadcastss 20(%[a]), %%ymm15\n\t"
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm10\n\t" "vfmadd231ps %%ymm13, %%ymm15, %%ymm11\n\t"
    "add $64, %[b]\n\t" "add $24, %[a]\n\t" "dec %[n]\n\t" "jnz 1b\n\t"
    : [n] "+r"(n), [a] "+r"(pa), [b] "+r"(pb)
    :
    : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  }
}
#endif

#endif
