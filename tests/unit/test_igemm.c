/* The integer GEMM of the quantized convolutions (kernels/igemm) at every level this CPU has
 * (scalar, AVX2 vpmaddwd, AVX-512 VNNI vpdpwssd) against a plain int64 reference reduced modulo
 * 2^32: results must be equal bit for bit. Shapes cover the 4-row blocks and their row tail,
 * the vector column blocks and the scalar column tail, odd k (the zero-padded last pair), one
 * row (the unpacked path of kiln_igemm_s16), values at the extremes (+-255: the largest pairs,
 * where a saturating scheme would fail) and accumulation into a non-zero c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/igemm.h"
#include "testutil.h"

static void reference(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b, int32_t *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t s = (uint32_t)c[i * n + j];
      for (int64_t p = 0; p < k; p++) s += (int64_t)a[i * k + p] * b[p * n + j];
      c[i * n + j] = (int32_t)(uint32_t)((uint64_t)s & 0xffffffffu);
    }
}

static void check_shape(int64_t m, int64_t n, int64_t k, int extreme) {
  int16_t *a = malloc(sizeof(int16_t) * (size_t)(m * k)), *b = malloc(sizeof(int16_t) * (size_t)(k * n));
  int32_t *c0 = malloc(sizeof(int32_t) * (size_t)(m * n)), *c = malloc(sizeof(int32_t) * (size_t)(m * n));
  for (int64_t i = 0; i < m * k; i++) a[i] = (int16_t)(extreme ? (kt_rand() & 1 ? 255 : -255) : kt_rand_in(-255, 255));
  for (int64_t i = 0; i < k * n; i++) b[i] = (int16_t)(extreme ? (kt_rand() & 1 ? 255 : -255) : kt_rand_in(-255, 255));
  for (int64_t i = 0; i < m * n; i++) c0[i] = (int32_t)kt_rand();
  int32_t *want = malloc(sizeof(int32_t) * (size_t)(m * n));
  memcpy(want, c0, sizeof(int32_t) * (size_t)(m * n));
  reference(m, n, k, a, b, want);
  for (int isa = KILN_ISA_SCALAR; isa <= KILN_ISA_AVX512; isa++) {
    if (isa > (int)kiln_cpu_isa() || (isa == KILN_ISA_AVX512 && !kiln_igemm_has_vnni())) continue;
    memcpy(c, c0, sizeof(int32_t) * (size_t)(m * n));
    CHECK(kiln_igemm_s16_isa((kiln_isa)isa, m, n, k, a, b, c) == 0);
    CHECK_MSG(!memcmp(c, want, sizeof(int32_t) * (size_t)(m * n)), "isa %d m %lld n %lld k %lld", isa,
              (long long)m, (long long)n, (long long)k);
  }
  memcpy(c, c0, sizeof(int32_t) * (size_t)(m * n));
  CHECK(kiln_igemm_s16(m, n, k, a, b, c) == 0);
  CHECK(!memcmp(c, want, sizeof(int32_t) * (size_t)(m * n)));
  free(a);
  free(b);
  free(c0);
  free(c);
  free(want);
}

int main(void) {
  kt_rng = 18;
  printf("test_igemm: levels up to %d, VNNI %s\n", (int)kiln_cpu_isa(), kiln_igemm_has_vnni() ? "yes" : "no");
  static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 13};
  static const int64_t ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 64, 100};
  static const int64_t ks[] = {1, 2, 3, 9, 27, 64, 147};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
      for (size_t p = 0; p < sizeof ks / sizeof *ks; p++) check_shape(ms[i], ns[j], ks[p], 0);
  check_shape(8, 64, 1155, 1); /* the largest pairs; sums onto random int32 c wrap past 2^31 */
  check_shape(64, 200, 300, 1);
  check_shape(37, 129, 577, 0);
  return kt_finish("test_igemm");
}
