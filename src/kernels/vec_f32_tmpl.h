/* The memory-bound float32 kernels (softmax rows, LayerNorm rows, GELU, FusedElementwise's
 * block ops) as plain loops for the compiler's vectoriser. Included once per ISA by
 * vec_f32_scalar.c, vec_f32_avx2.c and vec_f32_avx512.c, each compiled with its own flags
 * (CMakeLists.txt) and -ffp-contract=off, so every instance does the same operations in the
 * same order per element and a result does not depend on the level chosen. VEC_FN(name) names
 * this instance's function; the table at the end is what vec_f32.c dispatches through. Not a
 * public header. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/norm_math.h"
#include "kernels/vec_f32.h"
#include "kernels/vmath.h"
#include "kernels/fused_ew.h"

#ifndef VEC_FN
#error "define VEC_FN before including vec_f32_tmpl.h"
#endif

/* ---- softmax ---- */

enum { SM_LANES = 8, SM_BLOCK = 256 };

/* Softmax of contiguous float rows: the max (8 lanes), then exp(x - max) stored with its sum
 * (8 float lanes per block of 256, blocks summed in double), then one scale by 1 / sum. A row
 * whose max is not finite, or that holds a NaN, gives NaN everywhere, as the general path
 * does. */
static void VEC_FN(softmax_rows)(const float *x, float *y, int64_t rows, int64_t len) {
  for (int64_t t = 0; t < rows; t++) {
    const float *xr = x + t * len;
    float *yr = y + t * len;
    float lm[SM_LANES];
    int64_t j = 0;
    for (int l = 0; l < SM_LANES; l++) lm[l] = -INFINITY;
    for (; j + SM_LANES <= len; j += SM_LANES) /* NaN is skipped here, caught by the sum */
      for (int l = 0; l < SM_LANES; l++) lm[l] = xr[j + l] > lm[l] ? xr[j + l] : lm[l];
    for (; j < len; j++) lm[0] = xr[j] > lm[0] ? xr[j] : lm[0];
    float mx = lm[0];
    for (int l = 1; l < SM_LANES; l++) mx = lm[l] > mx ? lm[l] : mx;
    if (!isfinite(mx)) { /* +inf (inf - inf) or all -inf / NaN (0 / 0) */
      for (j = 0; j < len; j++) yr[j] = NAN;
      continue;
    }
    double sum = 0;
    for (int64_t j0 = 0; j0 < len; j0 += SM_BLOCK) {
      int64_t n = len - j0 < SM_BLOCK ? len - j0 : SM_BLOCK, i = 0;
      float *yb = yr + j0;
      const float *xb = xr + j0;
      for (i = 0; i < n; i++) yb[i] = kiln_exp_le0(xb[i] - mx);
      float ls[SM_LANES] = {0};
      for (i = 0; i + SM_LANES <= n; i += SM_LANES)
        for (int l = 0; l < SM_LANES; l++) ls[l] += yb[i + l];
      for (; i < n; i++) ls[0] += yb[i];
      for (int l = 0; l < SM_LANES; l++) sum += ls[l];
    }
    float inv = (float)(1.0 / sum); /* NaN when the row holds a NaN (kiln_exp_le0 keeps it) */
    for (j = 0; j < len; j++) yr[j] *= inv;
  }
}

/* ---- LayerNorm ---- */

enum { LANES = 8, BLOCK = 512 };

/* LANES floats as one GNU C vector: gcc turned the equivalent loop over float arrays into
 * 16-wide loads followed by shuffles and scalar adds (7x slower); with the vector type the
 * lanes stay in one register. Same lanes, same order as the array form, so the same sums. */
typedef float lanes_f __attribute__((vector_size(LANES * sizeof(float))));

/* Mean and 1 / sqrt(variance + eps) of a row from the sums s1, s2 of (x - k) and (x - k)^2
 * over its n values (k: a shift that keeps the sums small). */
__attribute__((always_inline)) static inline void VEC_FN(finish_stats)(double s1, double s2, int64_t n, float k,
                                                                       float eps, float *mean, float *inv) {
  double m = n ? s1 / (double)n : 0, var = n ? s2 / (double)n - m * m : 0;
  *mean = (float)(k + m);
  *inv = (float)(1.0 / sqrt((var > 0 ? var : 0) + eps));
}

/* mean and 1 / sqrt(var + eps) of x[0..n). Float lanes inside a block of BLOCK values, double
 * across blocks so long rows keep their precision. */
