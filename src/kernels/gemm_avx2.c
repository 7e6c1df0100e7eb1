/* AVX2+FMA single-precision kernels: the 6x16 GEMM micro-kernel, matrix-vector kernels, the
 * epilogue and vectorised activations. Built with the project's default flags: every
 * function carries a target attribute, and the driver only calls them when cpuid says so. */
#include "kernels/gemm_internal.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#include <stdalign.h>
#include <stdint.h>

#define T256 KILN_TARGET_AVX2
#define V256 KILN_INLINE T256

static const int32_t mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* Lanes [0, n) on, n in 0..8. */
V256 __m256i mask256(size_t n) { return _mm256_loadu_si256((const __m256i *)(mask_table + 8 - n)); }

/* ---- vector math ----------------------------------------------------------------------- */

V256 __m256 exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

V256 __m256 abs256(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

V256 __m256 sigmoid256(__m256 x) {
  __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

V256 __m256 tanh256(__m256 x) {
  __m256 ax = abs256(x);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  __m256 e = exp256(_mm256_add_ps(ax, ax));
  __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                             _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  big = _mm256_or_ps(big, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
  __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm256_blendv_ps(big, small, is_small);
}

V256 __m256 gelu256(__m256 x) {
  __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
  __m256 az = abs256(z);
  __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(az, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  __m256 erfc_az = _mm256_mul_ps(t, exp256(_mm256_sub_ps(p, _mm256_mul_ps(az, az))));
  __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 one_plus = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc_az), erfc_az, neg);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_plus);
}


V256 __m256 act256(__m256 v, const kiln_act *a) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  switch (a->kind) {
    case KILN_ACT_NONE: return v;
    case KILN_ACT_RELU: return _mm256_max_ps(v, zero);
    case KILN_ACT_LEAKY_RELU: {
      __m256 neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(a->alpha)), neg);
    }
    case KILN_ACT_CLIP:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(a->alpha)), _mm256_set1_ps(a->beta));
    case KILN_ACT_SIGMOID: return sigmoid256(v);
    case KILN_ACT_TANH: return tanh256(v);
    case KILN_ACT_GELU: return gelu256(v);
    case KILN_ACT_GELU_TANH: {
      __m256 x2 = _mm256_mul_ps(v, v);
      __m256 u = _mm256_mul_ps(v, _mm256_fmadd_ps(x2, _mm256_set1_ps(0.044715f * 1.5957691216057308f),
                                                   _mm256_set1_ps(1.5957691216057308f)));
      return _mm256_mul_ps(v, sigmoid256(u));
    }
    case KILN_ACT_SILU: return _mm256_mul_ps(v, sigmoid256(v));
    case KILN_ACT_HARD_SIGMOID:
      return _mm256_min_ps(
          _mm256_max_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(a->alpha), _mm256_set1_ps(a->beta)), zero),
          one);
    case KILN_ACT_HARD_SWISH: {
      __m256 h = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
      return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(h, zero), one));
    }
    case KILN_ACT_ELU: {
      __m256 neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
      __m256 e = _mm256_mul_ps(_mm256_sub_ps(exp256(v), one), _mm256_set1_ps(a->alpha));
      return _mm256_blendv_ps(v, e, neg);
    }
    default: return v;
  }
}

static T256 void act_avx2(float *x, size_t n, const kiln_act *a) {
  if (a->kind == KILN_ACT_NONE) return;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, act256(_mm256_loadu_ps(x + i), a));
  if (i < n) {
    __m256i m = mask256(n - i);
    _mm256_maskstore_ps(x + i, m, act256(_mm256_maskload_ps(x + i, m), a));
  }
}

/* ---- epilogue ------------------------------------------------------------------------ */

