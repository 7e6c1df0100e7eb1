/* RMSNormalization (opset 23), beside LayerNormalization:
 *   Y = X / sqrt(mean(X^2 over axes axis..rank-1) + epsilon) * scale
 * scale broadcasts to the normalised shape (X's dims from axis on). Rows are independent: one
 * pass for the mean square (summed in double), one writing y = x * inv * scale through kiln's
 * LayerNorm row kernel (kiln_ln_norm_f32 with mean 0), rows spread over the session's pool.
 * float32 on that path; double, float16 and bfloat16 through double arithmetic. The same kernel
 * is ai.kiln::RMSNorm (X, [gamma]), what src/opt/fuse_rmsnorm.c makes of the decomposed chain. */
#include <math.h>
#include <stdlib.h>

#include "base/threadpool.h"
#include "kernels/vec_f32.h"
#include "ops/cost.h"
#include "ops/op.h"

enum { PAR_MIN = 1 << 15, PAR_TASK = 1 << 14 };

typedef struct rms_job {
  const float *x;
  float *y;
  const float *scale; /* n values */
  int64_t n;
  float eps;
} rms_job;

static void rms_task(void *ctx, size_t begin, size_t end, int thread) {
  const rms_job *j = ctx;
  (void)thread;
  for (size_t r = begin; r < end; r++) {
    const float *x = j->x + (int64_t)r * j->n;
    double s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 1 < j->n; i += 2) {
      s0 += (double)x[i] * x[i];
      s1 += (double)x[i + 1] * x[i + 1];
    }
    if (i < j->n) s0 += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt((s0 + s1) / (double)j->n + (double)j->eps));
    kiln_ln_norm_f32(j->y + (int64_t)r * j->n, x, j->n, 0.0f, inv, j->scale, NULL);
  }
}

/* scale broadcast to the normalised dims (rank k, dims) as n doubles, or NULL (c->err set). */
static double *expand_scale(kiln_kctx *c, const kiln_tensor *s, int k, const int64_t *dims, int64_t n) {
  if (s->rank > k) return kiln_kfail(c, "scale has rank %d, above the %d normalised dims", s->rank, k), NULL;
  for (int d = 1; d <= s->rank; d++)
    if (s->dims[s->rank - d] != 1 && s->dims[s->rank - d] != dims[k - d])
      return kiln_kfail(c, "scale does not broadcast to the normalised dims"), NULL;
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v) return kiln_kfail(c, "out of memory"), NULL;
  kiln_bcast b;
  kiln_bcast_init(&b, k, dims, s);
  for (int64_t i = 0; i < n; i++) v[i] = kiln_get_f64(s, kiln_bcast_index(&b, i));
  return v;
}

static float one_value = 1.0f;
static const kiln_tensor one_scale = {.kind = KILN_KIND_TENSOR, .dtype = KILN_FLOAT, .rank = 0, .numel = 1,
                                      .data = &one_value, .nbytes = sizeof one_value, .borrowed = true};

static kiln_code rms_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0), *s = kiln_in(c, 1);
  if (!s && *c->node->domain) s = &one_scale; /* ai.kiln::RMSNorm without gamma */
  if (!s) return kiln_kfail(c, "input 1 (scale) is missing");
  if (!kiln_dtype_is_float(x->dtype) || (s->dtype != x->dtype && s != &one_scale))
    return kiln_kfail(c, "X must be a float tensor and scale of the same type (%s, %s)", kiln_dtype_name(x->dtype),
                      kiln_dtype_name(s->dtype));
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -1), x->rank);
  if (axis < 0) return c->err->code;
  int k = x->rank - axis;
  int64_t n = kiln_numel(k, x->dims + axis), rows = kiln_numel(axis, x->dims);
  float eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  double *sc = expand_scale(c, s, k, x->dims + axis, n);
  if (!sc) return c->err->code;
  kiln_tensor *y = kiln_out_uninit(c, 0, x->dtype, x->rank, x->dims);
  if (!y) {
    free(sc);
    return c->err->code;
  }
  if (x->dtype == KILN_FLOAT && n > 0) {
    float *scf = malloc((size_t)n * sizeof *scf);
    if (!scf) {
      free(sc);
      return kiln_kfail(c, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) scf[i] = (float)sc[i];
    rms_job j = {x->data, y->data, scf, n, eps};
    kiln_threadpool *pool = rows * n >= PAR_MIN ? kiln_kpool(c) : NULL;
    kiln_parallel_for(pool, (size_t)rows, rms_task, &j, n >= PAR_TASK ? 1 : (size_t)(PAR_TASK / n));
    free(scf);
  } else {
    for (int64_t r = 0; r < rows; r++) {
      double ss = 0;
      for (int64_t i = 0; i < n; i++) {
        double v = kiln_load_f64(x, r * n + i);
        ss += v * v;
      }
      double inv = 1.0 / sqrt(ss / (double)(n ? n : 1) + (double)eps);
      for (int64_t i = 0; i < n; i++) kiln_store_f64(y, r * n + i, kiln_load_f64(x, r * n + i) * inv * sc[i]);
    }
  }
  free(sc);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_rms_norm[] = {
    {.domain = "", .name = "RMSNormalization", .since = 23, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = rms_run, .cost = kiln_cost_norm, .flow = KILN_FLOW_SAME},
    /* the decomposed chain of an older export (src/opt/fuse_rmsnorm.c); gamma optional */
    {.domain = KILN_FUSED_DOMAIN, .name = "RMSNorm", .since = 1, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = rms_run, .cost = kiln_cost_norm, .flow = KILN_FLOW_SAME},
    {0},
};
