/* Normalization operators: BatchNormalization, InstanceNormalization, LayerNormalization, LRN,
 * MeanVarianceNormalization. Statistics are computed in double whatever the element type.
 */
#include <math.h>
#include <stdlib.h>

#include "ops/cost.h"
#include "ops/op.h"

static bool is_float_tensor(const kiln_tensor *t) {
  return t && t->kind == KILN_KIND_TENSOR && kiln_dtype_is_float(t->dtype);
}

/* Read a per-channel parameter of exactly `n` elements into a new double array. */
static double *load_param(kiln_kctx *c, const kiln_tensor *t, const char *name, int64_t n) {
  if (!is_float_tensor(t)) {
    kiln_kfail(c, "input '%s' must be a floating-point tensor", name);
    return NULL;
  }
  if (t->numel != n) {
    char buf[96];
    kiln_kfail(c, "input '%s' has shape %s; %lld elements expected", name,
               kiln_shape_str(t, buf, sizeof buf), (long long)n);
    return NULL;
  }
  double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  if (!p) {
    kiln_kfail(c, "out of memory");
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) p[i] = kiln_load_f64(t, i);
  return p;
}

/* ---- BatchNormalization ---- */

/* Layout shared by BatchNormalization and InstanceNormalization: X is (N, C, spatial...). */
typedef struct nchw {
  int64_t n, c, s; /* batch, channels, product of the spatial dims */
} nchw;

static bool get_nchw(kiln_kctx *c, const kiln_tensor *x, nchw *l) {
  if (!is_float_tensor(x)) {
    kiln_kfail(c, "input 'X' must be a floating-point tensor");
    return false;
  }
  if (x->rank < 2) {
    kiln_kfail(c, "input 'X' must have rank >= 2 (N, C, ...), got rank %d", x->rank);
    return false;
  }
  l->n = x->dims[0];
  l->c = x->dims[1];
  l->s = 1;
  for (int d = 2; d < x->rank; d++) l->s *= x->dims[d];
  return true;
}

static kiln_code batchnorm_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  nchw l;
  if (!get_nchw(c, x, &l)) return KILN_ERR_RUN;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  double momentum = kiln_attr_float(c->node, "momentum", 0.9f);
  /* Before opset 9, spatial=0 gives every (C, D1, ...) position its own parameters. */
  bool spatial = c->opset >= 9 || kiln_attr_int(c->node, "spatial", 1) != 0;
  /* Training mode: an attribute from opset 14; before, implied by asking for the statistics
   * outputs (the spec's "output case #1"). */
  bool training = c->opset >= 14 ? kiln_attr_int(c->node, "training_mode", 0) != 0
                                 : kiln_out_used(c, 1) || kiln_out_used(c, 2);
  if (c->opset < 14 && (kiln_out_used(c, 3) || kiln_out_used(c, 4)))
    return kiln_kunsup(c, "the saved_mean / saved_var outputs of opset %d are not supported",
                       c->opset);
  if (c->opset >= 14 && !training && (kiln_out_used(c, 1) || kiln_out_used(c, 2)))
    return kiln_kfail(c, "running_mean / running_var outputs require training_mode=1");

  int64_t np = spatial ? l.c : l.c * l.s;       /* number of parameter sets */
  int64_t inner = spatial ? l.s : 1;            /* elements per (n, parameter) run */
  int64_t count = x->numel / (np ? np : 1);     /* elements each parameter set covers */
  const char *names[4] = {"scale", "B", "input_mean", "input_var"};
  double *p[4] = {NULL, NULL, NULL, NULL};
  double *bm = NULL, *bv = NULL;
  kiln_code rc = KILN_OK;
  for (int k = 0; k < 4; k++)
    if (!(p[k] = load_param(c, kiln_in(c, 1 + (size_t)k), names[k], np))) {
      rc = KILN_ERR_RUN;
      goto done;
    }
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) {
    rc = c->err->code;
    goto done;
  }
  const double *mean = p[2], *var = p[3];
  if (training) {
    /* Batch statistics per parameter set (population variance, as the spec's reference). */
    bm = calloc((size_t)(np ? np : 1), sizeof *bm);
    bv = calloc((size_t)(np ? np : 1), sizeof *bv);
    if (!bm || !bv) {
      rc = kiln_kfail(c, "out of memory");
      goto done;
    }
    for (int64_t n = 0; n < l.n; n++)
      for (int64_t q = 0; q < np; q++)
        for (int64_t s = 0; s < inner; s++) bm[q] += kiln_load_f64(x, (n * np + q) * inner + s);
    for (int64_t q = 0; q < np; q++) bm[q] /= (double)count;
    for (int64_t n = 0; n < l.n; n++)
      for (int64_t q = 0; q < np; q++)
        for (int64_t s = 0; s < inner; s++) {
          double d = kiln_load_f64(x, (n * np + q) * inner + s) - bm[q];
          bv[q] += d * d;
        }
    for (int64_t q = 0; q < np; q++) bv[q] /= (double)count;
    mean = bm;
    var = bv;
    for (int k = 1; k <= 2; k++) {
      if (!kiln_out_used(c, (size_t)k)) continue;
      const kiln_tensor *src = c->in[2 + k];
      kiln_tensor *o = kiln_out(c, (size_t)k, src->dtype, src->rank, src->dims);
      if (!o) {
        rc = c->err->code;
        goto done;
      }
      const double *run = k == 1 ? p[2] : p[3], *batch = k == 1 ? bm : bv;
      for (int64_t q = 0; q < np; q++) kiln_store_f64(o, q, run[q] * momentum + batch[q] * (1 - momentum));
    }
  }
  for (int64_t n = 0; n < l.n; n++)
    for (int64_t q = 0; q < np; q++) {
      double a = p[0][q] / sqrt(var[q] + eps), b = p[1][q] - mean[q] * a;
      int64_t base = (n * np + q) * inner;
      if (x->dtype == KILN_FLOAT) { /* the same double arithmetic without a call per element */
        const float *xs = (const float *)x->data + base;
        float *ys = (float *)y->data + base;
        for (int64_t s = 0; s < inner; s++) ys[s] = (float)((double)xs[s] * a + b);
        continue;
      }
      for (int64_t s = 0; s < inner; s++) kiln_store_f64(y, base + s, kiln_load_f64(x, base + s) * a + b);
    }
