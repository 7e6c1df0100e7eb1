/* Pieces shared by the AMX bf16x3 GEMMs (gemm_amx.c: W packed, X split per call, for
 * convolutions; gemm_amx_ab.c: A split per call, B packed, for MatMul and Gemm). Internal. */
#ifndef KILN_KERNELS_GEMM_AMX_INTERNAL_H
#define KILN_KERNELS_GEMM_AMX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#define KILN_AMX_BUILD 1
#define T_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define T_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

enum { TILE_ELEMS = 512 }; /* bfloat16 per tile: 16 rows of 64 bytes */
enum { K_CHUNK = 16 };     /* k blocks of 32 per chunk where K is taken in chunks */

static inline uint16_t kiln_bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float kiln_bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bf16 of 16 floats, rounded to nearest even (finite values) */
T_512 static inline __m256i kiln_cvt_bf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
}

T_512 static inline __m512 kiln_bf16_widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Configure this thread's tiles (eight of 16 rows x 64 bytes) / release them. */
void kiln_amx_tiles_on(void);
void kiln_amx_tiles_off(void);

/* A 32 x 32 block of sums: left operand tiles (16 rows x 32 bf16, row-major) at lh / ll (hi /
 * lo) for rows 0-15 and at +tstep for rows 16-31; right operand tiles (VNNI: 16 k-pairs x 16
 * columns) at rh / rl for columns 0-15 and at +tstep for 16-31; k blocks [b0, b1) (tile b at
 * +b * TILE_ELEMS); started from acc (32 x 32 floats, rows 128 bytes apart) or from 0 when acc
 * is NULL; stored to out (the same form; may be acc). */
void kiln_amx_mma(const uint16_t *lh, const uint16_t *ll, const uint16_t *rh, const uint16_t *rl,
                  size_t tstep, size_t b0, size_t b1, const float *acc, float *out);
#endif

#endif
