/* kiln's fused operators (domain ai.kiln). Each fused node replaced a chain of standard ops
 * and keeps that chain as its "original" attribute for fallback and validation.
 *
 * FusedConv(X, W, [B], [R])      Conv, + residual R, then `activation`
 * FusedMatMul(A, B, [bias], [R]) MatMul, + bias over the last dim, + R, then `activation`
 * Activations: "" (none), Relu, LeakyRelu(act_alpha), Clip(act_alpha=min, act_beta=max),
 * Sigmoid, HardSigmoid(act_alpha, act_beta), HardSwish, Tanh, Gelu (erf form), GeluTanh.
 *
 * The convolution and matrix product run in the standard kernels, writing the output once;
 * bias, residual and activation are applied to that output in place, so no intermediate
 * tensor is materialised. */
#include <math.h>
#include <string.h>

#include "ops/cost.h"
#include "ops/fused.h"

#include <stdint.h>
#include <stdlib.h>

#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_amx.h"
#include "kernels/vec_f32.h"
#include "base/threadpool.h"
#include "ops/registry.h"

typedef enum { ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_CLIP, ACT_SIGMOID, ACT_HSIGMOID, ACT_HSWISH, ACT_TANH, ACT_GELU, ACT_GELU_TANH } act_kind;

static const struct { const char *name; act_kind k; } acts[] = {
    {"", ACT_NONE},           {"Relu", ACT_RELU},         {"LeakyRelu", ACT_LEAKY},
    {"Clip", ACT_CLIP},       {"Sigmoid", ACT_SIGMOID},   {"HardSigmoid", ACT_HSIGMOID},
    {"HardSwish", ACT_HSWISH}, {"Tanh", ACT_TANH},        {"Gelu", ACT_GELU},
    {"GeluTanh", ACT_GELU_TANH}};

bool kiln_fused_activation_known(const char *name) {
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    if (!strcmp(acts[i].name, name)) return true;
  return false;
}

static float act_apply(act_kind k, float x, float a, float b) {
  switch (k) {
    case ACT_NONE: return x;
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_LEAKY: return x >= 0 ? x : a * x;
    case ACT_CLIP: return x < a ? a : x > b ? b : x;
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case ACT_HSIGMOID: {
      float y = a * x + b;
      return y < 0 ? 0 : y > 1 ? 1 : y;
    }
    case ACT_HSWISH: {
      float y = x / 6.0f + 0.5f;
      return x * (y < 0 ? 0 : y > 1 ? 1 : y);
    }
    case ACT_TANH: return tanhf(x);
    case ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ACT_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
  return x;
}

bool kiln_fused_act(const kiln_node *n, kiln_act *act) {
  return kiln_fused_act_named(n, "activation", "act_alpha", "act_beta", act);
}

bool kiln_fused_act_named(const kiln_node *n, const char *activation, const char *alpha, const char *beta,
                          kiln_act *act) {
  static const struct { const char *name; kiln_act_kind k; float a, b; } map[] = {
      {"", KILN_ACT_NONE, 0, 0},          {"Relu", KILN_ACT_RELU, 0, 0},
      {"LeakyRelu", KILN_ACT_LEAKY_RELU, 0.01f, 0}, {"Clip", KILN_ACT_CLIP, -INFINITY, INFINITY},
      {"Sigmoid", KILN_ACT_SIGMOID, 0, 0}, {"HardSigmoid", KILN_ACT_HARD_SIGMOID, 0.2f, 0.5f},
      {"HardSwish", KILN_ACT_HARD_SWISH, 0, 0}, {"Tanh", KILN_ACT_TANH, 0, 0},
      {"Gelu", KILN_ACT_GELU, 0, 0},       {"GeluTanh", KILN_ACT_GELU_TANH, 0, 0}};
  const char *name = kiln_attr_str(n, activation, "");
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(map[i].name, name)) {
      act->kind = map[i].k;
      act->alpha = kiln_attr_float(n, alpha, map[i].a);
      act->beta = kiln_attr_float(n, beta, map[i].b);
      return true;
    }
  return false;
}

