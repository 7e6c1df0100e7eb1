/* Winograd F(2x2, 3x3) and F(4x4, 3x3) (kernels/winograd_f32) against a direct convolution
 * with double accumulation: odd sizes, tile tails (16-tile vector groups and partial edge
 * tiles), padding 0/1/asymmetric, several blocks, batch 2, few and many channels; fused bias,
 * residual and activation; 1 and 2 threads (byte-equal results); every ISA level this CPU has.
 * The normwise relative error max |y - ref| / max |ref| must stay within 1e-4, here with
 * realistic magnitudes (inputs in [0, 1) like post-ReLU activations, weights scaled by
 * 1/sqrt(9c) like trained ones). Also: the tile-size choice and the weight header. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/winograd_f32.h"
#include "base/threadpool.h"
#include "testutil.h"


static void reference(const kiln_conv2d_f32_params *p, const float *x, const float *w,
                      const kiln_conv2d_f32_epilogue *ep, float *y) {
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t m = 0; m < p->m; m++)
      for (int64_t oy = 0; oy < p->oh; oy++)
        for (int64_t ox = 0; ox < p->ow; ox++) {
          double s = ep->bias ? ep->bias[m] : 0.0;
          for (int64_t ci = 0; ci < p->c; ci++)
            for (int64_t ky = 0; ky < 3; ky++)
              for (int64_t kx = 0; kx < 3; kx++) {
                int64_t iy = oy + ky - p->pt, ix = ox + kx - p->pl;
                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
                s += (double)x[((n * p->c + ci) * p->h + iy) * p->w + ix] * w[((m * p->c + ci) * 3 + ky) * 3 + kx];
              }
          int64_t o = ((n * p->m + m) * p->oh + oy) * p->ow + ox;
          if (ep->residual) s += ep->residual[o];
          y[o] = kiln_act_ref((float)s, &ep->act);
        }
}

static double g_max_rel[5]; /* largest normwise relative error per tile size */

/* One shape, one tile size, one weight layout (trans: the GEMMs transposed), one ISA: 1 and 2
 * threads against the reference. */
static void check_one(kiln_threadpool *pools[2], int isa, int e, int trans, const kiln_conv2d_f32_params *p,
                      int with_bias, int with_res, kiln_act act) {
  int64_t xn = p->n * p->c * p->h * p->w, wn = p->m * p->c * 9, yn = p->n * p->m * p->oh * p->ow;
  float *x = malloc(sizeof(float) * (size_t)xn), *w = malloc(sizeof(float) * (size_t)wn);
  float *b = malloc(sizeof(float) * (size_t)p->m), *r = malloc(sizeof(float) * (size_t)yn);
  float *y[2] = {malloc(sizeof(float) * (size_t)yn), malloc(sizeof(float) * (size_t)yn)};
  float *ref = malloc(sizeof(float) * (size_t)yn);
  float *u = malloc(sizeof(float) * (size_t)kiln_wino_f32_weights_size_tile(e, p->m, p->c));
  float ws = (float)(1.0 / sqrt(9.0 * (double)p->c));
  for (int64_t i = 0; i < xn; i++) x[i] = 0.5f * (kt_frand() + 1.0f);
  for (int64_t i = 0; i < wn; i++) w[i] = ws * kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = 0.1f * kt_frand();
  for (int64_t i = 0; i < yn; i++) r[i] = kt_frand(), y[0][i] = y[1][i] = NAN;
  kiln_conv2d_f32_epilogue ep = {with_bias ? b : NULL, with_res ? r : NULL, act};
  reference(p, x, w, &ep, ref);
  kiln_wino_f32_weights_tile(e, trans, w, p->m, p->c, u);
  for (int t = 0; t < 2; t++) {
    kiln_code rc = kiln_wino_f32_conv(pools[t], isa, p, x, u, &ep, y[t]);
    CHECK_MSG(rc == KILN_OK, "rc %d", (int)rc);
  }
  double emax = 0, rmax = 0;
  for (int64_t i = 0; i < yn; i++) {
    double d = fabs((double)y[0][i] - ref[i]);
    if (!(d <= emax)) emax = d; /* NaN sticks */
    if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
  }
  double rel = rmax > 0 ? emax / rmax : emax;
  if (!(rel <= g_max_rel[e])) g_max_rel[e] = rel;
  CHECK_MSG(rel <= 1e-4, "F(%dx%d)%s isa %d n%lld c%lld %lldx%lld m%lld p%lld,%lld o%lldx%lld: relative error %g", e, e,
            trans ? " transposed" : "", isa, (long long)p->n, (long long)p->c, (long long)p->h, (long long)p->w, (long long)p->m,
            (long long)p->pt, (long long)p->pl, (long long)p->oh, (long long)p->ow, rel);
  CHECK_MSG(memcmp(y[0], y[1], sizeof(float) * (size_t)yn) == 0,
            "F(%dx%d)%s isa %d c%lld %lldx%lld m%lld: 1 and 2 threads differ", e, e, trans ? " transposed" : "",
            isa, (long long)p->c,
            (long long)p->h, (long long)p->w, (long long)p->m);
  free(x);
  free(w);
  free(b);
  free(r);
  free(y[0]);
  free(y[1]);
  free(ref);
  free(u);
}

