/* Integer GEMM dispatch, packing and the scalar kernel (see igemm.h). */
#include "kernels/igemm.h"

#include <stdlib.h>
#include <string.h>

/* The reference: int32 sums computed in uint32 so that they wrap without undefined behaviour. */
static void igemm_scalar(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b, int32_t *c) {
  for (int64_t i = 0; i < m; i++) {
    uint32_t *ci = (uint32_t *)(c + i * n);
    for (int64_t p = 0; p < k; p++) {
      const int32_t av = a[i * k + p];
      const int16_t *bp = b + p * n;
      for (int64_t j = 0; j < n; j++) ci[j] += (uint32_t)(av * (int32_t)bp[j]);
    }
  }
}

int kiln_igemm_has_vnni(void) {
  return kiln_cpu_isa() >= KILN_ISA_AVX512 && kiln_cpu_get_features()->avx512_vnni;
}

int kiln_igemm_s16_isa(kiln_isa isa, int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b,
                       int32_t *c) {
  if (isa <= KILN_ISA_SCALAR || m <= 0 || n <= 0 || k <= 0) {
    if (isa > kiln_cpu_isa()) return -1;
    if (m > 0 && n > 0 && k > 0) igemm_scalar(m, n, k, a, b, c);
    return 0;
  }
  if (isa > kiln_cpu_isa() || (isa == KILN_ISA_AVX512 && !kiln_igemm_has_vnni())) return -1;
  /* b packed in pairs of rows with n padded to whole vector blocks (zero columns); the sums go
   * to a scratch c of that width and are then added into c */
  int64_t k2 = (k + 1) / 2, np = (n + KILN_IGEMM_NBLOCK - 1) / KILN_IGEMM_NBLOCK * KILN_IGEMM_NBLOCK;
  int16_t *ap = malloc(sizeof(int16_t) * (size_t)(m * k2 * 2));
  int16_t *bp = calloc((size_t)(k2 * np * 2), sizeof(int16_t));
  int32_t *cs = malloc(sizeof(int32_t) * (size_t)(m * np));
  if (!ap || !bp || !cs) {
    free(ap);
    free(bp);
    free(cs);
    return -1;
  }
  for (int64_t i = 0; i < m; i++) {
    memcpy(ap + i * k2 * 2, a + i * k, sizeof(int16_t) * (size_t)k);
    if (k & 1) ap[i * k2 * 2 + k] = 0;
  }
  for (int64_t p = 0; p < k2; p++) {
    const int16_t *r0 = b + 2 * p * n, *r1 = 2 * p + 1 < k ? r0 + n : NULL;
    int16_t *o = bp + p * np * 2;
    for (int64_t j = 0; j < n; j++) {
      o[2 * j] = r0[j];
      o[2 * j + 1] = r1 ? r1[j] : 0;
    }
  }
#if defined(__x86_64__) || defined(__i386__)
  if (isa == KILN_ISA_AVX512)
    kiln_igemm_packed_avx512(m, np, k2, ap, bp, cs);
  else
    kiln_igemm_packed_avx2(m, np, k2, ap, bp, cs);
  for (int64_t i = 0; i < m; i++) {
    uint32_t *ci = (uint32_t *)(c + i * n);
    const uint32_t *si = (const uint32_t *)(cs + i * np);
    for (int64_t j = 0; j < n; j++) ci[j] += si[j];
  }
#else
  igemm_scalar(m, n, k, a, b, c); /* no vector kernels built for this architecture */
#endif
  free(cs);
  free(ap);
  free(bp);
  return 0;
}

int kiln_igemm_s16(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *b, int32_t *c) {
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512 && !kiln_igemm_has_vnni()) isa = KILN_ISA_AVX2;
  /* a packed kernel pays for packing b once per call: worth it from a few rows on */
  if (m < 2 && isa > KILN_ISA_SCALAR) isa = KILN_ISA_SCALAR;
  return kiln_igemm_s16_isa(isa, m, n, k, a, b, c);
}
