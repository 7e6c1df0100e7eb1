/* kiln_gemm_f32 against a triple-loop reference with double accumulation: random shapes
 * (1, odd sizes, tails, block crossings), both transposes, alpha/beta, strides, fused
 * epilogues, prepacked B, 1 and 2 threads, at every ISA level this CPU has. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "base/threadpool.h"
#include "testutil.h"

static size_t pick(const size_t *v, size_t n) { return v[kt_rand() % n]; }

static double ref_act(double x, const kiln_act *a) {
  switch (a->kind) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return x > 0 ? x : 0;
    case KILN_ACT_LEAKY_RELU: return x >= 0 ? x : a->alpha * x;
    case KILN_ACT_CLIP: return fmin(fmax(x, a->alpha), a->beta);
    case KILN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_ACT_TANH: return tanh(x);
    case KILN_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case KILN_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case KILN_ACT_SILU: return x / (1.0 + exp(-x));
    case KILN_ACT_HARD_SIGMOID: return fmin(fmax(a->alpha * x + a->beta, 0.0), 1.0);
    case KILN_ACT_HARD_SWISH: return x * fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0);
    case KILN_ACT_ELU: return x >= 0 ? x : a->alpha * expm1(x);
    default: return x;
  }
}

static kiln_act random_act(void) {
  kiln_act a;
  a.kind = (kiln_act_kind)(kt_rand() % KILN_ACT_COUNT);
  a.alpha = 0.1f;
  a.beta = 0.0f;
  if (a.kind == KILN_ACT_CLIP) {
    a.alpha = -0.5f;
    a.beta = 0.75f;
  } else if (a.kind == KILN_ACT_HARD_SIGMOID) {
    a.alpha = 0.2f;
    a.beta = 0.5f;
  } else if (a.kind == KILN_ACT_ELU) {
    a.alpha = 1.0f;
  }
  return a;
}

/* A stored matrix: rows x cols with row stride ld; padding columns hold NaN (never read). */
static float *make_mat(size_t rows, size_t cols, size_t ld) {
  float *m = malloc((rows * ld + 1) * sizeof(float));
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < ld; j++) m[i * ld + j] = j < cols ? kt_frand() : NAN;
  return m;
}

typedef struct gcase {
  int ta, tb;
  size_t M, N, K, lda, ldb, ldc, ldr;
  float alpha, beta;
  int use_bias, use_res, res_after, prepack, scale;
  int use_brow; /* a per-row bias through kiln_gemm_f32_rows (not with prepack) */
  kiln_act act;
} gcase;

static int g_case_fail_budget = 20;

/* Run one case at one ISA level and thread count; returns 1 when it matches. Also returns
 * the output in *out (caller frees) for cross-thread comparisons. */