/* The weight transform G g G^T (the part after the header) against the same product in
 * double, for m x c filters (a count that is not a multiple of the vector width too), in
 * planes [m, c] or (trans) [c, m]. */
static void check_weights(int e, int trans, int64_t m, int64_t c) {
  static const double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static const double g4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  const double(*gm)[3] = e == 4 ? g4 : g2;
  int a = e + 2;
  int64_t ps = m * c, size = kiln_wino_f32_weights_size_tile(e, m, c);
  float *w = malloc(sizeof(float) * (size_t)ps * 9), *u = malloc(sizeof(float) * (size_t)size);
  for (int64_t i = 0; i < ps * 9; i++) w[i] = kt_frand();
  kiln_wino_f32_weights_tile(e, trans, w, m, c, u);
  const float *planes = u + (size - (int64_t)a * a * ps);
  double worst = 0;
  for (int64_t i = 0; i < ps; i++)
    for (int r = 0; r < a; r++)
      for (int s = 0; s < a; s++) {
        double ref = 0;
        for (int y = 0; y < 3; y++)
          for (int x = 0; x < 3; x++) ref += gm[r][y] * (double)w[i * 9 + y * 3 + x] * gm[s][x];
        int64_t at = trans ? i % c * m + i / c : i;
        double d = fabs(planes[(a * r + s) * ps + at] - ref) / fmax(fabs(ref), 1e-3);
        if (d > worst) worst = d;
      }
  CHECK_MSG(worst <= 1e-6, "weight transform F(%dx%d)%s %lld x %lld: relative error %.3g", e, e,
            trans ? " transposed" : "", (long long)m, (long long)c, worst);
  free(w);
  free(u);
}

