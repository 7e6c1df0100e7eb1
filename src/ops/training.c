/* Optimizer operators of the ai.onnx.preview.training domain (version 1): Adagrad, Adam,
 * Momentum. Each takes a learning rate R and an update count T (scalars), then n tensors to
 * optimize followed by their gradients and their optimizer states, block by block:
 *   Adagrad:  X[n], G[n], H[n]        -> X_new[n], H_new[n]
 *   Adam:     X[n], G[n], V[n], H[n]  -> X_new[n], V_new[n], H_new[n]
 *   Momentum: X[n], G[n], V[n]        -> X_new[n], V_new[n]
 * Input block 1 (the gradients) has no output; every other block b has output block
 * b == 0 ? 0 : b - 1. The update formulas are the spec's, evaluated in double.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"

#define TRAINING_DOMAIN "ai.onnx.preview.training"

typedef enum optkind { OPT_ADAGRAD, OPT_ADAM, OPT_MOMENTUM } optkind;

static int blocks_in(optkind k) { return k == OPT_ADAM ? 4 : 3; }

/* Number of optimized tensors, or -1 when the arities do not fit the block layout. */
static int64_t group_count(optkind k, size_t n_in, size_t n_out) {
  int bi = blocks_in(k);
  if (n_in < 2 || (n_in - 2) % (size_t)bi != 0) return -1;
  size_t n = (n_in - 2) / (size_t)bi;
  if (n == 0 || n_out != n * (size_t)(bi - 1)) return -1;
  return (int64_t)n;
}

typedef struct optattrs {
  double alpha, beta, eps, decay, norm, norm_post;
  bool nesterov;
} optattrs;

static kiln_code get_attrs(kiln_kctx *c, optkind k, optattrs *a) {
  const kiln_node *n = c->node;
  memset(a, 0, sizeof *a);
  a->norm = kiln_attr_float(n, "norm_coefficient", 0.0f);
  switch (k) {
    case OPT_ADAGRAD:
      a->eps = kiln_attr_float(n, "epsilon", 1e-6f);
      a->decay = kiln_attr_float(n, "decay_factor", 0.0f);
      break;
    case OPT_ADAM:
      a->alpha = kiln_attr_float(n, "alpha", 0.9f);
      a->beta = kiln_attr_float(n, "beta", 0.999f);
      a->eps = kiln_attr_float(n, "epsilon", 1e-6f);
      a->norm_post = kiln_attr_float(n, "norm_coefficient_post", 0.0f);
      break;
    case OPT_MOMENTUM: {
      static const char *const req[] = {"alpha", "beta", "mode", "norm_coefficient"};
      for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!kiln_node_attr(n, req[i]))
          return kiln_kfail(c, "required attribute '%s' is missing", req[i]);
      a->alpha = kiln_attr_float(n, "alpha", 0.0f);
      a->beta = kiln_attr_float(n, "beta", 0.0f);
      const char *mode = kiln_attr_str(n, "mode", "");
      if (strcmp(mode, "nesterov") == 0)
        a->nesterov = true;
      else if (strcmp(mode, "standard") != 0)
        return kiln_kfail(c, "mode must be 'standard' or 'nesterov', got '%s'", mode);
      break;
    }
  }
  return KILN_OK;
}

