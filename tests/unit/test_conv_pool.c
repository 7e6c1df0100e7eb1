/* Convolution then max pooling in one pass (kiln_conv2d_f32_maxpool) against the convolution
 * (kiln_conv2d_f32, the same direct kernel) followed by a max pooling written here: the same
 * values, bit for bit (a max of the same floats). Odd sizes and vector tails, the ResNet and
 * SqueezeNet stems, pads, ceil and floor rounding, y strides 1-2, 2- and 3-column windows,
 * channels not a multiple of 8, batch 2, with and without bias, activations applied in
 * registers and over the row, 1 and 2 threads. Also the shapes it turns down (one input
 * channel among them: kiln_conv2d_f32 takes its depthwise kernel there, summing otherwise). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "base/threadpool.h"
#include "testutil.h"

static int64_t out_dim(int64_t n, int64_t k, int64_t s, int64_t pb, int64_t pe, int ceil_mode) {
  int64_t span = n + pb + pe - k, y = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (y - 1) * s >= n + pb) y--;
  return y;
}

/* Max pooling of c ([n][m][oh][ow]) by q into y. */
static void maxpool_ref(const kiln_conv2d_f32_params *p, const float *c, const kiln_pool2d_params *q, float *y) {
  for (int64_t pl = 0; pl < p->n * p->m; pl++)
    for (int64_t py = 0; py < q->oh; py++)
      for (int64_t px = 0; px < q->ow; px++) {
        float v = -INFINITY;
        for (int64_t ky = 0; ky < q->kh; ky++)
          for (int64_t kx = 0; kx < q->kw; kx++) {
            int64_t cy = py * q->sh - q->pt + ky, cx = px * q->sw - q->pl + kx;
            if (cy >= 0 && cy < p->oh && cx >= 0 && cx < p->ow) v = fmaxf(v, c[(pl * p->oh + cy) * p->ow + cx]);
          }
        y[(pl * q->oh + py) * q->ow + px] = v;
      }
}

static void check_case(kiln_threadpool *pools[2], int isa, const int64_t *cv, const int64_t *pv, int with_bias,
                       kiln_act act) {
  /* cv: n c h w m k s pad; pv: kh kw sh pt pl pb pr ceil */
  kiln_conv2d_f32_params p = {cv[0], cv[1], cv[2], cv[3], cv[4], 1, cv[5], cv[5], cv[6], cv[6], 1, 1,
                              cv[7], cv[7], 0, 0, 0, 0};
  p.oh = (p.h + 2 * cv[7] - cv[5]) / cv[6] + 1;
  p.ow = (p.w + 2 * cv[7] - cv[5]) / cv[6] + 1;
  kiln_pool2d_params q = {pv[0], pv[1], pv[2], 2, pv[3], pv[4], out_dim(p.oh, pv[0], pv[2], pv[3], pv[5], (int)pv[7]),
                          out_dim(p.ow, pv[1], 2, pv[4], pv[6], (int)pv[7])};
  CHECK_MSG(kiln_conv2d_f32_maxpool_ok(&p, &q, isa), "shape accepted: c%lld %lldx%lld m%lld k%lld",
            (long long)p.c, (long long)p.h, (long long)p.w, (long long)p.m, (long long)p.kh);
  size_t xn = (size_t)(p.n * p.c * p.h * p.w), wn = (size_t)(p.m * p.c * p.kh * p.kw);
  size_t cn = (size_t)(p.n * p.m * p.oh * p.ow), yn = (size_t)(p.n * p.m * q.oh * q.ow);
  float *x = malloc(sizeof(float) * xn), *w = malloc(sizeof(float) * wn), *b = malloc(sizeof(float) * (size_t)p.m);
  float *c = malloc(sizeof(float) * cn), *ref = malloc(sizeof(float) * yn), *y = malloc(sizeof(float) * yn);
  for (size_t i = 0; i < xn; i++) x[i] = kt_frand();
  for (size_t i = 0; i < wn; i++) w[i] = kt_frand() * 0.3f;
  for (int64_t i = 0; i < p.m; i++) b[i] = kt_frand();
  kiln_conv2d_f32_epilogue ep = {with_bias ? b : NULL, NULL, act};
  for (int t = 0; t < 2; t++) {
    CHECK(kiln_conv2d_f32(pools[t], isa, &p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = c, .ep = ep}) == KILN_OK);
    maxpool_ref(&p, c, &q, ref);
    memset(y, 0xff, sizeof(float) * yn); /* NaN: an element left unwritten fails the compare */
    CHECK(kiln_conv2d_f32_maxpool(pools[t], isa, &p, x, w, &ep, &q, y) == KILN_OK);
    CHECK_MSG(!memcmp(y, ref, sizeof(float) * yn),
              "conv c%lld %lldx%lld m%lld k%lld s%lld p%lld, pool %lldx%lld s%lld pads %lld,%lld ceil %lld, "
              "bias %d act %d, %d thread(s), isa %d: differs from conv then pool",
              (long long)p.c, (long long)p.h, (long long)p.w, (long long)p.m, (long long)p.kh, (long long)p.sh,
              (long long)p.pt, (long long)q.kh, (long long)q.kw, (long long)q.sh, (long long)q.pt,
              (long long)q.pl, (long long)pv[7], with_bias, (int)act.kind, t + 1, isa);
  }
  free(x), free(w), free(b), free(c), free(ref), free(y);
}

