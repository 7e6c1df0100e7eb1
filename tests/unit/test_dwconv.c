/* Depthwise convolution (kiln_conv2d_f32 with one input channel per group) against a direct
 * reference with double accumulation: the 3x3 row-block kernel (strides 1 and 2 in each
 * direction, every padding 0..2 at each side, channel multipliers 1..3, planes from 1x1 to
 * wider than several 16-column strips and taller than several 8- or 7-row blocks, batch 2), the
 * kernel of small planes (up to 8 output columns, two rows a vector: 7x7, 8x8, 5x12 at stride
 * 2 and the like), the general direct kernel (5x5, dilation, stride 3), MobileNetV2's layer shapes;
 * bias, residual and activations (relu and clip inline, others after); 1 and 2 threads, and the
 * blocks of 16 channels against the row kernels (dw_blocked -1), whose outputs must be
 * byte-equal; every ISA level this CPU has. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "base/threadpool.h"
#include "testutil.h"


static void reference(const kiln_conv2d_f32_params *p, const float *x, const float *w,
                      const kiln_conv2d_f32_epilogue *ep, float *y) {
  int64_t mult = p->m / p->c;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t m = 0; m < p->m; m++)
      for (int64_t oy = 0; oy < p->oh; oy++)
        for (int64_t ox = 0; ox < p->ow; ox++) {
          double s = ep->bias ? ep->bias[m] : 0.0;
          for (int64_t ky = 0; ky < p->kh; ky++)
            for (int64_t kx = 0; kx < p->kw; kx++) {
              int64_t iy = oy * p->sh + ky * p->dh - p->pt, ix = ox * p->sw + kx * p->dw - p->pl;
              if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
              s += (double)x[((n * p->c + m / mult) * p->h + iy) * p->w + ix] *
                   w[(m * p->kh + ky) * p->kw + kx];
            }
          int64_t o = ((n * p->m + m) * p->oh + oy) * p->ow + ox;
          if (ep->residual) s += ep->residual[o];
          y[o] = kiln_act_ref((float)s, &ep->act);
        }
}

static int g_cases;

/* Runs p at isa on 1 and 2 threads; compares with the reference and 1 vs 2 threads. */
static void check(kiln_threadpool *pool2, int isa, const kiln_conv2d_f32_params *p, int with_bias,
                  int with_res, kiln_act act) {
  int64_t xn = p->n * p->c * p->h * p->w, wn = p->m * p->kh * p->kw, yn = p->n * p->m * p->oh * p->ow;
  float *x = malloc(sizeof(float) * (size_t)(xn + 1)), *w = malloc(sizeof(float) * (size_t)(wn + 1));
  float *b = malloc(sizeof(float) * (size_t)(p->m + 1)), *r = malloc(sizeof(float) * (size_t)(yn + 1));
  float *y1 = malloc(sizeof(float) * (size_t)(yn + 1)), *y2 = malloc(sizeof(float) * (size_t)(yn + 1));
  float *y3 = malloc(sizeof(float) * (size_t)(yn + 1));
  float *ref = malloc(sizeof(float) * (size_t)(yn + 1));
  for (int64_t i = 0; i < xn; i++) x[i] = kt_frand() * 4;
  for (int64_t i = 0; i < wn; i++) w[i] = kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = kt_frand();
  for (int64_t i = 0; i < yn; i++) r[i] = kt_frand(), y1[i] = y2[i] = y3[i] = NAN;
  kiln_conv2d_f32_epilogue ep = {with_bias ? b : NULL, with_res ? r : NULL, act};
  reference(p, x, w, &ep, ref);
  CHECK(kiln_conv2d_f32(NULL, isa, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y1, .ep = ep}) == KILN_OK);
  CHECK(kiln_conv2d_f32(pool2, isa, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y2, .ep = ep}) == KILN_OK);
  kiln_conv2d_f32_params rows = *p; /* the row kernels, where the channel blocks would be taken */
  rows.dw_blocked = -1;
  CHECK(kiln_conv2d_f32(NULL, isa, &rows, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y3, .ep = ep}) == KILN_OK);
  g_cases++;
  int bad = 0;
  for (int64_t i = 0; i < yn && bad < 3; i++) {
    double tol = 1e-5 * (double)(p->kh * p->kw + 8);
    if (!(fabs((double)y1[i] - ref[i]) <= tol) || memcmp(&y1[i], &y2[i], sizeof(float)) ||
        memcmp(&y1[i], &y3[i], sizeof(float))) {
      bad++;
      CHECK_MSG(0, "isa %d n%lld c%lld m%lld %lldx%lld k%lldx%lld s%lld,%lld d%lld,%lld p%lld,%lld o%lldx%lld bias %d res %d act %d: y[%lld] = %g (2 threads %g, row kernels %g), want %g",
                isa, (long long)p->n, (long long)p->c, (long long)p->m, (long long)p->h,
                (long long)p->w, (long long)p->kh, (long long)p->kw, (long long)p->sh,
                (long long)p->sw, (long long)p->dh, (long long)p->dw, (long long)p->pt,
                (long long)p->pl, (long long)p->oh, (long long)p->ow, with_bias, with_res,
                (int)act.kind, (long long)i, y1[i], y2[i], y3[i], ref[i]);
    }
  }
  free(x);
  free(w);
  free(b);
  free(r);
  free(y1);
  free(y2);
  free(y3);
  free(ref);
}

