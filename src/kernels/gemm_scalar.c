/* Portable single-precision kernels (the compiler's baseline ISA): the 4x16 GEMM micro-kernel,
 * matrix-vector kernels, the epilogue and libm activations. Also the activation dispatcher. */
#include <math.h>
#include <string.h>

#include "kernels/gemm_internal.h"

/* ---- activations --------------------------------------------------------------------- */

const char *kiln_act_name(kiln_act_kind k) {
  static const char *names[KILN_ACT_COUNT] = {
      "none", "relu",      "leaky_relu",   "clip",       "sigmoid", "tanh",
      "gelu", "gelu_tanh", "silu",         "hard_sigmoid", "hard_swish", "elu"};
  return (unsigned)k < KILN_ACT_COUNT ? names[k] : "?";
}

float kiln_act_ref(float x, const kiln_act *a) {
  switch (a->kind) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case KILN_ACT_LEAKY_RELU: return x >= 0.0f ? x : a->alpha * x;
    case KILN_ACT_CLIP: return fminf(fmaxf(x, a->alpha), a->beta);
    case KILN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_ACT_TANH: return tanhf(x);
    case KILN_ACT_GELU: return 0.5f * x * erfcf(-x * 0.70710678118654752f);
    case KILN_ACT_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case KILN_ACT_SILU: return x / (1.0f + expf(-x));
    case KILN_ACT_HARD_SIGMOID: return fminf(fmaxf(a->alpha * x + a->beta, 0.0f), 1.0f);
    case KILN_ACT_HARD_SWISH: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    case KILN_ACT_ELU: return x >= 0.0f ? x : a->alpha * expm1f(x);
    default: return x;
  }
}

static void act_scalar(float *x, size_t n, const kiln_act *a) {
  switch (a->kind) {
    case KILN_ACT_NONE: return;
    case KILN_ACT_RELU:
      for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    default:
      for (size_t i = 0; i < n; i++) x[i] = kiln_act_ref(x[i], a);
  }
}

void kiln_f32_act(int isa, float *x, size_t n, const kiln_act *act) {
  int lvl = kiln_isa_resolve(isa);
  if (lvl < 0) lvl = (int)kiln_cpu_isa_max();
  kiln_gemm_ops_for(lvl)->act(x, n, act);
}

/* ---- epilogue ------------------------------------------------------------------------ */

static void epilogue_row_scalar(float *c, const float *acc, size_t n, const kiln_gemm_tile *t) {
  const int first = t->flags & KILN_GT_FIRST, last = t->flags & KILN_GT_LAST;
  for (size_t j = 0; j < n; j++) {
    float v = t->alpha * acc[j];
    if (first) {
      if (t->beta != 0.0f) v += t->beta * c[j];
    } else {
      v += c[j];
    }
    if (last) {
      if (t->bias) v += t->bias[j];
      if (t->bias_row) v += t->bias_row[0];
      if (t->res && !t->res_after) v += t->res[j];
      v = kiln_act_ref(v, &t->act);
      if (t->res && t->res_after) v += t->res[j];
    }
    c[j] = v;
  }
}

/* ---- micro-kernel -------------------------------------------------------------------- */

static void f32_gemm_4x16__scalar(size_t mr, size_t nc, size_t kc, const float *a, size_t lda,
                                  const float *b, size_t ldb, float *c, size_t ldc,
                                  const kiln_gemm_tile *t) {
  float acc[4][16];
  memset(acc, 0, sizeof acc);
  if (mr == 4 && nc == 16) {
    for (size_t k = 0; k < kc; k++, b += ldb) {
      for (int i = 0; i < 4; i++) {
        float ai = a[(size_t)i * lda + k];
        for (int j = 0; j < 16; j++) acc[i][j] += ai * b[j];
      }
    }
  } else {
    for (size_t k = 0; k < kc; k++, b += ldb) {
      for (size_t i = 0; i < mr; i++) {
        float ai = a[i * lda + k];
        for (size_t j = 0; j < nc; j++) acc[i][j] += ai * b[j];
      }
    }
  }
  for (size_t i = 0; i < mr; i++) {
    kiln_gemm_tile row = *t;
    if (t->res) row.res = t->res + i * t->ldr;
    if (t->bias_row) row.bias_row = t->bias_row + i;
    epilogue_row_scalar(c + i * ldc, acc[i], nc, &row);
  }
}

/* ---- matrix-vector ------------------------------------------------------------------- */

static void gemv_n_scalar(size_t kc, size_t nc, const float *x, const float *b, size_t ldb,
                          float *y) {
  for (size_t j0 = 0; j0 < nc; j0 += 64) {
    size_t w = nc - j0 < 64 ? nc - j0 : 64;
    float acc[64];
    memset(acc, 0, sizeof acc);
    for (size_t k = 0; k < kc; k++) {
      const float *br = b + k * ldb + j0;
      float xk = x[k];
      for (size_t j = 0; j < w; j++) acc[j] += xk * br[j];
    }
    memcpy(y + j0, acc, w * sizeof(float));
  }
}

static void gemv_t_scalar(size_t kc, size_t nr, const float *x, const float *r, size_t ldr,
                          float *y) {
  for (size_t j = 0; j < nr; j++) {
    const float *rj = r + j * ldr;
    float s[8] = {0};
    size_t k = 0;
    for (; k + 8 <= kc; k += 8)
      for (int u = 0; u < 8; u++) s[u] += x[k + u] * rj[k + u];
    for (; k < kc; k++) s[0] += x[k] * rj[k];
    y[j] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
}

const kiln_gemm_isa_ops kiln_gemm_ops_scalar = {
    KILN_ISA_SCALAR, "f32_gemm_4x16__scalar", 4,  16, 1, f32_gemm_4x16__scalar, NULL,
    gemv_n_scalar,   gemv_t_scalar,           epilogue_row_scalar, act_scalar, NULL,
};
