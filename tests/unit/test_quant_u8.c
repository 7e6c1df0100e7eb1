/* DynamicQuantizeLinear's passes (kernels/quant_u8) at every level this CPU runs against the
 * plain loops of the operator's definition: the range min(0, x) .. max(0, x) skipping NaN, and
 * clamp(rint(x / scale) + zp, 0, 255) with NaN giving 0, equal bit for bit. Lengths around the
 * vector widths and their tails; values with NaN, infinities, exact halves (ties to even) and
 * results beyond either end of the byte. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/quant_u8.h"
#include "testutil.h"

typedef void (*minmax_fn)(const float *, int64_t, float *, float *);
typedef void (*quant_fn)(const float *, int64_t, float, float, uint8_t *);

static void ref_minmax(const float *x, int64_t n, float *mn, float *mx) {
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  *mn = lo, *mx = hi;
}

static void ref_quant(const float *x, int64_t n, float scale, float zp, uint8_t *y) {
  for (int64_t i = 0; i < n; i++) {
    float v = rintf(x[i] / scale) + zp;
    y[i] = isnan(v) || v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
  }
}

static void fill(float *x, int64_t n, int special) {
  for (int64_t i = 0; i < n; i++) {
    x[i] = kt_frand() * 40.0f;
    if (special && kt_rand() % 7 == 0) x[i] = (float)(kt_rand_in(-20, 20)) + 0.5f; /* ties */
    if (special && kt_rand() % 23 == 0) x[i] = NAN;
    if (special && kt_rand() % 31 == 0) x[i] = kt_rand() & 1 ? INFINITY : -INFINITY;
  }
}

static void check(const char *name, minmax_fn mm, quant_fn q, int64_t n, int special) {
  float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
  uint8_t *want = malloc((size_t)n + 1), *got = malloc((size_t)n + 1);
  fill(x, n, special);
  float mn0, mx0, mn1, mx1;
  ref_minmax(x, n, &mn0, &mx0);
  mm(x, n, &mn1, &mx1);
  CHECK_MSG(mn0 == mn1 && mx0 == mx1, "%s minmax n %lld: %g %g vs %g %g", name, (long long)n, (double)mn1,
            (double)mx1, (double)mn0, (double)mx0);
  static const float scales[] = {0.1f, 0.05f, 1.0f / 3.0f, 2.0f};
  static const float zps[] = {0, 77, 128, 255};
  for (int s = 0; s < 4; s++) {
    ref_quant(x, n, scales[s], zps[s], want);
    memset(got, 0xa5, (size_t)n + 1);
    q(x, n, scales[s], zps[s], got);
    CHECK_MSG(!memcmp(want, got, (size_t)n), "%s quantize n %lld scale %g", name, (long long)n, (double)scales[s]);
    CHECK_MSG(got[n] == 0xa5, "%s quantize n %lld wrote past the end", name, (long long)n);
  }
  free(x), free(want), free(got);
}

int main(void) {
  kt_rng = 7;
  static const int64_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000, 4099};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
    for (int special = 0; special < 2; special++) {
      check("dispatch", kiln_minmax_f32, kiln_quantize_u8_f32, ns[i], special);
#if defined(__x86_64__) || defined(__i386__)
      if (kiln_cpu_isa() >= KILN_ISA_AVX2) check("avx2", kiln_minmax_f32_avx2, kiln_quantize_u8_f32_avx2, ns[i], special);
      if (kiln_cpu_isa() >= KILN_ISA_AVX512)
        check("avx512", kiln_minmax_f32_avx512, kiln_quantize_u8_f32_avx512, ns[i], special);
#endif
    }
  return kt_finish("test_quant_u8");
}
