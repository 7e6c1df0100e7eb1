/* Standalone GEMM benchmark: kiln against OpenBLAS (cblas_sgemm) and oneDNN (dnnl_sgemm)
 * when they were compiled in (see build.sh), side by side: every repeat runs each
 * implementation once, in turn, and the median over repeats is reported.
 *
 *   gemm_bench [--threads N] [--reps R] [--isa scalar|avx2|avx512] [--shape MxNxK]...
 *              [--mc X --kc X --nc X] [--peak] [--ceiling] [--dispatch] [--no-gemm] [--trans-b]
 *              [--only kiln,kiln-prepacked,openblas,onednn,fma-peak] [--clock wall|thread]
 *              [--best] [--sample-ms X] [--cfg MC,KC,NC,ORDER]... [--cfg-raw] [--epilogue ACT]
 * GEMM columns are medians over repeats (--best: the fastest sample). --cfg runs a blocking on
 * prepacked B, or with --cfg-raw through the unpacked entry point.
 *
 * Also: the achievable FMA peak (a register-only FMA loop), the ceiling of a GEMM whose data
 * streams through the load ports (--ceiling: see ceiling_bench) and the thread-pool dispatch
 * round trip (an empty kiln_parallel_for), spinning and sleeping workers. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "base/threadpool.h"
#include "fma_loop.h" /* tools/: the FMA peak loops kiln profile uses */

#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The clock GEMM samples are timed with: wall time, or (--clock thread, single-thread runs
 * only) the calling thread's CPU time, which leaves out time the thread was not running on a
 * shared machine. */
