/* kiln's AMX bf16x3 GEMM (kernels/gemm_amx.h) against its float32 GEMM, single thread.
 *
 * Intel AMX multiplies bfloat16 tiles (TDPBF16PS: 16x16 float32 results += 16x32 by 32x16
 * bfloat16) at many times the AVX-512 float32 FMA rate, but bfloat16 keeps 8 bits of
 * mantissa. "bf16x3" recovers most of float32's accuracy: each operand is split into
 * hi = bf16(x) and lo = bf16(x - hi), and C = Ahi Bhi + Ahi Blo + Alo Bhi (the dropped
 * Alo Blo term and the rounding of lo are about 2^-16 relative). This benchmark times
 * kiln_amx_gemm_ab as MatMul runs it (B packed once, A split per call; kiln-amx) and kiln's
 * float32 GEMM with B prepacked (kiln-f32), alternately, and reports the error of each against
 * a double-precision reference (max |C - ref| / max |ref|). kiln-amx-w is the convolution
 * form, kiln_amx_gemm (the left operand, M x K, packed once as weights; the right split per
 * call), on the same matrices.
 *
 * --kernel measures the tile loop alone, single thread, on tiles that stay in L1: TDPBF16PS
 * with no loads (the TMUL rate; bf16x3 needs three per float32 product), and kiln_amx_mma
 * (10 tile loads per 12 multiplies) over 4 k blocks. Both as float32-equivalent GFLOP/s.
 *
 *   amx_bench [--reps R] [--shape MxNxK]... [--kernel]
 *
 * Needs a CPU with AMX-BF16 and Linux 5.16+ (the tile state is granted per process). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm_amx_internal.h"

static double thread_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* max |C - ref| / max |ref| over the whole matrix */
static double rel_err(const float *C, const double *ref, size_t n) {
  double e = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)C[i] - ref[i]);
    if (d > e) e = d;
    if (fabs(ref[i]) > r) r = fabs(ref[i]);
  }
  return r > 0 ? e / r : e;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void run_shape(int M, int N, int K, int reps) {
  size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
  float *A = malloc(na * 4), *B = malloc(nb * 4), *Cx = calloc(nc, 4), *C32 = calloc(nc, 4);
  double *ref = calloc(nc, sizeof *ref);
  srand(1);
  for (size_t i = 0; i < na; i++) A[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
  for (size_t i = 0; i < nb; i++) B[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) {
      double a = A[(size_t)i * K + k];
      for (int j = 0; j < N; j++) ref[(size_t)i * N + j] += a * B[(size_t)k * N + j];
    }
  kiln_gemm_packed_b *pb = NULL;
  kiln_gemm_pack_b(KILN_ISA_AUTO, 0, (size_t)K, (size_t)N, B, (size_t)N, &pb, NULL);
  kiln_amx_b *ab = kiln_amx_pack_b(B, (size_t)K, (size_t)N, (size_t)N, 0);
  kiln_amx_w *aw = kiln_amx_pack_w(A, (size_t)M, (size_t)K, (size_t)K);
  float *Cw = calloc(nc, 4);
  double *tk = malloc(sizeof(double) * reps), *tx = malloc(sizeof(double) * reps);
  double *tw = malloc(sizeof(double) * reps);
  for (int r = 0; r < reps; r++) { /* alternating, so a noisy neighbour hits both alike */
    double t0 = thread_s();
    kiln_gemm_f32_packed(NULL, 0, (size_t)M, 1.0f, A, (size_t)K, pb, 0.0f, C32, (size_t)N, NULL, NULL);
    tk[r] = thread_s() - t0;
    t0 = thread_s();
    kiln_amx_gemm_ab(NULL, (size_t)M, A, (size_t)K, ab, Cx, (size_t)N, NULL, NULL, 0, NULL);
    tx[r] = thread_s() - t0;
    t0 = thread_s();
    kiln_amx_gemm(NULL, aw, (size_t)N, B, (size_t)N, Cw, (size_t)N, NULL, NULL, 0, NULL);
    tw[r] = thread_s() - t0;
  }
  qsort(tk, (size_t)reps, sizeof *tk, cmp_d);
  qsort(tx, (size_t)reps, sizeof *tx, cmp_d);
  qsort(tw, (size_t)reps, sizeof *tw, cmp_d);
  double fl = 2.0 * M * N * K, mk = tk[reps / 2], mx = tx[reps / 2], mw = tw[reps / 2];
  printf("%5dx%5dx%5d  kiln-amx %6.1f (err %.1e)  kiln-amx-w %6.1f (err %.1e)  kiln-f32 %6.1f "
         "(err %.1e) GFLOP/s  kiln-amx/kiln-f32 %.2f\n",
         M, N, K, fl / mx * 1e-9, rel_err(Cx, ref, nc), fl / mw * 1e-9, rel_err(Cw, ref, nc),
         fl / mk * 1e-9, rel_err(C32, ref, nc), mk / mx);
  kiln_gemm_packed_b_free(pb);
  kiln_amx_b_free(ab);
  kiln_amx_w_free(aw);
  free(A), free(B), free(Cx), free(Cw), free(C32), free(ref), free(tk), free(tx), free(tw);
}

#ifdef KILN_AMX_BUILD
/* n x 12 tile multiplies into tmm0-3 from tmm4-7, no loads. */
T_AMX static void tdp_only(long n) {
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (long i = 0; i < 3 * n; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

/* The tile loop's rate: see the file comment. */
static void kernel_bench(int reps) {
  enum { KB = 4 };
  const size_t tstep = KB * TILE_ELEMS;
  uint16_t *t = aligned_alloc(64, 8 * tstep * sizeof(uint16_t)); /* lh, ll, rh, rl: 2 x KB each */
  float *out = aligned_alloc(64, 1024 * sizeof(float));
  if (!t || !out) return;
  memset(t, 0, 8 * tstep * sizeof(uint16_t));
  const long calls = 20000;
  const double fl = (double)calls * KB * 2.0 * 32 * 32 * 32; /* float32-equivalent flop */
  double *a = malloc(sizeof(double) * reps), *b = malloc(sizeof(double) * reps);
  kiln_amx_tiles_on();
  for (int r = 0; r < reps; r++) {
    double t0 = thread_s();
    tdp_only(calls * KB);
    double t1 = thread_s();
    for (long i = 0; i < calls; i++)
      kiln_amx_mma(t, t + 2 * tstep, t + 4 * tstep, t + 6 * tstep, tstep, 0, KB, NULL, out);
    double t2 = thread_s();
    a[r] = fl / (t1 - t0) * 1e-9;
    b[r] = fl / (t2 - t1) * 1e-9;
  }
  kiln_amx_tiles_off();
  qsort(a, (size_t)reps, sizeof *a, cmp_d);
  qsort(b, (size_t)reps, sizeof *b, cmp_d);
  printf("tile loop, float32-equivalent GFLOP/s (median of %d): multiplies only %.1f (bf16 "
         "rate %.1f); kiln_amx_mma on L1 tiles %.1f (%.0f%% of the multiplies-only rate)\n",
         reps, a[reps / 2], 3 * a[reps / 2], b[reps / 2], 100.0 * b[reps / 2] / a[reps / 2]);
  free(a), free(b), free(t), free(out);
}
#endif

int main(int argc, char **argv) {
  int reps = 11, shapes[16][3], ns = 0, kernel = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--kernel")) {
      kernel = 1;
    } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 16) {
      if (sscanf(argv[++i], "%dx%dx%d", &shapes[ns][0], &shapes[ns][1], &shapes[ns][2]) != 3) {
        fprintf(stderr, "amx_bench: --shape expects MxNxK\n");
        return 2;
      }
      ns++;
    } else {
      fprintf(stderr, "usage: amx_bench [--reps R] [--shape MxNxK]... [--kernel]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (!kiln_amx_available()) {
    fprintf(stderr, "amx_bench: AMX-BF16 is not available (CPU, kernel, or KILN_AMX=0)\n");
    return 1;
  }
#ifdef KILN_AMX_BUILD
  if (kernel) {
    kernel_bench(reps);
    if (!ns) return 0;
  }
#endif
  if (!ns) {
    static const int def[][3] = {{1024, 1024, 1024}, {128, 768, 768}, {256, 3136, 64},
                                 {1024, 224, 256}, {512, 64, 4608}};
    ns = 5;
    memcpy(shapes, def, sizeof def);
  }
  printf("single thread, B packed once; time: thread CPU time, median of %d\n", reps);
  for (int s = 0; s < ns; s++) {
    if (shapes[s][0] <= 0 || shapes[s][1] <= 0 || shapes[s][2] <= 0) {
      fprintf(stderr, "amx_bench: %dx%dx%d: M, N and K must be positive\n",
              shapes[s][0], shapes[s][1], shapes[s][2]);
      return 2;
    }
    run_shape(shapes[s][0], shapes[s][1], shapes[s][2], reps);
  }
  return 0;
}