V256 __m256 finish256(__m256 v, const float *cp, __m256i m, size_t col, const kiln_gemm_tile *t,
                      const float *brp, const float *rp, int inline_act) {
  if (t->alpha != 1.0f) v = _mm256_mul_ps(v, _mm256_set1_ps(t->alpha));
  if (t->flags & KILN_GT_FIRST) {
    if (t->beta != 0.0f) v = _mm256_fmadd_ps(_mm256_set1_ps(t->beta), _mm256_maskload_ps(cp, m), v);
  } else {
    v = _mm256_add_ps(v, _mm256_maskload_ps(cp, m));
  }
  if (t->flags & KILN_GT_LAST) {
    if (t->bias) v = _mm256_add_ps(v, _mm256_maskload_ps(t->bias + col, m));
    if (brp) v = _mm256_add_ps(v, _mm256_set1_ps(*brp));
    if (rp && !t->res_after) v = _mm256_add_ps(v, _mm256_maskload_ps(rp, m));
    if (inline_act) v = act256(v, &t->act);
  }
  return v;
}

static T256 void post_row256(float *c, size_t n, const kiln_gemm_tile *t, const float *rp) {
  if (!kiln_act_is_simple(t->act.kind)) act_avx2(c, n, &t->act);
  if (rp && t->res_after) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(c + j, _mm256_add_ps(_mm256_loadu_ps(c + j), _mm256_loadu_ps(rp + j)));
    if (j < n) {
      __m256i m = mask256(n - j);
      _mm256_maskstore_ps(c + j, m, _mm256_add_ps(_mm256_maskload_ps(c + j, m),
                                                  _mm256_maskload_ps(rp + j, m)));
    }
  }
}

static T256 void epilogue_row_avx2(float *c, const float *acc, size_t n, const kiln_gemm_tile *t) {
  int simple = kiln_act_is_simple(t->act.kind);
  for (size_t j = 0; j < n; j += 8) {
    __m256i m = mask256(n - j < 8 ? n - j : 8);
    __m256 v = finish256(_mm256_maskload_ps(acc + j, m), c + j, m, j, t, t->bias_row,
                         t->res ? t->res + j : NULL, simple);
    _mm256_maskstore_ps(c + j, m, v);
  }
  if (t->flags & KILN_GT_LAST) post_row256(c, n, t, t->res);
}

/* ---- micro-kernel -------------------------------------------------------------------- */

/* Finish an mr x nc tile held in buf (row stride 16). */
static T256 void store_tile256(size_t mr, size_t nc, const float *buf, float *c, size_t ldc,
                               const kiln_gemm_tile *t) {
  const int simple = kiln_act_is_simple(t->act.kind);
  const int post = (t->flags & KILN_GT_LAST) && (!simple || (t->res && t->res_after));
  for (size_t i = 0; i < mr; i++) {
    float *cr = c + i * ldc;
    const float *rp = t->res ? t->res + i * t->ldr : NULL;
    const float *brp = t->bias_row ? t->bias_row + i : NULL;
    for (size_t j = 0; j < nc; j += 8) {
      __m256i m = mask256(nc - j < 8 ? nc - j : 8);
      __m256 v = finish256(_mm256_load_ps(buf + 16 * i + j), cr + j, m, j, t, brp,
                           rp ? rp + j : NULL, simple);
      if (j + 8 <= nc)
        _mm256_storeu_ps(cr + j, v);
      else
        _mm256_maskstore_ps(cr + j, m, v);
    }
    if (post) post_row256(cr, nc, t, rp);
  }
}

V256 void ukr256(const int MR, const int NV, const int PF, const int FULL, size_t nc, size_t kc,
                 const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc,
                 const kiln_gemm_tile *t) {
  /* FULL: nc is NV whole vectors, so no load or store is masked (masked stores are slow on
   * some CPUs, e.g. AMD's) */
  const size_t tail = FULL ? 8 : nc - (size_t)(NV - 1) * 8;
  const __m256i ml = mask256(tail);
  const int fast = kiln_tile_fast_mode(t);
  if (fast != 1) /* C will be read: start bringing it in (a plain store needs no read) */
    for (int i = 0; i < MR; i++) _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
  /* the residual tile, read once by the epilogue of the last K block: a layer or more old, it
   * comes from L3 or memory, and its misses would stall the stores at the end */
  if (t->res && (t->flags & KILN_GT_LAST))
    for (int i = 0; i < MR; i++) {
      _mm_prefetch((const char *)(t->res + (size_t)i * t->ldr), _MM_HINT_T0);
      _mm_prefetch((const char *)(t->res + (size_t)i * t->ldr + nc - 1), _MM_HINT_T0);
    }
  /* rows past mr alias row 0 (never read) so no pointer leaves the matrix */
  const float *a0 = a, *a1 = MR > 1 ? a + lda : a, *a2 = MR > 2 ? a + 2 * lda : a,
              *a3 = MR > 3 ? a + 3 * lda : a, *a4 = MR > 4 ? a + 4 * lda : a,
              *a5 = MR > 5 ? a + 5 * lda : a;
#define DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = c##i##0;
  DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5)