static int run_case(const gcase *g, int isa, kiln_threadpool *pool, float **out) {
  size_t M = g->M, N = g->N, K = g->K;
  size_t ar = g->ta ? K : M, ac = g->ta ? M : K, br = g->tb ? N : K, bc = g->tb ? K : N;
  uint64_t seed = kt_rng;
  float *A = make_mat(ar, ac, g->lda), *B = make_mat(br, bc, g->ldb);
  float *C0 = make_mat(M, N, g->ldc), *R = make_mat(M, N, g->ldr);
  float *bias = make_mat(1, N, N), *brow = make_mat(1, M, M);
  if (g->scale)
    for (size_t i = 0; i < ar * g->lda; i++) A[i] *= 8.0f;
  kt_rng = seed; /* every (isa, threads) run of a case sees the same data */
  float *C = malloc((M * g->ldc + 1) * sizeof(float));
  for (size_t i = 0; i < M * g->ldc; i++) {
    int pad = i % g->ldc >= N;
    C[i] = pad ? 12345.0f : (g->beta == 0.0f ? NAN : C0[i]);
  }
  kiln_gemm_epilogue ep;
  memset(&ep, 0, sizeof ep);
  ep.bias = g->use_bias ? bias : NULL;
  ep.residual = g->use_res ? R : NULL;
  ep.ldr = g->ldr;
  ep.residual_after_act = g->res_after;
  ep.act = g->act;
  kiln_gemm_ctx ctx = {pool, isa};
  kiln_error err;
  kiln_code rc;
  if (g->prepack) {
    kiln_gemm_packed_b *pb = NULL;
    rc = kiln_gemm_pack_b(isa, g->tb, K, N, B, g->ldb, &pb, &err);
    if (rc == KILN_OK) {
      CHECK(kiln_gemm_packed_b_k(pb) == K && kiln_gemm_packed_b_n(pb) == N);
      CHECK(kiln_gemm_packed_b_isa(pb) == isa);
      /* B may change after packing: the handle must not refer to it */
      for (size_t i = 0; i < br * g->ldb; i++) B[i] = B[i];
      rc = kiln_gemm_f32_packed(&ctx, g->ta, M, g->alpha, A, g->lda, pb, g->beta, C, g->ldc, &ep,
                                &err);
    }
    kiln_gemm_packed_b_free(pb);
  } else {
    rc = kiln_gemm_f32_rows(&ctx, g->ta, g->tb, M, N, K, g->alpha, A, g->lda, B, g->ldb,
                            g->beta, C, g->ldc, &ep, g->use_brow ? brow : NULL, &err);
  }
  int ok = rc == KILN_OK;
  CHECK_MSG(rc == KILN_OK, "gemm returned %d: %s", (int)rc, err.message);
  double worst = 0;
  size_t wi = 0, wj = 0;
  double wgot = 0, wref = 0;
  for (size_t i = 0; i < M && ok; i++) {
    for (size_t j = 0; j < g->ldc; j++) {
      float got = C[i * g->ldc + j];
      if (j >= N) {
        if (got != 12345.0f) ok = 0, worst = INFINITY, wi = i, wj = j, wgot = got;
        continue;
      }
      double acc = 0, mag = 0;
      for (size_t k = 0; k < K; k++) {
        double a = g->ta ? A[k * g->lda + i] : A[i * g->lda + k];
        double b = g->tb ? B[j * g->ldb + k] : B[k * g->ldb + j];
        acc += a * b;
        mag += fabs(a * b);
      }
      double v = g->alpha * acc, vmag = fabs(g->alpha) * mag;
      if (g->beta != 0.0f) v += (double)g->beta * C0[i * g->ldc + j], vmag += fabs(g->beta * C0[i * g->ldc + j]);
      if (g->use_bias) v += bias[j], vmag += fabs(bias[j]);
      if (g->use_brow && !g->prepack) v += brow[i], vmag += fabs(brow[i]);
      double r = g->use_res ? R[i * g->ldr + j] : 0.0;
      if (g->use_res && !g->res_after) v += r, vmag += fabs(r);
      v = ref_act(v, &g->act);
      if (g->use_res && g->res_after) v += r, vmag += fabs(r);
      /* fp32 accumulation error grows with K; activations add a few ulp */
      double tol = 2.5e-7 * (double)(K + 16) * vmag * 1.2 + 3e-6 * (1.0 + fabs(v));
      double e = fabs((double)got - v);
      if (!(e <= tol)) {
        ok = 0;
        if (!(e <= worst)) worst = e, wi = i, wj = j, wgot = got, wref = v;
      }
    }
  }
  if (!ok && g_case_fail_budget-- > 0)
    fprintf(stderr,
            "  mismatch isa=%s threads=%d ta=%d tb=%d M=%zu N=%zu K=%zu lda=%zu ldb=%zu ldc=%zu "
            "alpha=%g beta=%g bias=%d res=%d/%d act=%s prepack=%d: C[%zu][%zu]=%.9g ref %.9g\n",
            kiln_isa_name(isa), kiln_threadpool_size(pool), g->ta, g->tb, M, N, K, g->lda, g->ldb,
            g->ldc, g->alpha, g->beta, g->use_bias, g->use_res, g->res_after,
            kiln_act_name(g->act.kind), g->prepack, wi, wj, wgot, wref);
  free(A);
  free(B);
  free(C0);
  free(R);
  free(bias);
  free(brow);
  if (out)
    *out = C;
  else
    free(C);
  return ok;
}

