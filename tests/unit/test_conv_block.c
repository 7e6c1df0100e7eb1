/* kiln_conv_block_f32 (an inverted residual block in one call) against the same three
 * convolutions run one by one through kiln_conv2d_f32: MobileNetV2's blocks on 14x14 and 7x7
 * (with and without the residual, stride 1 and 2), its blocks on 112x112 and 56x56 (bands of
 * rows), odd channel counts (partial blocks of 16),
 * other kernels and pads, a batch of 2, an expansion that is a network's first layer (a direct
 * convolution: MobileNetV2's stem and first block), activations before the projection (clip, relu, none)
 * and after it (none, hard-swish: applied after the write-back); byte-equal to the convolutions
 * one by one (but on planes of one pixel), and 1 and 2 threads byte-equal. Where the CPU has no AVX-512, that the block declines (the graph then runs
 * the convolutions one by one). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "kernels/act.h"
#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "testutil.h"

typedef struct shape {
  int64_t n, c, ce, m, h, w, k, s, pad;
  int res;
} shape;

/* An expansion that is a direct convolution (a network's first layer): k x k, stride s, pads p,
 * over an input of h x w; the shape's h x w is its output. */
typedef struct stem {
  int64_t k, s, p, h, w;
} stem;

static float *rnd(int64_t n, float scale) {
  float *v = malloc(sizeof(float) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) v[i] = kt_frand() * scale;
  return v;
}