kiln_code kiln_fused_epilogue(kiln_kctx *c, kiln_tensor *y, const kiln_tensor *bias,
                              const kiln_tensor *residual) {
  if (y->dtype != KILN_FLOAT) return kiln_kunsup(c, "fused epilogue supports float only, got %s", kiln_dtype_name(y->dtype));
  const char *name = kiln_attr_str(c->node, "activation", "");
  act_kind k = ACT_NONE;
  bool found = false;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    if (!strcmp(acts[i].name, name)) {
      k = acts[i].k;
      found = true;
    }
  if (!found) return kiln_kfail(c, "unknown activation '%s'", name);
  /* act_alpha/act_beta, not alpha/beta: FusedGemm keeps Gemm's own alpha and beta */
  float a = kiln_attr_float(c->node, "act_alpha", 0.01f), b = kiln_attr_float(c->node, "act_beta", 0.0f);
  float *p = y->data;
  int64_t n = y->numel;
  if (bias) {
    if (bias->dtype != KILN_FLOAT || y->rank < 1 || bias->numel != y->dims[y->rank - 1])
      return kiln_kfail(c, "bias of %lld values does not match the last dim", (long long)bias->numel);
    const float *pb = bias->data;
    int64_t cols = bias->numel;
    for (int64_t i = 0; i < n; i++) p[i] += pb[i % cols];
  }
  if (residual) {
    if (residual->dtype != KILN_FLOAT || !kiln_same_shape(residual, y))
      return kiln_kfail(c, "residual input does not match the output shape");
    const float *pr = residual->data;
    for (int64_t i = 0; i < n; i++) p[i] += pr[i];
  }
  if (k != ACT_NONE)
    for (int64_t i = 0; i < n; i++) p[i] = act_apply(k, p[i], a, b);
  return KILN_OK;
}

/* Run the standard op `name` on this node's first n inputs (its attributes are the fused
 * node's, which carry the standard op's own). */
static kiln_code run_standard(kiln_kctx *c, const char *name, int opset, size_t n) {
  const kiln_op_schema *s = kiln_op_find("", name, opset);
  if (!s) return kiln_kfail(c, "standard op %s is not available", name);
  kiln_kctx sc = *c;
  sc.opset = opset;
  sc.n_in = n < c->n_in ? n : c->n_in;
  return s->run(&sc);
}

/* Shape function of the standard op on the first n inputs: the fused epilogue keeps shapes. */
static kiln_code infer_standard(kiln_ictx *c, const char *name, int opset, size_t n) {
  const kiln_op_schema *s = kiln_op_find("", name, opset);
  if (!s || !s->infer) return KILN_OK;
  kiln_ictx sc = *c;
  sc.opset = opset;
  sc.n_in = n < c->n_in ? n : c->n_in;
  return s->infer(&sc);
}

static kiln_code fused_conv_infer(kiln_ictx *c) { return infer_standard(c, "Conv", 11, 3); }

/* The node's activation as a kernels/act.h description; false for names it has no form of. */
static bool node_act(const kiln_kctx *c, kiln_act *out) {
  static const struct { const char *name; kiln_act_kind k; } map[] = {
      {"", KILN_ACT_NONE},           {"Relu", KILN_ACT_RELU},
      {"LeakyRelu", KILN_ACT_LEAKY_RELU}, {"Clip", KILN_ACT_CLIP},
      {"Sigmoid", KILN_ACT_SIGMOID}, {"HardSigmoid", KILN_ACT_HARD_SIGMOID},
      {"HardSwish", KILN_ACT_HARD_SWISH}, {"Tanh", KILN_ACT_TANH},
      {"Gelu", KILN_ACT_GELU},       {"GeluTanh", KILN_ACT_GELU_TANH}};
  const char *name = kiln_attr_str(c->node, "activation", "");
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(map[i].name, name)) {
      out->kind = map[i].k;
      out->alpha = kiln_attr_float(c->node, "act_alpha", 0.01f);
      out->beta = kiln_attr_float(c->node, "act_beta", 0.0f);
      return true;
    }
  return false;
}