static clockid_t g_sample_clock = CLOCK_MONOTONIC;
static double g_sample_ms = 4.0; /* a sample repeats calls for at least this long */
static int g_best;               /* report the best sample instead of the median */
static double sample_s(void) {
  struct timespec t;
  clock_gettime(g_sample_clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- FMA peak ------------------------------------------------------------------------ */

typedef struct peak_arg {
  int width; /* 512 or 256 */
  long iters;
  double secs;
  float sink;
} peak_arg;

static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Timed with the thread's CPU time: the rate while it runs, whatever else the machine does. */
static void *peak_thread(void *p) {
  peak_arg *a = p;
  double t = thread_cpu_s();
#if defined(__x86_64__)
  a->sink = a->width == 512 ? fma512(a->iters) : fma256(a->iters);
#endif
  a->secs = thread_cpu_s() - t;
  return NULL;
}

/* GFLOP/s of `threads` concurrent FMA loops, summed over threads (median of 7). */
static double fma_peak(int width, int threads) {
  double r[7];
  long iters = 20000000;
  for (int rep = 0; rep < 7; rep++) {
    peak_arg args[64];
    pthread_t th[64];
    for (int t = 0; t < threads; t++) {
      args[t].width = width;
      args[t].iters = iters;
      pthread_create(&th[t], NULL, peak_thread, &args[t]);
    }
    double sum = 0;
    for (int t = 0; t < threads; t++) {
      pthread_join(th[t], NULL);
      sum += (double)iters * 12.0 * 2.0 * (width / 32) / args[t].secs / 1e9;
    }
    r[rep] = sum;
  }
  return median(r, 7);
}

/* ---- the ceiling of a streaming GEMM --------------------------------------------------- */

/* What a float32 GEMM can reach on this core, measured five ways, rotated over `rounds`
 * rounds and timed with the thread's CPU time. At avx512 a step is 6x64 x 768 flop (gemm_mix512),
 * at avx2 6x16 x 192 flop (gemm_mix256), the shape of kiln's micro-kernel at that level:
 *   register: the register-only FMA loop (the FMA peak);
 *   L1 mix:   the micro-kernel's instruction mix in asm over packed operands resident in L1
 *             (A 6 x 128, B 128 x NR), advanced every step;
 *   L2 mix:   the same with B 256 KiB (K = 1024 at avx512, 4096 at avx2: from L2 at every
 *             step, A still in L1), the case of a B panel met by one A strip after another;
 *   A stream: B (128 x NR) in L1, met by 256 A strips of 6 x 128 in turn (768 KiB, from L2):
 *             the case of A strips passing an L1-resident B panel;
 *   kiln:     kiln's own micro-kernel at that level on the L1 operands, epilogue included.
 * A GEMM whose operands stream from L2 or memory cannot beat the L1 mix. */
static void ceiling_bench(int rounds, int lvl) {
#if defined(__x86_64__)
  if (lvl < KILN_ISA_AVX2) {
    printf("ceiling: needs AVX2 or AVX-512\n");
    return;
  }
  const int w512 = lvl >= KILN_ISA_AVX512;
  const int NR = w512 ? 64 : 16, KC2 = w512 ? 1024 : 4096;
  const double step = 6.0 * NR * 2.0;
  enum { KC = 128, STRIPS = 256, R = 31 };
  const kiln_gemm_isa_ops *ops = kiln_gemm_ops_for(lvl);
  void (*mix)(long, long, const float *, const float *) = w512 ? gemm_mix512 : gemm_mix256;
  float (*fma)(long) = w512 ? fma512 : fma256;
  float *a = aligned_alloc(64, (size_t)STRIPS * KC * 6 * sizeof(float));
  float *b = aligned_alloc(64, (size_t)KC2 * NR * sizeof(float));
  float *c = aligned_alloc(64, 6 * 64 * sizeof(float));
  if (!a || !b || !c) return;
  for (int i = 0; i < STRIPS * KC * 6; i++) a[i] = 1e-3f * (float)(i % 7);
  for (int i = 0; i < KC2 * NR; i++) b[i] = 1e-3f * (float)(i % 5);
  kiln_gemm_tile t;
  memset(&t, 0, sizeof t);
  t.alpha = 1.0f;
  t.flags = KILN_GT_FIRST | KILN_GT_LAST;
  const long reps = w512 ? 40000 : 80000; /* x KC steps: about 20 ms per run */
  const double flop = (double)reps * KC * step;
  double reg[R], mixr[R], mix2[R], mix3[R], kern[R], rmix[R], rmix2[R], rmix3[R], rkern[R];
  if (rounds > R) rounds = R;
  volatile float sink = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = thread_cpu_s();
    sink += fma((long)(flop / (12.0 * 2.0 * (w512 ? 16 : 8))));
    double t1 = thread_cpu_s();
    mix(reps, KC, a, b);
    double t2 = thread_cpu_s();
    for (long i = 0; i < reps; i++) ops->ukernel(6, (size_t)NR, KC, a, KC, b, (size_t)NR, c, 64, &t);
    double t3 = thread_cpu_s();
    mix(reps / (KC2 / KC), KC2, a, b);
    double t4 = thread_cpu_s();
    for (long i = 0; i < reps / STRIPS; i++)
      for (int st = 0; st < STRIPS; st++) mix(1, KC, a + (size_t)st * KC * 6, b);
    double t5 = thread_cpu_s();
    reg[r] = flop / (t1 - t0) / 1e9;
    mixr[r] = flop / (t2 - t1) / 1e9;
    kern[r] = flop / (t3 - t2) / 1e9;
    mix2[r] = flop / (t4 - t3) / 1e9;
    rmix2[r] = mix2[r] / reg[r];
    mix3[r] = (double)(reps / STRIPS) * STRIPS * KC * step / (t5 - t4) / 1e9;
    rmix3[r] = mix3[r] / reg[r];
    rmix[r] = mixr[r] / reg[r];
    rkern[r] = kern[r] / reg[r];
  }
  (void)sink;
  printf("ceiling %s (1 thread, %d rounds, medians; %% of the register FMA rate, median of "
         "per-round ratios):\n  register FMA %.1f  L1 mix %.1f (%.1f%%)  L2 mix %.1f (%.1f%%)  "
         "A stream %.1f (%.1f%%)  kiln kernel, L1 %.1f (%.1f%%)  GFLOP/s\n",
         kiln_isa_name(lvl), rounds, median(reg, rounds), median(mixr, rounds),
         100.0 * median(rmix, rounds), median(mix2, rounds), 100.0 * median(rmix2, rounds),
         median(mix3, rounds), 100.0 * median(rmix3, rounds), median(kern, rounds),
         100.0 * median(rkern, rounds));
  free(a);
  free(b);
  free(c);
#else
  (void)rounds;
  (void)lvl;
  printf("ceiling: x86-64 only\n");
#endif
}

/* ---- dispatch round trip ------------------------------------------------------------- */

static void empty_task(void *ctx, size_t b, size_t e, int tid) {
  (void)ctx, (void)b, (void)e, (void)tid;
}

static void busy_wait_us(double us) {
  double end = now_s() + us * 1e-6;
  while (now_s() < end) {
  }
}

/* Median and 90th percentile (ns) of an empty parallel_for over n_threads tasks. */
static void dispatch_bench(int threads, unsigned spin_us, double gap_us, double *med, double *p90) {
  kiln_threadpool *pool = kiln_threadpool_create(threads);
  kiln_threadpool_set_spin_us(pool, spin_us);
  enum { N = 2000 };
  static double v[N];
  for (int i = 0; i < 200; i++) kiln_parallel_for(pool, (size_t)threads, empty_task, NULL, 1);
  for (int i = 0; i < N; i++) {
    if (gap_us > 0) {
      struct timespec ts = {0, (long)(gap_us * 1000)};
      nanosleep(&ts, NULL);
    }
    double t = now_s();
    kiln_parallel_for(pool, (size_t)threads, empty_task, NULL, 1);
    v[i] = (now_s() - t) * 1e9;
  }
  qsort(v, N, sizeof *v, cmp_double);
  *med = v[N / 2];
  *p90 = v[N * 9 / 10];
  kiln_threadpool_free(pool);
  (void)busy_wait_us;
}

/* ---- GEMM ---------------------------------------------------------------------------- */

typedef struct shape {
  size_t M, N, K;
} shape;

/* "fma-peak" is the register-only FMA loop run in the same rotation, for the same number of
 * flops as one sample, so a GEMM's fraction of peak is taken under the same conditions (on a
 * shared machine, a busy sibling hyperthread lowers both). */
enum { IMPL_KILN, IMPL_KILN_PACKED, IMPL_OPENBLAS, IMPL_DNNL, IMPL_PEAK, IMPL_UNFUSED, IMPL_COUNT };
static const char *impl_names[IMPL_COUNT] = {"kiln", "kiln-prepacked", "openblas", "onednn",
                                             "fma-peak", "kiln-unfused"};

/* --epilogue ACT: the kiln runs add a per-column bias and the activation, fused; the
 * "kiln-unfused" run does the prepacked GEMM and then a separate bias + activation pass. */
static kiln_gemm_epilogue g_ep;
static const kiln_gemm_epilogue *g_epp;
static float *g_bias;

/* --cfg MC,KC,NC,ORDER: extra kiln-prepacked runs with other blocking, in the same rotation. */
#define MAX_CFG 8
static kiln_gemm_blocking g_cfg[MAX_CFG];
static char g_cfg_name[MAX_CFG][48];
static int g_cfg_raw; /* --cfg runs the unpacked entry point */
static int g_n_cfg, g_lvl;
static kiln_gemm_blocking g_default_blk;
#define N_IMPL (IMPL_COUNT + MAX_CFG)

static const char *impl_name(int impl) {
  return impl < IMPL_COUNT ? impl_names[impl] : g_cfg_name[impl - IMPL_COUNT];
}

typedef struct bench_ctx {
  shape s;
  int trans_b;
  float *A, *B, *C;
  kiln_gemm_packed_b *pb;
  kiln_gemm_ctx kctx;
} bench_ctx;

static int run_impl(bench_ctx *b, int impl) {
  size_t M = b->s.M, N = b->s.N, K = b->s.K;
  if (impl >= IMPL_COUNT) {
    kiln_gemm_set_blocking(g_lvl, g_cfg[impl - IMPL_COUNT]);
    int ok = g_cfg_raw ? kiln_gemm_f32(&b->kctx, 0, b->trans_b, M, N, K, 1.0f, b->A, K, b->B,
                                       b->trans_b ? K : N, 0.0f, b->C, N, NULL, NULL) == KILN_OK
                       : kiln_gemm_f32_packed(&b->kctx, 0, M, 1.0f, b->A, K, b->pb, 0.0f, b->C, N,
                                              NULL, NULL) == KILN_OK;
    kiln_gemm_set_blocking(g_lvl, g_default_blk);
    return ok;
  }
  size_t ldb = b->trans_b ? K : N;
  switch (impl) {
    case IMPL_KILN:
      return kiln_gemm_f32(&b->kctx, 0, b->trans_b, M, N, K, 1.0f, b->A, K, b->B, ldb, 0.0f, b->C, N,
                           g_epp, NULL) == KILN_OK;
    case IMPL_KILN_PACKED:
      return kiln_gemm_f32_packed(&b->kctx, 0, M, 1.0f, b->A, K, b->pb, 0.0f, b->C, N, g_epp, NULL) ==
             KILN_OK;
    case IMPL_UNFUSED: {
      int ok = kiln_gemm_f32_packed(&b->kctx, 0, M, 1.0f, b->A, K, b->pb, 0.0f, b->C, N, NULL, NULL) ==
               KILN_OK;
      for (size_t i = 0; i < M; i++) {
        float *row = b->C + i * N;
        for (size_t j = 0; j < N; j++) row[j] += g_bias[j];
        kiln_f32_act(b->kctx.isa, row, N, &g_ep.act);
      }
      return ok;
    }
#ifdef HAVE_OPENBLAS
    case IMPL_OPENBLAS:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, b->trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                  (int)K, 1.0f, b->A, (int)K, b->B, (int)ldb, 0.0f, b->C, (int)N);
      return 1;
#endif
#ifdef HAVE_DNNL
    case IMPL_DNNL:
      return dnnl_sgemm('N', b->trans_b ? 'T' : 'N', (dnnl_dim_t)M, (dnnl_dim_t)N, (dnnl_dim_t)K, 1.0f,
                        b->A, (dnnl_dim_t)K, b->B, (dnnl_dim_t)ldb, 0.0f, b->C, (dnnl_dim_t)N) ==
             dnnl_success;
#endif
    case IMPL_PEAK: {
#if defined(__x86_64__)
      long iters = (long)(2.0 * (double)M * (double)N * (double)K / (12.0 * 32.0)) + 1;
      volatile float sink = fma512(iters);
      (void)sink;
      return 1;
#else
      return 0;
#endif
    }
    default: return 0;
  }
}

