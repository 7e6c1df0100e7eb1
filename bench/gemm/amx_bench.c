/* What AMX could do for float32 GEMM: a measurement, not a kiln kernel.
 *
 * Intel AMX multiplies bfloat16 tiles (TDPBF16PS: 16x16 float32 results += 16x32 by 32x16
 * bfloat16) at many times the AVX-512 float32 FMA rate, but bfloat16 keeps 8 bits of
 * mantissa. "bf16x3" recovers most of float32's accuracy: each operand is split into
 * hi = bf16(x) and lo = bf16(x - hi), and C = Ahi Bhi + Ahi Blo + Alo Bhi (the dropped
 * Alo Blo term and the rounding of lo are about 2^-16 relative). This benchmark times that
 * scheme single-threaded: its own plain kernel with both operands prepacked (bench-bf16x3),
 * kiln's AMX GEMM (kiln-amx: kernels/gemm_amx.h, B packed once, A split per call, as MatMul
 * runs it) and kiln's float32 GEMM with B prepacked (kiln-f32), and reports the error of each
 * against a double-precision reference (max |C - ref| / max |ref|).
 *
 *   amx_bench [--reps R] [--shape MxNxK]...   (M, N multiples of 32, K of 32)
 *
 * Needs a CPU with AMX-BF16 and Linux 5.16+ (arch_prctl ARCH_REQ_XCOMP_PERM). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_amx.h"

#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

typedef struct {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_cfg;

static double thread_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint16_t bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf16_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A (M x K) -> tiles [M/16][K/32] of 16 rows x 32 bf16, hi and lo parts. */
static void pack_a(const float *A, int M, int K, uint16_t *hi, uint16_t *lo) {
  for (int mb = 0; mb < M / 16; mb++)
    for (int kb = 0; kb < K / 32; kb++) {
      size_t t = ((size_t)mb * (K / 32) + kb) * 512;
      for (int i = 0; i < 16; i++)
        for (int k = 0; k < 32; k++) {
          float x = A[(size_t)(mb * 16 + i) * K + kb * 32 + k];
          uint16_t h = bf16_rne(x);
          hi[t + i * 32 + k] = h;
          lo[t + i * 32 + k] = bf16_rne(x - bf16_f(h));
        }
    }
}

/* B (K x N) -> tiles [N/16][K/32] of 16 k-pairs x 16 columns x 2 (VNNI), hi and lo. */
static void pack_b(const float *B, int K, int N, uint16_t *hi, uint16_t *lo) {
  for (int nb = 0; nb < N / 16; nb++)
    for (int kb = 0; kb < K / 32; kb++) {
      size_t t = ((size_t)nb * (K / 32) + kb) * 512;
      for (int k = 0; k < 32; k++)
        for (int j = 0; j < 16; j++) {
          float x = B[(size_t)(kb * 32 + k) * N + nb * 16 + j];
          uint16_t h = bf16_rne(x);
          size_t o = t + (size_t)(k / 2) * 32 + j * 2 + (k % 2);
          hi[o] = h;
          lo[o] = bf16_rne(x - bf16_f(h));
        }
    }
}