static kiln_code fused_conv_run(kiln_kctx *c) {
  /* float32 2-D: bias, residual and activation applied inside the convolution kernel */
  kiln_act act;
  if (node_act(c, &act)) {
    kiln_kctx sc = *c;
    sc.n_in = c->n_in < 3 ? c->n_in : 3;
    kiln_code frc = kiln_conv2d_f32_run(&sc, kiln_in(c, 3), &act);
    if (frc != KILN_ERR_UNSUPPORTED) return frc;
  }
  kiln_code rc = run_standard(c, "Conv", 11, 3);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], NULL, kiln_in(c, 3));
}

/* Constant weights packed once, kept on the node: for the AMX GEMM where the CPU has it and B
 * is large enough (src/kernels/gemm_amx.h), for the float32 GEMM (src/kernels/gemm.h) when a
 * call first needs it (fewer rows than AMX takes, a strict_fp32 session, no AMX): a node whose
 * calls all run on AMX holds one copy of its weights, not two. */
typedef struct packed_weights {
  const void *source;     /* the weight tensor's data the packs are made from */
  int trans;
  kiln_gemm_packed_b *pb; /* or NULL until first needed; published with a compare-and-swap */
  kiln_amx_b *amx;        /* or NULL */
} packed_weights;

static void packed_weights_free(void *p) {
  packed_weights *w = p;
  kiln_gemm_packed_b_free(w->pb);
  kiln_amx_b_free(w->amx);
  free(w);
}

/* B sizes from which MatMul and Gemm use the AMX GEMM (with at least AMX_MIN_M rows of A):
 * the tiles are 16 x 32 and A is split per call. */
enum { AMX_MIN_K = 64, AMX_MIN_N = 64, AMX_MIN_M = 32 };

static size_t b_rows(const kiln_tensor *b, int trans) { return (size_t)b->dims[trans ? 1 : 0]; }
static size_t b_cols(const kiln_tensor *b, int trans) { return (size_t)b->dims[trans ? 0 : 1]; }

/* The packs of B for this node: made on first use and published with a compare-and-swap (a
 * losing thread frees its own); NULL when B is not the tensor they were made from. */
static packed_weights *node_weights(kiln_kctx *c, const kiln_tensor *b, int trans) {
  if (!c->state) return NULL;
  packed_weights *w = kiln_cache_get(c);
  if (!w) {
    packed_weights *mine = calloc(1, sizeof *mine);
    if (!mine) return NULL;
    mine->source = b->data;
    mine->trans = trans;
    size_t kk = b_rows(b, trans), nn = b_cols(b, trans);
    if (kk >= AMX_MIN_K && nn >= AMX_MIN_N && kiln_amx_available())
      mine->amx = kiln_amx_pack_b(b->data, kk, nn, (size_t)b->dims[1], trans); /* NULL: float32 */
    w = kiln_cache_publish(c, mine, packed_weights_free);
  }
  return w && w->source == b->data && w->trans == trans ? w : NULL;
}

/* The float32 pack of B, made on first use; NULL when B is not the node's weights or out of
 * memory (the caller then runs the GEMM on B in place). */
