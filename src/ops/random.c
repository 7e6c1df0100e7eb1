/* Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
 * Bernoulli, Multinomial, and Dropout (identity at inference, random mask in training mode).
 *
 * Every node call owns a local Mersenne Twister (MT19937). With a `seed` attribute it is seeded
 * exactly as numpy's legacy np.random.seed(int(seed)) and draws doubles and normals the way
 * numpy's RandomState does, so seeded results are reproducible across runs and, for the simple
 * draws (uniform, normal, Dropout's mask), identical to the numpy reference implementations.
 * Without a seed, the generator is seeded from the clock and the node's addresses: there is no
 * global state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"

/* ---- MT19937, numpy legacy flavour ---- */

enum { MT_N = 624, MT_M = 397 };

typedef struct rng {
  uint32_t mt[MT_N];
  int mti;
  bool has_gauss;
  double gauss;
} rng;

static void rng_seed(rng *r, uint32_t s) {
  r->mt[0] = s;
  for (int i = 1; i < MT_N; i++)
    r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
  r->mti = MT_N;
  r->has_gauss = false;
  r->gauss = 0;
}

static uint32_t rng_u32(rng *r) {
  if (r->mti >= MT_N) {
    for (int k = 0; k < MT_N; k++) {
      uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[(k + 1) % MT_N] & 0x7fffffffu);
      r->mt[k] = r->mt[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    r->mti = 0;
  }
  uint32_t y = r->mt[r->mti++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* Uniform double in [0, 1) with 53 random bits (numpy's random_sample). */
static double rng_uniform(rng *r) {
  uint32_t a = rng_u32(r) >> 5, b = rng_u32(r) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* Standard normal by the polar Box-Muller method, caching the second value (numpy legacy). */
static double rng_gauss(rng *r) {
  if (r->has_gauss) {
    r->has_gauss = false;
    return r->gauss;
  }
  double x1, x2, r2;
  do {
    x1 = 2.0 * rng_uniform(r) - 1.0;
    x2 = 2.0 * rng_uniform(r) - 1.0;
    r2 = x1 * x1 + x2 * x2;
  } while (r2 >= 1.0 || r2 == 0.0);
  double f = sqrt(-2.0 * log(r2) / r2);
  r->gauss = f * x1;
  r->has_gauss = true;
  return f * x2;
}

/* Seed from the `seed` attribute when present, else from the clock and this call's addresses
 * (unpredictable enough for sampling, no shared state). */
static void rng_init(rng *r, const kiln_kctx *c) {
  const kiln_attr *a = kiln_node_attr(c->node, "seed");
  if (a) {
    /* a float for the generators, an int for Dropout */
    int64_t s = a->i;
    if (a->kind == KILN_ATTR_FLOAT) s = isfinite(a->f) && fabsf(a->f) < 9e18f ? (int64_t)a->f : 0;
    rng_seed(r, (uint32_t)s);
    return;
  }
  struct timespec ts = {0, 0};
  timespec_get(&ts, TIME_UTC);
  uint64_t h = (uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec;
  h ^= (uint64_t)(uintptr_t)c->out + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
  h ^= (uint64_t)(uintptr_t)r + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
  rng_seed(r, (uint32_t)(h ^ (h >> 31)));
}

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

/* ---- RandomNormal / RandomUniform and their *Like forms ---- */

static bool random_dtype_ok(int64_t dt) {
  return dt == KILN_FLOAT || dt == KILN_DOUBLE || dt == KILN_FLOAT16 || dt == KILN_BFLOAT16;
}

static bool is_normal(const kiln_node *n) { return strstr(n->op_type, "Normal") != NULL; }
static bool is_like(const kiln_node *n) { return strstr(n->op_type, "Like") != NULL; }

static kiln_code random_infer(kiln_ictx *c) {
  int64_t dt = kiln_attr_int(c->node, "dtype", is_like(c->node) ? 0 : KILN_FLOAT);
  if (is_like(c->node)) {
    const kiln_type *x = c->in[0];
    if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
    if (!dt) dt = x->dtype;
    if (dt && !random_dtype_ok(dt)) return KILN_OK; /* reported at run time */
    kiln_infer_tensor(c, 0, (kiln_dtype)dt, x->rank, x->dims);
    return KILN_OK;
  }
  if (!random_dtype_ok(dt)) return kiln_ifail(c, "dtype %lld is not a floating type", (long long)dt);
  size_t n = 0;
  const int64_t *shape = kiln_attr_ints(c->node, "shape", &n);
  if (!shape) return kiln_ifail(c, "the 'shape' attribute is required");
  if (n > KILN_MAX_RANK) return KILN_OK;
  for (size_t i = 0; i < n; i++)
    if (shape[i] < 0) return kiln_ifail(c, "shape has a negative dimension");
  kiln_infer_tensor(c, 0, (kiln_dtype)dt, (int)n, shape);
  return KILN_OK;
}

static kiln_code random_run(kiln_kctx *c) {
  int64_t dt;
  kiln_tensor *y;
  if (is_like(c->node)) {
    const kiln_tensor *x = kiln_in(c, 0);
    if (!is_tensor(x)) return kiln_kfail(c, "input must be a tensor");
    dt = kiln_attr_int(c->node, "dtype", x->dtype);
    if (!random_dtype_ok(dt))
      return kiln_kfail(c, "output type %s is not a floating type", kiln_dtype_name((kiln_dtype)dt));
    y = kiln_out(c, 0, (kiln_dtype)dt, x->rank, x->dims);
  } else {
    dt = kiln_attr_int(c->node, "dtype", KILN_FLOAT);
    if (!random_dtype_ok(dt)) return kiln_kfail(c, "dtype %lld is not a floating type", (long long)dt);
    size_t n = 0;
    const int64_t *shape = kiln_attr_ints(c->node, "shape", &n);
    if (!shape) return kiln_kfail(c, "the 'shape' attribute is required");
    if (n > KILN_MAX_RANK) return kiln_kunsup(c, "shape has %zu dimensions", n);
    y = kiln_out(c, 0, (kiln_dtype)dt, (int)n, shape);
  }
  if (!y) return KILN_ERR_NOMEM;
  rng r;
  rng_init(&r, c);
  if (is_normal(c->node)) {
    double mean = kiln_attr_float(c->node, "mean", 0), scale = kiln_attr_float(c->node, "scale", 1);
    for (int64_t i = 0; i < y->numel; i++) kiln_set_f64(y, i, mean + scale * rng_gauss(&r));
  } else {
    double lo = kiln_attr_float(c->node, "low", 0), hi = kiln_attr_float(c->node, "high", 1);
    for (int64_t i = 0; i < y->numel; i++) kiln_set_f64(y, i, lo + (hi - lo) * rng_uniform(&r));
  }
  return KILN_OK;
}

/* ---- Bernoulli ---- */

static kiln_code bernoulli_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  int64_t dt = kiln_attr_int(c->node, "dtype", x->dtype);
  kiln_infer_tensor(c, 0, (kiln_dtype)dt, x->rank, x->dims);
  return KILN_OK;
}

static kiln_code bernoulli_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "input must be a floating-point tensor of probabilities");
  int64_t dt = kiln_attr_int(c->node, "dtype", x->dtype);
  if (!kiln_dtype_is_float((kiln_dtype)dt) && !kiln_dtype_is_int((kiln_dtype)dt) && dt != KILN_BOOL)
    return kiln_kfail(c, "dtype %lld is not numeric or bool", (long long)dt);
  kiln_tensor *y = kiln_out(c, 0, (kiln_dtype)dt, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  rng r;
  rng_init(&r, c);
  for (int64_t i = 0; i < x->numel; i++) {
    double p = kiln_get_f64(x, i);
    if (!(p >= 0 && p <= 1)) return kiln_kfail(c, "probability %g at %lld is outside [0, 1]", p, (long long)i);
    kiln_set_i64(y, i, rng_uniform(&r) < p);
  }
  return KILN_OK;
}

/* ---- Multinomial ---- */

static kiln_code multinomial_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  int64_t dt = kiln_attr_int(c->node, "dtype", KILN_INT32);
  if (dt != KILN_INT32 && dt != KILN_INT64) return kiln_ifail(c, "dtype must be int32 or int64");
  int64_t dims[2] = {-1, kiln_attr_int(c->node, "sample_size", 1)};
  if (x && x->kind == KILN_T_TENSOR && x->rank == 2) dims[0] = x->dims[0];
  else if (x && x->kind == KILN_T_TENSOR && x->rank >= 0)
    return kiln_ifail(c, "input must have shape [batch_size, class_size]");
  kiln_infer_tensor(c, 0, (kiln_dtype)dt, 2, dims);
  return KILN_OK;
}

static kiln_code multinomial_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype) || x->rank != 2)
    return kiln_kfail(c, "input must be a float tensor of shape [batch_size, class_size]");
  int64_t dt = kiln_attr_int(c->node, "dtype", KILN_INT32);
  if (dt != KILN_INT32 && dt != KILN_INT64) return kiln_kfail(c, "dtype must be int32 or int64");
  int64_t ns = kiln_attr_int(c->node, "sample_size", 1);
  if (ns < 0) return kiln_kfail(c, "sample_size must not be negative");
  int64_t nb = x->dims[0], nk = x->dims[1], dims[2] = {nb, ns};
  kiln_tensor *y = kiln_out(c, 0, (kiln_dtype)dt, 2, dims);
  if (!y) return KILN_ERR_NOMEM;
  if (nk == 0) {
    if (nb && ns) return kiln_kfail(c, "cannot sample from zero classes");
    return KILN_OK;
  }
  double *cdf = malloc((size_t)nk * sizeof *cdf);
  if (!cdf) return kiln_kfail(c, "out of memory");
  rng r;
  rng_init(&r, c);
  for (int64_t b = 0; b < nb; b++) {
    /* The inputs are unnormalised log-probabilities: subtract the max before exp. */
    double mx = -INFINITY;
    for (int64_t k = 0; k < nk; k++) mx = fmax(mx, kiln_get_f64(x, b * nk + k));
    double acc = 0;
    for (int64_t k = 0; k < nk; k++) {
      double l = kiln_get_f64(x, b * nk + k);
      acc += isinf(mx) && mx < 0 ? 0 : exp(l - mx);
      cdf[k] = acc;
    }
    if (!(acc > 0) || isinf(acc)) {
      free(cdf);
      return kiln_kfail(c, "row %lld has no finite positive probability mass", (long long)b);
    }
    for (int64_t s = 0; s < ns; s++) {
      double u = rng_uniform(&r) * acc;
      int64_t lo = 0, hi = nk - 1; /* first k with cdf[k] > u */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
      }
      kiln_set_i64(y, b * ns + s, lo);
    }
  }
  free(cdf);
  return KILN_OK;
}