/* C = A B, bf16x3, 32 x 32 blocks of C (4 tiles) in an M block of MC rows. */
enum { MC = 256 };
AMX static void gemm_bf16x3(int M, int N, int K, const uint16_t *ahi, const uint16_t *alo,
                            const uint16_t *bhi, const uint16_t *blo, float *C) {
  const int KB = K / 32;
  for (int m0 = 0; m0 < M; m0 += MC)
    for (int nb = 0; nb < N / 16; nb += 2)
      for (int mb = m0 / 16; mb < (m0 + MC < M ? m0 + MC : M) / 16; mb += 2) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint16_t *a0h = ahi + (size_t)mb * KB * 512, *a1h = a0h + (size_t)KB * 512;
        const uint16_t *a0l = alo + (size_t)mb * KB * 512, *a1l = a0l + (size_t)KB * 512;
        const uint16_t *b0h = bhi + (size_t)nb * KB * 512, *b1h = b0h + (size_t)KB * 512;
        const uint16_t *b0l = blo + (size_t)nb * KB * 512, *b1l = b0l + (size_t)KB * 512;
        for (int kb = 0; kb < KB; kb++) {
          size_t o = (size_t)kb * 512;
          _tile_loadd(4, a0h + o, 64);
          _tile_loadd(5, a1h + o, 64);
          _tile_loadd(6, b0h + o, 64);
          _tile_loadd(7, b1h + o, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
          _tile_loadd(6, b0l + o, 64);
          _tile_loadd(7, b1l + o, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
          _tile_loadd(4, a0l + o, 64);
          _tile_loadd(5, a1l + o, 64);
          _tile_loadd(6, b0h + o, 64);
          _tile_loadd(7, b1h + o, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        float *c = C + (size_t)mb * 16 * N + nb * 16;
        _tile_stored(0, c, (long)N * 4);
        _tile_stored(1, c + 16, (long)N * 4);
        _tile_stored(2, c + (size_t)16 * N, (long)N * 4);
        _tile_stored(3, c + (size_t)16 * N + 16, (long)N * 4);
      }
}

AMX static void amx_setup(void) {
  /* static: gcc 12 drops stores to a local whose only reader is _tile_loadconfig */
  static tile_cfg c;
  c.palette = 1;
  for (int i = 0; i < 8; i++) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  _tile_loadconfig(&c);
}
AMX static void amx_release(void) { _tile_release(); }

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
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C = calloc(nc, 4), *C32 = calloc(nc, 4);
  double *ref = calloc(nc, sizeof *ref);
  uint16_t *ahi = malloc(na * 2), *alo = malloc(na * 2), *bhi = malloc(nb * 2), *blo = malloc(nb * 2);
  srand(1);
  for (size_t i = 0; i < na; i++) A[i] = (float)rand() / RAND_MAX * 2 - 1;
  for (size_t i = 0; i < nb; i++) B[i] = (float)rand() / RAND_MAX * 2 - 1;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) {
      double a = A[(size_t)i * K + k];
      for (int j = 0; j < N; j++) ref[(size_t)i * N + j] += a * B[(size_t)k * N + j];
    }
  double tp = thread_s();
  pack_a(A, M, K, ahi, alo);
  double pack_a_s = thread_s() - tp;
  pack_b(B, K, N, bhi, blo);
  kiln_gemm_packed_b *pb = NULL;
  kiln_gemm_pack_b(KILN_ISA_AUTO, 0, (size_t)K, (size_t)N, B, (size_t)N, &pb, NULL);
  kiln_amx_b *ab = kiln_amx_pack_b(B, (size_t)K, (size_t)N, (size_t)N, 0);
  float *Cx = calloc(nc, 4);
  double *ta = malloc(sizeof(double) * reps), *tk = malloc(sizeof(double) * reps);
  double *tx = malloc(sizeof(double) * reps);
  amx_setup();
  for (int r = 0; r < reps; r++) {
    double t0 = thread_s();
    gemm_bf16x3(M, N, K, ahi, alo, bhi, blo, C);
    ta[r] = thread_s() - t0;
    t0 = thread_s();
    kiln_gemm_f32_packed(NULL, 0, (size_t)M, 1.0f, A, (size_t)K, pb, 0.0f, C32, (size_t)N, NULL, NULL);
    tk[r] = thread_s() - t0;
    t0 = thread_s();
    kiln_amx_gemm_ab(NULL, (size_t)M, A, (size_t)K, ab, Cx, (size_t)N, NULL, NULL, 0, NULL);
    tx[r] = thread_s() - t0;
    amx_setup(); /* kiln's GEMM released the tiles */
  }
  amx_release();
  qsort(ta, (size_t)reps, sizeof *ta, cmp_d);
  qsort(tk, (size_t)reps, sizeof *tk, cmp_d);
  qsort(tx, (size_t)reps, sizeof *tx, cmp_d);
  double fl = 2.0 * M * N * K, ma = ta[reps / 2], mk = tk[reps / 2], mx = tx[reps / 2];
  printf("%5dx%5dx%5d  bench-bf16x3 %6.1f (err %.1e)  kiln-amx %6.1f (err %.1e)  kiln-f32 %6.1f "
         "(err %.1e) GFLOP/s  kiln-amx/kiln-f32 %.2f\n",
         M, N, K, fl / ma * 1e-9, rel_err(C, ref, nc), fl / mx * 1e-9, rel_err(Cx, ref, nc),
         fl / mk * 1e-9, rel_err(C32, ref, nc), mk / mx);
  (void)pack_a_s;
  kiln_gemm_packed_b_free(pb);
  kiln_amx_b_free(ab);
  free(Cx), free(tx);
  free(A), free(B), free(C), free(C32), free(ref), free(ahi), free(alo), free(bhi), free(blo);
  free(ta), free(tk);
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
      fprintf(stderr, "usage: amx_bench [--reps R] [--shape MxNxK]...\n"
                      "M and N multiples of 32, K a multiple of 32.\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0 ||
      !__builtin_cpu_supports("amx-bf16")) {
    fprintf(stderr, "amx_bench: this CPU or kernel does not offer AMX-BF16\n");
    return 1;
  }
  if (!ns) {
    static const int def[][3] = {{1024, 1024, 1024}, {128, 768, 768}, {256, 3136, 64},
                                 {1024, 224, 256}, {512, 64, 4608}};
    ns = 5;
    memcpy(shapes, def, sizeof def);
  }
  printf("single thread, operands prepacked; time: thread CPU time, median of %d\n", reps);
  for (int s = 0; s < ns; s++) {
    if (shapes[s][0] % 32 || shapes[s][1] % 32 || shapes[s][2] % 32 || shapes[s][0] <= 0 ||
        shapes[s][1] <= 0 || shapes[s][2] <= 0) {
      fprintf(stderr, "amx_bench: %dx%dx%d: M, N and K must be positive multiples of 32\n",
              shapes[s][0], shapes[s][1], shapes[s][2]);
      return 2;
    }
    run_shape(shapes[s][0], shapes[s][1], shapes[s][2], reps);
  }
  return 0;
}