/* A depthwise shape: output size from the pads at the end; false when the kernel does not fit. */
static int shape(kiln_conv2d_f32_params *p, int64_t n, int64_t c, int64_t mult, int64_t h,
                 int64_t w, int64_t k, int64_t sh, int64_t sw, int64_t d, int64_t pt, int64_t pl,
                 int64_t pb, int64_t pr) {
  kiln_conv2d_f32_params q = {n, c, h, w, c * mult, c, k, k, sh, sw, d, d, pt, pl, 0, 0, 0, 0};
  int64_t ek = (k - 1) * d + 1;
  if (h + pt + pb < ek || w + pl + pr < ek) return 0;
  q.oh = (h + pt + pb - ek) / sh + 1;
  q.ow = (w + pl + pr - ek) / sw + 1;
  *p = q;
  return 1;
}

int main(void) {
  kt_rng = 0x9e3779b97f4a7c15ull; /* this test's data */
  kiln_threadpool *pool2 = kiln_threadpool_create(2);
  int isas[3] = {KILN_ISA_SCALAR, KILN_ISA_AVX2, KILN_ISA_AVX512};
  kiln_conv2d_f32_params p;
  for (int i = 0; i < 3; i++) {
    if (kiln_isa_resolve(isas[i]) < 0) continue;
    /* 3x3: every stride pair and padding 0..2 at each side, odd sizes, several blocks */
    static const int64_t hw[][2] = {{1, 1}, {2, 3}, {7, 7}, {9, 17}, {19, 33}, {17, 50}, {8, 8}, {5, 12}, {4, 16}, {21, 23}, {14, 14},
                                    {19, 7}, {30, 5}}; /* the last two: small planes of many row pairs */
    for (size_t s = 0; s < sizeof hw / sizeof hw[0]; s++)
      for (int64_t sh = 1; sh <= 2; sh++)
        for (int64_t sw = 1; sw <= 2; sw++)
          for (int64_t pt = 0; pt <= 2; pt++)
            for (int64_t pl = 0; pl <= 2; pl++) {
              int64_t pb = (pt + s) % 3, pr = (pl + 2 * s) % 3, mult = 1 + (pt + pl + s) % 3;
              if (!shape(&p, 1 + (int64_t)(s % 2), 3, mult, hw[s][0], hw[s][1], 3, sh, sw, 1, pt, pl, pb, pr))
                continue;
              check(pool2, isas[i], &p, (int)((pt + sw) % 2), (int)(pl == 1), kt_act((int)((sh + pl + s) % 4)));
            }
    /* MobileNetV2's depthwise layers (bias + Relu6), and two wide rows: {c, h, w, stride} */
    static const int64_t mb[][4] = {{32, 112, 112, 1}, {96, 112, 112, 2}, {144, 56, 56, 1},
                                    {144, 56, 56, 2},  {192, 28, 28, 1},  {192, 28, 28, 2},
                                    {576, 14, 14, 2},  {960, 7, 7, 1},    {384, 14, 14, 1},
                                    {576, 14, 14, 1},  {4, 3, 200, 1},    {2, 5, 301, 2},
                                    {40, 9, 11, 1},    {20, 6, 6, 2}}; /* the last two: a partial block of 16 channels */
    for (size_t s = 0; s < sizeof mb / sizeof mb[0]; s++) {
      shape(&p, 1 + (int64_t)(s >= 12), mb[s][0], 1, mb[s][1], mb[s][2], 3, mb[s][3], mb[s][3], 1, 1, 1, 1, 1);
      check(pool2, isas[i], &p, 1, s >= 12, kt_act(s >= 12 ? (int)s % 4 : 2));
    }
    /* the general kernel next to the 3x3 one: 5x5, dilation 2, stride 3, 1x1 */
    static const int64_t gen[][5] = {{5, 1, 1, 2, 12}, {3, 2, 1, 1, 20}, {3, 3, 1, 1, 23}, {1, 1, 1, 0, 18},
                                     {5, 2, 2, 4, 31}};
    for (size_t s = 0; s < sizeof gen / sizeof gen[0]; s++) {
      const int64_t *g = gen[s];
      if (shape(&p, 2, 5, 2, g[4], g[4] + 3, g[0], g[1], g[1], g[2], g[3], g[3], g[3], g[3]))
        check(pool2, isas[i], &p, 1, 1, kt_act((int)s % 4));
    }
  }
  /* random shapes, mostly 3x3 */
  for (int it = 0; it < 300; it++) {
    int64_t k = kt_rand() % 4 ? 3 : kt_rand_in(1, 5), d = kt_rand() % 5 ? 1 : 2;
    if (!shape(&p, kt_rand_in(1, 2), kt_rand_in(1, 9), kt_rand_in(1, 3), kt_rand_in(1, 30), kt_rand_in(1, 70), k,
               kt_rand_in(1, 2), kt_rand_in(1, 2), d, kt_rand_in(0, 2), kt_rand_in(0, 2), kt_rand_in(0, 2), kt_rand_in(0, 2)))
      continue;
    int isa = isas[kt_rand() % 3];
    if (kiln_isa_resolve(isa) < 0) isa = KILN_ISA_AUTO;
    check(pool2, isa, &p, (int)(kt_rand() % 2), (int)(kt_rand() % 2), kt_act((int)(kt_rand() % 4)));
  }
  printf("test_dwconv: %d cases\n", g_cases);
  kiln_threadpool_free(pool2);
  return kt_finish("test_dwconv");
}