static const kiln_gemm_packed_b *node_packed_b(kiln_kctx *c, const kiln_tensor *b, int trans) {
  packed_weights *w = node_weights(c, b, trans);
  if (!w) return NULL;
  kiln_gemm_packed_b *pb = __atomic_load_n(&w->pb, __ATOMIC_ACQUIRE), *expected = NULL;
  if (pb) return pb;
  if (kiln_gemm_pack_b(0, trans, b_rows(b, trans), b_cols(b, trans), b->data, (size_t)b->dims[1],
                       &pb, NULL))
    return NULL;
  if (__atomic_compare_exchange_n(&w->pb, &expected, pb, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return pb;
  kiln_gemm_packed_b_free(pb);
  return expected;
}

/* The AMX form of B when this call should use it (m rows of A), else NULL. */
static const kiln_amx_b *node_amx_b(kiln_kctx *c, const kiln_tensor *b, int trans, int64_t m) {
  if (m < AMX_MIN_M || !kiln_kamx(c)) return NULL; /* kiln_kamx: AMX implies AVX-512 here */
  const packed_weights *w = node_weights(c, b, trans);
  return w ? w->amx : NULL;
}

/* ---- GELU (erf form) after the GEMM: kiln_gelu_erf_f32 (src/kernels/vec_f32.h) ---- */

typedef struct gelu_job {
  float *x;
  size_t n;
} gelu_job;

enum { GELU_CHUNK = 1 << 14 }; /* values per task: well above the cost of handing one out */

static void gelu_task(void *ctx, size_t begin, size_t end, int thread) {
  const gelu_job *j = ctx;
  (void)thread;
  size_t b = begin * GELU_CHUNK, e = end * GELU_CHUNK < j->n ? end * GELU_CHUNK : j->n;
  kiln_gelu_erf_f32(j->x + b, e - b);
}

/* x[i] = gelu(x[i]) for i < n on the pool (NULL: inline). */
static void gelu_inplace(kiln_threadpool *pool, float *x, size_t n) {
  gelu_job j = {x, n};
  size_t tasks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
  kiln_parallel_for(tasks > 1 ? pool : NULL, tasks, gelu_task, &j, 1);
}

/* FusedMatMul with 2-D float weights: one GEMM over all rows of A with the epilogue (bias,
 * activation, residual) applied to each tile while it is in registers; GELU (erf) is applied
 * after the GEMM by gelu_inplace, which is cheaper than the GEMM's own form. */
static kiln_code fused_matmul_fast(kiln_kctx *c, bool *done) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1), *bias = kiln_in(c, 2), *res = kiln_in(c, 3);
  *done = false;
  kiln_act act;
  if (!a || !b || a->kind != KILN_KIND_TENSOR || b->kind != KILN_KIND_TENSOR || a->dtype != KILN_FLOAT ||
      b->dtype != KILN_FLOAT || b->rank != 2 || a->rank < 2 || a->dims[a->rank - 1] != b->dims[0] ||
      !kiln_fused_act(c->node, &act))
    return KILN_OK;
  int64_t k = b->dims[0], n = b->dims[1], m = k ? a->numel / k : 0;
  if (bias && (bias->dtype != KILN_FLOAT || bias->numel != n)) return KILN_OK;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
  dims[a->rank - 1] = n;
  if (res && (res->dtype != KILN_FLOAT || res->rank != a->rank || memcmp(res->dims, dims, sizeof(int64_t) * (size_t)a->rank)))
    return KILN_OK;
  if (!m || !n || !k) return KILN_OK;
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, a->rank, dims); /* beta 0: C is only written */
  if (!y) return KILN_ERR_NOMEM;
  kiln_gemm_ctx g = {kiln_kpool(c), 0};
  /* the residual is added before the activation in both forms */
  bool gelu_after = act.kind == KILN_ACT_GELU;
  kiln_gemm_epilogue ep = {bias ? bias->data : NULL, act, res ? res->data : NULL, (size_t)n, 0};
  if (gelu_after) ep.act.kind = KILN_ACT_NONE;
  const kiln_amx_b *ab = node_amx_b(c, b, 0, m);
  const kiln_gemm_packed_b *pb = ab ? NULL : node_packed_b(c, b, 0);
  kiln_code rc = ab ? kiln_amx_gemm_ab(g.pool, (size_t)m, a->data, (size_t)k, ab, y->data, (size_t)n, ep.bias,
                                       ep.residual, (size_t)n, &ep.act)
                 : pb ? kiln_gemm_f32_packed(&g, 0, (size_t)m, 1.0f, a->data, (size_t)k, pb, 0.0f, y->data, (size_t)n, &ep, c->err)
                      : kiln_gemm_f32(&g, 0, 0, (size_t)m, (size_t)n, (size_t)k, 1.0f, a->data, (size_t)k, b->data,
                                      (size_t)n, 0.0f, y->data, (size_t)n, &ep, c->err);
  if (rc && ab) rc = kiln_kfail(c, "AMX GEMM failed (code %d)", (int)rc);
  if (rc == KILN_OK && gelu_after) gelu_inplace(g.pool, y->data, (size_t)y->numel);
  *done = rc == KILN_OK;
  return rc;
}