static gcase random_case(size_t max_dim, int epilogues) {
  static const size_t dims[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 23, 31, 32, 33,
                                47, 48, 63, 64, 65, 66, 80, 95, 97, 127, 128, 129, 130, 191, 193};
  gcase g;
  memset(&g, 0, sizeof g);
  size_t nd = sizeof dims / sizeof dims[0];
  g.M = kt_rand() % 4 ? pick(dims, nd) : 1 + kt_rand() % max_dim;
  g.N = kt_rand() % 4 ? pick(dims, nd) : 1 + kt_rand() % max_dim;
  g.K = kt_rand() % 4 ? pick(dims, nd) : 1 + kt_rand() % max_dim;
  g.ta = (int)(kt_rand() % 2);
  g.tb = (int)(kt_rand() % 2);
  g.lda = (g.ta ? g.M : g.K) + (kt_rand() % 3 == 0 ? kt_rand() % 5 : 0);
  g.ldb = (g.tb ? g.K : g.N) + (kt_rand() % 3 == 0 ? kt_rand() % 5 : 0);
  g.ldc = g.N + (kt_rand() % 3 == 0 ? kt_rand() % 5 : 0);
  g.ldr = g.N + kt_rand() % 3;
  static const float alphas[] = {1.0f, 1.0f, 0.5f, -2.0f};
  static const float betas[] = {0.0f, 0.0f, 1.0f, 0.25f};
  g.alpha = alphas[kt_rand() % 4];
  g.beta = betas[kt_rand() % 4];
  g.prepack = kt_rand() % 3 == 0;
  if (epilogues && kt_rand() % 2) {
    g.use_bias = (int)(kt_rand() % 2);
    g.use_brow = (int)(kt_rand() % 2);
    g.use_res = (int)(kt_rand() % 2);
    g.res_after = (int)(kt_rand() % 2);
    g.act = random_act();
    g.scale = kt_rand() % 2; /* spread values over the activations' interesting ranges */
  }
  return g;
}

/* Run a case at every ISA level with 1 and 2 threads; the 1- and 2-thread results must be
 * bitwise equal (the partition never changes an element's arithmetic). */
static int run_everywhere(const gcase *g, kiln_threadpool *pool2) {
  int ok = 1;
  uint64_t seed = kt_rng;
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    float *c1 = NULL, *c2 = NULL;
    kt_rng = seed;
    ok &= run_case(g, isa, NULL, &c1);
    kt_rng = seed;
    ok &= run_case(g, isa, pool2, &c2);
    if (memcmp(c1, c2, g->M * g->ldc * sizeof(float)) != 0) {
      int same = 1; /* NaN-aware compare, in case an element is NaN in both */
      for (size_t i = 0; i < g->M * g->ldc; i++)
        if (!(c1[i] == c2[i] || (isnan(c1[i]) && isnan(c2[i])))) same = 0;
      CHECK_MSG(same, "isa %s M=%zu N=%zu K=%zu: 1 and 2 threads differ", kiln_isa_name(isa),
                g->M, g->N, g->K);
    }
    free(c1);
    free(c2);
  }
  kt_rng = seed;
  kt_rand();
  return ok;
}

static void test_random(kiln_threadpool *pool2) {
  int bad = 0;
  for (int i = 0; i < 250; i++) {
    gcase g = random_case(260, 1);
    if (!run_everywhere(&g, pool2)) bad++;
  }
  CHECK_MSG(bad == 0, "%d of 250 random cases failed", bad);
}