static int impl_available(int impl) {
#ifndef HAVE_OPENBLAS
  if (impl == IMPL_OPENBLAS) return 0;
#endif
#ifndef HAVE_DNNL
  if (impl == IMPL_DNNL) return 0;
#endif
  if (impl == IMPL_PEAK) return kiln_cpu_isa_max() >= KILN_ISA_AVX512;
  if (impl == IMPL_UNFUSED) return g_epp != NULL;
  (void)impl;
  return 1;
}

static int g_huge; /* --huge: operands on transparent huge pages */

static float *alloc_rand(size_t n, unsigned seed) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64 + 64;
  float *p;
  if (g_huge) {
    const size_t h = (size_t)2 << 20;
    bytes = (bytes + h - 1) / h * h;
    p = aligned_alloc(h, bytes);
    madvise(p, bytes, MADV_HUGEPAGE);
  } else {
    p = aligned_alloc(64, bytes);
  }
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  return p;
}

/* Max relative difference of C against a double reference on a few sampled elements. */
static double spot_check(const bench_ctx *b) {
  double worst = 0;
  size_t M = b->s.M, N = b->s.N, K = b->s.K;
  for (int s = 0; s < 64; s++) {
    size_t i = (size_t)s * 7919 % M, j = (size_t)s * 104729 % N;
    double acc = 0, mag = 0;
    for (size_t k = 0; k < K; k++) {
      double bb = b->trans_b ? b->B[j * K + k] : b->B[k * N + j];
      acc += (double)b->A[i * K + k] * bb;
      mag += fabs((double)b->A[i * K + k] * bb);
    }
    double e = fabs(b->C[i * N + j] - acc) / (mag + 1e-30);
    if (e > worst) worst = e;
  }
  return worst;
}

