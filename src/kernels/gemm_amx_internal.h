/* Pieces shared by the AMX bf16x3 GEMMs (gemm_amx.c: W packed, X split per call, for
 * convolutions; gemm_amx_ab.c: A split per call, B packed, for MatMul and Gemm). Internal. */
#ifndef KILN_KERNELS_GEMM_AMX_INTERNAL_H
#define KILN_KERNELS_GEMM_AMX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/act.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#define KILN_AMX_BUILD 1
#define T_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define T_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

enum { TILE_ELEMS = 512 }; /* bfloat16 per tile: 16 rows of 64 bytes */
enum { K_CHUNK = 16 };     /* k blocks of 32 per chunk where K is taken in chunks */

/* 16 floats rounded to bf16 (nearest even; finite values), as 32-bit patterns whose high 16
 * bits are the bf16 (the low 16 are left over, not zero). */
T_512 static inline __m512i kiln_bf16_bits(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}

/* The hi and lo parts of 16 floats at p (the first n of them; 0 for the rest): bf16 patterns
 * as from kiln_bf16_bits, hi = bf16(x) and lo = bf16(x - hi). */
T_512 static inline void kiln_bf16_split16(const float *p, size_t n, __m512i *hi, __m512i *lo) {
  const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
  __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
  *hi = kiln_bf16_bits(v);
  *lo = kiln_bf16_bits(_mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_and_si512(*hi, top))));
}

static inline size_t kiln_amx_take16(size_t from, size_t end) {
  return from < end ? (end - from < 16 ? end - from : 16) : 0;
}

/* Rows [row0, row0 + 32) of a (m x k, rows lda apart; 0 past m and k) as left-operand tiles
 * (row-major: 16 rows x 32 bf16): hi [2][kb] tiles and lo [2][kb] tiles. */
T_512 static inline void kiln_amx_split_rows(const float *a, size_t lda, size_t m, size_t k,
                                             size_t kb, size_t row0, uint16_t *hi, uint16_t *lo) {
  /* the bf16 halves of two vectors' 32-bit patterns, in order */
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                       31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (size_t i = 0; i < 32; i++) {
    size_t row = row0 + i, off = (i / 16) * kb * TILE_ELEMS + (i % 16) * 32;
    const float *ar = a + (row < m ? row : 0) * lda;
    for (size_t b = 0; b < kb; b++) {
      size_t k0 = b * 32;
      __m512i h0, h1, l0, l1;
      kiln_bf16_split16(ar + k0, row < m ? kiln_amx_take16(k0, k) : 0, &h0, &l0);
      kiln_bf16_split16(ar + k0 + 16, row < m ? kiln_amx_take16(k0 + 16, k) : 0, &h1, &l1);
      _mm512_store_si512((void *)(hi + off + b * TILE_ELEMS), _mm512_permutex2var_epi16(h0, odd, h1));
      _mm512_store_si512((void *)(lo + off + b * TILE_ELEMS), _mm512_permutex2var_epi16(l0, odd, l1));
    }
  }
}

/* Columns [j0, j0 + 32) of x (k x n, rows ldx apart; 0 past n and k) as right-operand tiles
 * (VNNI: row r of a tile holds columns 0..15 of k rows 2r and 2r + 1, interleaved, that is one
 * 32-bit word per column with row 2r in its low half): hi [2][kb] tiles (column halves) and
 * lo [2][kb] tiles. */
T_512 static inline void kiln_amx_split_cols(const float *x, size_t ldx, size_t k, size_t kb,
                                             size_t n, size_t j0, uint16_t *hi, uint16_t *lo) {
  const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
  for (size_t half = 0; half < 2; half++) {
    size_t c0 = j0 + 16 * half, cols = kiln_amx_take16(c0, n);
    for (size_t b = 0; b < kb; b++) {
      uint16_t *th = hi + (half * kb + b) * TILE_ELEMS, *tl = lo + (half * kb + b) * TILE_ELEMS;
      for (size_t r = 0; r < 16; r++) {
        size_t k0 = b * 32 + 2 * r;
        __m512i h0, h1, l0, l1;
        kiln_bf16_split16(x + (k0 < k ? k0 : 0) * ldx + c0, k0 < k ? cols : 0, &h0, &l0);
        kiln_bf16_split16(x + (k0 + 1 < k ? k0 + 1 : 0) * ldx + c0, k0 + 1 < k ? cols : 0, &h1, &l1);
        /* (row 2r + 1's bf16 & top) | row 2r's bf16 moved down: ternary logic 0xEA is a & b | c */
        _mm512_store_si512((void *)(th + r * 32),
                           _mm512_ternarylogic_epi32(h1, top, _mm512_srli_epi32(h0, 16), 0xEA));
        _mm512_store_si512((void *)(tl + r * 32),
                           _mm512_ternarylogic_epi32(l1, top, _mm512_srli_epi32(l0, 16), 0xEA));
      }
    }
  }
}

/* A block of C (rows x cols of it, rows ldc apart) from its 32 x 32 sums: plus a bias per row
 * (bias_row[i], may be NULL) or per column (bias_col[j], may be NULL), plus the residual (rows
 * ldr apart, may be NULL), then the activation (relu and clip in registers). */
T_512 static inline void kiln_amx_finish(const float *sums, size_t rows, size_t cols, float *c, size_t ldc,
                                         const float *bias_row, const float *bias_col, const float *res,
                                         size_t ldr, const kiln_act *act) {
  const int clamp = act->kind == KILN_ACT_RELU || act->kind == KILN_ACT_CLIP;
  const __m512 lo = _mm512_set1_ps(act->kind == KILN_ACT_CLIP ? act->alpha : 0.0f);
  const __m512 hi = _mm512_set1_ps(act->kind == KILN_ACT_CLIP ? act->beta : __builtin_inff());
  for (size_t i = 0; i < rows; i++) {
    float *cr = c + i * ldc;
    const float *rr = res ? res + i * ldr : NULL;
    for (size_t h = 0; h < cols; h += 16) {
      size_t left = cols - h;
      __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      __m512 v = _mm512_load_ps(sums + i * 32 + h);
      if (bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(bias_row[i]));
      if (bias_col) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias_col + h));
      if (rr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rr + h));
      if (clamp) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_mask_storeu_ps(cr + h, m, v);
    }
    if (!clamp && act->kind != KILN_ACT_NONE) kiln_f32_act(KILN_ISA_AVX512, cr, cols, act);
  }
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