static void test_fixed(kiln_threadpool *pool2) {
  /* shapes that cross the blocking (KC, NC, MC), the 4 KiB-stride packing of A, M=1/N=1,
   * and task grids of the 2-thread partition */
  static const size_t shapes[][3] = {
      {200, 1100, 300}, {37, 2100, 130}, {130, 70, 1024}, {20, 70, 1024}, {1, 1000, 513},
      {1, 77, 2048},    {1, 1, 1},       {1, 1, 300},    {300, 1, 77},    {513, 1, 64},
      {6, 64, 128},     {12, 128, 256},  {7, 129, 257},  {1, 4096, 8},    {3, 1024, 100},
      {97, 3, 1},       {2, 2, 1},
      /* conv shapes whose 2-thread grid splits M, or N and M, unevenly cut panels */
      {256, 196, 288}, {128, 784, 72}, {512, 49, 160},
      /* many rows of A against a short, wide B: packed (PACK_B_MIN_M), with tails */
      {257, 515, 67}, {262, 600, 40},
      /* 17-32 strips of A against 256 KiB or more of prepacked B: streamed panel by panel
       * at 1 thread, not at 2 (the transformers' shapes, smaller) */
      {100, 256, 256}, {150, 260, 300}};
  int bad = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    for (int tr = 0; tr < 4; tr++) {
      for (int pp = 0; pp < 2; pp++) {
        gcase g;
        memset(&g, 0, sizeof g);
        g.M = shapes[s][0];
        g.N = shapes[s][1];
        g.K = shapes[s][2];
        g.ta = tr & 1;
        g.tb = tr >> 1;
        g.lda = g.ta ? g.M : g.K;
        g.ldb = g.tb ? g.K : g.N;
        g.ldc = g.N;
        g.ldr = g.N;
        g.alpha = 1.0f;
        g.beta = (tr & 1) ? 0.5f : 0.0f;
        g.prepack = pp;
        g.use_bias = pp;
        g.use_brow = !pp && tr != 1;
        g.use_res = tr == 3;
        g.act.kind = pp ? KILN_ACT_GELU : KILN_ACT_RELU;
        if (!run_everywhere(&g, pool2)) bad++;
      }
    }
  }
  CHECK_MSG(bad == 0, "%d fixed cases failed", bad);
}

/* The cache sizes kiln reads, and the AVX2 blocking derived from them: the KC x 16 B panel
 * within 3/4 of L1 (L1 taken as 16-64 KiB), the A block within L2 / 7, whole strips and
 * panels. */
static void test_derived_blocking(void) {
  size_t l1 = kiln_cpu_cache_bytes(1), l2 = kiln_cpu_cache_bytes(2), l3 = kiln_cpu_cache_bytes(3);
  printf("caches: L1d %zu, L2 %zu, L3 %zu bytes\n", l1, l2, l3);
  CHECK(kiln_cpu_cache_bytes(0) == 0 && kiln_cpu_cache_bytes(4) == 0);
  /* every x86 CPU with AVX2 says its L1d and L2 (leaf 4, AMD's 0x8000001D or 0x80000005/6) */
  if (kiln_cpu_isa_max() >= KILN_ISA_AVX2) CHECK(l1 && l2);
  if (l1) CHECK(l1 >= 4096 && l1 <= (1u << 20));
  if (l1 && l2) CHECK(l1 <= l2);
  if (l2 && l3) CHECK(l2 <= l3);
  kiln_gemm_blocking b = kiln_gemm_get_blocking(KILN_ISA_SCALAR);
  CHECK(b.kc > 0); /* the scalar level exists everywhere */
  if (kiln_cpu_isa_max() < KILN_ISA_AVX2) return;
  b = kiln_gemm_get_blocking(KILN_ISA_AVX2);
  size_t c1 = l1 ? l1 : 32768;
  c1 = c1 < 16384 ? 16384 : c1 > 65536 ? 65536 : c1;
  CHECK(b.order == 1 && b.kc % 16 == 0 && b.kc >= 128 && b.kc <= 768);
  CHECK(b.kc * 16 * sizeof(float) <= c1 * 3 / 4 || b.kc == 128);
  CHECK(b.mc % 6 == 0 && b.mc >= 24 && b.nc % 16 == 0 && b.nc >= 128);
  if (l2 >= (256u << 10) && l2 <= (4u << 20)) CHECK(b.mc * b.kc * sizeof(float) <= l2 / 7 || b.mc == 24);
}

/* Tiny blocking so moderate shapes take many MC/KC/NC blocks; then restore. */
static void test_small_blocking(kiln_threadpool *pool2) {
  kiln_gemm_blocking saved[KILN_ISA_LEVELS];
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    saved[isa] = kiln_gemm_get_blocking(isa);
    kiln_gemm_blocking b = {1, 8, 1, 1 + (int)(kt_rand() % 2)}; /* rounded up to MR, 8, NR */
    kiln_gemm_set_blocking(isa, b);
  }
  int bad = 0;
  for (int i = 0; i < 60; i++) {
    gcase g = random_case(150, 1);
    if (!run_everywhere(&g, pool2)) bad++;
  }
  CHECK_MSG(bad == 0, "%d small-blocking cases failed", bad);
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    kiln_gemm_set_blocking(isa, saved[isa]);
    kiln_gemm_blocking b = kiln_gemm_get_blocking(isa);
    CHECK(b.mc == saved[isa].mc && b.kc == saved[isa].kc && b.nc == saved[isa].nc &&
          b.order == saved[isa].order);
  }
}

