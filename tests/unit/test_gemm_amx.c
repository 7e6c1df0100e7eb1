/* The bf16x3 AMX GEMMs (kernels/gemm_amx.h: W X for convolutions, A op(B) for MatMul and
 * Gemm) against a double-precision reference: shapes with
 * tails in every dimension, bias, residual and activations, 1 and 2 threads.
 * max |C - ref| / max |W X + bias + residual| (the scale before the activation, which here
 * has no slope above 1) must stay within 2e-5 (float32 itself: about 1e-6), and the
 * result must not depend on the thread count. On a machine without AMX the test checks that
 * the path says so (NULL weights, an error from the GEMM) and runs nothing else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_amx.h"
#include "base/threadpool.h"
#include "testutil.h"

static double g_worst;

/* c (2 threads) against ref and c1 (1 thread): error within 2e-5 of `big`, nothing written
 * past column n (the padding holds 12345), the same bytes whatever the thread count. */
static void check_result(const char *what, const float *c, const float *c1, const double *ref,
                         size_t m, size_t n, size_t ldc, double big) {
  double err = 0;
  int pad_ok = 1;
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      double d = fabs((double)c[i * ldc + j] - ref[i * n + j]);
      if (d > err) err = d;
    }
    for (size_t j = n; j < ldc; j++) pad_ok &= c[i * ldc + j] == 12345.0f;
  }
  double rel = big > 0 ? err / big : err;
  if (rel > g_worst) g_worst = rel;
  CHECK_MSG(rel <= 2e-5, "%s: relative error %g", what, rel);
  CHECK_MSG(pad_ok, "%s: wrote past n", what);
  CHECK_MSG(!memcmp(c, c1, sizeof(float) * m * ldc), "%s: 2 threads differ from 1", what);
}

static void check_shape(kiln_threadpool *pool, size_t m, size_t k, size_t n, int with_bias,
                        int with_res, kiln_act act) {
  size_t ldx = n + 3, ldc = n + 5, ldr = n + 1, ldw = k + 2;
  float *w = malloc(sizeof(float) * m * ldw), *x = malloc(sizeof(float) * k * ldx);
  float *bias = malloc(sizeof(float) * m), *res = malloc(sizeof(float) * m * ldr);
  float *c = malloc(sizeof(float) * m * ldc), *c1 = malloc(sizeof(float) * m * ldc);
  double *ref = malloc(sizeof(double) * m * n);
  for (size_t i = 0; i < m * ldw; i++) w[i] = kt_frand();
  for (size_t i = 0; i < k * ldx; i++) x[i] = kt_frand() * 3.0f;
  for (size_t i = 0; i < m; i++) bias[i] = kt_frand();
  for (size_t i = 0; i < m * ldr; i++) res[i] = kt_frand();
  for (size_t i = 0; i < m * ldc; i++) c[i] = c1[i] = 12345.0f; /* padding must stay */
  double big = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t q = 0; q < k; q++) s += (double)w[i * ldw + q] * x[q * ldx + j];
      if (with_bias) s += bias[i];
      if (with_res) s += res[i * ldr + j];
      ref[i * n + j] = act.kind == KILN_ACT_NONE ? s : kiln_act_ref((float)s, &act);
      if (fabs(s) > big) big = fabs(s); /* the activations here change no slope above 1 */
    }
  kiln_amx_w *pw = kiln_amx_pack_w(w, m, k, ldw);
  CHECK(pw && kiln_amx_w_rows(pw) == m && kiln_amx_w_cols(pw) == k);
  if (pw) {
    CHECK(kiln_amx_gemm(pool, pw, n, x, ldx, c, ldc, with_bias ? bias : NULL,
                        with_res ? res : NULL, ldr, &act) == KILN_OK);
    CHECK(kiln_amx_gemm(NULL, pw, n, x, ldx, c1, ldc, with_bias ? bias : NULL,
                        with_res ? res : NULL, ldr, &act) == KILN_OK);
    char what[128];
    snprintf(what, sizeof what, "W X m %zu k %zu n %zu bias %d res %d act %d", m, k, n, with_bias,
             with_res, (int)act.kind);
    check_result(what, c, c1, ref, m, n, ldc, big);
  }
  kiln_amx_w_free(pw);
  free(w), free(x), free(bias), free(res), free(c), free(c1), free(ref);
}