static void bench_shape(shape s, int trans_b, int threads, kiln_threadpool *pool, int reps, int isa,
                        const int *use) {
  bench_ctx b;
  memset(&b, 0, sizeof b);
  b.s = s;
  b.trans_b = trans_b;
  b.A = alloc_rand(s.M * s.K, 1);
  b.B = alloc_rand(s.K * s.N, 2);
  b.C = alloc_rand(s.M * s.N, 3);
  b.kctx.pool = pool;
  b.kctx.isa = isa;
  kiln_gemm_pack_b(isa, trans_b, s.K, s.N, b.B, trans_b ? s.K : s.N, &b.pb, NULL);
  double flop = 2.0 * (double)s.M * (double)s.N * (double)s.K;

  /* calibrate: calls per sample so that a sample takes >= ~4 ms (on kiln) */
  int calls = 1;
  for (;;) {
    double t = now_s();
    for (int c = 0; c < calls; c++) run_impl(&b, IMPL_KILN);
    double dt = now_s() - t;
    if (dt > g_sample_ms * 1e-3 || calls > (1 << 20)) break;
    calls *= 2;
  }
  static double samples[N_IMPL][256], raw[N_IMPL][256]; /* samples get sorted */
  double err[N_IMPL], med[N_IMPL];
  if (reps > 256) reps = 256;
  for (int impl = 0; impl < N_IMPL; impl++) { /* warm-up + correctness spot check */
    if (!use[impl]) continue;
    memset(b.C, 0, s.M * s.N * sizeof(float));
    run_impl(&b, impl);
    err[impl] = impl == IMPL_PEAK || g_epp ? 0 : spot_check(&b);
    run_impl(&b, impl);
  }
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < N_IMPL; k++) {
      int impl = (r + k) % N_IMPL; /* rotate the order too */
      if (!use[impl]) continue;
      double t = sample_s();
      for (int c = 0; c < calls; c++) run_impl(&b, impl);
      samples[impl][r] = raw[impl][r] = flop * calls / (sample_s() - t) / 1e9;
    }
  }
  printf("%5zux%5zux%5zu%s thr=%d", s.M, s.N, s.K, trans_b ? "(Bt)" : "    ", threads);
  for (int impl = 0; impl < N_IMPL; impl++) {
    if (!use[impl]) continue;
    double m = median(samples[impl], reps);
    if (g_best) m = samples[impl][reps - 1]; /* median() sorted them */
    printf("  %s %7.1f%s", impl_name(impl), m, err[impl] > 1e-5 ? "(WRONG)" : "");
    med[impl] = m;
  }
  if (use[IMPL_DNNL]) { /* paired: each sample against oneDNN's sample of the same repeat */
    printf("\n      vs onednn (median of per-repeat ratios):");
    for (int impl = 0; impl < N_IMPL; impl++) {
      if (!use[impl] || impl == IMPL_DNNL || impl == IMPL_PEAK) continue;
      double q[256];
      for (int r = 0; r < reps; r++) q[r] = raw[impl][r] / raw[IMPL_DNNL][r];
      printf("  %s %.3f", impl_name(impl), median(q, reps));
    }
  }
  if (use[IMPL_PEAK] && threads == 1)
    for (int impl = 0; impl < N_IMPL; impl++)
      if (use[impl] && impl != IMPL_PEAK)
        printf("  %s=%.0f%%", impl_name(impl), 100.0 * med[impl] / med[IMPL_PEAK]);
  printf("   GFLOP/s\n");
  fflush(stdout);
  kiln_gemm_packed_b_free(b.pb);
  free(b.A);
  free(b.B);
  free(b.C);
}