/* K == 0 and alpha == 0 give beta*C + epilogue without reading A or B; M or N == 0 is a no-op. */
static void test_degenerate(void) {
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    kiln_gemm_ctx ctx = {NULL, isa};
    float C[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {1, 1, 1}, A[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    kiln_gemm_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.bias = bias;
    ep.act.kind = KILN_ACT_RELU;
    CHECK(kiln_gemm_f32(&ctx, 0, 0, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, -1.0f, C, 3, &ep, NULL) == KILN_OK);
    CHECK(C[0] == 0.0f && C[5] == 0.0f); /* relu(-c + 1) */
    float C2[6] = {1, 2, 3, 4, 5, 6};
    CHECK(kiln_gemm_f32(&ctx, 0, 0, 2, 3, 2, 0.0f, A, 2, A, 3, 2.0f, C2, 3, NULL, NULL) == KILN_OK);
    CHECK(C2[0] == 2.0f && C2[5] == 12.0f);
    float C3[1] = {7};
    CHECK(kiln_gemm_f32(&ctx, 0, 0, 0, 3, 2, 1.0f, NULL, 2, A, 3, 0.0f, C3, 3, NULL, NULL) == KILN_OK);
    CHECK(kiln_gemm_f32(&ctx, 0, 0, 2, 0, 2, 1.0f, A, 2, NULL, 1, 0.0f, C3, 1, NULL, NULL) == KILN_OK);
    CHECK(C3[0] == 7.0f);
  }
}

static void test_errors(void) {
  float A[16] = {0}, B[16] = {0}, C[16] = {0};
  kiln_error err;
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 2, 2, 1, NULL, 2, B, 2, 0, C, 2, NULL, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 2, 2, 1, A, 1, B, 2, 0, C, 2, NULL, &err) == KILN_ERR_INVALID_ARG);
  CHECK(strstr(err.message, "lda") != NULL);
  CHECK(kiln_gemm_f32(NULL, 0, 1, 2, 3, 2, 1, A, 2, B, 1, 0, C, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, C, 2, NULL, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, NULL, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  kiln_gemm_epilogue ep;
  memset(&ep, 0, sizeof ep);
  ep.residual = C;
  ep.ldr = 1;
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, C, 3, &ep, &err) == KILN_ERR_INVALID_ARG);
  ep.ldr = 3;
  ep.act.kind = (kiln_act_kind)99;
  CHECK(kiln_gemm_f32(NULL, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, C, 3, &ep, &err) == KILN_ERR_INVALID_ARG);
  kiln_gemm_ctx bad = {NULL, 17};
  CHECK(kiln_gemm_f32(&bad, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, C, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  if (kiln_cpu_isa_max() < KILN_ISA_AVX512) {
    kiln_gemm_ctx hi = {NULL, KILN_ISA_AVX512};
    CHECK(kiln_gemm_f32(&hi, 0, 0, 2, 3, 2, 1, A, 2, B, 3, 0, C, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  }
  kiln_gemm_packed_b *pb = NULL;
  CHECK(kiln_gemm_pack_b(KILN_ISA_AUTO, 0, 2, 3, B, 2, &pb, &err) == KILN_ERR_INVALID_ARG);
  CHECK(pb == NULL);
  CHECK(kiln_gemm_pack_b(KILN_ISA_SCALAR, 0, 2, 3, B, 3, &pb, &err) == KILN_OK);
  if (kiln_cpu_isa_max() > KILN_ISA_SCALAR) {
    kiln_gemm_ctx other = {NULL, (int)kiln_cpu_isa_max()};
    CHECK(kiln_gemm_f32_packed(&other, 0, 2, 1, A, 2, pb, 0, C, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  }
  CHECK(kiln_gemm_f32_packed(NULL, 0, 2, 1, A, 2, pb, 0, C, 3, NULL, &err) == KILN_OK);
  CHECK(kiln_gemm_f32_packed(NULL, 0, 2, 1, A, 2, NULL, 0, C, 3, NULL, &err) == KILN_ERR_INVALID_ARG);
  kiln_gemm_packed_b_free(pb);
  kiln_gemm_packed_b_free(NULL);
}

/* Vectorised activations against the double reference over a wide range. */
static void test_act(void) {
  enum { N = 4003 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = -25.0f + 50.0f * (float)i / (N - 1);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-6f;
  x[3] = -3e-5f;
  x[4] = 0.6249f;
  x[5] = -0.6251f;
  x[6] = 95.0f;
  x[7] = -95.0f;
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    for (int k = 0; k < KILN_ACT_COUNT; k++) {
      kiln_act a = {(kiln_act_kind)k, 0.1f, 0.0f};
      if (k == KILN_ACT_CLIP) a.alpha = -1.0f, a.beta = 2.0f;
      if (k == KILN_ACT_HARD_SIGMOID) a.alpha = 0.2f, a.beta = 0.5f;
      if (k == KILN_ACT_ELU) a.alpha = 1.0f;
      for (size_t n = 0; n <= N; n += N / 3 + 13) { /* odd lengths exercise the tails */
        memcpy(y, x, sizeof x);
        kiln_f32_act(isa, y, n, &a);
        int bad = 0;
        double worst = 0;
        float wx = 0;
        for (size_t i = 0; i < N; i++) {
          double ref = i < n ? ref_act(x[i], &a) : x[i];
          double e = fabs(y[i] - ref), tol = 2e-6 * fabs(ref) + 1e-7;
          if (!(e <= tol)) {
            bad++;
            if (e > worst) worst = e, wx = x[i];
          }
        }
        CHECK_MSG(bad == 0, "act %s isa %s n %zu: %d bad, worst err %g at x=%g", kiln_act_name(a.kind),
                  kiln_isa_name(isa), n, bad, worst, wx);
      }
    }
  }
}

/* KILN_ISA lowers the level (never raises it); an unknown value is ignored. The variable is
 * read once per process, so each setting runs in a child: this binary with --print-isa (under
 * KILN_TEST_WRAPPER, e.g. the CPU emulator of scripts/check-isa.sh, when set). */
static void test_isa_env(const char *self) {
  static const char *names[] = {"scalar", "avx2", "avx512", "bogus"};
  kiln_isa max = kiln_cpu_isa_max();
  const char *wrap = getenv("KILN_TEST_WRAPPER");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "KILN_ISA=%s %s '%s' --print-isa", names[i], wrap ? wrap : "", self);
    int rc = kt_run(cmd, out, sizeof out);
    kiln_isa want = max;
    kiln_isa parsed;
    if (kiln_isa_parse(names[i], &parsed) == 0 && parsed < max) want = parsed;
    CHECK_MSG(rc == 0 && strncmp(out, kiln_isa_name(want), strlen(kiln_isa_name(want))) == 0,
              "KILN_ISA=%s gave '%s' (rc %d), want %s", names[i], out, rc, kiln_isa_name(want));
  }
}

/* kiln_gemm_f32_packed_gather: A's element (i, k) at buf[arow[i] + koff[k]] (random offsets,
 * rows and K steps overlapping), against kiln_gemm_f32_packed on A written out (the same
 * kernel arithmetic: the same bytes; M 1 against the double reference, as the packed GEMM
 * takes its matrix-vector path there), with column bias, residual and relu, 1 and 2 threads;
 * levels without the kernel refuse. */
static void test_gather(kiln_threadpool *pool2) {
  static const size_t ms[] = {1, 2, 5, 6, 7, 13, 49, 100}, ns[] = {1, 5, 16, 63, 64, 65, 130, 520};
  static const size_t ks[] = {1, 3, 17, 300, 600};
  const size_t S = 4096;
  float *buf = make_mat(1, S, S);
  int ran = 0;
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++) {
    kiln_gemm_ctx ctx = {NULL, isa};
    for (int it = 0; it < 24; it++) {
      size_t M = pick(ms, 8), N = pick(ns, 8), K = pick(ks, 5);
      int32_t *arow = malloc(sizeof(int32_t) * M), *koff = malloc(sizeof(int32_t) * K);
      for (size_t i = 0; i < M; i++) arow[i] = (int32_t)(kt_rand() % (S / 2));
      for (size_t k = 0; k < K; k++) koff[k] = (int32_t)(kt_rand() % (S / 2));
      float *A = malloc(sizeof(float) * M * K), *B = make_mat(K, N, N);
      float *bias = make_mat(1, N, N), *res = make_mat(M, N, N);
      float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
      for (size_t i = 0; i < M; i++)
        for (size_t k = 0; k < K; k++) A[i * K + k] = buf[arow[i] + koff[k]];
      kiln_gemm_packed_b *pb = NULL;
      CHECK(kiln_gemm_pack_b(isa, 0, K, N, B, N, &pb, NULL) == KILN_OK);
      kiln_gemm_epilogue ep = {0};
      ep.bias = bias;
      ep.residual = res;
      ep.ldr = N;
      ep.act.kind = KILN_ACT_RELU;
      kiln_code rc = kiln_gemm_f32_packed_gather(&ctx, M, buf, arow, koff, pb, C1, N, &ep, NULL);
      if (!kiln_gemm_has_gather(isa)) {
        CHECK(isa != KILN_ISA_AVX512);
        CHECK(rc == KILN_ERR_UNSUPPORTED);
      } else {
        ran++;
        CHECK(rc == KILN_OK);
        kiln_gemm_ctx c2 = {pool2, isa};
        CHECK(kiln_gemm_f32_packed_gather(&c2, M, buf, arow, koff, pb, C2, N, &ep, NULL) == KILN_OK);
        CHECK_MSG(!memcmp(C1, C2, sizeof(float) * M * N), "gather %zux%zux%zu: 1 and 2 threads differ",
                  M, N, K);
        if (M > 1) {
          CHECK(kiln_gemm_f32_packed(&ctx, 0, M, 1.0f, A, K, pb, 0.0f, C2, N, &ep, NULL) == KILN_OK);
          CHECK_MSG(!memcmp(C1, C2, sizeof(float) * M * N),
                    "gather %zux%zux%zu: differs from the packed GEMM on A written out", M, N, K);
        } else {
          for (size_t j = 0; j < N; j++) {
            double acc = bias[j] + res[j];
            for (size_t k = 0; k < K; k++) acc += (double)A[k] * B[k * N + j];
            acc = acc > 0 ? acc : 0;
            CHECK_MSG(fabs(C1[j] - acc) <= 1e-5 * (K + 4), "gather 1x%zux%zu: [%zu] %g want %g", N,
                      K, j, C1[j], acc);
          }
        }
      }
      kiln_gemm_packed_b_free(pb);
      free(arow), free(koff), free(A), free(B), free(bias), free(res), free(C1), free(C2);
    }
  }
  if (kiln_cpu_isa_max() >= KILN_ISA_AVX512) CHECK(ran > 0);
  free(buf);
}

int main(int argc, char **argv) {
  kt_rng = 0x9e3779b97f4a7c15ull; /* this test's data */
  if (argc > 1 && !strcmp(argv[1], "--print-isa")) {
    printf("%s\n", kiln_isa_name(kiln_cpu_isa()));
    return 0;
  }
  test_isa_env(argv[0]);
  char desc[256];
  kiln_cpu_describe(desc, sizeof desc);
  printf("cpu: %s\n", desc);
  for (int isa = KILN_ISA_SCALAR; isa <= (int)kiln_cpu_isa_max(); isa++)
    printf("  testing %s: %s\n", kiln_isa_name(isa), kiln_gemm_kernel_name(isa));
  kiln_threadpool *pool2 = kiln_threadpool_create(2);
  CHECK(pool2 != NULL);
  test_act();
  test_errors();
  test_degenerate();
  test_fixed(pool2);
  test_random(pool2);
  test_derived_blocking();
  test_small_blocking(pool2);
  test_gather(pool2);
  kiln_threadpool_free(pool2);
  return kt_finish("test_gemm");
}