static void VEC_FN(ln_stats)(const float *x, int64_t n, float eps, float *mean, float *inv) {
  float k = n ? x[0] : 0.0f;
  double s1 = 0, s2 = 0;
  for (int64_t b = 0; b < n; b += BLOCK) {
    int64_t e = b + BLOCK < n ? b + BLOCK : n, j = b;
    lanes_f a1 = {0}, a2 = {0}, v;
    for (; j + LANES <= e; j += LANES) {
      memcpy(&v, x + j, sizeof v);
      v -= k;
      a1 += v;
      a2 += v * v;
    }
    for (; j < e; j++) {
      float d = x[j] - k;
      a1[0] += d;
      a2[0] += d * d;
    }
    for (int l = 0; l < LANES; l++) {
      s1 += a1[l];
      s2 += a2[l];
    }
  }
  VEC_FN(finish_stats)(s1, s2, n, k, eps, mean, inv);
}

/* y = (x - mean) * inv [* gamma] [+ beta]; y may be x. */
static void VEC_FN(ln_norm)(float *y, const float *x, int64_t n, float mean, float inv, const float *gamma,
                           const float *beta) {
  if (gamma && beta)
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv * gamma[j] + beta[j];
  else if (gamma)
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv * gamma[j];
  else if (beta)
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv + beta[j];
  else
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv;
}

/* s = a + b (the skip sum) and ln_stats(s) in the same pass: the same lanes in the same
 * order as ln_stats over the stored sum, so the same mean and inv, one pass fewer. */
static void VEC_FN(ln_add_stats)(float *s, const float *a, const float *b, int64_t n, float eps, float *mean,
                                 float *inv) {
  float k = n ? a[0] + b[0] : 0.0f;
  double s1 = 0, s2 = 0;
  for (int64_t blk = 0; blk < n; blk += BLOCK) {
    int64_t e = blk + BLOCK < n ? blk + BLOCK : n, j = blk;
    lanes_f a1 = {0}, a2 = {0}, va, vb;
    for (; j + LANES <= e; j += LANES) {
      memcpy(&va, a + j, sizeof va);
      memcpy(&vb, b + j, sizeof vb);
      va += vb;
      memcpy(s + j, &va, sizeof va);
      va -= k;
      a1 += va;
      a2 += va * va;
    }
    for (; j < e; j++) {
      s[j] = a[j] + b[j];
      float d = s[j] - k;
      a1[0] += d;
      a2[0] += d * d;
    }
    for (int l = 0; l < LANES; l++) {
      s1 += a1[l];
      s2 += a2[l];
    }
  }
  VEC_FN(finish_stats)(s1, s2, n, k, eps, mean, inv);
}

/* ---- GELU ---- */

/* y = gelu(x [+ bias]) for n values (bias: n values or NULL), erf form or tanh form. */
static void VEC_FN(gelu_map)(float *y, const float *x, const float *bias, int64_t n, int tanh_form) {
  if (!bias) {
    if (!tanh_form)
      for (int64_t i = 0; i < n; i++) y[i] = kn_gelu(x[i]);
    else
      for (int64_t i = 0; i < n; i++) y[i] = kn_gelu_tanh(x[i]);
    return;
  }
  if (tanh_form)
    for (int64_t i = 0; i < n; i++) y[i] = kn_gelu_tanh(x[i] + bias[i]);
  else
    for (int64_t i = 0; i < n; i++) y[i] = kn_gelu(x[i] + bias[i]);
}

/* ---- GELU (erf form) after a GEMM, in place ----
 * 0.5 x (1 + erf(x / sqrt 2)) with erf as a rational function of degree 13/8 on [-4, 4]
 * (clamped outside, where erf is +-1 in float; Eigen's fast erf, max abs error 6.5e-8): a
 * dozen FMAs and one reciprocal (rcp14 / rcp plus a Newton step, relative error ~1e-8), where
 * the GEMM's epilogue form spends a division and an exp per vector. Elementwise, so the split
 * over threads cannot change a result. */
static const float erf_num[7] = {-1.60960333262415e-02f, -2.95459980854025e-03f, -7.34990630326855e-04f,
                                 -5.69250639462346e-05f, -2.10102402082508e-06f, 2.77068142495902e-08f,
                                 -2.72614225801306e-10f};
static const float erf_den[5] = {-1.42647390514189e-02f, -7.37332916720468e-03f, -1.68282697438203e-03f,
                                 -2.13374055278905e-04f, -1.45660718464996e-05f};

__attribute__((unused)) static void VEC_FN(gelu_erf_scalar)(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], z = v * 0.70710678118654752f;
    z = z < -4.0f ? -4.0f : z > 4.0f ? 4.0f : z;
    float z2 = z * z, p = erf_num[6], q = erf_den[4];
    for (int k = 5; k >= 0; k--) p = p * z2 + erf_num[k];
    for (int k = 3; k >= 0; k--) q = q * z2 + erf_den[k];
    float h = 0.5f * v;
    x[i] = h + h * (z * p / q);
  }
}

#ifndef VEC_GELU_ERF
#define VEC_GELU_ERF VEC_FN(gelu_erf_scalar)
#endif

/* ---- FusedElementwise ---- */

/* The loops below select between computed values (clamps, NaN checks, piecewise formulas):
 * without trapping math and errno the compiler if-converts and vectorises them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

/* ---- vectorisable exp ---- */