done:
  for (int k = 0; k < 4; k++) free(p[k]);
  free(bm);
  free(bv);
  return rc;
}

static kiln_code batchnorm_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (x && x->kind == KILN_T_TENSOR && x->rank >= 0 && x->rank < 2)
    return kiln_ifail(c, "input 'X' must have rank >= 2 (N, C, ...), got rank %d", x->rank);
  kiln_infer_same(c, 0, 0);
  /* running mean / var (and the old saved statistics) have the parameters' type */
  for (size_t k = 1; k < c->n_out && k <= 4; k++) kiln_infer_same(c, k, k % 2 ? 3 : 4);
  return KILN_OK;
}

/* ---- InstanceNormalization ---- */

static kiln_code instancenorm_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  nchw l;
  if (!get_nchw(c, x, &l)) return KILN_ERR_RUN;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  double *scale = load_param(c, c->in[1], "scale", l.c);
  if (!scale) return KILN_ERR_RUN;
  double *bias = load_param(c, c->in[2], "B", l.c);
  if (!bias) {
    free(scale);
    return KILN_ERR_RUN;
  }
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) {
    free(scale);
    free(bias);
    return c->err->code;
  }
  for (int64_t n = 0; n < l.n; n++)
    for (int64_t ch = 0; ch < l.c; ch++) {
      int64_t base = (n * l.c + ch) * l.s;
      double sum = 0, sq = 0;
      for (int64_t s = 0; s < l.s; s++) sum += kiln_load_f64(x, base + s);
      double mean = l.s ? sum / (double)l.s : 0;
      for (int64_t s = 0; s < l.s; s++) {
        double d = kiln_load_f64(x, base + s) - mean;
        sq += d * d;
      }
      double a = scale[ch] / sqrt((l.s ? sq / (double)l.s : 0) + eps);
      for (int64_t s = 0; s < l.s; s++)
        kiln_store_f64(y, base + s, (kiln_load_f64(x, base + s) - mean) * a + bias[ch]);
    }
  free(scale);
  free(bias);
  return KILN_OK;
}

/* ---- LayerNormalization ---- */

static bool stash_ok(int64_t t) {
  return t == KILN_FLOAT || t == KILN_DOUBLE || t == KILN_FLOAT16 || t == KILN_BFLOAT16;
}

/* Scale / B broadcast unidirectionally to the normalized shape dims[axis:], expanded to one
 * value per normalized position. */
