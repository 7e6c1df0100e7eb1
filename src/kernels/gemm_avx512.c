/* AVX-512 single-precision kernels: the 6x64 GEMM micro-kernel, matrix-vector kernels, the
 * epilogue and vectorised activations. Built with the project's default flags: every
 * function carries a target attribute, and the driver only calls them when cpuid says so. */
#include "kernels/gemm_internal.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#include <stdalign.h>
#include <stdint.h>

#define T512 KILN_TARGET_AVX512
#define V512 KILN_INLINE T512

/* ---- vector math ----------------------------------------------------------------------- */

/* exp(x), about 1 ulp on [-87, 88]; saturates outside. */
V512 __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

V512 __m512 sigmoid512(__m512 x) {
  __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

V512 __m512 tanh512(__m512 x) {
  __m512 ax = _mm512_abs_ps(x);
  /* small |x|: x + x^3 P(x^2) (Cephes tanhf) */
  __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  /* large |x|: 1 - 2 / (exp(2|x|) + 1), sign of x */
  __m512 e = exp512(_mm512_add_ps(ax, ax));
  __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                             _mm512_div_ps(_mm512_set1_ps(2.0f),
                                           _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  big = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(big),
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(is_small, big, small);
}

/* 0.5 x (1 + erf(x / sqrt 2)); 1 + erf is formed from erfc without cancellation (Chebyshev
 * fit with relative error < 1.2e-7, Numerical Recipes' erfcc). */
V512 __m512 gelu512(__m512 x) {
  __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  __m512 az = _mm512_abs_ps(z);
  __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(az, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(0.17087277f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
  __m512 erfc_az = _mm512_mul_ps(t, exp512(_mm512_sub_ps(p, _mm512_mul_ps(az, az))));
  /* 1 + erf(z) = z >= 0 ? 2 - erfc(|z|) : erfc(|z|) */
  __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 one_plus = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc_az), erfc_az);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), one_plus);
}


V512 __m512 act512(__m512 v, const kiln_act *a) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (a->kind) {
    case KILN_ACT_NONE: return v;
    case KILN_ACT_RELU: return _mm512_max_ps(v, zero);
    case KILN_ACT_LEAKY_RELU: {
      __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
      return _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(a->alpha));
    }
    case KILN_ACT_CLIP:
      return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(a->alpha)), _mm512_set1_ps(a->beta));
    case KILN_ACT_SIGMOID: return sigmoid512(v);
    case KILN_ACT_TANH: return tanh512(v);
    case KILN_ACT_GELU: return gelu512(v);
    case KILN_ACT_GELU_TANH: {
      /* x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) */
      __m512 x2 = _mm512_mul_ps(v, v);
      __m512 u = _mm512_mul_ps(v, _mm512_fmadd_ps(x2, _mm512_set1_ps(0.044715f * 1.5957691216057308f),
                                                   _mm512_set1_ps(1.5957691216057308f)));
      return _mm512_mul_ps(v, sigmoid512(u));
    }
    case KILN_ACT_SILU: return _mm512_mul_ps(v, sigmoid512(v));
    case KILN_ACT_HARD_SIGMOID:
      return _mm512_min_ps(
          _mm512_max_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(a->alpha), _mm512_set1_ps(a->beta)), zero),
          one);
    case KILN_ACT_HARD_SWISH: {
      __m512 h = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(h, zero), one));
    }
    case KILN_ACT_ELU: {
      __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
      __m512 e = _mm512_mul_ps(_mm512_sub_ps(exp512(v), one), _mm512_set1_ps(a->alpha));
      return _mm512_mask_blend_ps(neg, v, e);
    }
    default: return v;
  }
}

static T512 void act_avx512(float *x, size_t n, const kiln_act *a) {
  if (a->kind == KILN_ACT_NONE) return;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, act512(_mm512_loadu_ps(x + i), a));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, act512(_mm512_maskz_loadu_ps(m, x + i), a));
  }
}

