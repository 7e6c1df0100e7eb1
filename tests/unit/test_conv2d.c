/* kiln_conv2d_f32 against a direct 7-loop reference with double accumulation (the Conv
 * definition): random shapes with groups, depthwise (channel multiplier 1 and more), strides,
 * dilations, asymmetric pads, 1x1, odd sizes, batch > 1; fused bias, residual and activation;
 * 1 and 2 threads; every ISA level this CPU has. Winograd F(2x2, 3x3): forced on 3x3 stride-1
 * shapes (odd sizes, padding 0/1/asymmetric, tile tails, several blocks, batch 2), with the
 * weights transformed per call and beforehand (kiln_conv2d_f32_args.wu); its normwise relative error
 * max |y - ref| / max |ref| must stay within 1e-4. The transposed GEMM of small planes (W^T
 * packed, kiln_conv2d_f32_args.wt) on fixed and random shapes; 1 and 2 threads give the same bytes
 * for the even tile split and the transposed path. The direct kernel for few input channels
 * (stems) on fixed shapes with every epilogue, and through the random shapes. (Conv and FusedConv nodes reach this kernel
 * through src/ops/conv.c; the conformance and real-model tests cover that hook.) Repeated calls
 * whose buffers (im2col block, C^T, Winograd V and O) are large reuse them: a call after the
 * first faults no page in (they were malloc'ed per call, and glibc's mmap of each made a
 * single 16 -> 64 3x3 at 55x55 17x slower). */
#include <math.h>
#ifdef __linux__
#include <malloc.h> /* mallopt */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kernels/act.h"
#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm.h"
#include "kernels/conv_internal.h"
#include "kernels/winograd_f32.h"
#include "base/threadpool.h"
#include "testutil.h"


static void reference(const kiln_conv2d_f32_params *p, const float *x, const float *w,
                      const kiln_conv2d_f32_epilogue *ep, float *y) {
  int64_t cg = p->c / p->group, mg = p->m / p->group;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t m = 0; m < p->m; m++) {
      int64_t gr = m / mg;
      for (int64_t oy = 0; oy < p->oh; oy++)
        for (int64_t ox = 0; ox < p->ow; ox++) {
          double s = ep->bias ? ep->bias[m] : 0.0;
          for (int64_t ci = 0; ci < cg; ci++)
            for (int64_t ky = 0; ky < p->kh; ky++)
              for (int64_t kx = 0; kx < p->kw; kx++) {
                int64_t iy = oy * p->sh + ky * p->dh - p->pt, ix = ox * p->sw + kx * p->dw - p->pl;
                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
                s += (double)x[((n * p->c + gr * cg + ci) * p->h + iy) * p->w + ix] *
                     w[((m * cg + ci) * p->kh + ky) * p->kw + kx];
              }
          int64_t o = ((n * p->m + m) * p->oh + oy) * p->ow + ox;
          if (ep->residual) s += ep->residual[o];
          y[o] = kiln_act_ref((float)s, &ep->act);
        }
    }
}

static double g_wino_max_rel; /* largest Winograd normwise relative error seen */
static int g_use_wu;          /* pass transformed weights (kiln_conv2d_f32_args.wu) */
static int g_use_wt;          /* pass W^T packed for the transposed path (.wt) */
static int g_wt_runs;         /* checks that took the transposed path */