#undef DECL
#pragma GCC unroll 4
  for (size_t k = 0; k < kc; k++) {
    __m256 b0 = NV == 1 && !FULL ? _mm256_maskload_ps(b, ml) : _mm256_loadu_ps(b);
    __m256 b1 = NV < 2 ? _mm256_setzero_ps()
                       : FULL ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, ml);
    if (PF) _mm_prefetch((const char *)(b + 8 * ldb), _MM_HINT_T0); /* B streams from L2 */
    b += ldb;
#define ROW(i)                                              \
  if (MR > i) {                                             \
    __m256 av = _mm256_broadcast_ss(a##i + k);              \
    c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);             \
    if (NV > 1) c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1); \
  }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
  }
  if (fast) { /* C = acc or C += acc, straight from registers */
#define PUT(i, j)                                                                        \
  if (MR > i && NV > j) {                                                                \
    float *cp = c + (size_t)i * ldc + 8 * j;                                             \
    if (FULL || NV - 1 != j) {                                                           \
      __m256 v = fast == 2 ? _mm256_add_ps(c##i##j, _mm256_loadu_ps(cp)) : c##i##j;      \
      _mm256_storeu_ps(cp, v);                                                           \
    } else {                                                                             \
      __m256 v = fast == 2 ? _mm256_add_ps(c##i##j, _mm256_maskload_ps(cp, ml)) : c##i##j; \
      _mm256_maskstore_ps(cp, ml, v);                                                    \
    }                                                                                    \
  }
#define PUTROW(i) PUT(i, 0) PUT(i, 1)
    PUTROW(0) PUTROW(1) PUTROW(2) PUTROW(3) PUTROW(4) PUTROW(5)
#undef PUTROW
#undef PUT
    return;
  }
  if (kiln_tile_reg_epilogue(t)) {
    /* bias, residual and clamp from registers, in finish256's order (short K blocks, as in
     * 1x1 convolutions, spend as long on the tile's epilogue as on its products) */
    const int accum = !(t->flags & KILN_GT_FIRST) || t->beta != 0.0f;
    const int clamp = t->act.kind != KILN_ACT_NONE;
    const __m256 lo = _mm256_set1_ps(t->act.kind == KILN_ACT_CLIP ? t->act.alpha : 0.0f);
    const __m256 hi = _mm256_set1_ps(t->act.kind == KILN_ACT_CLIP ? t->act.beta : __builtin_inff());
    const float *cb = t->bias, *rb = t->bias_row, *res = t->res;
    const size_t ldr = t->ldr;
#define LD(p, whole) ((whole) ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), ml))
#define PUT(i, j)                                                                      \
  if (MR > i && NV > j) {                                                              \
    float *cp = c + (size_t)i * ldc + 8 * j;                                           \
    const int whole = FULL || NV - 1 != j;                                             \
    __m256 v = c##i##j;                                                                \
    if (accum) v = _mm256_add_ps(v, LD(cp, whole));                                    \
    if (cb) v = _mm256_add_ps(v, LD(cb + 8 * j, whole));                               \
    if (rb) v = _mm256_add_ps(v, _mm256_broadcast_ss(rb + i));                         \
    if (res) v = _mm256_add_ps(v, LD(res + (size_t)i * ldr + 8 * j, whole));           \
    if (clamp) v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);                            \
    if (whole)                                                                         \
      _mm256_storeu_ps(cp, v);                                                         \
    else                                                                               \
      _mm256_maskstore_ps(cp, ml, v);                                                  \
  }
#define PUTROW(i) PUT(i, 0) PUT(i, 1)
    PUTROW(0) PUTROW(1) PUTROW(2) PUTROW(3) PUTROW(4) PUTROW(5)
#undef PUTROW
#undef PUT
#undef LD
    return;
  }
  alignas(32) float buf[6 * 16];
#define SAVE(i)                                                  \
  if (MR > i) {                                                  \
    _mm256_store_ps(buf + 16 * i, c##i##0);                      \
    if (NV > 1) _mm256_store_ps(buf + 16 * i + 8, c##i##1);      \
  }
  SAVE(0) SAVE(1) SAVE(2) SAVE(3) SAVE(4) SAVE(5)
#undef SAVE
  store_tile256(MR, nc, buf, c, ldc, t);
}

#define UKR(MR, NV, PF, F)                                                                    \
  static T256 void ukr256_##MR##x##NV##_##PF##F(size_t nc, size_t kc, const float *a, size_t lda, \
                                                const float *b, size_t ldb, float *c, size_t ldc, \
                                                const kiln_gemm_tile *t) {                       \
    ukr256(MR, NV, PF, F, nc, kc, a, lda, b, ldb, c, ldc, t);                                   \
  }
#define UKR_F(MR, NV, PF) UKR(MR, NV, PF, 0) UKR(MR, NV, PF, 1)
#define UKR_ROW(MR) UKR_F(MR, 1, 0) UKR_F(MR, 2, 0) UKR_F(MR, 1, 1) UKR_F(MR, 2, 1)
UKR_ROW(1) UKR_ROW(2) UKR_ROW(3) UKR_ROW(4) UKR_ROW(5) UKR_ROW(6)
#undef UKR_ROW
#undef UKR_F
#undef UKR

typedef void (*ukr_fn)(size_t, size_t, const float *, size_t, const float *, size_t, float *,
                       size_t, const kiln_gemm_tile *);
/* [prefetch B][whole vectors][rows - 1][vectors - 1] */
#define UKR_ROW(MR, PF, F) {ukr256_##MR##x1_##PF##F, ukr256_##MR##x2_##PF##F}
#define UKR_TAB(PF, F)                                                                   \
  {UKR_ROW(1, PF, F), UKR_ROW(2, PF, F), UKR_ROW(3, PF, F), UKR_ROW(4, PF, F),           \
   UKR_ROW(5, PF, F), UKR_ROW(6, PF, F)}
static const ukr_fn ukr256_table[2][2][6][2] = {{UKR_TAB(0, 0), UKR_TAB(0, 1)},
                                                {UKR_TAB(1, 0), UKR_TAB(1, 1)}};
#undef UKR_TAB
#undef UKR_ROW

/* When B does not stay in L1 between calls (t->pf_b), the kernel prefetches it ahead of use;
 * a tile of whole vectors takes the variant without masked loads and stores. */
static void f32_gemm_6x16__avx2(size_t mr, size_t nc, size_t kc, const float *a, size_t lda,
                                const float *b, size_t ldb, float *c, size_t ldc,
                                const kiln_gemm_tile *t) {
  ukr256_table[t->pf_b != 0][(nc & 7) == 0][mr - 1][(nc + 7) / 8 - 1](nc, kc, a, lda, b, ldb, c,
                                                                      ldc, t);
}

/* ---- matrix-vector ------------------------------------------------------------------- */

/* y[0..nc) = x . B for a block of NV vectors. One or two vectors per k would wait on the FMA
 * latency (4 cycles) with their few accumulators: then U = 4 or 2 sets of them take
 * consecutive k, summed at the end. */
V256 void gemv_n_block256(const int NV, const int FULL, size_t kc, size_t nc, const float *x,
                          const float *b, size_t ldb, float *y) {
  enum { U = 4 };
  const int u = NV <= 2 ? 4 : NV <= 4 ? 2 : 1;
  __m256 acc[U][8];
  const size_t tail = nc - (size_t)(NV - 1) * 8;
  const __m256i ml = mask256(tail);
  for (int s = 0; s < u; s++)
    for (int j = 0; j < NV; j++) acc[s][j] = _mm256_setzero_ps();
  size_t k = 0;
  for (; k + (size_t)u <= kc; k += (size_t)u)
    for (int s = 0; s < u; s++) {
      __m256 xv = _mm256_broadcast_ss(x + k + s);
      const float *br = b + (k + s) * ldb;
      for (int j = 0; j < NV; j++) {
        __m256 bv = j == NV - 1 && !FULL ? _mm256_maskload_ps(br + 8 * j, ml) : _mm256_loadu_ps(br + 8 * j);
        acc[s][j] = _mm256_fmadd_ps(xv, bv, acc[s][j]);
      }
    }
  for (; k < kc; k++) {
    __m256 xv = _mm256_broadcast_ss(x + k);
    const float *br = b + k * ldb;
    for (int j = 0; j < NV; j++) {
      __m256 bv = j == NV - 1 && !FULL ? _mm256_maskload_ps(br + 8 * j, ml) : _mm256_loadu_ps(br + 8 * j);
      acc[0][j] = _mm256_fmadd_ps(xv, bv, acc[0][j]);
    }
  }
  for (int j = 0; j < NV; j++) {
    __m256 v = acc[0][j];
    if (u > 1) v = _mm256_add_ps(v, acc[1][j]);
    if (u > 2) v = _mm256_add_ps(v, _mm256_add_ps(acc[2][j], acc[3][j]));
    if (FULL || j < NV - 1)
      _mm256_storeu_ps(y + 8 * j, v);
    else
      _mm256_maskstore_ps(y + 8 * j, ml, v);
  }
}

#define GEMVN(NV)                                                                             \
  static T256 void gemv_n256_##NV(size_t kc, size_t nc, const float *x, const float *b,         \
                                  size_t ldb, float *y) {                                       \
    if (nc == 8 * NV) /* whole vectors: no masked loads (slow on some CPUs, e.g. AMD's) */      \
      gemv_n_block256(NV, 1, kc, nc, x, b, ldb, y);                                            \
    else                                                                                        \
      gemv_n_block256(NV, 0, kc, nc, x, b, ldb, y);                                            \
  }