/* ---- epilogue ------------------------------------------------------------------------ */

/* Finish one vector of a C row: alpha/beta/accumulate, then (last K block) bias, residual
 * and, when simple, the activation. */
V512 __m512 finish512(__m512 v, const float *cp, __mmask16 m, size_t col, const kiln_gemm_tile *t,
                      const float *brp, const float *rp, int inline_act) {
  if (t->alpha != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(t->alpha));
  if (t->flags & KILN_GT_FIRST) {
    if (t->beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(t->beta), _mm512_maskz_loadu_ps(m, cp), v);
  } else {
    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, cp));
  }
  if (t->flags & KILN_GT_LAST) {
    if (t->bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->bias + col));
    if (brp) v = _mm512_add_ps(v, _mm512_set1_ps(*brp));
    if (rp && !t->res_after) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rp));
    if (inline_act) v = act512(v, &t->act);
  }
  return v;
}

/* After a row is stored: the activation (if not applied inline) and a residual added after
 * it. The row is in L1. */
static T512 void post_row512(float *c, size_t n, const kiln_gemm_tile *t, const float *rp) {
  if (!kiln_act_is_simple(t->act.kind)) act_avx512(c, n, &t->act);
  if (rp && t->res_after) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(c + j, _mm512_add_ps(_mm512_loadu_ps(c + j), _mm512_loadu_ps(rp + j)));
    if (j < n) {
      __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
      _mm512_mask_storeu_ps(c + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, c + j),
                                                    _mm512_maskz_loadu_ps(m, rp + j)));
    }
  }
}

static T512 void epilogue_row_avx512(float *c, const float *acc, size_t n, const kiln_gemm_tile *t) {
  int simple = kiln_act_is_simple(t->act.kind);
  size_t j = 0;
  for (; j < n; j += 16) {
    size_t left = n - j;
    __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    __m512 v = finish512(_mm512_maskz_loadu_ps(m, acc + j), c + j, m, j, t, t->bias_row,
                         t->res ? t->res + j : NULL, simple);
    _mm512_mask_storeu_ps(c + j, m, v);
  }
  if (t->flags & KILN_GT_LAST) post_row512(c, n, t, t->res);
}

/* ---- micro-kernel -------------------------------------------------------------------- */

/* Finish an mr x nc tile held in buf (row stride 64). */
static T512 void store_tile512(size_t mr, size_t nc, const float *buf, float *c, size_t ldc,
                               const kiln_gemm_tile *t) {
  const int simple = kiln_act_is_simple(t->act.kind);
  const int post = (t->flags & KILN_GT_LAST) && (!simple || (t->res && t->res_after));
  for (size_t i = 0; i < mr; i++) {
    float *cr = c + i * ldc;
    const float *rp = t->res ? t->res + i * t->ldr : NULL;
    const float *brp = t->bias_row ? t->bias_row + i : NULL;
    for (size_t j = 0; j < nc; j += 16) {
      __mmask16 m = nc - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - j)) - 1);
      __m512 v = finish512(_mm512_load_ps(buf + 64 * i + j), cr + j, m, j, t, brp,
                           rp ? rp + j : NULL, simple);
      _mm512_mask_storeu_ps(cr + j, m, v);
    }
    if (post) post_row512(cr, nc, t, rp);
  }
}

/* C[MR x 16*NV] tile; the last vector is masked to nc. Instantiated for each (MR, NV) with
 * named accumulators (c<row><vec>) so they live in MR*NV zmm registers. AT 1: A is read
 * transposed in place, element (i, k) at a[k * lda + i] (the MR values of a step are
 * adjacent); AT 2: gathered, element (i, k) at a[t->arow[i] + t->koff[k]] (an implicit
 * im2col: rows are output pixels, k steps input taps); else at a[i * lda + k]. */