static int check_one(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p, int with_bias,
                     int with_res, kiln_act act) {
  int64_t xn = p->n * p->c * p->h * p->w, wn = p->m * (p->c / p->group) * p->kh * p->kw;
  int64_t yn = p->n * p->m * p->oh * p->ow;
  float *x = malloc(sizeof(float) * (size_t)(xn + 1)), *w = malloc(sizeof(float) * (size_t)(wn + 1));
  float *b = malloc(sizeof(float) * (size_t)(p->m + 1)), *r = malloc(sizeof(float) * (size_t)(yn + 1));
  float *y = malloc(sizeof(float) * (size_t)(yn + 1)), *ref = malloc(sizeof(float) * (size_t)(yn + 1));
  for (int64_t i = 0; i < xn; i++) x[i] = kt_frand();
  for (int64_t i = 0; i < wn; i++) w[i] = kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = kt_frand();
  for (int64_t i = 0; i < yn; i++) r[i] = kt_frand(), y[i] = NAN;
  kiln_conv2d_f32_epilogue ep = {with_bias ? b : NULL, with_res ? r : NULL, act};
  reference(p, x, w, &ep, ref);
  float *u = NULL;
  int wino = kiln_conv2d_f32_uses_winograd(p, g_use_wu) && p->c / p->group > 1;
  if (g_use_wu && wino) {
    u = malloc(sizeof(float) * (size_t)kiln_wino_f32_weights_size(p->m, p->c));
    kiln_wino_f32_weights(w, p->m, p->c, u);
  }
  kiln_gemm_packed_b *wt = NULL;
  int lvl = kiln_isa_resolve(isa);
  if (g_use_wt && lvl >= 0 && kiln_conv2d_f32_uses_transposed(p, lvl)) {
    size_t kk = (size_t)(p->c * p->kh * p->kw);
    CHECK(kiln_gemm_pack_b(lvl, 1, kk, (size_t)p->m, w, kk, &wt, NULL) == KILN_OK);
    g_wt_runs++;
  }
  kiln_code rc = kiln_conv2d_f32(pool, isa, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y, .ep = ep,
                                                                    .wu = u, .wt = wt});
  CHECK_MSG(rc == KILN_OK, "rc %d", (int)rc);
  kiln_gemm_packed_b_free(wt);
  free(u);
  if (wino && !rc) {
    double emax = 0, rmax = 0;
    for (int64_t i = 0; i < yn; i++) {
      double e = fabs((double)y[i] - ref[i]);
      if (!(e <= emax)) emax = e; /* NaN sticks */
      if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
    }
    double rel = rmax > 0 ? emax / rmax : emax;
    if (!(rel <= g_wino_max_rel)) g_wino_max_rel = rel;
    CHECK_MSG(rel <= 1e-4, "winograd isa %d n%lld c%lld %lldx%lld m%lld p%lld,%lld o%lldx%lld: relative error %g",
              isa, (long long)p->n, (long long)p->c, (long long)p->h, (long long)p->w, (long long)p->m,
              (long long)p->pt, (long long)p->pl, (long long)p->oh, (long long)p->ow, rel);
  }
  int bad = 0;
  double kk = (double)(p->c / p->group * p->kh * p->kw);
  for (int64_t i = 0; !rc && i < yn && bad < 3; i++) {
    double tol = 1e-5 * (kk + 4);
    if (!(fabs((double)y[i] - ref[i]) <= tol)) {
      bad++;
      CHECK_MSG(0, "isa %d n%lld c%lld %lldx%lld m%lld g%lld k%lldx%lld s%lld,%lld d%lld,%lld p%lld,%lld o%lldx%lld bias %d res %d act %d: y[%lld] = %g, want %g",
                isa, (long long)p->n, (long long)p->c, (long long)p->h, (long long)p->w,
                (long long)p->m, (long long)p->group, (long long)p->kh, (long long)p->kw,
                (long long)p->sh, (long long)p->sw, (long long)p->dh, (long long)p->dw,
                (long long)p->pt, (long long)p->pl, (long long)p->oh, (long long)p->ow, with_bias,
                with_res, (int)act.kind, (long long)i, y[i], ref[i]);
    }
  }
  free(x);
  free(w);
  free(b);
  free(r);
  free(y);
  free(ref);
  return bad;
}

/* 1 and 2 threads must give the same bytes (tiles and GEMM splits never change an element's
 * arithmetic), with and without packed W^T. */
static void check_threads_equal(kiln_threadpool *pool2, const kiln_conv2d_f32_params *p) {
  int64_t xn = p->n * p->c * p->h * p->w, wn = p->m * (p->c / p->group) * p->kh * p->kw;
  int64_t yn = p->n * p->m * p->oh * p->ow;
  float *x = malloc(sizeof(float) * (size_t)xn), *w = malloc(sizeof(float) * (size_t)wn);
  float *b = malloc(sizeof(float) * (size_t)p->m), *r = malloc(sizeof(float) * (size_t)yn);
  float *y1 = malloc(sizeof(float) * (size_t)yn), *y2 = malloc(sizeof(float) * (size_t)yn);
  for (int64_t i = 0; i < xn; i++) x[i] = kt_frand();
  for (int64_t i = 0; i < wn; i++) w[i] = kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = kt_frand();
  for (int64_t i = 0; i < yn; i++) r[i] = kt_frand();
  kiln_conv2d_f32_epilogue ep = {b, r, {KILN_ACT_RELU, 0, 0}};
  int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  kiln_gemm_packed_b *wt = NULL;
  size_t kk = (size_t)(p->c / p->group * p->kh * p->kw);
  if (p->group == 1) CHECK(kiln_gemm_pack_b(isa, 1, kk, (size_t)p->m, w, kk, &wt, NULL) == KILN_OK);
  for (int use_wt = 0; use_wt < 2; use_wt++) {
    const kiln_gemm_packed_b *u = use_wt ? wt : NULL;
    CHECK(kiln_conv2d_f32(NULL, isa, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y1, .ep = ep, .wt = u}) == KILN_OK);
    CHECK(kiln_conv2d_f32(pool2, isa, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y2, .ep = ep, .wt = u}) == KILN_OK);
    CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)yn) == 0,
              "c%lld %lldx%lld m%lld k%lld: 1 and 2 threads differ (wt %d)", (long long)p->c,
              (long long)p->h, (long long)p->w, (long long)p->m, (long long)p->kh, use_wt);
  }
  kiln_gemm_packed_b_free(wt);
  free(x), free(w), free(b), free(r), free(y1), free(y2);
}

/* kiln_conv2d_direct_f32_rows: each image's rows in three bands, at every direct level, byte-equal
 * to the whole direct convolution (kiln_conv2d_direct_f32) at that level (bias, clip: the epilogue in registers); rows out of
 * range, a residual or a batch refused. */
