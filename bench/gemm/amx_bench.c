/* kiln's AMX bf16x3 GEMM (kernels/gemm_amx.h) against its float32 GEMM, single thread.
 *
 * Intel AMX multiplies bfloat16 tiles (TDPBF16PS: 16x16 float32 results += 16x32 by 32x16
 * bfloat16) at many times the AVX-512 float32 FMA rate, but bfloat16 keeps 8 bits of
 * mantissa. "bf16x3" recovers most of float32's accuracy: each operand is split into
 * hi = bf16(x) and lo = bf16(x - hi), and C = Ahi Bhi + Ahi Blo + Alo Bhi (the dropped
 * Alo Blo term and the rounding of lo are about 2^-16 relative). This benchmark times
 * kiln_amx_gemm_ab as MatMul runs it (B packed once, A split per call; kiln-amx) and kiln's
 * float32 GEMM with B prepacked (kiln-f32), alternately, and reports the error of each against
 * a double-precision reference (max |C - ref| / max |ref|).
 *
 *   amx_bench [--reps R] [--shape MxNxK]...
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
  double *tk = malloc(sizeof(double) * reps), *tx = malloc(sizeof(double) * reps);
  for (int r = 0; r < reps; r++) { /* alternating, so a noisy neighbour hits both alike */
    double t0 = thread_s();
    kiln_gemm_f32_packed(NULL, 0, (size_t)M, 1.0f, A, (size_t)K, pb, 0.0f, C32, (size_t)N, NULL, NULL);
    tk[r] = thread_s() - t0;
    t0 = thread_s();
    kiln_amx_gemm_ab(NULL, (size_t)M, A, (size_t)K, ab, Cx, (size_t)N, NULL, NULL, 0, NULL);
    tx[r] = thread_s() - t0;
  }
  qsort(tk, (size_t)reps, sizeof *tk, cmp_d);
  qsort(tx, (size_t)reps, sizeof *tx, cmp_d);
  double fl = 2.0 * M * N * K, mk = tk[reps / 2], mx = tx[reps / 2];
  printf("%5dx%5dx%5d  kiln-amx %6.1f (err %.1e)  kiln-f32 %6.1f (err %.1e) GFLOP/s  "
         "kiln-amx/kiln-f32 %.2f\n",
         M, N, K, fl / mx * 1e-9, rel_err(Cx, ref, nc), fl / mk * 1e-9, rel_err(C32, ref, nc), mk / mx);
  kiln_gemm_packed_b_free(pb);
  kiln_amx_b_free(ab);
  free(A), free(B), free(Cx), free(C32), free(ref), free(tk), free(tx);
}

int main(int argc, char **argv) {
  int reps = 11, shapes[16][3], ns = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 16) {
      if (sscanf(argv[++i], "%dx%dx%d", &shapes[ns][0], &shapes[ns][1], &shapes[ns][2]) != 3) {
        fprintf(stderr, "amx_bench: --shape expects MxNxK\n");
        return 2;
      }
      ns++;
    } else {
      fprintf(stderr, "usage: amx_bench [--reps R] [--shape MxNxK]...\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (!kiln_amx_available()) {
    fprintf(stderr, "amx_bench: AMX-BF16 is not available (CPU, kernel, or KILN_AMX=0)\n");
    return 1;
  }
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