V512 void ukr512(const int MR, const int NV, const int PF, const int AT, size_t nc, size_t kc,
                 const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc,
                 const kiln_gemm_tile *t) {
  const size_t tail = nc - (size_t)(NV - 1) * 16;
  const __mmask16 ml = (__mmask16)((1u << tail) - 1);
  const int fast = kiln_tile_fast_mode(t);
  /* bring C in while the tile computes: it is read (accumulate) or written (a store that
   * misses waits for the line all the same); the driver says when it pays (t->pf_c) */
  if (t->pf_c)
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NV; j++) _mm_prefetch((const char *)(c + (size_t)i * ldc + 16 * j), _MM_HINT_T0);
  /* the residual tile, read once by the epilogue of the last K block: a layer or more old, it
   * comes from L3 or memory, and its misses would stall the stores at the end */
  if (t->res && (t->flags & KILN_GT_LAST))
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NV; j++)
        _mm_prefetch((const char *)(t->res + (size_t)i * t->ldr + 16 * j), _MM_HINT_T0);
  /* rows past mr alias row 0 (never read) so no pointer leaves the matrix */
  const size_t rs = AT ? 0 : lda; /* (unused when AT) */
  const float *a0 = a, *a1 = MR > 1 ? a + rs : a, *a2 = MR > 2 ? a + 2 * rs : a,
              *a3 = MR > 3 ? a + 3 * rs : a, *a4 = MR > 4 ? a + 4 * rs : a,
              *a5 = MR > 5 ? a + 5 * rs : a;
  const int32_t *ko = t->koff;
  if (AT == 2) {
    const int32_t *ar = t->arow;
    a0 = a + ar[0];
    if (MR > 1) a1 = a + ar[1];
    if (MR > 2) a2 = a + ar[2];
    if (MR > 3) a3 = a + ar[3];
    if (MR > 4) a4 = a + ar[4];
    if (MR > 5) a5 = a + ar[5];
  }
#define DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0;
  DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5)
#undef DECL
#define BLOAD(j) \
  (NV - 1 == j ? _mm512_maskz_loadu_ps(ml, b + 16 * j) : NV > j ? _mm512_loadu_ps(b + 16 * j) : _mm512_setzero_ps())
#define ROW(i)                                                  \
  if (MR > i) {                                                 \
    __m512 av = _mm512_set1_ps(AT == 2 ? a##i[o] : AT ? ak[i] : a##i[k]); \
    c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);                 \
    if (NV > 1) c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);     \
    if (NV > 2) c##i##2 = _mm512_fmadd_ps(av, b2, c##i##2);     \
    if (NV > 3) c##i##3 = _mm512_fmadd_ps(av, b3, c##i##3);     \
  }
  /* the next A strip (t->pf_a) into L2, one cache line of each of its rows per 16 K steps:
   * the short rows of a matrix that comes from memory (Winograd's weight planes, 64-256
   * floats a row) end before the hardware prefetcher has caught up with them */
  const float *ak = a, *pfa = AT == 0 ? t->pf_a : NULL;
  const int pfa_rows = pfa ? t->pf_a_rows : 0;
  const char *pfl = t->pf_l2;
  size_t pfl_done = 0;
  for (size_t k0 = 0; k0 < kc; k0 += 16) { /* K in runs of 16: a cache line of each A row */
    for (int i = 0; i < pfa_rows; i++) _mm_prefetch((const char *)(pfa + (size_t)i * lda + k0), _MM_HINT_T1);
    if (pfl) /* this run's share of t->pf_l2 */
      for (size_t e = t->pf_l2_lines * (k0 + 16 < kc ? k0 + 16 : kc) / kc; pfl_done < e; pfl_done++)
        _mm_prefetch(pfl + pfl_done * 64, _MM_HINT_T1);
    const size_t k1 = kc - k0 < 16 ? kc : k0 + 16;
    for (size_t k = k0; k < k1; k++, ak += AT == 1 ? lda : 0) {
      const int32_t o = AT == 2 ? ko[k] : 0;
      (void)o;
      __m512 b0 = BLOAD(0), b1 = BLOAD(1), b2 = BLOAD(2), b3 = BLOAD(3);
      if (PF) { /* B streams from L2: ask for it 8 rows ahead */
        for (int j = 0; j < NV; j++) _mm_prefetch((const char *)(b + 8 * ldb + 16 * j), _MM_HINT_T0);
      }
      b += ldb;
      ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
    }
  }