static void check_direct_rows(const kiln_conv2d_f32_params *p) {
  int64_t xn = p->n * p->c * p->h * p->w, wn = p->m * p->c * p->kh * p->kw, ohw = p->oh * p->ow;
  int64_t yn = p->n * p->m * ohw;
  float *x = malloc(sizeof(float) * (size_t)xn), *w = malloc(sizeof(float) * (size_t)wn);
  float *b = malloc(sizeof(float) * (size_t)p->m), *y = malloc(sizeof(float) * (size_t)yn);
  float *band = malloc(sizeof(float) * (size_t)(p->m * ohw));
  for (int64_t i = 0; i < xn; i++) x[i] = kt_frand();
  for (int64_t i = 0; i < wn; i++) w[i] = kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = kt_frand();
  kiln_conv2d_f32_epilogue ep = {b, NULL, {KILN_ACT_CLIP, 0.0f, 1.5f}};
  static const int lvls[] = {KILN_ISA_AVX2, KILN_ISA_AVX512};
  for (size_t l = 0; l < sizeof lvls / sizeof lvls[0]; l++) {
    int isa = lvls[l];
    if (kiln_isa_resolve(isa) < 0 || !kiln_conv2d_f32_uses_direct(p, isa)) continue;
    CHECK(kiln_conv2d_direct_f32(NULL, isa, p, x, w, &ep, y) == KILN_OK); /* (one channel: not kiln_conv2d_f32's path) */
    kiln_conv2d_f32_params one = *p;
    one.n = 1;
    int64_t cut[4] = {0, p->oh / 3, p->oh - p->oh / 4, p->oh};
    for (int64_t nn = 0; nn < p->n; nn++)
      for (int k = 0; k < 3; k++) {
        int64_t r0 = cut[k], r1 = cut[k + 1], ys = (r1 - r0) * p->ow;
        if (r0 >= r1) continue;
        const float *xi = x + nn * p->c * p->h * p->w, *yi = y + nn * p->m * ohw;
        CHECK(kiln_conv2d_direct_f32_rows(isa, &one, xi, w, &ep, r0, r1, band, ys) == KILN_OK);
        int same = 1;
        for (int64_t co = 0; co < p->m && same; co++)
          same = !memcmp(band + co * ys, yi + co * ohw + r0 * p->ow, sizeof(float) * (size_t)ys);
        CHECK_MSG(same, "direct rows [%lld, %lld) of image %lld at level %d: not the whole convolution's",
                  (long long)r0, (long long)r1, (long long)nn, isa);
      }
    CHECK(kiln_conv2d_direct_f32_rows(isa, &one, x, w, &ep, 0, p->oh + 1, band, ohw) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_conv2d_direct_f32_rows(isa, &one, x, w, &ep, 2, 2, band, ohw) == KILN_ERR_INVALID_ARG);
    kiln_conv2d_f32_epilogue res = {b, y, ep.act};
    CHECK(kiln_conv2d_direct_f32_rows(isa, &one, x, w, &res, 0, 1, band, ohw) == KILN_ERR_INVALID_ARG);
    if (p->n > 1) CHECK(kiln_conv2d_direct_f32_rows(isa, p, x, w, &ep, 0, 1, band, ohw) == KILN_ERR_INVALID_ARG);
  }
  free(x), free(w), free(b), free(y), free(band);
}

/* The gathered transposed path (W^T packed) against the im2col GEMM (no W^T) at level lvl, 1
 * and 2 threads, bias + residual + relu: the same K order and blocks, so the same bytes.
 * Returns 1 when checked. */
static int check_same_as_im2col(kiln_threadpool *pool2, const kiln_conv2d_f32_params *p, int lvl) {
  int64_t xn = p->n * p->c * p->h * p->w, kk = p->c * p->kh * p->kw, wn = p->m * kk;
  int64_t yn = p->n * p->m * p->oh * p->ow;
  float *x = malloc(sizeof(float) * (size_t)xn), *w = malloc(sizeof(float) * (size_t)wn);
  float *b = malloc(sizeof(float) * (size_t)p->m), *r = malloc(sizeof(float) * (size_t)yn);
  float *y1 = malloc(sizeof(float) * (size_t)yn), *y2 = malloc(sizeof(float) * (size_t)yn);
  for (int64_t i = 0; i < xn; i++) x[i] = kt_frand();
  for (int64_t i = 0; i < wn; i++) w[i] = kt_frand();
  for (int64_t i = 0; i < p->m; i++) b[i] = kt_frand();
  for (int64_t i = 0; i < yn; i++) r[i] = kt_frand();
  kiln_conv2d_f32_epilogue ep = {b, r, {KILN_ACT_RELU, 0, 0}};
  kiln_gemm_packed_b *wt = NULL;
  CHECK(kiln_gemm_pack_b(lvl, 1, (size_t)kk, (size_t)p->m, w, (size_t)kk, &wt, NULL) == KILN_OK);
  for (int t = 0; t < 2; t++) {
    kiln_threadpool *pool = t ? pool2 : NULL;
    CHECK(kiln_conv2d_f32(pool, lvl, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y1, .ep = ep}) == KILN_OK);
    CHECK(kiln_conv2d_f32(pool, lvl, p, &(kiln_conv2d_f32_args){.x = x, .w = w, .y = y2, .ep = ep, .wt = wt}) == KILN_OK);
    CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)yn) == 0,
              "c%lld %lldx%lld m%lld k%lldx%lld s%lld: gathered and im2col differ (%d threads)",
              (long long)p->c, (long long)p->h, (long long)p->w, (long long)p->m, (long long)p->kh,
              (long long)p->kw, (long long)p->sh, t + 1);
  }
  kiln_gemm_packed_b_free(wt);
  free(x), free(w), free(b), free(r), free(y1), free(y2);
  return 1;
}

