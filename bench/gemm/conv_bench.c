/* Convolution benchmark for the GEMM paths of kernels/conv2d_f32: each shape computed the
 * usual way (C = W * X) and transposed (C^T = X^T * W^T with W^T packed once), alternately,
 * with and without a residual. Single-thread samples use the thread's CPU time (time spent
 * descheduled on a shared machine is left out); 2 threads use wall time.
 *
 *   conv_bench [--threads N] [--reps R] [--cold] [--cold-io] C,H,W,M,K,S,P ...  (K x K kernel, stride S, pad P)
 *
 * --cold: every call takes the next of enough weight copies (256 MiB in all) that the
 * weights come from memory, as in a network whose weights do not fit the caches.
 * --cold-io: the same for the input, residual and output (64 MiB of copies), as in a network
 * whose activations were written a few layers before.
 *
 * Shapes with few input channels (kiln_conv2d_f32_uses_direct) take the direct kernel in
 * both rows. 3x3 stride-1 shapes get a third row, Winograd with weights transformed once, as a
 * model's (with --cold, each weight copy transformed). Prints the best and the median sample
 * per call in ms and GFLOP/s of the best. Built by build.sh next to gemm_bench. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/conv2d_f32.h"
#include "kernels/conv_internal.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/winograd_f32.h"
#include "base/threadpool.h"

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 15, cold = 0, cold_io = 0;
  kiln_threadpool *pool = NULL;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--threads") && a + 1 < argc) {
      threads = atoi(argv[++a]);
      continue;
    }
    if (!strcmp(argv[a], "--cold")) {
      cold = 1;
      continue;
    }
    if (!strcmp(argv[a], "--cold-io")) {
      cold_io = 1;
      continue;
    }
    if (!strcmp(argv[a], "--reps") && a + 1 < argc) {
      reps = atoi(argv[++a]);
      continue;
    }
    if (threads > 1 && !pool) pool = kiln_threadpool_create(threads);
    long c, h, w, m, k, s, pd;
    if (sscanf(argv[a], "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &c, &h, &w, &m, &k, &s, &pd) != 7) {
      fprintf(stderr, "bad shape %s (C,H,W,M,K,S,P)\n", argv[a]);
      return 2;
    }
    kiln_conv2d_f32_params p = {1, c, h, w, m, 1, k, k, s, s, 1, 1, pd, pd,
                                (h + 2 * pd - k) / s + 1, (w + 2 * pd - k) / s + 1, -1, 0};
    size_t kk = (size_t)(c * k * k), ysz = (size_t)(m * p.oh * p.ow);
    int copies = cold ? (int)((256u << 20) / (kk * (size_t)m * 4)) + 1 : 1;
    if (copies > 4096) copies = 4096;
    float **wc = malloc(sizeof(float *) * (size_t)copies);
    kiln_gemm_packed_b **pc = malloc(sizeof(kiln_gemm_packed_b *) * (size_t)copies);
    float *x = filled((size_t)(c * h * w)), *wt = filled(kk * (size_t)m), *bias = filled((size_t)m);
    float *res = filled(ysz), *y = malloc(ysz * sizeof(float));
    int isa = kiln_isa_resolve(KILN_ISA_AUTO);
    for (int i = 0; i < copies; i++) {
      wc[i] = i ? filled(kk * (size_t)m) : wt;
      pc[i] = NULL;
      kiln_gemm_pack_b(isa, 1, kk, (size_t)m, wc[i], kk, &pc[i], NULL);
    }
    size_t xsz = (size_t)(c * h * w);
    int io = cold_io ? (int)((64u << 20) / ((xsz + 2 * ysz) * 4)) + 1 : 1;
    if (io > 4096) io = 4096;
    float **xc = malloc(sizeof(float *) * (size_t)io), **rc = malloc(sizeof(float *) * (size_t)io);
    float **yc = malloc(sizeof(float *) * (size_t)io);
    for (int i = 0; i < io; i++) {
      xc[i] = i ? filled(xsz) : x;
      rc[i] = i ? filled(ysz) : res;
      yc[i] = i ? filled(ysz) : y;
    }
    int next = 0, nio = 0;
    double flops = 2.0 * (double)kk * (double)ysz;
    clockid_t clk = threads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
    int calls = (int)(2e7 / flops) + 1;
    printf("%s  C%ld %ldx%ld -> M%ld %ldx%ld k%ld s%ld  transposed path %s%s\n", argv[a], c, h, w,
           m, p.oh, p.ow, k, s, kiln_conv2d_f32_uses_transposed(&p, isa) ? "chosen" : "not chosen",
           kiln_conv2d_f32_uses_direct(&p, isa) ? "  (few input channels: direct kernel, both rows)"
                                                : "");
    /* 3x3 stride 1: a third row, Winograd with its weights transformed once (as a model's) */
    int nv = kiln_wino_f32_supported(&p) ? 3 : 2, tile = kiln_wino_f32_tile(&p);
    float **wu = calloc((size_t)copies, sizeof(float *));
    for (int i = 0; nv == 3 && i < copies; i++) {
      wu[i] = malloc(sizeof(float) * (size_t)kiln_wino_f32_weights_size_tile(tile, m, c));
      kiln_wino_f32_weights_tile(tile, kiln_wino_f32_trans(&p, isa), wc[i], m, c, wu[i]);
    }
    static const char *const names[3] = {"usual", "transposed", "winograd"};
    for (int use_res = 0; use_res < 2; use_res++) {
      kiln_conv2d_f32_epilogue ep = {bias, use_res ? res : NULL, {KILN_ACT_RELU, 0, 0}};
      double *t[3];
      for (int v = 0; v < nv; v++) t[v] = malloc(sizeof(double) * (size_t)reps);
      for (int r = 0; r < reps; r++)
        for (int v = 0; v < nv; v++) {
          kiln_conv2d_f32_params pv = p;
          pv.winograd = v == 2 ? 1 : -1;
          kiln_conv2d_f32(pool, isa, &pv, &(kiln_conv2d_f32_args){.x = x, .w = wt, .y = y, .ep = ep,
                                                                   .wt = v == 1 ? pc[0] : NULL,
                                                                   .wu = v == 2 ? wu[0] : NULL}); /* warm */
          double t0 = clock_s(clk);
          for (int i = 0; i < calls; i++, next = (next + 1) % copies, nio = (nio + 1) % io) {
            kiln_conv2d_f32_epilogue e = ep;
            if (e.residual) e.residual = rc[nio];
            kiln_conv2d_f32(pool, isa, &pv, &(kiln_conv2d_f32_args){.x = xc[nio], .w = wc[next], .y = yc[nio],
                                                                     .ep = e, .wt = v == 1 ? pc[next] : NULL,
                                                                     .wu = v == 2 ? wu[next] : NULL});
          }
          t[v][r] = (clock_s(clk) - t0) / calls;
        }
      for (int v = 0; v < nv; v++) {
        qsort(t[v], (size_t)reps, sizeof(double), cmp_d);
        printf("  %-10s %-9s best %8.4f ms  median %8.4f ms  %6.1f GFLOP/s\n", names[v],
               use_res ? "+residual" : "", t[v][0] * 1e3, t[v][reps / 2] * 1e3,
               flops / t[v][0] * 1e-9);
        free(t[v]);
      }
    }
    for (int i = 0; i < copies; i++) free(wu[i]);
    free(wu);
    for (int i = 0; i < copies; i++) {
      kiln_gemm_packed_b_free(pc[i]);
      free(wc[i]);
    }
    free(wc), free(pc);
    for (int i = 1; i < io; i++) free(xc[i]), free(rc[i]), free(yc[i]);
    free(xc), free(rc), free(yc);
    free(x), free(bias), free(res), free(y);
  }
  kiln_threadpool_free(pool);
  return 0;
}