#undef ROW
#undef BLOAD
  if (fast) { /* C = acc or C += acc, straight from registers */
#define PUT(i, j)                                                                           \
  if (MR > i && NV > j) {                                                                   \
    float *cp = c + (size_t)i * ldc + 16 * j;                                               \
    __mmask16 m = NV - 1 == j ? ml : (__mmask16)0xFFFF;                                     \
    __m512 v = fast == 2 ? _mm512_add_ps(c##i##j, _mm512_maskz_loadu_ps(m, cp)) : c##i##j; \
    _mm512_mask_storeu_ps(cp, m, v);                                                        \
  }
#define PUTROW(i) PUT(i, 0) PUT(i, 1) PUT(i, 2) PUT(i, 3)
    PUTROW(0) PUTROW(1) PUTROW(2) PUTROW(3) PUTROW(4) PUTROW(5)
#undef PUTROW
#undef PUT
    return;
  }
  if (kiln_tile_reg_epilogue(t)) {
    /* bias, residual and clamp from registers, in finish512's order */
    const int accum = !(t->flags & KILN_GT_FIRST) || t->beta != 0.0f;
    const int clamp = t->act.kind != KILN_ACT_NONE;
    const __m512 lo = _mm512_set1_ps(t->act.kind == KILN_ACT_CLIP ? t->act.alpha : 0.0f);
    const __m512 hi = _mm512_set1_ps(t->act.kind == KILN_ACT_CLIP ? t->act.beta : __builtin_inff());
    const float *cb = t->bias, *rb = t->bias_row, *res = t->res;
    const size_t ldr = t->ldr;
#define PUT(i, j)                                                                      \
  if (MR > i && NV > j) {                                                              \
    float *cp = c + (size_t)i * ldc + 16 * j;                                          \
    __mmask16 m = NV - 1 == j ? ml : (__mmask16)0xFFFF;                                \
    __m512 v = c##i##j;                                                                \
    if (accum) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, cp));                     \
    if (cb) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, cb + 16 * j));               \
    if (rb) v = _mm512_add_ps(v, _mm512_set1_ps(rb[i]));                               \
    if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + (size_t)i * ldr + 16 * j)); \
    if (clamp) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);                            \
    _mm512_mask_storeu_ps(cp, m, v);                                                   \
  }
#define PUTROW(i) PUT(i, 0) PUT(i, 1) PUT(i, 2) PUT(i, 3)
    PUTROW(0) PUTROW(1) PUTROW(2) PUTROW(3) PUTROW(4) PUTROW(5)
#undef PUTROW
#undef PUT
    return;
  }
  /* Otherwise hand the tile over through L1 to one out-of-line routine for every (MR, NV). */
  alignas(64) float buf[6 * 64];
