/* kiln_conv_block_f32 (an inverted residual block in one call) against its three convolutions
 * one by one through kiln_conv2d_f32, with the packed weights each would get in a model (W^T
 * where the transposed path is taken). Medians of alternating runs on one thread's CPU time
 * (or wall time with --threads N > 1).
 *   block_bench [--threads N] [--reps R] C,CE,M,H,W,S,RES[,EK,ES,EP] ...   (3x3 depthwise, pad 1)
 * With EK > 1 the expansion is a network's first layer: an EK x EK convolution of stride ES and
 * pads EP over the H x W input (the direct kernel), the depthwise on its output (MobileNetV2's
 * stem and first block: 3,32,16,224,224,1,0,3,2,1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *filled(size_t n, float scale) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = ((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f) * scale;
  return p;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* W^T packed when p takes the transposed path, as a model's node would have it; else NULL. */
static kiln_gemm_packed_b *wt_for(const kiln_conv2d_f32_params *p, const float *w, int isa) {
  kiln_gemm_packed_b *pb = NULL;
  if (!kiln_conv2d_f32_uses_transposed(p, isa)) return NULL;
  kiln_gemm_pack_b(isa, 1, (size_t)p->c, (size_t)p->m, w, (size_t)p->c, &pb, NULL);
  return pb;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 31;
  kiln_threadpool *pool = NULL;
  const int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--threads") && a + 1 < argc) {
      threads = atoi(argv[++a]);
      continue;
    }
    if (!strcmp(argv[a], "--reps") && a + 1 < argc) {
      reps = atoi(argv[++a]);
      continue;
    }
    if (threads > 1 && !pool) pool = kiln_threadpool_create(threads);
    long c, ce, m, h, w, s, res, ek = 1, es = 1, ep = 0;
    int got = sscanf(argv[a], "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld", &c, &ce, &m, &h, &w, &s, &res, &ek, &es, &ep);
    if ((got != 7 && got != 10) || ek < 1 || es < 1 || ep < 0 || h + 2 * ep < ek || w + 2 * ep < ek) {
      fprintf(stderr, "bad block %s (C,CE,M,H,W,S,RES[,EK,ES,EP])\n", argv[a]);
      return 2;
    }
    long eh = (h + 2 * ep - ek) / es + 1, ew = (w + 2 * ep - ek) / es + 1; /* the depthwise input */
    long oh = (eh + 2 - 3) / s + 1, ow = (ew + 2 - 3) / s + 1;
    kiln_conv2d_f32_params pe = {1, c, h, w, ce, 1, ek, ek, es, es, 1, 1, ep, ep, eh, ew, 0, 0};
    kiln_conv2d_f32_params pd = {1, ce, eh, ew, ce, ce, 3, 3, s, s, 1, 1, 1, 1, oh, ow, 0, 0};
    kiln_conv2d_f32_params pp = {1, ce, oh, ow, m, 1, 1, 1, 1, 1, 1, 1, 0, 0, oh, ow, 0, 0};
    float *x = filled((size_t)(c * h * w), 2), *we = filled((size_t)(ce * c * ek * ek), 0.3f), *be = filled((size_t)ce, 1);
    float *wd = filled((size_t)ce * 9, 0.5f), *bd = filled((size_t)ce, 1), *wp = filled((size_t)(m * ce), 0.2f);
    float *bp = filled((size_t)m, 1), *r = res ? filled((size_t)(m * oh * ow), 1) : NULL;
    float *e = filled((size_t)(ce * eh * ew), 0), *d = filled((size_t)(ce * oh * ow), 0), *y = filled((size_t)(m * oh * ow), 0);
    kiln_act clip = {KILN_ACT_CLIP, 0.0f, 6.0f}, none = {KILN_ACT_NONE, 0, 0};
    kiln_gemm_packed_b *ewt = wt_for(&pe, we, isa), *pwt = wt_for(&pp, wp, isa), *we_t = NULL, *wp_t = NULL;
    if (ek == 1) kiln_gemm_pack_b(isa, 1, (size_t)c, (size_t)ce, we, (size_t)c, &we_t, NULL);
    kiln_gemm_pack_b(isa, 1, (size_t)ce, (size_t)m, wp, (size_t)ce, &wp_t, NULL);
    kiln_conv_block_f32_args ba = {.x = x, .we = we, .wp = wp, .we_t = we_t, .e_ep = {be, NULL, clip}, .wd = wd,
                                   .d_ep = {bd, NULL, clip}, .wp_t = wp_t, .p_ep = {bp, r, none}, .y = y,
                                   .e_conv = ek > 1 ? &pe : NULL};
    if (!kiln_conv_block_f32_ok(&pd, c, m, &clip, &clip, ba.e_conv, isa)) {
      printf("%s: the block does not apply at this ISA level\n", argv[a]);
      continue;
    }
    clockid_t clk = threads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
    double flops = 2.0 * (double)(eh * ew) * (double)(c * ek * ek * ce) + 18.0 * (double)(oh * ow * ce) +
                   2.0 * (double)(oh * ow) * (double)(ce * m);
    int calls = (int)(2e7 / flops) + 1;
    double *t[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
    for (int rep = 0; rep < reps; rep++)
      for (int v = 0; v < 2; v++) {
        double t0 = clock_s(clk);
        for (int i = 0; i < calls; i++) {
          if (v == 1) {
            kiln_conv_block_f32(pool, isa, &pd, c, m, &ba);
            continue;
          }
          kiln_conv2d_f32(pool, isa, &pe, &(kiln_conv2d_f32_args){.x = x, .w = we, .y = e, .ep = {be, NULL, clip}, .wt = ewt});
          kiln_conv2d_f32(pool, isa, &pd, &(kiln_conv2d_f32_args){.x = e, .w = wd, .y = d, .ep = {bd, NULL, clip}});
          kiln_conv2d_f32(pool, isa, &pp, &(kiln_conv2d_f32_args){.x = d, .w = wp, .y = y, .ep = {bp, r, none}, .wt = pwt});
        }
        t[v][rep] = (clock_s(clk) - t0) / calls;
      }
    qsort(t[0], (size_t)reps, sizeof(double), cmp);
    qsort(t[1], (size_t)reps, sizeof(double), cmp);
    printf("%-28s one by one %8.1f us   block %8.1f us   ratio %.3f\n", argv[a], t[0][reps / 2] * 1e6,
           t[1][reps / 2] * 1e6, t[1][reps / 2] / t[0][reps / 2]);
    kiln_gemm_packed_b_free(ewt);
    kiln_gemm_packed_b_free(pwt);
    kiln_gemm_packed_b_free(we_t);
    kiln_gemm_packed_b_free(wp_t);
    float *bufs[] = {x, we, be, wd, bd, wp, bp, r, e, d, y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(t[0]);
    free(t[1]);
  }
  kiln_threadpool_free(pool);
  return 0;
}
