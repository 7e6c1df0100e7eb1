/* Scalar math written so loops over it vectorise: no calls, no float-to-int conversion, defined
 * behaviour for NaN. Shared by the softmax and attention kernels. */
#ifndef KILN_KERNELS_VMATH_H
#define KILN_KERNELS_VMATH_H

#include <stdint.h>
#include <string.h>

/* Always inlined: the callers are compiled once per ISA (the *_avx2.c and *_avx512.c kernel files), and an out-of-line copy built for the baseline ISA neither vectorises with the
 * loop nor avoids AVX-SSE transitions on every call (softmax measured 38 ms instead of 0.3 ms
 * on 1x4x256x256).
 * exp(x) for x <= 0 (x > 0 is accepted but loses range above 88); -inf and x < -87 give 0,
 * NaN stays NaN. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial
 * (relative error about 2e-7), and 2^n built in the exponent bits. */
__attribute__((always_inline)) static inline float kiln_exp_le0(float x) {
  float xc = x < -87.0f ? -87.0f : x; /* NaN passes through (comparison false) */
  const float shifter = 12582912.0f;  /* 1.5 * 2^23: adding it rounds to an integer */
  float t = xc * 1.44269504088896341f + shifter;
  float n = t - shifter;
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t tb, sb;
  memcpy(&tb, &t, 4);
  sb = (tb - 0x4B400000u + 127u) << 23; /* low bits of t hold n; n + 127 is the exponent */
  float s;
  memcpy(&s, &sb, 4);
  float y = p * s;
  return x < -87.0f ? 0.0f : y;
}

#endif