#define SAVE(i)                                                    \
  if (MR > i) {                                                    \
    _mm512_store_ps(buf + 64 * i, c##i##0);                        \
    if (NV > 1) _mm512_store_ps(buf + 64 * i + 16, c##i##1);       \
    if (NV > 2) _mm512_store_ps(buf + 64 * i + 32, c##i##2);       \
    if (NV > 3) _mm512_store_ps(buf + 64 * i + 48, c##i##3);       \
  }
  SAVE(0) SAVE(1) SAVE(2) SAVE(3) SAVE(4) SAVE(5)
#undef SAVE
  store_tile512(MR, nc, buf, c, ldc, t);
}

#define UKR(MR, NV, PF, AT)                                                                  \
  static T512 void ukr512_##MR##x##NV##_##PF##AT(size_t nc, size_t kc, const float *a,          \
                                                 size_t lda, const float *b, size_t ldb,        \
                                                 float *c, size_t ldc, const kiln_gemm_tile *t) { \
    ukr512(MR, NV, PF, AT, nc, kc, a, lda, b, ldb, c, ldc, t);                                \
  }
#define UKR_PF(MR, PF, AT) UKR(MR, 1, PF, AT) UKR(MR, 2, PF, AT) UKR(MR, 3, PF, AT) UKR(MR, 4, PF, AT)
#define UKR_ROW(MR) \
  UKR_PF(MR, 0, 0) UKR_PF(MR, 1, 0) UKR_PF(MR, 0, 1) UKR_PF(MR, 1, 1) UKR_PF(MR, 0, 2) UKR_PF(MR, 1, 2)
UKR_ROW(1) UKR_ROW(2) UKR_ROW(3) UKR_ROW(4) UKR_ROW(5) UKR_ROW(6)
#undef UKR_ROW
#undef UKR_PF
#undef UKR

typedef void (*ukr_fn)(size_t, size_t, const float *, size_t, const float *, size_t, float *,
                       size_t, const kiln_gemm_tile *);
#define UKR_ROW(MR, PF, AT)                                                              \
  {ukr512_##MR##x1_##PF##AT, ukr512_##MR##x2_##PF##AT, ukr512_##MR##x3_##PF##AT,        \
   ukr512_##MR##x4_##PF##AT}
#define UKR_TAB(PF, AT)                                                                 \
  {UKR_ROW(1, PF, AT), UKR_ROW(2, PF, AT), UKR_ROW(3, PF, AT), UKR_ROW(4, PF, AT),      \
   UKR_ROW(5, PF, AT), UKR_ROW(6, PF, AT)}
/* [AT][PF][mr - 1][vectors - 1] */
static const ukr_fn ukr512_table[3][2][6][4] = {{UKR_TAB(0, 0), UKR_TAB(1, 0)},
                                                 {UKR_TAB(0, 1), UKR_TAB(1, 1)},
                                                 {UKR_TAB(0, 2), UKR_TAB(1, 2)}};
#undef UKR_TAB
#undef UKR_ROW

/* When B does not stay in L1 between calls (t->pf_b), the kernel prefetches it ahead of use;
 * an L1-resident B panel goes without (the prefetches would only cost load slots). */
static void f32_gemm_6x64__avx512(size_t mr, size_t nc, size_t kc, const float *a, size_t lda,
                                  const float *b, size_t ldb, float *c, size_t ldc,
                                  const kiln_gemm_tile *t) {
  ukr512_table[0][t->pf_b != 0][mr - 1][(nc + 15) / 16 - 1](nc, kc, a, lda, b, ldb, c, ldc, t);
}

/* The same with A transposed in place (element (i, k) at a[k * lda + i]): no packing. */
static void f32_gemm_6x64_at__avx512(size_t mr, size_t nc, size_t kc, const float *a, size_t lda,
                                     const float *b, size_t ldb, float *c, size_t ldc,
                                     const kiln_gemm_tile *t) {
  ukr512_table[1][t->pf_b != 0][mr - 1][(nc + 15) / 16 - 1](nc, kc, a, lda, b, ldb, c, ldc, t);
}

/* The same with A gathered (element (i, k) at a[t->arow[i] + t->koff[k]]). */
static void f32_gemm_6x64_gather__avx512(size_t mr, size_t nc, size_t kc, const float *a,
                                         size_t lda, const float *b, size_t ldb, float *c,
                                         size_t ldc, const kiln_gemm_tile *t) {
  ukr512_table[2][t->pf_b != 0][mr - 1][(nc + 15) / 16 - 1](nc, kc, a, lda, b, ldb, c, ldc, t);
}

/* ---- matrix-vector ------------------------------------------------------------------- */

/* y[0..nc) = x . B[kc x nc]; 8 vectors (128 columns) per pass. */
V512 void gemv_n_block512(const int NV, size_t kc, size_t nc, const float *x, const float *b,
                          size_t ldb, float *y) {
  __m512 acc[8];
  const size_t tail = nc - (size_t)(NV - 1) * 16;
  const __mmask16 ml = (__mmask16)((1u << tail) - 1);
  for (int j = 0; j < NV; j++) acc[j] = _mm512_setzero_ps();
  for (size_t k = 0; k < kc; k++) {
    __m512 xv = _mm512_set1_ps(x[k]);
    const float *br = b + k * ldb;
    for (int j = 0; j < NV; j++) {
      __m512 bv = j == NV - 1 ? _mm512_maskz_loadu_ps(ml, br + 16 * j) : _mm512_loadu_ps(br + 16 * j);
      acc[j] = _mm512_fmadd_ps(xv, bv, acc[j]);
    }
  }
  for (int j = 0; j < NV; j++)
    _mm512_mask_storeu_ps(y + 16 * j, j == NV - 1 ? ml : (__mmask16)0xFFFF, acc[j]);
}

#define GEMVN(NV)                                                                             \
  static T512 void gemv_n512_##NV(size_t kc, size_t nc, const float *x, const float *b,         \
                                  size_t ldb, float *y) {                                       \
    gemv_n_block512(NV, kc, nc, x, b, ldb, y);                                                 \
  }
GEMVN(1) GEMVN(2) GEMVN(3) GEMVN(4) GEMVN(5) GEMVN(6) GEMVN(7) GEMVN(8)
#undef GEMVN

/* y[0..nc) = x . B[kc x nc] for wide nc: y stays in L1 while B is read eight rows at a time,
 * each row front to back (sequential streams the prefetchers follow). */
static T512 void gemv_n_rows512(size_t kc, size_t nc, const float *x, const float *b, size_t ldb,
                                float *y) {
  size_t nv = nc & ~(size_t)15;
  __mmask16 ml = (__mmask16)((1u << (nc - nv)) - 1);
  for (size_t j = 0; j < nc; j++) y[j] = 0.0f;
  size_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    const float *r = b + k * ldb;
    __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]), x2 = _mm512_set1_ps(x[k + 2]),
           x3 = _mm512_set1_ps(x[k + 3]), x4 = _mm512_set1_ps(x[k + 4]),
           x5 = _mm512_set1_ps(x[k + 5]), x6 = _mm512_set1_ps(x[k + 6]),
           x7 = _mm512_set1_ps(x[k + 7]);
#define ROWS8(LOAD, j)                                                  \
  {                                                                     \
    __m512 s0 = _mm512_mul_ps(x0, LOAD(r + j));                         \
    __m512 s1 = _mm512_mul_ps(x1, LOAD(r + ldb + j));                   \
    s0 = _mm512_fmadd_ps(x2, LOAD(r + 2 * ldb + j), s0);                \
    s1 = _mm512_fmadd_ps(x3, LOAD(r + 3 * ldb + j), s1);                \
    s0 = _mm512_fmadd_ps(x4, LOAD(r + 4 * ldb + j), s0);                \
    s1 = _mm512_fmadd_ps(x5, LOAD(r + 5 * ldb + j), s1);                \
    s0 = _mm512_fmadd_ps(x6, LOAD(r + 6 * ldb + j), s0);                \
    s1 = _mm512_fmadd_ps(x7, LOAD(r + 7 * ldb + j), s1);                \
    __m512 acc = _mm512_add_ps(LOAD(y + j), _mm512_add_ps(s0, s1));     \
    STORE(y + j, acc);                                                  \
  }
#define LOADU(p) _mm512_loadu_ps(p)
#define STORE(p, v) _mm512_storeu_ps(p, v)
    for (size_t j = 0; j < nv; j += 16) ROWS8(LOADU, j)
#undef STORE
#define LOADM(p) _mm512_maskz_loadu_ps(ml, p)
#define STORE(p, v) _mm512_mask_storeu_ps(p, ml, v)
    if (nv < nc) ROWS8(LOADM, nv)
#undef STORE
#undef ROWS8
  }
  for (; k < kc; k++) {
    const float *r = b + k * ldb;
    __m512 xk = _mm512_set1_ps(x[k]);
    for (size_t j = 0; j < nv; j += 16)
      _mm512_storeu_ps(y + j, _mm512_fmadd_ps(xk, LOADU(r + j), LOADU(y + j)));
    if (nv < nc) _mm512_mask_storeu_ps(y + nv, ml, _mm512_fmadd_ps(xk, LOADM(r + nv), LOADM(y + nv)));
  }
