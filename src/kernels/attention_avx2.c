/* ai.kiln::Attention's hot path in 256-bit AVX2 + FMA, and K's panel transpose. Compiled with
 * -mavx2 -mfma (CMakeLists.txt); entered only through kiln_attn_kernels_get(). */
#include <string.h>

#include "kernels/attention.h"
#include "kernels/vmath.h"

#if defined(__x86_64__) || defined(__i386__)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "attention_avx2.c must be compiled with its ISA flags (CMakeLists.txt)"
#endif
#include <immintrin.h>

#define AT_FN(name) name##_avx2
#define AT_VW 8
#define AT_QB 4
#define AT_FMA(acc, a, b) ((acc) = _mm256_fmadd_ps((a), (b), (acc)))
#define AT_FMA_SPLAT(e, r, c) ((e) = _mm256_fmadd_ps((e), (r), _mm256_set1_ps(c)))
#include "kernels/attention_tiles.h"

/* panel[d][j] = k[j][d] for j < nk (rows sj apart), d < D (contiguous), in 8 x 8 blocks
 * transposed in registers; the edges one value at a time. Pure data movement: the same
 * result as the scalar loop. */
void kiln_attn_pack_rows_avx2(const float *k, int64_t sj, int64_t nk, int64_t D, float *panel) {
  int64_t j = 0;
  for (; j + 8 <= nk; j += 8) {
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
      __m256 r[8], t[8], s[8];
      for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(k + (j + i) * sj + d);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(panel + (d + i) * BK + j, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
        _mm256_storeu_ps(panel + (d + i + 4) * BK + j, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
      }
    }
    for (; d < D; d++)
      for (int i = 0; i < 8; i++) panel[d * BK + j + i] = k[(j + i) * sj + d];
  }
  for (; j < nk; j++)
    for (int64_t d = 0; d < D; d++) panel[d * BK + j] = k[j * sj + d];
}
#endif
