/* Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
 *
 * Both see the input as (N, C, D) with D the product of the trailing dims and the target as
 * (N, D). Each position contributes -input[n, target[n,d], d] * weight[target[n,d]], or nothing
 * (weight 0) when target equals ignore_index. reduction "mean" divides the sum by the total
 * weight of the counted positions (their count without weights), as the spec's reference does.
 * SoftmaxCrossEntropyLoss applies this to LogSoftmax of the scores along axis 1.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

typedef enum reduction { RED_NONE, RED_SUM, RED_MEAN } reduction;

static bool get_reduction(const kiln_node *node, reduction *r) {
  const char *s = kiln_attr_str(node, "reduction", "mean");
  if (strcmp(s, "none") == 0)
    *r = RED_NONE;
  else if (strcmp(s, "sum") == 0)
    *r = RED_SUM;
  else if (strcmp(s, "mean") == 0)
    *r = RED_MEAN;
  else
    return false;
  return true;
}

/* Check input (N, C, d1..dk), target (N, d1..dk) and weight (C); set N, C, D. */
static kiln_code check_shapes(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *t,
                              const kiln_tensor *w, int64_t *N, int64_t *C, int64_t *D) {
  char a[96], b[96];
  if (!x || x->kind != KILN_KIND_TENSOR || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "input 0 must be a floating-point tensor");
  if (x->rank < 2) return kiln_kfail(c, "input 0 must have rank >= 2 (N, C, ...)");
  if (!t || t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype))
    return kiln_kfail(c, "input 1 (target) must be an integer tensor");
  bool ok = t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
  for (int d = 2; ok && d < x->rank; d++) ok = t->dims[d - 1] == x->dims[d];
  if (!ok)
    return kiln_kfail(c, "target shape %s does not match input shape %s (expected N, d1..dk)",
                      kiln_shape_str(t, a, sizeof a), kiln_shape_str(x, b, sizeof b));
  *N = x->dims[0];
  *C = x->dims[1];
  *D = 1;
  for (int d = 2; d < x->rank; d++) *D *= x->dims[d];
  if (w) {
    if (w->kind != KILN_KIND_TENSOR || !kiln_dtype_is_float(w->dtype))
      return kiln_kfail(c, "input 2 (weight) must be a floating-point tensor");
    if (w->rank != 1 || w->dims[0] != *C)
      return kiln_kfail(c, "weight shape %s does not match C = %lld",
                        kiln_shape_str(w, a, sizeof a), (long long)*C);
  }
  return KILN_OK;
}

/* The NLL part shared by both ops; lp(n, c, d) = lp[(n*C + c)*D + d] when lp is given,
 * else the input tensor x itself. Writes output 0. */
static kiln_code nll(kiln_kctx *c, const kiln_tensor *x, const double *lp, const kiln_tensor *t,
                     const kiln_tensor *w, int64_t N, int64_t C, int64_t D) {
  reduction red;
  if (!get_reduction(c->node, &red))
    return kiln_kfail(c, "reduction must be 'none', 'sum' or 'mean'");
  const kiln_attr *ia = kiln_node_attr(c->node, "ignore_index");
  bool has_ii = ia != NULL;
  int64_t ii = has_ii ? ia->i : 0;

  kiln_tensor *y = red == RED_NONE ? kiln_out(c, 0, x->dtype, t->rank, t->dims)
                                   : kiln_out(c, 0, x->dtype, 0, NULL);
  if (!y) return c->err->code;
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      int64_t ti = n * D + d, cls = kiln_get_i64(t, ti);
      double loss = 0;
      if (!(has_ii && cls == ii)) {
        if (cls < 0 || cls >= C)
          return kiln_kfail(c, "target value %lld at position %lld is outside [0, %lld)",
                            (long long)cls, (long long)ti, (long long)C);
        int64_t xi = (n * C + cls) * D + d;
        double wt = w ? kiln_load_f64(w, cls) : 1.0;
        loss = -(lp ? lp[xi] : kiln_load_f64(x, xi)) * wt;
        wsum += wt;
      }
      if (red == RED_NONE)
        kiln_store_f64(y, ti, loss);
      else
        sum += loss;
    }
  /* An all-ignored mean is 0/0 = NaN, as in the reference. */
  if (red == RED_SUM) kiln_store_f64(y, 0, sum);
  if (red == RED_MEAN) kiln_store_f64(y, 0, sum / wsum);
  return KILN_OK;
}

static kiln_code nllloss_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0], *t = c->in[1], *w = kiln_in(c, 2);
  int64_t N = 0, C = 0, D = 0;
  kiln_code rc = check_shapes(c, x, t, w, &N, &C, &D);
  if (rc) return rc;
  return nll(c, x, NULL, t, w, N, C, D);
}

static kiln_code sce_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0], *t = c->in[1], *w = kiln_in(c, 2);
  int64_t N = 0, C = 0, D = 0;
  kiln_code rc = check_shapes(c, x, t, w, &N, &C, &D);
  if (rc) return rc;
  double *lp = malloc((size_t)(x->numel ? x->numel : 1) * sizeof *lp);
  if (!lp) return kiln_kfail(c, "out of memory");
  /* LogSoftmax over the class axis, shifted by the maximum for stability. */
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      int64_t base = n * C * D + d;
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < C; k++) {
        double v = kiln_load_f64(x, base + k * D);
        if (v > mx) mx = v;
      }
      for (int64_t k = 0; k < C; k++) s += exp(kiln_load_f64(x, base + k * D) - mx);
      double lse = mx + log(s);
      for (int64_t k = 0; k < C; k++) lp[base + k * D] = kiln_load_f64(x, base + k * D) - lse;
    }
  rc = nll(c, x, lp, t, w, N, C, D);
  if (!rc && kiln_out_used(c, 1)) {
    kiln_tensor *o = kiln_out(c, 1, x->dtype, x->rank, x->dims);
    if (!o)
      rc = c->err->code;
    else
      for (int64_t i = 0; i < x->numel; i++) kiln_store_f64(o, i, lp[i]);
  }
  free(lp);
  return rc;
}

static kiln_code loss_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *t = c->in[1];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  reduction red;
  if (!get_reduction(c->node, &red))
    return kiln_ifail(c, "reduction must be 'none', 'sum' or 'mean'");
  if (x->rank >= 0 && x->rank < 2) return kiln_ifail(c, "input 0 must have rank >= 2 (N, C, ...)");
  if (red != RED_NONE)
    kiln_infer_tensor(c, 0, x->dtype, 0, NULL);
  else if (t && t->kind == KILN_T_TENSOR)
    kiln_infer_tensor(c, 0, x->dtype, t->rank, t->rank >= 0 ? t->dims : NULL);
  else
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
  kiln_infer_same(c, 1, 0); /* SoftmaxCrossEntropyLoss's log_prob */
  return KILN_OK;
}

const kiln_op_schema kiln_ops_loss[] = {
    {.domain = "", .name = "NegativeLogLikelihoodLoss", .since = 12, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = loss_infer, .run = nllloss_run},
    {.domain = "", .name = "SoftmaxCrossEntropyLoss", .since = 12, .inputs = {2, 3}, .outputs = {1, 2},
     .infer = loss_infer, .run = sce_run},
    {0},
};