static double *load_bcast(kiln_kctx *c, const kiln_tensor *t, const char *name, int rank,
                          const int64_t *dims, int64_t n) {
  if (!is_float_tensor(t)) {
    kiln_kfail(c, "input '%s' must be a floating-point tensor", name);
    return NULL;
  }
  bool ok = t->rank <= rank;
  for (int d = 0; ok && d < t->rank; d++) {
    int64_t td = t->dims[t->rank - 1 - d], xd = dims[rank - 1 - d];
    ok = td == xd || td == 1;
  }
  if (!ok) {
    char a[96], b[96];
    kiln_kfail(c, "input '%s' of shape %s does not broadcast to the normalized shape %s", name,
               kiln_shape_str(t, a, sizeof a), kiln_dims_str(rank, dims, b, sizeof b));
    return NULL;
  }
  double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  if (!p) {
    kiln_kfail(c, "out of memory");
    return NULL;
  }
  kiln_bcast b;
  kiln_bcast_init(&b, rank, dims, t);
  for (int64_t i = 0; i < n; i++) p[i] = kiln_load_f64(t, kiln_bcast_index(&b, i));
  return p;
}

static kiln_code layernorm_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  if (!is_float_tensor(x)) return kiln_kfail(c, "input 'X' must be a floating-point tensor");
  if (x->rank < 1) return kiln_kfail(c, "input 'X' must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -1), x->rank);
  if (axis < 0) return KILN_ERR_RUN;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  int64_t stash = kiln_attr_int(c->node, "stash_type", KILN_FLOAT);
  if (!stash_ok(stash))
    return kiln_kfail(c, "stash_type %lld is not a floating-point type", (long long)stash);

  int64_t outer = 1, n = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis; d < x->rank; d++) n *= x->dims[d];
  int nrank = x->rank - axis;
  const int64_t *ndims = x->dims + axis;
  double *scale = load_bcast(c, c->in[1], "Scale", nrank, ndims, n);
  if (!scale) return KILN_ERR_RUN;
  double *bias = NULL;
  const kiln_tensor *b = kiln_in(c, 2);
  if (b && !(bias = load_bcast(c, b, "B", nrank, ndims, n))) {
    free(scale);
    return KILN_ERR_RUN;
  }

  kiln_code rc = KILN_OK;
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  kiln_tensor *mo = NULL, *io = NULL;
  int64_t sdims[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++) sdims[d] = d < axis ? x->dims[d] : 1;
  if (y && kiln_out_used(c, 1)) mo = kiln_out(c, 1, (kiln_dtype)stash, x->rank, sdims);
  if (y && kiln_out_used(c, 2)) io = kiln_out(c, 2, (kiln_dtype)stash, x->rank, sdims);
  if (!y || (kiln_out_used(c, 1) && !mo) || (kiln_out_used(c, 2) && !io)) {
    rc = c->err->code;
    goto done;
  }
  for (int64_t o = 0; o < outer; o++) {
    int64_t base = o * n;
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < n; j++) sum += kiln_load_f64(x, base + j);
    double mean = n ? sum / (double)n : 0;
    for (int64_t j = 0; j < n; j++) {
      double d = kiln_load_f64(x, base + j) - mean;
      sq += d * d;
    }
    double inv = 1.0 / sqrt((n ? sq / (double)n : 0) + eps);
    for (int64_t j = 0; j < n; j++)
      kiln_store_f64(y, base + j, (kiln_load_f64(x, base + j) - mean) * inv * scale[j] + (bias ? bias[j] : 0));
    if (mo) kiln_store_f64(mo, o, mean);
    if (io) kiln_store_f64(io, o, inv);
  }
done:
  free(scale);
  free(bias);
  return rc;
}