/* The three convolutions one by one: the reference, and the block; returns the failed count. */
static int check(kiln_threadpool *pool2, const shape *s, const stem *st, int ea, int da, int pa) {
  const int isa = KILN_ISA_AVX512;
  int64_t hw = s->h * s->w, oh = (s->h + 2 * s->pad - s->k) / s->s + 1, ow = (s->w + 2 * s->pad - s->k) / s->s + 1;
  int64_t ohw = oh * ow;
  int64_t ek = st ? st->k : 1, es = st ? st->s : 1, ep = st ? st->p : 0;
  int64_t eh = st ? st->h : s->h, ew = st ? st->w : s->w; /* the block's input plane */
  kiln_conv2d_f32_params pe = {s->n, s->c, eh, ew, s->ce, 1, ek, ek, es, es, 1, 1, ep, ep, s->h, s->w, 0, 0};
  kiln_conv2d_f32_params pd = {s->n, s->ce, s->h, s->w, s->ce, s->ce, s->k, s->k, s->s, s->s, 1, 1,
                               s->pad, s->pad, oh, ow, 0, 0};
  kiln_conv2d_f32_params pp = {s->n, s->ce, oh, ow, s->m, 1, 1, 1, 1, 1, 1, 1, 0, 0, oh, ow, 0, 0};
  float *x = rnd(s->n * s->c * eh * ew, 2), *we = rnd(s->ce * s->c * ek * ek, 0.5f), *be = rnd(s->ce, 1);
  float *wd = rnd(s->ce * s->k * s->k, 0.5f), *bd = rnd(s->ce, 1), *wp = rnd(s->m * s->ce, 0.3f);
  float *bp = rnd(s->m, 1), *r = s->res ? rnd(s->n * s->m * ohw, 1) : NULL;
  float *e = rnd(s->n * s->ce * hw, 0), *d = rnd(s->n * s->ce * ohw, 0);
  int64_t yn = s->n * s->m * ohw;
  float *ref = rnd(yn, 0), *y1 = rnd(yn, 0), *y2 = rnd(yn, 0);
  kiln_act ae = kt_act(ea), ad = kt_act(da), ap = kt_act(pa);
  CHECK(kiln_conv2d_f32(NULL, isa, &pe, &(kiln_conv2d_f32_args){.x = x, .w = we, .y = e, .ep = {be, NULL, ae}}) == KILN_OK);
  CHECK(kiln_conv2d_f32(NULL, isa, &pd, &(kiln_conv2d_f32_args){.x = e, .w = wd, .y = d, .ep = {bd, NULL, ad}}) == KILN_OK);
  CHECK(kiln_conv2d_f32(NULL, isa, &pp, &(kiln_conv2d_f32_args){.x = d, .w = wp, .y = ref, .ep = {bp, r, ap}}) == KILN_OK);
  kiln_gemm_packed_b *we_t = NULL, *wp_t = NULL;
  if (!st) CHECK(kiln_gemm_pack_b(isa, 1, (size_t)s->c, (size_t)s->ce, we, (size_t)s->c, &we_t, NULL) == KILN_OK);
  CHECK(kiln_gemm_pack_b(isa, 1, (size_t)s->ce, (size_t)s->m, wp, (size_t)s->ce, &wp_t, NULL) == KILN_OK);
  kiln_conv_block_f32_args a = {.x = x, .we = we, .wp = wp, .we_t = we_t, .e_ep = {be, NULL, ae}, .wd = wd,
                                .d_ep = {bd, NULL, ad}, .wp_t = wp_t, .p_ep = {bp, r, ap}, .y = y1,
                                .e_conv = st ? &pe : NULL};
  CHECK(kiln_conv_block_f32_ok(&pd, s->c, s->m, &ae, &ad, a.e_conv, isa));
  CHECK(kiln_conv_block_f32(NULL, isa, &pd, s->c, s->m, &a) == KILN_OK);
  a.y = y2;
  CHECK(kiln_conv_block_f32(pool2, isa, &pd, s->c, s->m, &a) == KILN_OK);
  int bad = 0;
  for (int64_t i = 0; i < yn && bad < 3; i++) {
    /* the same sums in the same order, except on a plane of one pixel, where the projection
     * one by one takes the matrix-vector path */
    double tol = ohw > 1 ? 0.0 : 2e-5 * (1.0 + fabs((double)ref[i]));
    if (!(fabs((double)y1[i] - ref[i]) <= tol) || memcmp(&y1[i], &y2[i], sizeof(float))) {
      bad++;
      CHECK_MSG(0, "n%lld c%lld ce%lld m%lld %lldx%lld k%lld s%lld p%lld res %d expansion k%lld: acts %d %d %d: y[%lld] = %g "
                "(2 threads %g), the convolutions one by one %g",
                (long long)s->n, (long long)s->c, (long long)s->ce, (long long)s->m, (long long)s->h, (long long)s->w,
                (long long)s->k, (long long)s->s, (long long)s->pad, s->res, (long long)ek, ea, da, pa, (long long)i, y1[i], y2[i],
                ref[i]);
    }
  }
  /* declined, with nothing written: packs of another size (small planes), no 1x1 weights as
   * they are (bands), a non-inline activation inside */
  kiln_conv_block_f32_args wrong = a;
  if (hw <= 256) {
    wrong.we_t = wp_t;
    wrong.wp_t = we_t;
  } else {
    wrong.we = NULL;
  }
  if (s->c != s->ce || s->ce != s->m || hw > 256)
    CHECK(kiln_conv_block_f32(NULL, isa, &pd, s->c, s->m, &wrong) == KILN_ERR_UNSUPPORTED);
  kiln_act hs = kt_act(3);
  CHECK(!kiln_conv_block_f32_ok(&pd, s->c, s->m, &hs, &ad, a.e_conv, isa));
  if (st) { /* a direct expansion: bands only, and its output must be the depthwise input */
    kiln_conv2d_f32_params small = pd, other = pe;
    small.h = small.w = 16;
    other.m = s->ce + 1;
    CHECK(!kiln_conv_block_f32_ok(&small, s->c, s->m, &ae, &ad, &pe, isa));
    CHECK(!kiln_conv_block_f32_ok(&pd, s->c, s->m, &ae, &ad, &other, isa));
    wrong = a;
    wrong.e_conv = &other;
    CHECK(kiln_conv_block_f32(NULL, isa, &pd, s->c, s->m, &wrong) == KILN_ERR_UNSUPPORTED);
  }
  kiln_gemm_packed_b_free(we_t);
  kiln_gemm_packed_b_free(wp_t);
  float *bufs[] = {x, we, be, wd, bd, wp, bp, r, e, d, ref, y1, y2};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  return bad;
}