/* C = A op(B) (kiln_amx_gemm_ab): B as k x n or (trans) n x k, bias per column. */
static void check_ab(kiln_threadpool *pool, size_t m, size_t k, size_t n, int trans, int with_bias,
                     int with_res, kiln_act act) {
  size_t lda = k + 3, ldb = (trans ? k : n) + 2, ldc = n + 5, ldr = n + 1;
  float *a = malloc(sizeof(float) * m * lda), *b = malloc(sizeof(float) * (trans ? n : k) * ldb);
  float *bias = malloc(sizeof(float) * n), *res = malloc(sizeof(float) * m * ldr);
  float *c = malloc(sizeof(float) * m * ldc), *c1 = malloc(sizeof(float) * m * ldc);
  double *ref = malloc(sizeof(double) * m * n);
  for (size_t i = 0; i < m * lda; i++) a[i] = kt_frand() * 3.0f;
  for (size_t i = 0; i < (trans ? n : k) * ldb; i++) b[i] = kt_frand();
  for (size_t i = 0; i < n; i++) bias[i] = kt_frand();
  for (size_t i = 0; i < m * ldr; i++) res[i] = kt_frand();
  for (size_t i = 0; i < m * ldc; i++) c[i] = c1[i] = 12345.0f;
  double big = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t q = 0; q < k; q++) s += (double)a[i * lda + q] * (trans ? b[j * ldb + q] : b[q * ldb + j]);
      if (with_bias) s += bias[j];
      if (with_res) s += res[i * ldr + j];
      ref[i * n + j] = act.kind == KILN_ACT_NONE ? s : kiln_act_ref((float)s, &act);
      if (fabs(s) > big) big = fabs(s);
    }
  kiln_amx_b *pb = kiln_amx_pack_b(b, k, n, ldb, trans);
  CHECK(pb && kiln_amx_b_k(pb) == k && kiln_amx_b_n(pb) == n);
  if (pb) {
    CHECK(kiln_amx_gemm_ab(pool, m, a, lda, pb, c, ldc, with_bias ? bias : NULL, with_res ? res : NULL, ldr, &act) == KILN_OK);
    CHECK(kiln_amx_gemm_ab(NULL, m, a, lda, pb, c1, ldc, with_bias ? bias : NULL, with_res ? res : NULL, ldr, &act) == KILN_OK);
    char what[128];
    snprintf(what, sizeof what, "A op(B) m %zu k %zu n %zu trans %d bias %d res %d act %d", m, k, n,
             trans, with_bias, with_res, (int)act.kind);
    check_result(what, c, c1, ref, m, n, ldc, big);
  }
  kiln_amx_b_free(pb);
  free(a), free(b), free(bias), free(res), free(c), free(c1), free(ref);
}

int main(void) {
  kt_rng = 0x9e3779b97f4a7c15ull;
  if (!kiln_amx_available()) {
    float w = 1.0f;
    CHECK(kiln_amx_pack_w(&w, 1, 1, 1) == NULL);
    printf("test_gemm_amx: AMX is not available here (CPU, OS or KILN_AMX=0): only the refusal is checked\n");
    return kt_finish("test_gemm_amx");
  }
  kiln_threadpool *pool = kiln_threadpool_create(2);
  kiln_act none = {KILN_ACT_NONE, 0, 0}, relu = {KILN_ACT_RELU, 0, 0};
  kiln_act clip = {KILN_ACT_CLIP, 0.0f, 6.0f}, sig = {KILN_ACT_SIGMOID, 0, 0};
  static const size_t shapes[][3] = {
      {1, 1, 1},     {5, 7, 3},     {32, 32, 32},   {33, 65, 47},  {64, 96, 196},
      {100, 300, 49}, {256, 64, 300}, {31, 1000, 17}, {128, 33, 512},
      {200, 1100, 70}, /* W read once (more rows than columns), K in 3 chunks */
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    size_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    check_shape(pool, m, k, n, 0, 0, none);
    check_shape(pool, m, k, n, 1, 0, relu);
    check_shape(pool, m, k, n, 1, 1, clip);
    check_shape(pool, m, k, n, 0, 1, sig);
  }
  static const size_t ab_shapes[][3] = {
      {1, 1, 1}, {5, 7, 3}, {32, 32, 32}, {33, 65, 47}, {128, 256, 768}, {70, 1100, 90}, {17, 64, 300},
      {200, 100, 40}, {300, 600, 70}, /* more rows than columns: A read row pair by row pair */
  };
  for (size_t s = 0; s < sizeof ab_shapes / sizeof ab_shapes[0]; s++) {
    size_t m = ab_shapes[s][0], k = ab_shapes[s][1], n = ab_shapes[s][2];
    check_ab(pool, m, k, n, 0, 0, 0, none);
    check_ab(pool, m, k, n, 1, 1, 0, relu);
    check_ab(pool, m, k, n, 0, 1, 1, clip);
    check_ab(pool, m, k, n, 1, 0, 1, sig);
  }
  /* refusals */
  CHECK(kiln_amx_pack_w(NULL, 4, 4, 4) == NULL);
  CHECK(kiln_amx_gemm(pool, NULL, 4, (float[4]){0}, 4, (float[4]){0}, 4, NULL, NULL, 0, NULL) ==
        KILN_ERR_INVALID_ARG);
  printf("test_gemm_amx: max relative error %.3g\n", g_worst);
  kiln_threadpool_free(pool);
  return kt_finish("test_gemm_amx");
}