static kiln_code optimizer_run(kiln_kctx *c, optkind k) {
  int64_t n = group_count(k, c->n_in, c->n_out);
  if (n < 0)
    return kiln_kfail(c, "%zu inputs and %zu outputs do not form R, T and %d blocks of tensors "
                      "with %d output blocks", c->n_in, c->n_out, blocks_in(k), blocks_in(k) - 1);
  const kiln_tensor *R = c->in[0], *T = c->in[1];
  if (!R || R->kind != KILN_KIND_TENSOR || !kiln_dtype_is_float(R->dtype) || R->numel != 1)
    return kiln_kfail(c, "input 'R' must be a floating-point scalar");
  if (!T || T->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(T->dtype) || T->numel != 1)
    return kiln_kfail(c, "input 'T' must be an integer scalar");
  optattrs a;
  kiln_code rc = get_attrs(c, k, &a);
  if (rc) return rc;
  double r = kiln_load_f64(R, 0);
  int64_t t = kiln_get_i64(T, 0);
  int bi = blocks_in(k);

  for (int64_t i = 0; i < n; i++) {
    const kiln_tensor *in[4] = {NULL, NULL, NULL, NULL};
    kiln_tensor *out[3] = {NULL, NULL, NULL};
    for (int b = 0; b < bi; b++) {
      in[b] = c->in[2 + b * n + i];
      if (!in[b] || in[b]->kind != KILN_KIND_TENSOR || !kiln_dtype_is_float(in[b]->dtype))
        return kiln_kfail(c, "input %lld must be a floating-point tensor", (long long)(2 + b * n + i));
      if (b > 0 && !kiln_same_shape(in[b], in[0])) {
        char s1[96], s2[96];
        return kiln_kfail(c, "input %lld has shape %s, unlike its tensor's %s",
                          (long long)(2 + b * n + i), kiln_shape_str(in[b], s1, sizeof s1),
                          kiln_shape_str(in[0], s2, sizeof s2));
      }
    }
    for (int b = 0; b < bi - 1; b++) {
      const kiln_tensor *src = in[b == 0 ? 0 : b + 1];
      out[b] = kiln_out(c, (size_t)(b * n + i), src->dtype, src->rank, src->dims);
      if (!out[b]) return c->err->code;
    }
    const kiln_tensor *X = in[0], *G = in[1];
    for (int64_t j = 0; j < X->numel; j++) {
      double x = kiln_load_f64(X, j), g = a.norm * x + kiln_load_f64(G, j); /* gradient with L2 regularization */
      switch (k) {
        case OPT_ADAGRAD: {
          double rr = r / (1 + (double)t * a.decay);
          double h = kiln_load_f64(in[2], j) + g * g;
          kiln_store_f64(out[0], j, x - rr * g / (sqrt(h) + a.eps));
          kiln_store_f64(out[1], j, h);
          break;
        }
        case OPT_ADAM: {
          double v = a.alpha * kiln_load_f64(in[2], j) + (1 - a.alpha) * g;
          double h = a.beta * kiln_load_f64(in[3], j) + (1 - a.beta) * g * g;
          /* Bias correction only once updates have happened (T > 0). */
          double rr = t > 0 ? r * sqrt(1 - pow(a.beta, (double)t)) / (1 - pow(a.alpha, (double)t))
                            : r;
          double xn = x - rr * v / (sqrt(h) + a.eps);
          kiln_store_f64(out[0], j, (1 - a.norm_post) * xn);
          kiln_store_f64(out[1], j, v);
          kiln_store_f64(out[2], j, h);
          break;
        }
        case OPT_MOMENTUM: {
          /* The first update (T == 0) takes the whole gradient. */
          double beta = t > 0 ? a.beta : 1.0;
          double v = a.alpha * kiln_load_f64(in[2], j) + beta * g;
          kiln_store_f64(out[0], j, a.nesterov ? x - r * (g + a.alpha * v) : x - r * v);
          kiln_store_f64(out[1], j, v);
          break;
        }
      }
    }
  }
  return KILN_OK;
}

static kiln_code optimizer_infer(kiln_ictx *c, optkind k) {
  int64_t n = group_count(k, c->n_in, c->n_out);
  if (n < 0)
    return kiln_ifail(c, "%zu inputs and %zu outputs do not form R, T and %d blocks of tensors "
                      "with %d output blocks", c->n_in, c->n_out, blocks_in(k), blocks_in(k) - 1);
  for (int b = 0; b < blocks_in(k) - 1; b++)
    for (int64_t i = 0; i < n; i++)
      kiln_infer_same(c, (size_t)(b * n + i), (size_t)(2 + (b == 0 ? 0 : b + 1) * n + i));
  return KILN_OK;
}

static kiln_code adagrad_run(kiln_kctx *c) { return optimizer_run(c, OPT_ADAGRAD); }
static kiln_code adam_run(kiln_kctx *c) { return optimizer_run(c, OPT_ADAM); }
static kiln_code momentum_run(kiln_kctx *c) { return optimizer_run(c, OPT_MOMENTUM); }
static kiln_code adagrad_infer(kiln_ictx *c) { return optimizer_infer(c, OPT_ADAGRAD); }
static kiln_code adam_infer(kiln_ictx *c) { return optimizer_infer(c, OPT_ADAM); }
static kiln_code momentum_infer(kiln_ictx *c) { return optimizer_infer(c, OPT_MOMENTUM); }

const kiln_op_schema kiln_ops_training[] = {
    {.domain = TRAINING_DOMAIN, .name = "Adagrad", .since = 1,
     .inputs = {5, KILN_VARIADIC}, .outputs = {2, KILN_VARIADIC},
     .infer = adagrad_infer, .run = adagrad_run},
    {.domain = TRAINING_DOMAIN, .name = "Adam", .since = 1,
     .inputs = {6, KILN_VARIADIC}, .outputs = {3, KILN_VARIADIC},
     .infer = adam_infer, .run = adam_run},
    {.domain = TRAINING_DOMAIN, .name = "Momentum", .since = 1,
     .inputs = {5, KILN_VARIADIC}, .outputs = {2, KILN_VARIADIC},
     .infer = momentum_infer, .run = momentum_run},
    {0},
};
