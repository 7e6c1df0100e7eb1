/* Winograd F(2x2, 3x3) and F(4x4, 3x3) tile transforms, AVX2: 8 tiles at a time, the same
 * operations in the same order as winograd_f32.c's wino_in_c / wino_out_c and wino4_in_c /
 * wino4_out_c. Entered only from winograd_f32.c when kiln_cpu_isa() chose AVX2; built with
 * the AVX2 flags (isa_flags.cmake). */
#include "kernels/winograd_f32.h"

#include "kernels/gemm_internal.h"
#include "kernels/winograd_tf.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>

#define W8_ADD(a, b) _mm256_add_ps(a, b)
#define W8_SUB(a, b) _mm256_sub_ps(a, b)
#define W8_MUL(a, b) _mm256_mul_ps(a, b)

/* v[k] holds tiles 2k (low half) and 2k + 1 (high half), 4 values each; afterwards v[j] holds
 * value j of tiles 0..7 in order. */
static inline void tiles_to_lanes(__m256 v[4]) {
  const __m256i ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  v[0] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(t0, t2, 0x44), ord);
  v[1] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(t0, t2, 0xEE), ord);
  v[2] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(t1, t3, 0x44), ord);
  v[3] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(t1, t3, 0xEE), ord);
}

/* The inverse: v[j] holds value j of tiles 0..7; afterwards v[k] holds tiles 2k and 2k + 1
 * (4 values each), i.e. the 32 values tile by tile. */