int main(void) {
  kt_rng = 0x51ed27a3c2b1f00dull; /* this test's data */
  if (kiln_isa_resolve(KILN_ISA_AVX512) < 0) {
    kiln_conv2d_f32_params pd = {1, 384, 14, 14, 384, 384, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14, 0, 0};
    kiln_act a = kt_act(2);
    CHECK(!kiln_conv_block_f32_ok(&pd, 64, 64, &a, &a, NULL, kiln_isa_resolve(KILN_ISA_AUTO)));
    printf("test_conv_block: no AVX-512 here: the block declines, the graph runs the convolutions\n");
    return kt_finish("test_conv_block");
  }
  kiln_threadpool *pool2 = kiln_threadpool_create(2);
  static const shape shapes[] = {
      {1, 64, 384, 64, 14, 14, 3, 1, 1, 1},  {1, 96, 576, 96, 14, 14, 3, 1, 1, 1},
      {1, 96, 576, 160, 14, 14, 3, 2, 1, 0}, {1, 160, 960, 160, 7, 7, 3, 1, 1, 1},
      {1, 160, 960, 320, 7, 7, 3, 1, 1, 0},  {2, 5, 20, 7, 9, 11, 3, 1, 1, 1},
      {1, 3, 40, 5, 6, 6, 3, 2, 1, 0},       {2, 8, 16, 8, 1, 1, 3, 1, 1, 1},
      {1, 4, 33, 6, 8, 8, 5, 1, 2, 1},       {1, 24, 144, 24, 16, 16, 3, 1, 1, 1},
      /* planes over 256 pixels: bands of rows, each thread its own rows */
      {1, 16, 96, 24, 112, 112, 3, 2, 1, 0}, {1, 24, 144, 24, 56, 56, 3, 1, 1, 1},
      {2, 5, 20, 7, 23, 19, 3, 2, 1, 1},     {2, 4, 33, 6, 30, 17, 5, 1, 2, 1},
      {1, 8, 400, 8, 21, 200, 3, 1, 1, 0}, /* one output row per band */
      {1, 6, 40, 9, 300, 2, 3, 1, 1, 1},   /* narrow: two columns */
  };
  /* the expansion a network's first layer: MobileNetV2's 3 -> 32, 3x3 stride 2 on 224x224, then
   * its first block without expansion (depthwise, projection); other kernels, strides and pads,
   * a batch of 2, a depthwise of stride 2 */
  static const struct {
    shape s;
    stem e;
  } stems[] = {
      {{1, 3, 32, 16, 112, 112, 3, 1, 1, 0}, {3, 2, 1, 224, 224}},
      {{2, 3, 8, 5, 23, 19, 3, 1, 1, 1}, {3, 2, 1, 45, 37}},
      {{1, 4, 12, 6, 20, 32, 5, 2, 2, 0}, {7, 2, 3, 40, 64}},
      {{1, 2, 8, 8, 20, 24, 3, 1, 1, 1}, {3, 1, 1, 20, 24}},
  };
  int cases = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int v = 0; v < 3; v++) {
      check(pool2, &shapes[i], NULL, (int)(i + v) % 3, 2 - v, v == 2 ? 3 : 0);
      cases++;
    }
  for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++)
    for (int v = 0; v < 3; v++) {
      check(pool2, &stems[i].s, &stems[i].e, (int)(i + v) % 3, 2 - v, v == 2 ? 3 : 0);
      cases++;
    }
  printf("test_conv_block: %d cases\n", cases);
  kiln_threadpool_free(pool2);
  return kt_finish("test_conv_block");
}