int main(void) {
  kt_rng = 0x2545f4914f6cdd1dull;
  kiln_threadpool *pools[2] = {NULL, kiln_threadpool_create(2)};
  if (kiln_cpu_isa_max() < KILN_ISA_AVX2) {
    kiln_conv2d_f32_params p = {1, 3, 64, 64, 16, 1, 3, 3, 2, 2, 1, 1, 0, 0, 31, 31, 0, 0};
    kiln_pool2d_params q = {3, 3, 2, 2, 0, 0, 15, 15};
    CHECK(!kiln_conv2d_f32_maxpool_ok(&p, &q, kiln_cpu_isa_max())); /* the direct kernel is AVX2 or AVX-512 */
    kiln_threadpool_free(pools[1]);
    return kt_finish("test_conv_pool");
  }
  static const int64_t convs[][8] = {
      /* n  c   h   w   m  k  s  pad */
      {1, 3, 67, 71, 64, 3, 2, 0},   /* SqueezeNet's stem, smaller */
      {1, 3, 64, 64, 64, 7, 2, 3},   /* ResNet's stem, smaller */
      {2, 3, 41, 53, 20, 3, 2, 1},   /* batch 2, channels not a multiple of 8 */
      {1, 2, 33, 65, 8, 3, 1, 1},    /* two input channels, stride 1 */
      {1, 4, 30, 98, 12, 5, 2, 2},   /* four input channels, a 5x5 kernel */
      {1, 3, 199, 47, 64, 3, 2, 0},  /* tall: several bands per thread, rows carried over */
  };
  static const int64_t pools_[][8] = {
      /* kh kw sh pt pl pb pr ceil */
      {3, 3, 2, 0, 0, 0, 0, 1}, /* SqueezeNet: ceil */
      {3, 3, 2, 1, 1, 1, 1, 0}, /* ResNet: pad 1, floor */
      {2, 2, 2, 0, 0, 0, 0, 0}, /* 2x2 */
      {3, 3, 1, 1, 1, 1, 1, 1}, /* y stride 1 */
      {2, 3, 2, 0, 1, 0, 1, 1}, /* 2 rows, 3 columns, left pad only on x */
  };
  const kiln_act acts[] = {{KILN_ACT_NONE, 0, 0}, {KILN_ACT_RELU, 0, 0}, {KILN_ACT_CLIP, -0.5f, 0.75f},
                           {KILN_ACT_LEAKY_RELU, 0.1f, 0}, {KILN_ACT_HARD_SWISH, 0, 0}};
  /* every level with the direct kernel: AVX2 (conv_direct_avx2.c) and AVX-512 */
  for (int isa = KILN_ISA_AVX2; isa <= (int)kiln_cpu_isa_max(); isa++) {
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
      for (size_t j = 0; j < sizeof pools_ / sizeof pools_[0]; j++)
        check_case(pools, isa, convs[i], pools_[j], (int)((i + j) % 2), acts[(i + j) % 5]);
    /* every activation on one shape */
    for (size_t a = 0; a < 5; a++) check_case(pools, isa, convs[0], pools_[0], 1, acts[a]);
  }

  /* turned down: x stride 1, 4 columns, a left pad of 2, a window past the output, 5 or 1
   * input channels */
  kiln_conv2d_f32_params p = {1, 3, 64, 64, 16, 1, 3, 3, 2, 2, 1, 1, 0, 0, 31, 31, 0, 0};
  int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  kiln_pool2d_params ok = {3, 3, 2, 2, 0, 0, 15, 15}, q;
  CHECK(kiln_conv2d_f32_maxpool_ok(&p, &ok, isa));
  q = ok, q.sw = 1, q.ow = 29;
  CHECK(!kiln_conv2d_f32_maxpool_ok(&p, &q, isa));
  q = ok, q.kw = 4;
  CHECK(!kiln_conv2d_f32_maxpool_ok(&p, &q, isa));
  q = ok, q.pl = 2;
  CHECK(!kiln_conv2d_f32_maxpool_ok(&p, &q, isa));
  q = ok, q.oh = 17;
  CHECK(!kiln_conv2d_f32_maxpool_ok(&p, &q, isa));
  kiln_conv2d_f32_params pc = p;
  pc.c = 5;
  CHECK(!kiln_conv2d_f32_maxpool_ok(&pc, &ok, isa));
  pc.c = 1; /* the chain's convolution takes the depthwise kernel there */
  CHECK(!kiln_conv2d_f32_maxpool_ok(&pc, &ok, isa));
  kiln_conv2d_f32_epilogue with_res = {NULL, (const float *)&p, {KILN_ACT_NONE, 0, 0}};
  float dummy = 0;
  CHECK(kiln_conv2d_f32_maxpool(NULL, isa, &p, &dummy, &dummy, &with_res, &ok, &dummy) == KILN_ERR_INVALID_ARG);
  kiln_threadpool_free(pools[1]);
  return kt_finish("test_conv_pool");
}