int main(int argc, char **argv) {
  int threads = 1, reps = 15, isa = KILN_ISA_AUTO, do_peak = 0, do_ceiling = 0, do_dispatch = 0;
  int do_gemm = 1;
  int trans_b = 0;
  kiln_gemm_blocking blk = {0, 0, 0, 0};
  shape shapes[32];
  int n_shapes = 0;
  int use[N_IMPL] = {1, 1, 1, 1, 1, 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "--threads")) threads = atoi(v), i++;
    else if (!strcmp(a, "--reps")) reps = atoi(v), i++;
    else if (!strcmp(a, "--isa")) {
      kiln_isa x;
      if (kiln_isa_parse(v, &x)) return fprintf(stderr, "bad --isa %s\n", v), 2;
      isa = x, i++;
    } else if (!strcmp(a, "--shape") && n_shapes < 32) {
      if (sscanf(v, "%zux%zux%zu", &shapes[n_shapes].M, &shapes[n_shapes].N, &shapes[n_shapes].K) == 3)
        n_shapes++;
      i++;
    } else if (!strcmp(a, "--mc")) blk.mc = (size_t)atol(v), i++;
    else if (!strcmp(a, "--kc")) blk.kc = (size_t)atol(v), i++;
    else if (!strcmp(a, "--nc")) blk.nc = (size_t)atol(v), i++;
    else if (!strcmp(a, "--only")) { /* comma list of impl names */
      for (int k = 0; k < IMPL_COUNT; k++) {
        size_t n = strlen(impl_names[k]);
        const char *p = v;
        use[k] = 0;
        while ((p = strstr(p, impl_names[k])) != NULL) {
          if ((p == v || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) use[k] = 1;
          p += n;
        }
      }
      i++;
    } else if (!strcmp(a, "--clock")) {
      if (!strcmp(v, "thread")) g_sample_clock = CLOCK_THREAD_CPUTIME_ID;
      i++;
    } else if (!strcmp(a, "--cfg") && g_n_cfg < MAX_CFG) {
      kiln_gemm_blocking *c = &g_cfg[g_n_cfg];
      if (sscanf(v, "%zu,%zu,%zu,%d", &c->mc, &c->kc, &c->nc, &c->order) == 4) {
        snprintf(g_cfg_name[g_n_cfg], sizeof g_cfg_name[0], "k[%zu/%zu/%zu/%d]", c->mc, c->kc, c->nc,
                 c->order);
        use[IMPL_COUNT + g_n_cfg++] = 1;
      }
      i++;
    } else if (!strcmp(a, "--epilogue")) {
      for (int k = 0; k < KILN_ACT_COUNT; k++)
        if (!strcmp(v, kiln_act_name((kiln_act_kind)k))) g_ep.act.kind = (kiln_act_kind)k;
      g_ep.act.alpha = 0.1f;
      g_ep.act.beta = 1.0f;
      g_epp = &g_ep;
      i++;
    } else if (!strcmp(a, "--best")) g_best = 1;
    else if (!strcmp(a, "--sample-ms")) g_sample_ms = atof(v), i++;
    else if (!strcmp(a, "--huge")) g_huge = 1;
    else if (!strcmp(a, "--cfg-raw")) g_cfg_raw = 1;
    else if (!strcmp(a, "--peak")) do_peak = 1;
    else if (!strcmp(a, "--ceiling")) do_ceiling = 1;
    else if (!strcmp(a, "--dispatch")) do_dispatch = 1;
    else if (!strcmp(a, "--no-gemm")) do_gemm = 0;
    else if (!strcmp(a, "--trans-b")) trans_b = 1;
    else return fprintf(stderr, "unknown option %s\n", a), 2;
  }
  for (int k = 0; k < IMPL_COUNT; k++) use[k] &= impl_available(k);
  if (g_epp) { /* bias sized for the widest shape */
    size_t maxn = 1;
    for (int i2 = 0; i2 < n_shapes; i2++) maxn = shapes[i2].N > maxn ? shapes[i2].N : maxn;
    if (!n_shapes) maxn = 4096;
    g_bias = alloc_rand(maxn, 7);
    g_ep.bias = g_bias;
  }
  if (!n_shapes) {
    static const shape def[] = {{1024, 1024, 1024}, {128, 768, 768}, {128, 3072, 768},
                                {1, 1000, 2048},    {3136, 64, 576}};
    n_shapes = 5;
    memcpy(shapes, def, sizeof def);
  }
  if (threads > 1) g_sample_clock = CLOCK_MONOTONIC; /* CPU time would count every thread */
  int lvl = kiln_isa_resolve(isa);
  if (lvl < 0) return fprintf(stderr, "ISA %s not available\n", kiln_isa_name(isa)), 2;
  if (blk.mc || blk.kc || blk.nc) kiln_gemm_set_blocking(lvl, blk);
  kiln_gemm_blocking cur = kiln_gemm_get_blocking(lvl);
  g_lvl = lvl;
  g_default_blk = cur;
  char desc[256];
  kiln_cpu_describe(desc, sizeof desc);
  printf("cpu: %s\nkiln kernel: %s  MC=%zu KC=%zu NC=%zu  threads=%d reps=%d\n", desc,
         kiln_gemm_kernel_name(lvl), cur.mc, cur.kc, cur.nc, threads, reps);