GEMVN(1) GEMVN(2) GEMVN(3) GEMVN(4) GEMVN(5) GEMVN(6) GEMVN(7) GEMVN(8)
#undef GEMVN

/* y[0..nc) = x . B[kc x nc] for wide nc: y stays in L1 while B is read four rows at a time,
 * each row front to back (sequential streams the prefetchers follow). */
static T256 void gemv_n_rows256(size_t kc, size_t nc, const float *x, const float *b, size_t ldb,
                                float *y) {
  size_t nv = nc & ~(size_t)7;
  __m256i ml = mask256(nc - nv);
  for (size_t j = 0; j < nc; j++) y[j] = 0.0f;
  size_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const float *r = b + k * ldb;
    __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1),
           x2 = _mm256_broadcast_ss(x + k + 2), x3 = _mm256_broadcast_ss(x + k + 3);
    for (size_t j = 0; j < nv; j += 8) {
      __m256 s0 = _mm256_mul_ps(x0, _mm256_loadu_ps(r + j));
      __m256 s1 = _mm256_mul_ps(x1, _mm256_loadu_ps(r + ldb + j));
      s0 = _mm256_fmadd_ps(x2, _mm256_loadu_ps(r + 2 * ldb + j), s0);
      s1 = _mm256_fmadd_ps(x3, _mm256_loadu_ps(r + 3 * ldb + j), s1);
      _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_add_ps(s0, s1)));
    }
    if (nv < nc) {
      __m256 s0 = _mm256_mul_ps(x0, _mm256_maskload_ps(r + nv, ml));
      __m256 s1 = _mm256_mul_ps(x1, _mm256_maskload_ps(r + ldb + nv, ml));
      s0 = _mm256_fmadd_ps(x2, _mm256_maskload_ps(r + 2 * ldb + nv, ml), s0);
      s1 = _mm256_fmadd_ps(x3, _mm256_maskload_ps(r + 3 * ldb + nv, ml), s1);
      _mm256_maskstore_ps(y + nv, ml, _mm256_add_ps(_mm256_maskload_ps(y + nv, ml), _mm256_add_ps(s0, s1)));
    }
  }
  for (; k < kc; k++) {
    const float *r = b + k * ldb;
    __m256 xk = _mm256_broadcast_ss(x + k);
    for (size_t j = 0; j < nv; j += 8)
      _mm256_storeu_ps(y + j, _mm256_fmadd_ps(xk, _mm256_loadu_ps(r + j), _mm256_loadu_ps(y + j)));
    if (nv < nc)
      _mm256_maskstore_ps(y + nv, ml, _mm256_fmadd_ps(xk, _mm256_maskload_ps(r + nv, ml),
                                                      _mm256_maskload_ps(y + nv, ml)));
  }
}