#undef LOADU
#undef LOADM
}

static void gemv_n_avx512(size_t kc, size_t nc, const float *x, const float *b, size_t ldb,
                          float *y) {
  if (ldb > 64) { /* the caller's matrix (not a panel): stream its rows; never depends on nc */
    gemv_n_rows512(kc, nc, x, b, ldb, y);
    return;
  }
  typedef void (*fn)(size_t, size_t, const float *, const float *, size_t, float *);
  static const fn tab[8] = {gemv_n512_1, gemv_n512_2, gemv_n512_3, gemv_n512_4,
                            gemv_n512_5, gemv_n512_6, gemv_n512_7, gemv_n512_8};
  for (size_t j = 0; j < nc; j += 128) {
    size_t w = nc - j < 128 ? nc - j : 128;
    tab[(w + 15) / 16 - 1](kc, w, x, b + j, ldb, y + j);
  }
}

/* y[j] = dot(x, r + j*ldr) for j < nr, four rows at a time. */
static T512 void gemv_t_avx512(size_t kc, size_t nr, const float *x, const float *r, size_t ldr,
                               float *y) {
  size_t kv = kc & ~(size_t)15;
  __mmask16 ml = (__mmask16)((1u << (kc - kv)) - 1);
  size_t j = 0;
  for (; j + 4 <= nr; j += 4) {
    const float *r0 = r + j * ldr, *r1 = r0 + ldr, *r2 = r1 + ldr, *r3 = r2 + ldr;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t k = 0; k < kv; k += 16) {
      __m512 xv = _mm512_loadu_ps(x + k);
      s0 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r0 + k), s0);
      s1 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r1 + k), s1);
      s2 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r2 + k), s2);
      s3 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r3 + k), s3);
    }
    if (kv < kc) {
      __m512 xv = _mm512_maskz_loadu_ps(ml, x + kv);
      s0 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(ml, r0 + kv), s0);
      s1 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(ml, r1 + kv), s1);
      s2 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(ml, r2 + kv), s2);
      s3 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(ml, r3 + kv), s3);
    }
    y[j] = _mm512_reduce_add_ps(s0);
    y[j + 1] = _mm512_reduce_add_ps(s1);
    y[j + 2] = _mm512_reduce_add_ps(s2);
    y[j + 3] = _mm512_reduce_add_ps(s3);
  }
  for (; j < nr; j++) { /* same summation order as above: results do not depend on j */
    const float *r0 = r + j * ldr;
    __m512 s0 = _mm512_setzero_ps();
    for (size_t k = 0; k < kv; k += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(r0 + k), s0);
    if (kv < kc)
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(ml, x + kv), _mm512_maskz_loadu_ps(ml, r0 + kv), s0);
    y[j] = _mm512_reduce_add_ps(s0);
  }
}

const kiln_gemm_isa_ops kiln_gemm_ops_avx512 = {
    KILN_ISA_AVX512,       "f32_gemm_6x64__avx512", 6, 64, 16, f32_gemm_6x64__avx512,
    f32_gemm_6x64_at__avx512, gemv_n_avx512,        gemv_t_avx512, epilogue_row_avx512, act_avx512,
    f32_gemm_6x64_gather__avx512,
};

#else
/* not x86: nothing here (ISO C wants a declaration in every translation unit) */
typedef int kiln_gemm_avx512_unused;
#endif
