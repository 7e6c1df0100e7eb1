/* Branch-free float erf, tanh and exp for the fused GELU kernels.
 *
 * libm's erff/tanhf are accurate but are calls the compiler cannot vectorise; these are plain
 * arithmetic and selects, so a loop over them becomes SIMD code. Each function evaluates all of
 * its pieces and selects one, which is cheaper in SIMD than branching per element.
 * Accuracy (checked against double libm on a dense sweep, see tests/graph/test_fuse_norm_gelu_
 * embedding.py for the end-to-end checks): erf and tanh within 2e-7 relative, exp within 2 ulp.
 * Coefficients are weighted least-squares fits on Chebyshev nodes (near minimax). */
#ifndef KILN_KERNELS_NORM_MATH_H
#define KILN_KERNELS_NORM_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* c ? a : b through bit masks. A float ?: followed by more arithmetic becomes a branch that
 * GCC cannot if-convert back under the default -ftrapping-math, which stops vectorisation. */
static inline float kn_sel(int c, float a, float b) {
  uint32_t ia, ib, m = (uint32_t)0 - (uint32_t)(c != 0);
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  ia = (ia & m) | (ib & ~m);
  memcpy(&a, &ia, sizeof a);
  return a;
}

/* e^y for y in float range; saturates to the largest / smallest normal scale outside it. */
static inline float kn_expf(float y) {
  y = kn_sel(y > -87.0f, y, -87.0f); /* NaN clamps too: no NaN reaches the int cast */
  y = kn_sel(y < 88.0f, y, 88.0f);
  /* n = round(y / ln2) by the 1.5 * 2^23 trick (round-to-nearest, vectorisable) */
  float n = y * 1.44269504088896341f + 12582912.0f;
  n -= 12582912.0f;
  /* r = y - n ln2 in two steps (Cody-Waite); n * 0.693359375 is exact in float */
  float r = y - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 0.0013829411551481035f;
  p = p * r + 0.0083747777950355061f;
  p = p * r + 0.04166835854733604f;
  p = p * r + 0.16666420757881556f;
  p = p * r + 0.49999991489160184f;
  p = p * r + 1.0000000361421955f;
  p = p * r + 1.0000000005923795f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* The two pieces of erf: *small = erf(x) for |x| <= 1 (x P(x^2)), *tail = erfc(|x|) for
 * 1 < |x| (a polynomial in u = (|x| - 2.5) / 1.5 fitted on (1, 4]; beyond 4, erf rounds to 1 in
 * float (erfc(4) = 1.5e-8) and the clamped polynomial gives that). */
static inline void kn_erf_parts(float x, float *small, float *tail) {
  float a = fabsf(x);
  float t = x * x;
  float p = 7.9334938092351612e-05f;
  p = p * t - 0.00080348466236410912f;
  p = p * t + 0.0051912183739010621f;
  p = p * t - 0.026855399449832822f;
  p = p * t + 0.11283625725014276f;
  p = p * t - 0.37612629877665982f;
  p = p * t + 1.1283791665931497f;
  *small = x * p;
  float u = (kn_sel(a < 4.0f, a, 4.0f) - 2.5f) * (1.0f / 1.5f);
  float q = -0.00025985707873044567f;
  q = q * u - 9.7030901044515338e-05f;
  q = q * u + 0.0020395178243190018f;
  q = q * u - 0.0015362171722200801f;
  q = q * u - 0.0046766619400640998f;
  q = q * u + 0.010403472540535761f;
  q = q * u - 0.0066309699197002981f;
  q = q * u - 0.0095742783619644587f;
  q = q * u + 0.031865896370109906f;
  q = q * u - 0.046391051234574203f;
  q = q * u + 0.043651934257146356f;
  q = q * u - 0.028187222659509858f;
  q = q * u + 0.012252799467988539f;
  q = q * u - 0.0032672769189072901f;
  q = q * u + 0.00040695236772208144f;
  *tail = q;
}

static inline float kn_erff(float x) {
  float small, tail;
  kn_erf_parts(x, &small, &tail);
  float r = kn_sel(fabsf(x) <= 1.0f, small, copysignf(1.0f - tail, x));
  return kn_sel(x == x, r, x); /* NaN stays NaN */
}

static inline float kn_tanhf(float x) {
  float a = fabsf(x);
  /* |x| < 0.625: tanh(x) = x P(x^2) */
  float t = x * x;
  float p = -0.0057099654106276803f;
  p = p * t + 0.020642254913108091f;
  p = p * t - 0.053739843722442726f;
  p = p * t + 0.13331418613446031f;
  p = p * t - 0.33333277685306384f;
  p = p * t + 0.99999999834172948f;
  float small = x * p;
  /* else tanh |x| = 1 - 2 / (e^2|x| + 1), which has no cancellation there; tanh(9) rounds to 1 */
  float e = kn_expf(2.0f * kn_sel(a < 9.0f, a, 9.0f));
  float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  float r = kn_sel(a < 0.625f, small, big);
  return kn_sel(x == x, r, x);
}

/* GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)). For x / sqrt 2 < -1, 1 + erf is taken as erfc
 * directly, which avoids the cancellation the unfused chain (1 + erf in float) suffers there;
 * below -4 it is under 1.6e-8 and taken as 0, as the chain's float sum rounds it. */
static inline float kn_gelu(float x) {
  float z = x * 0.70710678118654752f, small, tail;
  kn_erf_parts(z, &small, &tail);
  float onep = kn_sel(z < -1.0f, kn_sel(z > -4.0f, tail, 0.0f), kn_sel(z > 1.0f, 2.0f - tail, 1.0f + small));
  return 0.5f * x * onep;
}

/* GELU, tanh form: 0.5 x (1 + tanh(w)), w = sqrt(2/pi) (x + 0.044715 x^3). Since
 * 1 + tanh(w) = 2 / (1 + e^-2w), this is x / (1 + e^-2w): no cancellation for negative x. */
static inline float kn_gelu_tanh(float x) {
  float w = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + kn_expf(-2.0f * w));
}

#endif