static void gemv_n_avx2(size_t kc, size_t nc, const float *x, const float *b, size_t ldb,
                        float *y) {
  if (ldb > 16) { /* the caller's matrix (not a panel): stream its rows; never depends on nc */
    gemv_n_rows256(kc, nc, x, b, ldb, y);
    return;
  }
  typedef void (*fn)(size_t, size_t, const float *, const float *, size_t, float *);
  static const fn tab[8] = {gemv_n256_1, gemv_n256_2, gemv_n256_3, gemv_n256_4,
                            gemv_n256_5, gemv_n256_6, gemv_n256_7, gemv_n256_8};
  for (size_t j = 0; j < nc; j += 64) {
    size_t w = nc - j < 64 ? nc - j : 64;
    tab[(w + 7) / 8 - 1](kc, w, x, b + j, ldb, y + j);
  }
}

V256 float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

static T256 void gemv_t_avx2(size_t kc, size_t nr, const float *x, const float *r, size_t ldr,
                             float *y) {
  size_t kv = kc & ~(size_t)7;
  __m256i ml = mask256(kc - kv);
  size_t j = 0;
  for (; j + 4 <= nr; j += 4) {
    const float *r0 = r + j * ldr, *r1 = r0 + ldr, *r2 = r1 + ldr, *r3 = r2 + ldr;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t k = 0; k < kv; k += 8) {
      __m256 xv = _mm256_loadu_ps(x + k);
      s0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r0 + k), s0);
      s1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r1 + k), s1);
      s2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r2 + k), s2);
      s3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r3 + k), s3);
    }
    if (kv < kc) {
      __m256 xv = _mm256_maskload_ps(x + kv, ml);
      s0 = _mm256_fmadd_ps(xv, _mm256_maskload_ps(r0 + kv, ml), s0);
      s1 = _mm256_fmadd_ps(xv, _mm256_maskload_ps(r1 + kv, ml), s1);
      s2 = _mm256_fmadd_ps(xv, _mm256_maskload_ps(r2 + kv, ml), s2);
      s3 = _mm256_fmadd_ps(xv, _mm256_maskload_ps(r3 + kv, ml), s3);
    }
    y[j] = hsum256(s0);
    y[j + 1] = hsum256(s1);
    y[j + 2] = hsum256(s2);
    y[j + 3] = hsum256(s3);
  }
  for (; j < nr; j++) { /* same summation order as above: results do not depend on j */
    const float *r0 = r + j * ldr;
    __m256 s0 = _mm256_setzero_ps();
    for (size_t k = 0; k < kv; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(r0 + k), s0);
    if (kv < kc)
      s0 = _mm256_fmadd_ps(_mm256_maskload_ps(x + kv, ml), _mm256_maskload_ps(r0 + kv, ml), s0);
    y[j] = hsum256(s0);
  }
}

const kiln_gemm_isa_ops kiln_gemm_ops_avx2 = {
    KILN_ISA_AVX2, "f32_gemm_6x16__avx2", 6,         16, 8, f32_gemm_6x16__avx2, NULL,
    gemv_n_avx2,   gemv_t_avx2,           epilogue_row_avx2, act_avx2, NULL,
};

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_gemm_avx2_unused;
#endif