static kiln_code layernorm_infer(kiln_ictx *c) {
  kiln_infer_same(c, 0, 0);
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  int64_t stash = kiln_attr_int(c->node, "stash_type", KILN_FLOAT);
  if (!stash_ok(stash))
    return kiln_ifail(c, "stash_type %lld is not a floating-point type", (long long)stash);
  int64_t dims[KILN_MAX_RANK] = {0};
  if (x->rank >= 0) {
    if (x->rank < 1) return kiln_ifail(c, "input 'X' must have rank >= 1");
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (axis < -x->rank || axis >= x->rank)
      return kiln_ifail(c, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
    if (axis < 0) axis += x->rank;
    for (int d = 0; d < x->rank; d++) dims[d] = d < axis ? x->dims[d] : 1;
  }
  for (size_t k = 1; k < c->n_out && k <= 2; k++)
    kiln_infer_tensor(c, k, (kiln_dtype)stash, x->rank, dims);
  return KILN_OK;
}

/* ---- LRN ---- */

static kiln_code lrn_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  nchw l;
  if (!get_nchw(c, x, &l)) return KILN_ERR_RUN;
  int64_t size = kiln_attr_int(c->node, "size", 0);
  if (size <= 0) return kiln_kfail(c, "attribute 'size' must be a positive integer");
  double alpha = kiln_attr_float(c->node, "alpha", 1e-4f);
  double beta = kiln_attr_float(c->node, "beta", 0.75f);
  double bias = kiln_attr_float(c->node, "bias", 1.0f);
  /* The window over channels is [c - floor((size-1)/2), c + ceil((size-1)/2)]. */
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  for (int64_t n = 0; n < l.n; n++)
    for (int64_t ch = 0; ch < l.c; ch++) {
      int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= l.c ? l.c - 1 : ch + hi;
      for (int64_t s = 0; s < l.s; s++) {
        double sq = 0;
        for (int64_t k = c0; k <= c1; k++) {
          double v = kiln_load_f64(x, (n * l.c + k) * l.s + s);
          sq += v * v;
        }
        int64_t i = (n * l.c + ch) * l.s + s;
        kiln_store_f64(y, i, kiln_load_f64(x, i) / pow(bias + alpha / (double)size * sq, beta));
      }
    }
  return KILN_OK;
}

/* ---- MeanVarianceNormalization ---- */

static kiln_code mvn_run(kiln_kctx *c) {
  const kiln_tensor *x = c->in[0];
  if (!is_float_tensor(x)) return kiln_kfail(c, "input 'X' must be a floating-point tensor");
  static const int64_t def_axes[] = {0, 2, 3};
  size_t na = 0;
  const int64_t *axes = kiln_attr_ints(c->node, "axes", &na);
  if (!axes) {
    axes = def_axes;
    na = 3;
  }
  bool reduce[KILN_MAX_RANK] = {false};
  for (size_t k = 0; k < na; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + x->rank : axes[k];
    if (a < 0 || a >= x->rank)
      return kiln_kfail(c, "axis %lld is out of range for rank %d", (long long)axes[k], x->rank);
    reduce[a] = true;
  }
  /* Group slot of every element: strides over the kept dims, 0 over the reduced ones. */
  int64_t gstr[KILN_MAX_RANK], ngroups = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    gstr[d] = reduce[d] ? 0 : ngroups;
    if (!reduce[d]) ngroups *= x->dims[d];
  }
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return c->err->code;
  if (x->numel == 0) return KILN_OK;
  double count = (double)(x->numel / ngroups);
  double *sum = calloc((size_t)ngroups * 2, sizeof *sum);
  if (!sum) return kiln_kfail(c, "out of memory");
  double *sq = sum + ngroups;
  for (int pass = 0; pass < 2; pass++) {
    int64_t idx[KILN_MAX_RANK] = {0}, g = 0;
    for (int64_t i = 0; i < x->numel; i++) {
      double v = kiln_load_f64(x, i);
      if (pass == 0) {
        sum[g] += v;
        sq[g] += v * v;
      } else {
        /* The spec's function: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9). The clamp keeps
         * rounding from taking the root of a slightly negative number. */
        double mean = sum[g] / count, var = sq[g] / count - mean * mean;
        kiln_store_f64(y, i, (v - mean) / (sqrt(var > 0 ? var : 0) + 1e-9));
      }
      for (int d = x->rank - 1; d >= 0; d--) {
        g += gstr[d];
        if (++idx[d] < x->dims[d]) break;
        g -= gstr[d] * x->dims[d];
        idx[d] = 0;
      }
    }
  }
  free(sum);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_norm[] = {
    {.domain = "", .name = "BatchNormalization", .since = 1, .inputs = {5, 5}, .outputs = {1, 5},
     .infer = batchnorm_infer, .run = batchnorm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_batchnorm},
    {.domain = "", .name = "BatchNormalization", .since = 14, .inputs = {5, 5}, .outputs = {1, 3},
     .infer = batchnorm_infer, .run = batchnorm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_batchnorm},
    {.domain = "", .name = "InstanceNormalization", .since = 1, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = instancenorm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_norm},
    {.domain = "", .name = "LayerNormalization", .since = 17, .inputs = {2, 3}, .outputs = {1, 3},
     .infer = layernorm_infer, .run = layernorm_run, .flow = KILN_FLOW_SAME, .cost = kiln_cost_norm},
    {.domain = "", .name = "LRN", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = lrn_run, .flow = KILN_FLOW_SAME},
    {.domain = "", .name = "MeanVarianceNormalization", .since = 9, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = mvn_run, .flow = KILN_FLOW_SAME},
    {0},
};