/* ---- Dropout ---- */

/* Mask type: the input's before opset 10, bool after. */
static kiln_dtype dropout_mask_dtype(int opset, kiln_dtype x) { return opset >= 10 ? KILN_BOOL : x; }

static kiln_code dropout_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_infer_same(c, 0, 0);
  if (x->dtype || c->opset >= 10)
    kiln_infer_tensor(c, 1, dropout_mask_dtype(c->opset, x->dtype), x->rank, x->dims);
  return KILN_OK;
}

static kiln_code dropout_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!is_tensor(x) || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "data must be a floating-point tensor");
  double ratio = kiln_attr_float(c->node, "ratio", 0.5f);
  bool training;
  if (c->opset >= 12) {
    const kiln_tensor *rt = kiln_in(c, 1), *tm = kiln_in(c, 2);
    if (is_tensor(rt)) {
      if (rt->numel != 1 || !kiln_dtype_is_float(rt->dtype))
        return kiln_kfail(c, "ratio must be a floating-point scalar");
      ratio = kiln_get_f64(rt, 0);
    }
    training = false;
    if (is_tensor(tm)) {
      if (tm->numel != 1 || tm->dtype != KILN_BOOL)
        return kiln_kfail(c, "training_mode must be a bool scalar");
      training = kiln_get_i64(tm, 0) != 0;
    }
  } else {
    /* Before opset 7 the graph said whether it runs a test pass; from 7 to 11 kiln, an
     * inference runtime, always does. */
    training = c->opset < 7 && kiln_attr_int(c->node, "is_test", 0) == 0;
  }
  if (!(ratio >= 0 && ratio <= 1)) return kiln_kfail(c, "ratio %g is outside [0, 1]", ratio);
  if (ratio == 0) training = false; /* nothing dropped, no scaling */

  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, x->dims);
  if (!y) return KILN_ERR_NOMEM;
  kiln_tensor *mask = NULL;
  if (kiln_out_used(c, 1) &&
      !(mask = kiln_out(c, 1, dropout_mask_dtype(c->opset, x->dtype), x->rank, x->dims)))
    return KILN_ERR_NOMEM;
  if (!training) {
    memcpy(y->data, x->data, x->nbytes);
    if (mask) {
      if (mask->dtype == KILN_BOOL) memset(mask->data, 1, mask->nbytes);
      else for (int64_t i = 0; i < mask->numel; i++) kiln_set_f64(mask, i, 1);
    }
    return KILN_OK;
  }
  /* Keep an element when its uniform draw is >= ratio and scale kept ones by 1/(1-ratio), as
   * the ONNX reference does; with a seed this reproduces numpy's mask exactly. */
  rng r;
  rng_init(&r, c);
  double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  for (int64_t i = 0; i < x->numel; i++) {
    bool keep = rng_uniform(&r) >= ratio;
    if (x->dtype == KILN_FLOAT)
      ((float *)y->data)[i] = keep ? (float)(((const float *)x->data)[i] * scale) : 0.0f;
    else
      kiln_set_f64(y, i, keep ? kiln_get_f64(x, i) * scale : 0.0);
    if (mask) kiln_set_i64(mask, i, keep);
  }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_random[] = {
    {.domain = "", .name = "RandomNormal", .since = 1, .inputs = {0, 0}, .outputs = {1, 1},
     .infer = random_infer, .run = random_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "RandomUniform", .since = 1, .inputs = {0, 0}, .outputs = {1, 1},
     .infer = random_infer, .run = random_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "RandomNormalLike", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = random_infer, .run = random_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "RandomUniformLike", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = random_infer, .run = random_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "Bernoulli", .since = 15, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = bernoulli_infer, .run = bernoulli_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "Multinomial", .since = 7, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = multinomial_infer, .run = multinomial_run, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "Dropout", .since = 1, .inputs = {1, 1}, .outputs = {1, 2},
     .infer = dropout_infer, .run = dropout_run, .flow = KILN_FLOW_SAME, .flags = KILN_OPF_RANDOM},
    {.domain = "", .name = "Dropout", .since = 12, .inputs = {1, 3}, .outputs = {1, 2},
     .infer = dropout_infer, .run = dropout_run, .flow = KILN_FLOW_SAME, .flags = KILN_OPF_RANDOM},
    {0},
};