/* Minor page faults of this process so far. */
static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/* Calls 2..12 of one convolution (1 or 2 threads) fault in (next to) no page: the kernel's
 * scratch is kept between calls. */
static void check_scratch_reused(kiln_threadpool *pool, const kiln_conv2d_f32_params *p, size_t buf_bytes) {
  size_t nx = (size_t)(p->n * p->c * p->h * p->w), nw = (size_t)(p->m * p->c / p->group * p->kh * p->kw);
  size_t ny = (size_t)(p->n * p->m * p->oh * p->ow);
  float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw), *y = malloc(sizeof(float) * ny);
  for (size_t i = 0; i < nx; i++) x[i] = kt_frand();
  for (size_t i = 0; i < nw; i++) w[i] = kt_frand();
  /* Winograd weights transformed beforehand, as a session does at load */
  float *u = NULL;
  if (kiln_conv2d_f32_uses_winograd(p, 1)) {
    int e = kiln_wino_f32_tile(p);
    u = malloc(sizeof(float) * (size_t)kiln_wino_f32_weights_size_tile(e, p->m, p->c));
    kiln_wino_f32_weights_tile(e, kiln_wino_f32_trans(p, kiln_isa_resolve(KILN_ISA_AUTO)), w, p->m, p->c, u);
  }
  kiln_conv2d_f32_args a = {.x = x, .w = w, .y = y, .wu = u};
  CHECK(kiln_conv2d_f32(pool, KILN_ISA_AUTO, p, &a) == KILN_OK);
  long faults[11]; /* per call; the median leaves out a worker's first touch of its own scratch */
  for (int i = 0; i < 11; i++) {
    long f0 = minor_faults();
    CHECK(kiln_conv2d_f32(pool, KILN_ISA_AUTO, p, &a) == KILN_OK);
    faults[i] = minor_faults() - f0;
    for (int j = i; j > 0 && faults[j] < faults[j - 1]; j--) {
      long t = faults[j];
      faults[j] = faults[j - 1];
      faults[j - 1] = t;
    }
  }
  printf("scratch: %ldx%ld %ld -> %ld, %d thread(s): median %ld page faults per call (buffers ~%zu pages)\n",
         p->h, p->w, p->c, p->m, kiln_threadpool_size(pool), faults[5], buf_bytes / 4096);
  CHECK(faults[5] <= 2);
  free(u);
  free(x);
  free(w);
  free(y);
}

/* Fills the output size from pads at the end (pb, pr); false when the kernel does not fit. */
static int finish(kiln_conv2d_f32_params *p, int64_t pb, int64_t pr) {
  int64_t ekh = (p->kh - 1) * p->dh + 1, ekw = (p->kw - 1) * p->dw + 1;
  int64_t sh = p->h + p->pt + pb, sw = p->w + p->pl + pr;
  if (sh < ekh || sw < ekw) return 0;
  p->oh = (sh - ekh) / p->sh + 1;
  p->ow = (sw - ekw) / p->sw + 1;
  return 1;
}

static kiln_act random_act(void) {
  kiln_act a = {KILN_ACT_NONE, 0, 0};
  switch (kt_rand() % 5) {
    case 1: a.kind = KILN_ACT_RELU; break;
    case 2: a.kind = KILN_ACT_CLIP; a.alpha = 0.0f; a.beta = 6.0f; break;
    case 3: a.kind = KILN_ACT_LEAKY_RELU; a.alpha = 0.1f; break;
    case 4: a.kind = KILN_ACT_HARD_SWISH; break;
    default: break;
  }
  return a;
}

static const int g_isas[3] = {KILN_ISA_SCALAR, KILN_ISA_AVX2, KILN_ISA_AVX512};

/* An epilogue to check: bias, residual, activation, and whether the Winograd weights are
 * passed transformed (g_use_wu). */
typedef struct epi_case {
  int bias, res;
  kiln_act act;
  int use_wu;
} epi_case;

/* check_one for each case at every ISA level this machine has, with 1 and 2 threads. */
static void check_levels(kiln_threadpool *const pools[2], const kiln_conv2d_f32_params *p,
                         const epi_case *cs, size_t n) {
  for (int i = 0; i < 3; i++) {
    if (kiln_isa_resolve(g_isas[i]) < 0) continue;
    for (int t = 0; t < 2; t++)
      for (size_t k = 0; k < n; k++) {
        g_use_wu = cs[k].use_wu;
        check_one(pools[t], g_isas[i], p, cs[k].bias, cs[k].res, cs[k].act);
      }
  }
  g_use_wu = 0;
}