#ifdef HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  printf("openblas: %s, %d threads\n", openblas_get_corename(), threads);
#endif
#ifdef HAVE_DNNL
  omp_set_num_threads(threads);
  printf("onednn: dnnl_sgemm, %d OpenMP threads\n", threads);
#endif
  if (do_peak) {
#if defined(__x86_64__)
    if (kiln_cpu_isa_max() >= KILN_ISA_AVX512)
      printf("fma peak avx512: 1 thread %.1f GFLOP/s", fma_peak(512, 1)),
          threads > 1 ? printf(", %d threads %.1f GFLOP/s", threads, fma_peak(512, threads)) : 0,
          printf("\n");
    if (kiln_cpu_isa_max() >= KILN_ISA_AVX2)
      printf("fma peak avx2:   1 thread %.1f GFLOP/s", fma_peak(256, 1)),
          threads > 1 ? printf(", %d threads %.1f GFLOP/s", threads, fma_peak(256, threads)) : 0,
          printf("\n");
#endif
  }
  if (do_ceiling) ceiling_bench(reps, lvl);
  if (do_dispatch) {
    int t = threads > 1 ? threads : 2;
    double m, p;
    dispatch_bench(t, 50, 0, &m, &p);
    printf("dispatch (empty parallel_for, %d threads): spinning workers  median %.0f ns  p90 %.0f ns\n", t, m, p);
    dispatch_bench(t, 0, 0, &m, &p);
    printf("dispatch (empty parallel_for, %d threads): sleeping workers  median %.0f ns  p90 %.0f ns\n", t, m, p);
    dispatch_bench(t, 50, 200, &m, &p);
    printf("dispatch (empty parallel_for, %d threads): 200us idle gap    median %.0f ns  p90 %.0f ns\n", t, m, p);
  }
  if (do_gemm) {
    kiln_threadpool *pool = threads > 1 ? kiln_threadpool_create(threads) : NULL;
    for (int i = 0; i < n_shapes; i++) bench_shape(shapes[i], trans_b, threads, pool, reps, lvl, use);
    kiln_threadpool_free(pool);
  }
  return 0;
}