/* Session creation (kiln_prepare_fn): the packs of B that a call with m rows of A (-1:
 * unknown) takes: the AMX form where amx_form allows it, else the float32 one. With m unknown,
 * the float32 pack waits for a call that needs it, unless AMX is out of the question. */
static kiln_code prepare_b(kiln_kctx *c, const kiln_tensor *b, int trans, int64_t m, bool amx_form) {
  const packed_weights *w = node_weights(c, b, trans);
  if (!w) return KILN_ERR_NOMEM;
  bool amx = amx_form && w->amx && kiln_kamx(c);
  if (amx && (m < 0 || m >= AMX_MIN_M)) return KILN_OK;
  return node_packed_b(c, b, trans) ? KILN_OK : KILN_ERR_NOMEM;
}

/* Rows of A: the product of its dims but the last, -1 when one is unknown. */
static int64_t rows_of(const kiln_tensor *a, int last) {
  int64_t m = 1;
  for (int d = 0; d < a->rank; d++)
    if (d != last) m = a->dims[d] < 0 || m < 0 ? -1 : m * a->dims[d];
  return m;
}

kiln_code kiln_fused_matmul_prepare(kiln_kctx *c) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1);
  if (!a || !kiln_in_const(c, 1, b) || a->dtype != KILN_FLOAT || b->dtype != KILN_FLOAT ||
      b->rank != 2 || a->rank < 2 || a->dims[a->rank - 1] != b->dims[0] || !b->dims[0])
    return KILN_ERR_UNSUPPORTED;
  return prepare_b(c, b, 0, rows_of(a, a->rank - 1), true);
}

kiln_code kiln_fused_gemm_prepare(kiln_kctx *c) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1);
  if (!a || !kiln_in_const(c, 1, b) || a->dtype != KILN_FLOAT || b->dtype != KILN_FLOAT ||
      a->rank != 2 || b->rank != 2)
    return KILN_ERR_UNSUPPORTED;
  int ta = kiln_attr_int(c->node, "transA", 0) != 0, tb = kiln_attr_int(c->node, "transB", 0) != 0;
  float alpha = kiln_attr_float(c->node, "alpha", 1.0f);
  return prepare_b(c, b, tb, rows_of(a, !ta), !ta && alpha == 1.0f);
}

kiln_code kiln_fused_matmul_run(kiln_kctx *c) {
  bool done;
  kiln_code rc = fused_matmul_fast(c, &done);
  if (rc || done) return rc;
  rc = run_standard(c, "MatMul", 13, 2);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], kiln_in(c, 2), kiln_in(c, 3));
}

/* FusedGemm with float A, B and a bias-like C (beta 1, C of N values): alpha * op(A) op(B) in
 * the GEMM with bias and activation in its epilogue, weights packed once per node. */