int main(void) {
  kt_rng = 0x13198a2e03707344ull; /* this test's data */
  kiln_threadpool *pools[2] = {NULL, kiln_threadpool_create(2)};
  const int isas[3] = {KILN_ISA_SCALAR, KILN_ISA_AVX2, KILN_ISA_AVX512};
  static const int64_t shapes[][9] = {
      /* n  c   h   w   m  pt pl pb pr */
      {1, 16, 5, 7, 16, 1, 1, 1, 1},    /* odd sizes: partial tiles at the edges */
      {1, 17, 9, 33, 19, 0, 0, 0, 0},   /* no padding, odd channels */
      {1, 32, 1, 1, 24, 1, 1, 1, 1},    /* one pixel */
      {1, 20, 12, 40, 16, 1, 0, 2, 1},  /* asymmetric pads */
      {2, 24, 15, 15, 32, 1, 1, 1, 1},  /* batch 2 */
      {2, 40, 100, 14, 40, 1, 1, 1, 1}, /* several blocks (whole blocks per thread) */
      {1, 16, 9, 70, 16, 1, 1, 1, 1},   /* F(2x2): 35 tiles a row; F(4x4): 18 */
      {1, 16, 13, 137, 16, 1, 1, 1, 1}, /* F(4x4): 35 tiles a row (16 + 16 + 3) */
      {1, 2, 6, 6, 3, 1, 1, 1, 1},      /* few channels */
      {1, 64, 28, 28, 64, 1, 1, 1, 1},  /* ResNet-like */
      {1, 256, 14, 14, 96, 1, 1, 1, 1}, /* many channels (error grows with the sum length) */
      {1, 300, 10, 10, 17, 1, 1, 1, 1}, /* 2 threads: 16 output channels and one more */
      {1, 24, 10, 10, 33, 1, 1, 1, 1},  /* 2 threads: 32 and one more, short K */
  };
  kiln_act none = {KILN_ACT_NONE, 0, 0}, relu = {KILN_ACT_RELU, 0, 0};
  kiln_act hs = {KILN_ACT_HARD_SWISH, 0, 0};
  for (size_t f = 0; f < sizeof shapes / sizeof shapes[0]; f++) {
    const int64_t *v = shapes[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], 1, 3, 3, 1, 1, 1, 1, v[5], v[6], 0, 0, 1, 0};
    p.oh = p.h + v[5] + v[7] - 2;
    p.ow = p.w + v[6] + v[8] - 2;
    CHECK(kiln_wino_f32_supported(&p));
    for (int e = 2; e <= 4; e += 2)
      for (int trans = 0; trans < 2; trans++)
        for (int i = 0; i < 3; i++) {
          if (kiln_isa_resolve(isas[i]) < 0) continue;
          int isa = kiln_isa_resolve(isas[i]);
          check_one(pools, isa, e, trans, &p, 0, 0, none);
          check_one(pools, isa, e, trans, &p, 1, 1, relu);
          check_one(pools, isa, e, trans, &p, 1, 0, hs);
        }
  }
  for (int e = 2; e <= 4; e += 2)
    for (int trans = 0; trans < 2; trans++) {
      check_weights(e, trans, 5, 3);   /* 15 filters: one group of 8 and a tail of 7 */
      check_weights(e, trans, 16, 24); /* whole groups */
    }
  /* The weights made per call (kiln_wino_f32_weights) are F(2x2) and run as such. */
  CHECK(kiln_wino_f32_weights_size(8, 4) == kiln_wino_f32_weights_size_tile(2, 8, 4));
  CHECK(kiln_wino_f32_weights_size_tile(4, 8, 4) > 36 * 8 * 4);
  /* Tile size: F(4x4) on large planes only. */
  kiln_conv2d_f32_params r56 = {1, 64, 56, 56, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 56, 56, 0, 0};
  kiln_conv2d_f32_params r7 = {1, 512, 7, 7, 512, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7, 7, 0, 0};
  CHECK(kiln_wino_f32_tile(&r56) == 4);
  CHECK(kiln_wino_f32_tile(&r7) == 2);
  /* GEMMs transposed at AVX-512 only, up to 64 input channels, not on 7x7 planes (16 tiles). */
  kiln_conv2d_f32_params r13 = {1, 64, 13, 13, 256, 1, 3, 3, 1, 1, 1, 1, 1, 1, 13, 13, 0, 0};
  kiln_conv2d_f32_params r14 = {1, 256, 14, 14, 256, 1, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14, 0, 0};
  CHECK(kiln_wino_f32_trans(&r13, KILN_ISA_AVX512) && kiln_wino_f32_trans(&r56, KILN_ISA_AVX512));
  CHECK(!kiln_wino_f32_trans(&r7, KILN_ISA_AVX512) && !kiln_wino_f32_trans(&r13, KILN_ISA_AVX2));
  CHECK(!kiln_wino_f32_trans(&r14, KILN_ISA_AVX512));
  printf("winograd: max relative error F(2x2) %.3g, F(4x4) %.3g\n", g_max_rel[2], g_max_rel[4]);
  kiln_threadpool_free(pools[1]);
  return kt_finish("test_winograd");
}