static inline void lanes_to_tiles(__m256 v[4]) {
  const __m256i ord = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int j = 0; j < 4; j++) v[j] = _mm256_permutevar8x32_ps(v[j], ord);
  __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  v[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  v[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  v[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  v[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

static const int32_t w8_mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* n <= 8 tiles' values at p (the lanes past n masked by mk: neither read nor written). */
static inline __m256 ld_tiles8(const float *p, int64_t n, __m256i mk) {
  return n == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mk);
}
static inline void st_tiles8(float *p, int64_t n, __m256i mk, __m256 v) {
  if (n == 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, mk, v);
}

void kiln_wino4_in_avx2(const float *const r[6], int64_t tw, float *out, int64_t ps) {
  const __m256 k4 = _mm256_set1_ps(4.0f), k5 = _mm256_set1_ps(5.0f), k2 = _mm256_set1_ps(2.0f);
  for (int64_t tx = 0; tx < tw; tx += 8) {
    const int64_t n = tw - tx < 8 ? tw - tx : 8;
    const __m256i mk = _mm256_loadu_si256((const __m256i *)(w8_mask_table + 8 - n));
    __m256 d[6][6]; /* d[i][j]: row i, column 4 * tile + j */
    for (int i = 0; i < 6; i++) {
      const float *s = r[i] + 4 * tx;
      __m256 a[4], b[4];
      for (int k = 0; k < 4; k++) {
        a[k] = _mm256_loadu_ps(s + 8 * k);
        b[k] = _mm256_loadu_ps(s + 8 * k + 4);
      }
      tiles_to_lanes(a);
      tiles_to_lanes(b);
      for (int j = 0; j < 4; j++) d[i][j] = a[j];
      d[i][4] = b[0];
      d[i][5] = b[1];
    }
    __m256 t[6][6];
    for (int j = 0; j < 6; j++) {
      __m256 c[6], o[6];
      for (int i = 0; i < 6; i++) c[i] = d[i][j];
      WINO_BT6(__m256, c, o, W8_ADD, W8_SUB, W8_MUL, k4, k5, k2);
      for (int i = 0; i < 6; i++) t[i][j] = o[i];
    }
    for (int i = 0; i < 6; i++) {
      __m256 o[6];
      WINO_BT6(__m256, t[i], o, W8_ADD, W8_SUB, W8_MUL, k4, k5, k2);
      for (int j = 0; j < 6; j++) st_tiles8(out + (6 * i + j) * ps + tx, n, mk, o[j]);
    }
  }
}

void kiln_wino4_out_avx2(const float *o, int64_t ps, int64_t tw, float *const r[4]) {
  const __m256 k2 = _mm256_set1_ps(2.0f), k4 = _mm256_set1_ps(4.0f), k8 = _mm256_set1_ps(8.0f);
  for (int64_t tx = 0; tx < tw; tx += 8) {
    const int64_t n = tw - tx < 8 ? tw - tx : 8;
    const __m256i mk = _mm256_loadu_si256((const __m256i *)(w8_mask_table + 8 - n));
    __m256 s[4][6];
    for (int j = 0; j < 6; j++) {
      __m256 m[6], y[4];
      for (int i = 0; i < 6; i++) m[i] = ld_tiles8(o + (6 * i + j) * ps + tx, n, mk);
      WINO_AT6(__m256, m, y, W8_ADD, W8_SUB, W8_MUL, k2, k4, k8);
      for (int a = 0; a < 4; a++) s[a][j] = y[a];
    }
    for (int a = 0; a < 4; a++) {
      __m256 y[4];
      WINO_AT6(__m256, s[a], y, W8_ADD, W8_SUB, W8_MUL, k2, k4, k8);
      lanes_to_tiles(y);
      /* the row has room for whole groups of 8 tiles (rw >= 4 * round_up(tw, 16)) */
      for (int k = 0; k < 4; k++) _mm256_storeu_ps(r[a] + 4 * tx + 8 * k, y[k]);
    }
  }
}

/* ---- F(2x2, 3x3) ------------------------------------------------------------------------ */

/* The even (e) and odd (o) elements of s[0 .. 16), in order: element 2 l and 2 l + 1 of
 * lane l (the in-lane shuffles give lanes 0 1 4 5 2 3 6 7; one cross-lane permute each). */
static inline void even_odd8(const float *s, __m256 *e, __m256 *o) {
  __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
  *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
  *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}

void kiln_wino_in_avx2(const float *const r[4], int64_t tw, float *out, int64_t ps) {
  for (int64_t tx = 0; tx < tw; tx += 8) {
    const int64_t n = tw - tx < 8 ? tw - tx : 8;
    const __m256i mk = _mm256_loadu_si256((const __m256i *)(w8_mask_table + 8 - n));
    __m256 d[4][4], t[4][4];
    for (int i = 0; i < 4; i++) { /* tile tx reads columns 2 tx .. 2 tx + 3 */
      even_odd8(r[i] + 2 * tx, &d[i][0], &d[i][1]);
      even_odd8(r[i] + 2 * tx + 2, &d[i][2], &d[i][3]);
    }
    for (int j = 0; j < 4; j++)
      WINO_BT4(t[0][j], t[1][j], t[2][j], t[3][j], d[0][j], d[1][j], d[2][j], d[3][j], W8_ADD, W8_SUB);
    for (int i = 0; i < 4; i++) {
      __m256 v[4];
      WINO_BT4(v[0], v[1], v[2], v[3], t[i][0], t[i][1], t[i][2], t[i][3], W8_ADD, W8_SUB);
      for (int j = 0; j < 4; j++) st_tiles8(out + (4 * i + j) * ps + tx, n, mk, v[j]);
    }
  }
}

void kiln_wino_out_avx2(const float *o, int64_t ps, int64_t tw, float *r0, float *r1) {
  for (int64_t tx = 0; tx < tw; tx += 8) {
    const int64_t n = tw - tx < 8 ? tw - tx : 8;
    const __m256i mk = _mm256_loadu_si256((const __m256i *)(w8_mask_table + 8 - n));
    __m256 m[16], s[2][4];
    for (int k = 0; k < 16; k++) m[k] = ld_tiles8(o + k * ps + tx, n, mk);
    for (int j = 0; j < 4; j++) WINO_AT4(s[0][j], s[1][j], m[j], m[4 + j], m[8 + j], m[12 + j], W8_ADD, W8_SUB);
    float *const rr[2] = {r0, r1};
    for (int a = 0; a < 2; a++) { /* columns 2 tx (y0) and 2 tx + 1 (y1), interleaved */
      __m256 y0, y1;
      WINO_AT4(y0, y1, s[a][0], s[a][1], s[a][2], s[a][3], W8_ADD, W8_SUB);
      __m256 lo = _mm256_unpacklo_ps(y0, y1), hi = _mm256_unpackhi_ps(y0, y1);
      /* the row has room for whole groups of 8 tiles (rw >= 2 * round_up(tw, 16)) */
      _mm256_storeu_ps(rr[a] + 2 * tx, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(rr[a] + 2 * tx + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
}

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_winograd_avx2_unused;
#endif