static kiln_code fused_gemm_fast(kiln_kctx *c, bool *done) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1), *cc = kiln_in(c, 2);
  *done = false;
  if (cc && cc->kind == KILN_KIND_NONE) cc = NULL;
  kiln_act act;
  if (!a || !b || a->kind != KILN_KIND_TENSOR || b->kind != KILN_KIND_TENSOR || a->dtype != KILN_FLOAT ||
      b->dtype != KILN_FLOAT || a->rank != 2 || b->rank != 2 || !kiln_fused_act(c->node, &act))
    return KILN_OK;
  int ta = kiln_attr_int(c->node, "transA", 0) != 0, tb = kiln_attr_int(c->node, "transB", 0) != 0;
  float alpha = kiln_attr_float(c->node, "alpha", 1.0f), beta = kiln_attr_float(c->node, "beta", 1.0f);
  int64_t m = a->dims[ta], k = a->dims[!ta], n = b->dims[!tb];
  if (b->dims[tb] != k || !m || !n || !k) return KILN_OK;
  bool vec = cc && cc->kind == KILN_KIND_TENSOR && cc->dtype == KILN_FLOAT && cc->numel == n &&
             cc->dims[cc->rank - 1] == n;
  if (cc && (!vec || beta != 1.0f)) return KILN_OK;
  int64_t dims[2] = {m, n};
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, 2, dims); /* beta 0: C is only written */
  if (!y) return KILN_ERR_NOMEM;
  kiln_gemm_ctx g = {kiln_kpool(c), 0};
  kiln_gemm_epilogue ep = {cc ? cc->data : NULL, act, NULL, 0, 0};
  const kiln_amx_b *ab = !ta && alpha == 1.0f ? node_amx_b(c, b, tb, m) : NULL;
  const kiln_gemm_packed_b *pb = ab ? NULL : node_packed_b(c, b, tb);
  kiln_code rc = ab ? kiln_amx_gemm_ab(g.pool, (size_t)m, a->data, (size_t)k, ab, y->data, (size_t)n, ep.bias, NULL, 0,
                                       &ep.act)
                 : pb ? kiln_gemm_f32_packed(&g, ta, (size_t)m, alpha, a->data, (size_t)a->dims[1], pb, 0.0f, y->data,
                                           (size_t)n, &ep, c->err)
                    : kiln_gemm_f32(&g, ta, tb, (size_t)m, (size_t)n, (size_t)k, alpha, a->data, (size_t)a->dims[1],
                                    b->data, (size_t)b->dims[1], 0.0f, y->data, (size_t)n, &ep, c->err);
  if (rc && ab) rc = kiln_kfail(c, "AMX GEMM failed (code %d)", (int)rc);
  *done = rc == KILN_OK;
  return rc;
}

kiln_code kiln_fused_gemm_run(kiln_kctx *c) {
  bool done;
  kiln_code rc = fused_gemm_fast(c, &done);
  if (rc || done) return rc;
  rc = run_standard(c, "Gemm", 13, 3);
  if (rc) return rc;
  return kiln_fused_epilogue(c, c->out[0], NULL, NULL);
}

/* FusedConvMaxPool: the convolution's type, then the pooling's spatial dims. */
static kiln_code fused_conv_pool_infer(kiln_ictx *c) {
  kiln_code rc = infer_standard(c, "Conv", 11, 3);
  kiln_type *t = c->out[0];
  if (rc || t->kind != KILN_T_TENSOR || t->rank != 4) return rc;
  kiln_pool2d_params q;
  if (!kiln_fused_pool_params(c->node, t->dims[2], t->dims[3], &q))
    return kiln_ifail(c, "pool_kernel_shape must have 2 values, pool_strides 2, pool_pads 4");
  t->dims[2] = q.oh;
  t->dims[3] = q.ow;
  return KILN_OK;
}

static kiln_code fused_conv_pool_run(kiln_kctx *c) {
  kiln_act act;
  if (!node_act(c, &act)) return kiln_kfail(c, "unknown activation '%s'", kiln_attr_str(c->node, "activation", ""));
  return kiln_conv2d_f32_maxpool_run(c, &act);
}

const kiln_op_schema kiln_ops_fused[] = {
    {.domain = KILN_FUSED_DOMAIN, .name = "FusedConv", .since = 1, .inputs = {2, 4}, .outputs = {1, 1},
     .infer = fused_conv_infer, .run = fused_conv_run,
     .prepare = kiln_conv2d_f32_prepare, .cost = kiln_cost_conv, .flow = KILN_FLOW_BATCH},
    {.domain = KILN_FUSED_DOMAIN, .name = "FusedConvMaxPool", .since = 1, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = fused_conv_pool_infer, .run = fused_conv_pool_run, .cost = kiln_cost_conv_pool},
    {0},
};