/* e^x in float: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for
 * e^r (Cephes expf), and 2^n applied as two exact power-of-two factors, so that results from
 * the denormals to overflow (inf, past 88.72) come out right without a branch. NaN stays NaN
 * (it flows through the arithmetic; only the integer conversion is kept away from it). */
static inline float exp_f(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  float fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  fx = fx != fx ? 0.0f : fx;
  int32_t n = (int32_t)fx, n1 = n / 2, n2 = n - n1;
  int32_t b1 = (n1 + 127) * (1 << 23), b2 = (n2 + 127) * (1 << 23);
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

static inline float tanh_f(float x) {
  float ax = fabsf(x), z = x * x;
  /* small |x|: odd polynomial (Cephes tanhf); else 1 - 2/(e^2|x| + 1) */
  float s = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
              1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  float l = 1.0f - 2.0f / (exp_f(2.0f * ax) + 1.0f);
  l = copysignf(l, x);
  return ax < 0.625f ? s : l;
}

/* ---- one instruction over a block ---- */

#define LOOP1(EXPR)                                 \
  for (int i = 0; i < n; i++) {                     \
    const float x = a[i];                           \
    o[i] = (EXPR);                                  \
  }                                                 \
  break
#define LOOP2(EXPR)                                 \
  for (int i = 0; i < n; i++) {                     \
    const float x = a[i], z = b[i];                 \
    o[i] = (EXPR);                                  \
  }                                                 \
  break

static void VEC_FN(ew_block)(int op, float *restrict o, const float *restrict a, const float *restrict b, int n,
                             float p0, float p1) {
  switch (op) {
    case KILN_EW_ADD: LOOP2(x + z);
    case KILN_EW_SUB: LOOP2(x - z);
    case KILN_EW_MUL: LOOP2(x * z);
    case KILN_EW_DIV: LOOP2(x / z);
    case KILN_EW_POW: LOOP2(z == 2.0f ? x * x : powf(x, z));
    case KILN_EW_MAX: LOOP2(x > z || x != x ? x : z); /* NaN propagates, as in Max */
    case KILN_EW_MIN: LOOP2(x < z || x != x ? x : z);
    case KILN_EW_PRELU: LOOP2(x < 0 ? z * x : x);
    case KILN_EW_RELU: LOOP1(x < 0 ? 0.0f : x); /* NaN stays */
    case KILN_EW_SIGMOID: LOOP1(1.0f / (1.0f + exp_f(-x)));
    case KILN_EW_TANH: LOOP1(tanh_f(x));
    case KILN_EW_EXP: LOOP1(exp_f(x));
    case KILN_EW_LOG: LOOP1(logf(x));
    case KILN_EW_ABS: LOOP1(fabsf(x));
    case KILN_EW_NEG: LOOP1(-x);
    case KILN_EW_SQRT: LOOP1(sqrtf(x));
    case KILN_EW_ERF: LOOP1(erff(x));
    case KILN_EW_RECIPROCAL: LOOP1(1.0f / x);
    case KILN_EW_FLOOR: LOOP1(floorf(x));
    case KILN_EW_CEIL: LOOP1(ceilf(x));
    case KILN_EW_CLIP: LOOP1((x < p0 ? p0 : x) > p1 ? p1 : (x < p0 ? p0 : x));
    case KILN_EW_LEAKYRELU: LOOP1(x < 0 ? p0 * x : x);
    case KILN_EW_ELU: LOOP1(x < 0 ? p0 * (exp_f(x) - 1.0f) : x);
    case KILN_EW_HARDSIGMOID: {
      for (int i = 0; i < n; i++) {
        float v = p0 * a[i] + p1;
        o[i] = v < 0 ? 0.0f : v > 1 ? 1.0f : v;
      }
      break;
    }
    case KILN_EW_HARDSWISH: {
      for (int i = 0; i < n; i++) {
        float v = a[i] / 6.0f + 0.5f;
        o[i] = a[i] * (v < 0 ? 0.0f : v > 1 ? 1.0f : v);
      }
      break;
    }
    case KILN_EW_SOFTPLUS: LOOP1(x > 0 ? x + log1pf(exp_f(-x)) : log1pf(exp_f(x)));
    case KILN_EW_SOFTSIGN: LOOP1(x / (1.0f + fabsf(x)));
    case KILN_EW_SIN: LOOP1(sinf(x));
    case KILN_EW_COS: LOOP1(cosf(x));
    default: break; /* rejected before the loop */
  }
}

const kiln_vec_f32_kernels VEC_FN(kiln_vec_f32) = {
    VEC_FN(softmax_rows), VEC_FN(ln_stats),     VEC_FN(ln_norm),
    VEC_FN(ln_add_stats), VEC_FN(gelu_map),     VEC_GELU_ERF,
    VEC_FN(ew_block),
};