int main(void) {
  kt_rng = 0x243f6a8885a308d3ull; /* this test's data */
  kiln_threadpool *pools[2] = {NULL, kiln_threadpool_create(2)};
  /* fixed layers of the target networks (shrunk where large) */
  static const int64_t fixed[][13] = {
      /* n  c   h   w   m  group kh kw s  d  p  pe  */
      {1, 16, 20, 20, 16, 1, 3, 3, 1, 1, 1, 1, 0},    /* ResNet 3x3 */
      {1, 3, 37, 37, 8, 1, 7, 7, 2, 1, 3, 3, 0},      /* stem 7x7/2 */
      {2, 32, 17, 19, 32, 32, 3, 3, 1, 1, 1, 1, 0},   /* depthwise s1 */
      {1, 24, 33, 35, 24, 24, 3, 3, 2, 1, 1, 1, 0},   /* depthwise s2 */
      {1, 40, 9, 9, 40, 40, 5, 5, 1, 1, 2, 2, 0},     /* depthwise 5x5 */
      {2, 24, 13, 11, 16, 1, 1, 1, 1, 1, 0, 0, 0},    /* 1x1 */
      {1, 32, 14, 14, 48, 1, 1, 1, 2, 1, 0, 0, 0},    /* 1x1 stride 2 (downsample) */
      {1, 16, 15, 15, 32, 4, 3, 3, 1, 1, 1, 1, 0},    /* grouped */
      {1, 8, 12, 40, 16, 8, 3, 3, 1, 2, 2, 2, 0},     /* depthwise x2, dilated */
      {1, 6, 7, 70, 6, 6, 3, 3, 3, 1, 1, 1, 0},       /* depthwise stride 3 */
      {1, 5, 6, 150, 5, 5, 3, 3, 1, 1, 1, 1, 0},      /* depthwise, wide rows (4-chunk path) */
      {2, 4, 5, 261, 4, 4, 3, 3, 2, 1, 1, 0, 0},      /* depthwise s2, wide, pads at start only */
      {1, 3, 9, 199, 6, 3, 5, 3, 1, 2, 3, 2, 0},      /* depthwise x2, dilated, wide */
      {1, 4, 8, 130, 4, 4, 5, 5, 2, 1, 2, 2, 0},      /* depthwise 5x5 s2, wide */
      {1, 4, 6, 40, 4, 4, 1, 17, 1, 1, 8, 8, 0},      /* depthwise 1x17: padded-plane path */
      {1, 4, 9, 21, 8, 4, 3, 3, 2, 1, 1, 0, 0},       /* depthwise x2 s2, pads at start only */
      {1, 3, 7, 7, 3, 3, 7, 7, 1, 1, 3, 3, 0},        /* depthwise 7x7 on a 7x7 plane */
      {1, 64, 4, 500, 8, 1, 3, 3, 1, 1, 1, 1, 0},     /* im2col in several row tiles */
      {2, 128, 5, 1000, 6, 2, 3, 3, 2, 1, 1, 1, 0},   /* tiles, groups, stride 2, batch 2 */
      {2, 64, 40, 300, 8, 1, 1, 1, 1, 1, 0, 0, 0},    /* 1x1 direct in several tiles */
      {2, 64, 9, 50, 16, 4, 1, 1, 1, 1, 0, 0, 0},     /* grouped 1x1 direct */
      {1, 40, 61, 47, 24, 1, 3, 3, 2, 2, 2, 2, 0},    /* im2col tiles starting mid-row, dilated s2 */
      {1, 96, 40, 50, 16, 1, 3, 3, 3, 1, 1, 1, 0},    /* stride 3 (no vector im2col), mid-row tiles */
      {1, 16, 37, 37, 96, 1, 1, 1, 1, 1, 0, 0, 0},    /* 1x1 direct with bias: column tiles, tail */
      {1, 24, 56, 56, 144, 1, 1, 1, 1, 1, 0, 0, 0},   /* MobileNetV2 expansion 1x1 */
      /* few tiles cut evenly over 2 threads (each thread its own im2col block / columns) */
      {1, 16, 64, 64, 32, 1, 3, 3, 2, 1, 1, 1, 0},    /* 3x3 s2: 2 tiles of 16 rows */
      {3, 8, 50, 50, 24, 1, 3, 3, 2, 1, 1, 1, 0},     /* batch 3: 2 tiles each, uneven rows */
      {1, 32, 40, 40, 16, 1, 1, 1, 1, 1, 0, 0, 0},    /* 1x1 direct, few channels: 2 x 800 */
      {1, 640, 14, 14, 192, 1, 1, 1, 1, 1, 0, 0, 0},  /* projection: W^T at 1 thread, W at 2 */
  };
  for (size_t f = 0; f < sizeof fixed / sizeof fixed[0]; f++) {
    const int64_t *v = fixed[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[8],
                                v[9], v[9], v[10], v[10], 0, 0, 0, 0};
    finish(&p, v[11], v[11]);
    check_threads_equal(pools[1], &p);
    static const epi_case cs[] = {{0, 0, {KILN_ACT_NONE, 0, 0}, 0},
                                  {1, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {0, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {1, 0, {KILN_ACT_CLIP, 0.0f, 6.0f}, 0}}; /* bias + Relu6 in one pass */
    check_levels(pools, &p, cs, sizeof cs / sizeof cs[0]);
  }
  /* the direct kernel for few input channels (kiln_conv2d_f32_uses_direct): stems, odd
   * rows (vector tails), 1 to 8 vectors per row (3, 2 + 2, 3 + 2, 3 + 3 + 1 ...), channel
   * counts off the block of 8, strides 1 and 2, dilation, asymmetric pads, batch 2 */
  static const int64_t dir[][15] = {
      /* n  c  h   w    m  kh kw sh sw dh dw pt pl pb pr */
      {1, 3, 40, 45, 64, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},     /* ResNet stem 7x7/2 */
      {1, 3, 35, 67, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     /* MobileNetV2 stem 3x3/2 */
      {1, 3, 23, 223, 64, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},    /* SqueezeNet conv1: 111 columns */
      {2, 1, 9, 64, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      /* 1 channel, 4 vectors, m 13 */
      {1, 4, 11, 80, 20, 5, 3, 1, 1, 1, 1, 2, 1, 0, 2},     /* 4 channels, 5 vectors, pads */
      {1, 2, 12, 50, 9, 3, 3, 2, 1, 2, 2, 2, 0, 1, 3},      /* dilated, stride (2, 1) */
      {1, 3, 8, 33, 4, 2, 3, 1, 2, 1, 1, 0, 1, 0, 0},       /* 16 columns exactly, m 4 */
      {1, 3, 7, 260, 8, 1, 5, 3, 2, 1, 3, 0, 2, 0, 2},      /* 1x5 dilated, sh 3, 8 vectors */
      {2, 3, 9, 27, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},       /* 25 columns (AVX2: 2 + 2 vectors, 1 lane), m 6 */
      {1, 2, 6, 37, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      /* 37 columns (AVX2: 3 + 2), m 8 + 3 */
  };
  for (size_t f = 0; f < sizeof dir / sizeof dir[0]; f++) {
    const int64_t *v = dir[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], 1, v[5], v[6], v[7], v[8],
                                v[9], v[10], v[11], v[12], 0, 0, 0, 0};
    CHECK(finish(&p, v[13], v[14]));
    if (kiln_isa_resolve(KILN_ISA_AVX512) >= 0) CHECK(kiln_conv2d_f32_uses_direct(&p, KILN_ISA_AVX512));
    if (kiln_isa_resolve(KILN_ISA_AVX2) >= 0) CHECK(kiln_conv2d_f32_uses_direct(&p, KILN_ISA_AVX2));
    CHECK(!kiln_conv2d_f32_uses_direct(&p, KILN_ISA_SCALAR));
    check_threads_equal(pools[1], &p);
    check_direct_rows(&p);
    static const epi_case cs[] = {{0, 0, {KILN_ACT_NONE, 0, 0}, 0},
                                  {1, 0, {KILN_ACT_RELU, 0, 0}, 0},
                                  {1, 0, {KILN_ACT_CLIP, 0.0f, 6.0f}, 0},
                                  {1, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {0, 1, {KILN_ACT_HARD_SWISH, 0, 0}, 0},
                                  {1, 0, {KILN_ACT_LEAKY_RELU, 0.1f, 0}, 0}};
    check_levels(pools, &p, cs, sizeof cs / sizeof cs[0]);
  }
  /* Winograd F(2x2, 3x3), forced (small shapes) and by the default rule (large ones) */
  static const int64_t wino[][9] = {
      /* n  c   h   w   m  pt pl pb pr */
      {1, 16, 5, 7, 16, 1, 1, 1, 1},     /* odd sizes: half tiles at the edges */
      {1, 17, 9, 33, 19, 0, 0, 0, 0},    /* no padding, odd channels, 16-tile tail */
      {1, 32, 1, 1, 24, 1, 1, 1, 1},     /* one pixel */
      {1, 20, 12, 40, 16, 1, 0, 2, 1},   /* asymmetric pads */
      {2, 24, 15, 15, 32, 1, 1, 1, 1},   /* batch 2 */
      {2, 40, 100, 14, 40, 1, 1, 1, 1},  /* several blocks (whole blocks per thread) */
      {2, 16, 9, 70, 16, 1, 1, 1, 1},    /* tiles 16 + 16 + 3 per row */
      {1, 2, 6, 6, 3, 1, 1, 1, 1},       /* few channels */
      {1, 64, 32, 32, 64, 1, 1, 1, 1},   /* picked by the default rule */
      {1, 48, 12, 12, 32, 1, 1, 1, 1},   /* picked with cached weights */
      {1, 32, 7, 7, 48, 1, 1, 1, 1},     /* 7x7: picked with cached weights where AMX is off */
  };
  for (size_t f = 0; f < sizeof wino / sizeof wino[0]; f++) {
    const int64_t *v = wino[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], 1, 3, 3, 1, 1, 1, 1, v[5], v[6], 0, 0, 0, 0};
    finish(&p, v[7], v[8]);
    p.winograd = f < 8 ? 1 : 0;
    static const epi_case cs[] = {{0, 0, {KILN_ACT_NONE, 0, 0}, 0},
                                  {1, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {0, 1, {KILN_ACT_LEAKY_RELU, 0.1f, 0}, 1},
                                  {1, 0, {KILN_ACT_HARD_SWISH, 0, 0}, 1}};
    check_levels(pools, &p, cs, sizeof cs / sizeof cs[0]);
    if (f < 10)
      CHECK(kiln_conv2d_f32_uses_winograd(&p, f == 9));
    else
      CHECK(kiln_conv2d_f32_uses_winograd(&p, 1) == !kiln_amx_available() && !kiln_conv2d_f32_uses_winograd(&p, 0));
  }
  /* the transposed GEMM of small planes (C^T = X^T W^T, W^T packed beforehand; 1x1 kernels):
   * direct and im2col (stride, padding), odd channel counts (vector tails), batch 2 */
  static const int64_t tr[][9] = {
      /* n  c    h   w   m   k  s  p */
      {1, 64, 7, 7, 128, 1, 1, 0},    /* 1x1, 49 outputs */
      {1, 40, 7, 7, 60, 1, 1, 0},     /* output channels with a tail */
      {2, 33, 5, 5, 80, 1, 1, 0},     /* 5x5 plane, batch 2 */
      {1, 48, 14, 14, 96, 1, 2, 0},   /* stride 2 to 7x7 (im2col) */
      {1, 19, 9, 9, 64, 1, 2, 1},     /* stride 2 with padding */
      {1, 8, 3, 3, 250, 1, 1, 0},     /* 3x3 plane, many channels */
      {2, 530, 2, 3, 33, 1, 1, 0},    /* long K (several K blocks) */
      {1, 600, 7, 7, 100, 1, 1, 0},   /* 49 rows: 9 strips; K over two blocks */
  };
  g_use_wt = 1;
  for (size_t f = 0; f < sizeof tr / sizeof tr[0]; f++) {
    const int64_t *v = tr[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], 1, v[5], v[5], v[6], v[6],
                                1, 1, v[7], v[7], 0, 0, -1, 0};
    finish(&p, v[7], v[7]);
    if (kiln_isa_resolve(KILN_ISA_AVX512) >= 0) CHECK(kiln_conv2d_f32_uses_transposed(&p, KILN_ISA_AVX512));
    check_threads_equal(pools[1], &p);
    static const epi_case cs[] = {{0, 0, {KILN_ACT_NONE, 0, 0}, 0},
                                  {1, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {0, 1, {KILN_ACT_CLIP, 0.0f, 6.0f}, 0},
                                  {1, 0, {KILN_ACT_HARD_SWISH, 0, 0}, 0}};
    check_levels(pools, &p, cs, sizeof cs / sizeof cs[0]);
  }
  /* larger kernels on small planes: the transposed GEMM with the taps gathered from the
   * (zero-padded) input, no im2col (AVX-512); same bytes as the im2col GEMM (strided 1x1: the
   * transposed GEMM on the im2col block, also the same bytes) */
  static const int64_t ga[][15] = {
      /* n  c    h   w   m   kh kw sh sw dh dw pt pl pb pr */
      {1, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      /* ResNet 3x3 at 7x7 */
      {1, 40, 14, 14, 72, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},    /* 3x3 s2 to 7x7, channel tail */
      {2, 33, 9, 11, 80, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},     /* no padding: read in place, batch 2 */
      {1, 600, 5, 5, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* K 5400: several K blocks */
      {1, 16, 12, 13, 65, 3, 5, 2, 1, 2, 1, 2, 1, 0, 3},    /* dilated, asymmetric pads */
      {1, 24, 14, 14, 96, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},    /* 1x1 s2 in place */
      {1, 32, 15, 15, 64, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1},    /* 1x1 s2 padded */
      {1, 20, 3, 3, 130, 2, 2, 1, 1, 1, 1, 0, 0, 1, 1},     /* 2x2 kernel, pads at the end only */
      {1, 16, 40, 36, 64, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0},    /* s2 to 20x18 (360 rows of C^T) */
      /* 2 threads: a band of output rows each (8 + 9), its own padded rows, and in place */
      {1, 80, 34, 34, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   /* s2 to 17x17, padded */
      {2, 80, 35, 35, 128, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},   /* s2 to 17x17 in place, batch 2 */
  };
  int ga_runs = 0;
  for (size_t f = 0; f < sizeof ga / sizeof ga[0]; f++) {
    const int64_t *v = ga[f];
    kiln_conv2d_f32_params p = {v[0], v[1], v[2], v[3], v[4], 1, v[5], v[6], v[7], v[8],
                                v[9], v[10], v[11], v[12], 0, 0, -1, 0};
    CHECK(finish(&p, v[13], v[14]));
    int lvl = kiln_isa_resolve(KILN_ISA_AVX512);
    if (lvl >= 0) {
      CHECK_MSG(kiln_conv2d_f32_uses_transposed(&p, lvl), "gathered shape %zu not taken", f);
      ga_runs += check_same_as_im2col(pools[1], &p, lvl);
    }
    check_threads_equal(pools[1], &p);
    static const epi_case cs[] = {{0, 0, {KILN_ACT_NONE, 0, 0}, 0},
                                  {1, 1, {KILN_ACT_RELU, 0, 0}, 0},
                                  {0, 1, {KILN_ACT_CLIP, 0.0f, 6.0f}, 0},
                                  {1, 0, {KILN_ACT_HARD_SWISH, 0, 0}, 0}};
    check_levels(pools, &p, cs, sizeof cs / sizeof cs[0]);
  }
  if (kiln_isa_resolve(KILN_ISA_AVX512) >= 0) CHECK(ga_runs == (int)(sizeof ga / sizeof ga[0]));
  /* the AVX2 and scalar levels have no gathered kernel: larger kernels stay on im2col there */
  kiln_conv2d_f32_params g7 = {1, 64, 7, 7, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7, 7, -1, 0};
  CHECK(!kiln_conv2d_f32_uses_transposed(&g7, KILN_ISA_SCALAR));
  if (kiln_isa_resolve(KILN_ISA_AVX2) >= 0) CHECK(!kiln_conv2d_f32_uses_transposed(&g7, KILN_ISA_AVX2));
  g_use_wt = 0;
  /* large enough that 2 threads take the transposed path too (and 1 thread for the pixel) */
  kiln_conv2d_f32_params big = {1, 768, 7, 7, 1024, 1, 1, 1, 1, 1, 1, 1, 0, 0, 7, 7, -1, 0};
  check_threads_equal(pools[1], &big);
  kiln_conv2d_f32_params pix = {1, 900, 1, 1, 64, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, -1, 0};
  check_threads_equal(pools[1], &pix);
  CHECK(!kiln_conv2d_f32_uses_transposed(&pix, KILN_ISA_AUTO));
  if (kiln_isa_resolve(KILN_ISA_AVX512) >= 0) CHECK(g_wt_runs > 0);
  printf("transposed path: %d checks\n", g_wt_runs);
  kiln_conv2d_f32_params w7 = {1, 512, 7, 7, 512, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7, 7, 0, 0};
  /* 7x7: Winograd with weights transformed at load, unless AMX runs it */
  CHECK(kiln_conv2d_f32_uses_winograd(&w7, 1) == !kiln_amx_available());
  CHECK(!kiln_conv2d_f32_uses_winograd(&w7, 0));
  printf("winograd: max relative error %.3g\n", g_wino_max_rel);
  for (int it = 0; it < 400; it++) {
    kiln_conv2d_f32_params p;
    memset(&p, 0, sizeof p);
    int kind = (int)(kt_rand() % 4); /* 0 general, 1 depthwise, 2 grouped, 3 1x1 */
    p.n = kt_rand_in(1, 2);
    p.group = 1;
    int64_t cg = kt_rand_in(1, 9), mg = kt_rand_in(1, 9);
    if (kind == 1) {
      p.group = kt_rand_in(1, 12);
      cg = 1;
      mg = kt_rand() % 3 ? 1 : kt_rand_in(1, 3);
    } else if (kind == 2) {
      p.group = kt_rand_in(2, 4);
    }
    p.c = cg * p.group;
    p.m = mg * p.group;
    p.h = kt_rand_in(1, 23);
    p.w = kt_rand_in(1, 41);
    p.kh = kind == 3 ? 1 : kt_rand_in(1, 5);
    p.kw = kind == 3 ? 1 : kt_rand_in(1, 5);
    p.sh = kt_rand_in(1, 3);
    p.sw = kt_rand_in(1, 3);
    p.dh = kt_rand() % 4 ? 1 : kt_rand_in(2, 3);
    p.dw = kt_rand() % 4 ? 1 : kt_rand_in(2, 3);
    int64_t pb = 0, pr = 0;
    if (kind != 3 || kt_rand() % 2) {
      p.pt = kt_rand_in(0, 3);
      p.pl = kt_rand_in(0, 3);
      pb = kt_rand_in(0, 3);
      pr = kt_rand_in(0, 3);
    }
    if (kind == 3 && kt_rand() % 2) p.sh = p.sw = 1;
    if (!finish(&p, pb, pr)) continue;
    int isa = g_isas[kt_rand() % 3];
    if (kiln_isa_resolve(isa) < 0) isa = KILN_ISA_AUTO;
    p.winograd = (int)(kt_rand() % 2); /* forced where it applies (3x3 stride 1 group 1) */
    g_use_wu = (int)(kt_rand() % 2);
    g_use_wt = (int)(kt_rand() % 2);
    check_one(pools[kt_rand() % 2], isa, &p, (int)(kt_rand() % 2), (int)(kt_rand() % 2), random_act());
  }
  g_use_wu = 0;
  g_use_wt = 0;
  printf("transposed path: %d checks in all\n", g_wt_runs);
  /* Winograd F(4x4) on 55x55 (V and O ~650 KB) and im2col + GEMM of a 5x5 (a 512 KB block),
   * with glibc's malloc set to hand blocks from 64 KiB back to the system on free (a fixed
   * mmap threshold), as its dynamic threshold did on every run of a model whose largest
   * buffer is such a block */
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
#endif
  kiln_conv2d_f32_params wino55 = {1, 16, 55, 55, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 55, 55, 1, 0};
  kiln_conv2d_f32_params col = {1, 32, 40, 40, 32, 1, 5, 5, 1, 1, 1, 1, 2, 2, 40, 40, -1, 0};
  for (int t = 0; t < 2; t++) {
    check_scratch_reused(pools[t], &wino55, 36 * 80 * 14 * 4 * sizeof(float));
    check_scratch_reused(pools[t], &col, 512 * 1024);
  }
  /* bad parameters */
  kiln_conv2d_f32_params bad = {1, 3, 4, 4, 4, 2, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4, 0, 0};
  float dummy[64] = {0};
  CHECK(kiln_conv2d_f32(NULL, KILN_ISA_AUTO, &bad, &(kiln_conv2d_f32_args){.x = dummy, .w = dummy, .y = dummy}) ==
        KILN_ERR_INVALID_ARG);
  CHECK(kiln_conv2d_f32(NULL, KILN_ISA_AUTO, &bad, NULL) == KILN_ERR_INVALID_ARG);
  kiln_threadpool_free(pools[1]);
  return kt_finish("test_conv2d");
}
