/* Matrix products: MatMul, Gemm, MatMulInteger, QLinearMatMul (Einsum, in einsum.c, runs on
 * the same reference GEMM). The 8-bit products run on the integer GEMM of ops/qgemm.c.
 *
 * Everything funnels into one cache-friendly GEMM (c += a * b, i-k-j order, column-blocked)
 * instantiated for three working types: float (float, float16, bfloat16), double, and uint64
 * for every integer type (wrap-around arithmetic is the same for signed and unsigned, and
 * avoids signed-overflow undefined behaviour). Inputs are used in place when they already have
 * the working type and converted once otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "ops/cost.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "ops/qgemm.h"

/* ---- GEMM --------------------------------------------------------------------------------- */

enum { GEMM_NB = 256 }; /* output columns per block: that slice of b stays in cache */

#define GEMM_KERNEL(T, SUF)                                                                     \
  /* c[m,n] += a[m,k] * b[k,n] */                                                             \
  static void gemm_##SUF(int64_t m, int64_t n, int64_t k, const void *av, const void *bv,     \
                         void *cv) {                                                          \
    const T *a = av, *b = bv;                                                                 \
    T *c = cv;                                                                                \
    for (int64_t j0 = 0; j0 < n; j0 += GEMM_NB) {                                             \
      int64_t nb = n - j0 < GEMM_NB ? n - j0 : GEMM_NB;                                       \
      for (int64_t i = 0; i < m; i++) {                                                       \
        T *restrict ci = c + i * n + j0;                                                      \
        for (int64_t p = 0; p < k; p++) {                                                     \
          const T av_ = a[i * k + p];                                                         \
          const T *restrict bp = b + p * n + j0;                                              \
          for (int64_t j = 0; j < nb; j++) ci[j] += av_ * bp[j];                              \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }

GEMM_KERNEL(float, f32)
GEMM_KERNEL(double, f64)
GEMM_KERNEL(uint64_t, u64)

void kiln_ref_gemm_f64(int64_t m, int64_t n, int64_t k, const double *a, const double *b, double *c) {
  gemm_f64(m, n, k, a, b, c);
}

typedef void (*gemm_fn)(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c);

/* The working type of a dtype; UNDEFINED when not numeric. */
kiln_dtype kiln_matmul_work_type(kiln_dtype t) {
  if (t == KILN_DOUBLE) return KILN_DOUBLE;
  if (kiln_dtype_is_float(t)) return KILN_FLOAT;
  if (kiln_dtype_is_int(t)) return KILN_UINT64;
  return KILN_UNDEFINED;
}

static size_t work_size(kiln_dtype w) { return w == KILN_FLOAT ? sizeof(float) : 8; }
static gemm_fn work_gemm(kiln_dtype w) {
  return w == KILN_FLOAT ? gemm_f32 : w == KILN_DOUBLE ? gemm_f64 : gemm_u64;
}

/* t's elements in working type w: its own data when the bits already fit, else a converted
 * copy stored in *owned (freed by the caller). NULL on allocation failure. */
static const void *as_work(const kiln_tensor *t, kiln_dtype w, void **owned) {
  *owned = NULL;
  if (t->dtype == w || (w == KILN_UINT64 && t->dtype == KILN_INT64)) return t->data;
  void *buf = kiln_malloc((size_t)t->numel * work_size(w));
  if (!buf) return NULL;
  for (int64_t i = 0; i < t->numel; i++) {
    if (w == KILN_FLOAT)
      ((float *)buf)[i] = (float)kiln_get_f64(t, i);
    else if (w == KILN_DOUBLE)
      ((double *)buf)[i] = kiln_get_f64(t, i);
    else
      ((uint64_t *)buf)[i] = (uint64_t)kiln_get_i64(t, i);
  }
  *owned = buf;
  return buf;
}

/* Stores working-type results into y (whose data may already be the working buffer). */
static void from_work(kiln_tensor *y, kiln_dtype w, const void *buf) {
  if (buf == y->data) return;
  for (int64_t i = 0; i < y->numel; i++) {
    if (w == KILN_FLOAT)
      kiln_set_f64(y, i, ((const float *)buf)[i]);
    else if (w == KILN_DOUBLE)
      kiln_set_f64(y, i, ((const double *)buf)[i]);
    else
      kiln_set_i64(y, i, (int64_t)((const uint64_t *)buf)[i]);
  }
}

/* ---- batched matrix product (numpy matmul semantics) ------------------------------------ */

typedef struct mm_plan {
  int brank;                                 /* broadcast batch rank */
  int64_t bdims[KILN_MAX_RANK];
  int64_t astr[KILN_MAX_RANK], bstr[KILN_MAX_RANK]; /* batch strides in matrices, 0 = broadcast */
  int64_t m, k, n, batches;
  int yrank;
  int64_t ydims[KILN_MAX_RANK];
} mm_plan;

static bool mm_plan_init(mm_plan *p, int ra, const int64_t *da, int rb, const int64_t *db,
                         char *msg, size_t cap) {
  if (ra < 1 || rb < 1) {
    snprintf(msg, cap, "MatMul inputs must have rank >= 1, got %d and %d", ra, rb);
    return false;
  }
  p->m = ra == 1 ? 1 : da[ra - 2];
  p->k = da[ra - 1];
  int64_t kb = rb == 1 ? db[0] : db[rb - 2];
  p->n = rb == 1 ? 1 : db[rb - 1];
  if (kb != p->k) {
    snprintf(msg, cap, "inner dimensions differ: %lld vs %lld", (long long)p->k, (long long)kb);
    return false;
  }
  int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
  if (!kiln_broadcast_shape(ba, da, bb, db, &p->brank, p->bdims)) {
    snprintf(msg, cap, "batch dimensions cannot be broadcast");
    return false;
  }
  int64_t sa = 1, sb = 1;
  p->batches = 1;
  for (int i = p->brank - 1; i >= 0; i--) {
    int ia = i - (p->brank - ba), ib = i - (p->brank - bb);
    int64_t xa = ia >= 0 ? da[ia] : 1, xb = ib >= 0 ? db[ib] : 1;
    p->astr[i] = xa == 1 ? 0 : sa;
    p->bstr[i] = xb == 1 ? 0 : sb;
    sa *= xa;
    sb *= xb;
    p->batches *= p->bdims[i];
  }
  p->yrank = p->brank;
  memcpy(p->ydims, p->bdims, sizeof(int64_t) * (size_t)p->brank);
  if (ra > 1) p->ydims[p->yrank++] = p->m;
  if (rb > 1) p->ydims[p->yrank++] = p->n;
  return true;
}

/* The matrices of a and b (their indices) that batch bi of the output multiplies. */
static void mm_batch(const mm_plan *p, int64_t bi, int64_t *ia, int64_t *ib) {
  int64_t rest = bi;
  *ia = *ib = 0;
  for (int d = p->brank - 1; d >= 0; d--) {
    int64_t q = rest % p->bdims[d];
    rest /= p->bdims[d];
    *ia += q * p->astr[d];
    *ib += q * p->bstr[d];
  }
}

/* y[batch] += a[batch] @ b[batch] over the broadcast batch; y starts zeroed. Float products
 * run in the packed, register-tiled GEMM (src/kernels/gemm.c) on the session's threads; other
 * types in the reference loop above. */
static void mm_run(const mm_plan *p, kiln_dtype w, const void *a, const void *b, void *y,
                   kiln_threadpool *pool) {
  gemm_fn gemm = work_gemm(w);
  kiln_gemm_ctx gctx = {pool, 0};
  size_t esz = work_size(w);
  for (int64_t bi = 0; bi < p->batches; bi++) {
    int64_t ia, ib;
    mm_batch(p, bi, &ia, &ib);
    const void *ab = (const char *)a + (size_t)(ia * p->m * p->k) * esz;
    const void *bb = (const char *)b + (size_t)(ib * p->k * p->n) * esz;
    void *yb = (char *)y + (size_t)(bi * p->m * p->n) * esz;
    if (w == KILN_FLOAT && p->m && p->n &&
        kiln_gemm_f32(&gctx, 0, 0, (size_t)p->m, (size_t)p->n, (size_t)p->k, 1.0f, ab,
                      (size_t)(p->k ? p->k : 1), bb, (size_t)p->n, 0.0f, yb, (size_t)p->n, NULL,
                      NULL) == KILN_OK)
      continue;
    gemm(p->m, p->n, p->k, ab, bb, yb);
  }
}

static bool is_tensor(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR; }

static kiln_code matmul_run(kiln_kctx *c) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1);
  if (!is_tensor(a) || !is_tensor(b)) return kiln_kfail(c, "A and B must be tensors");
  kiln_dtype w = kiln_matmul_work_type(a->dtype);
  if (a->dtype != b->dtype || !w)
    return kiln_kfail(c, "A and B must have the same numeric type, got %s and %s",
                      kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
  mm_plan p;
  char msg[160];
  if (!mm_plan_init(&p, a->rank, a->dims, b->rank, b->dims, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  kiln_tensor *y = kiln_out(c, 0, a->dtype, p.yrank, p.ydims);
  if (!y) return KILN_ERR_NOMEM;
  void *ao, *bo;
  const void *aw = as_work(a, w, &ao), *bw = as_work(b, w, &bo);
  bool direct = y->dtype == w || (w == KILN_UINT64 && y->dtype == KILN_INT64);
  void *yw = direct ? y->data : kiln_calloc((size_t)y->numel, work_size(w));
  kiln_code rc = KILN_OK;
  if (!aw || !bw || !yw) {
    rc = kiln_kfail(c, "out of memory");
  } else {
    mm_run(&p, w, aw, bw, yw, kiln_kpool(c));
    from_work(y, w, yw);
  }
  if (!direct) free(yw);
  free(ao);
  free(bo);
  return rc;
}

/* ---- Gemm --------------------------------------------------------------------------------- */

/* A 2-D tensor as a working-type [rows, cols] matrix, transposed when `trans`; *owned is what
 * the caller frees. */
static const void *gemm_operand(const kiln_tensor *t, kiln_dtype w, bool trans, void **owned) {
  const void *src = as_work(t, w, owned);
  if (!src || !trans) return src;
  size_t esz = work_size(w);
  int64_t r = t->dims[0], cols = t->dims[1];
  char *dst = kiln_malloc((size_t)t->numel * esz);
  if (dst)
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < cols; j++)
        memcpy(dst + (size_t)(j * r + i) * esz, (const char *)src + (size_t)(i * cols + j) * esz, esz);
  free(*owned);
  *owned = dst;
  return dst;
}

static kiln_code gemm_run(kiln_kctx *c) {
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1), *cc = kiln_in(c, 2);
  if (cc && cc->kind == KILN_KIND_NONE) cc = NULL;
  if (!is_tensor(a) || !is_tensor(b) || a->rank != 2 || b->rank != 2)
    return kiln_kfail(c, "A and B must be 2-D tensors");
  kiln_dtype w = kiln_matmul_work_type(a->dtype);
  if (a->dtype != b->dtype || !w) return kiln_kfail(c, "A and B must have the same numeric type");
  bool ta = kiln_attr_int(c->node, "transA", 0) != 0, tb = kiln_attr_int(c->node, "transB", 0) != 0;
  double alpha = kiln_attr_float(c->node, "alpha", 1.0f), beta = kiln_attr_float(c->node, "beta", 1.0f);
  int64_t m = a->dims[ta], k = a->dims[!ta], kb = b->dims[tb], n = b->dims[!tb];
  if (k != kb) return kiln_kfail(c, "inner dimensions differ: %lld vs %lld", (long long)k, (long long)kb);
  int64_t dims[2] = {m, n};
  if (cc) {
    int r;
    int64_t bd[KILN_MAX_RANK];
    if (!is_tensor(cc) || cc->dtype != a->dtype || cc->rank > 2 ||
        !kiln_broadcast_shape(2, dims, cc->rank, cc->dims, &r, bd) || bd[0] != m || bd[1] != n)
      return kiln_kfail(c, "C must be a %s tensor broadcastable to [%lld, %lld]",
                        kiln_dtype_name(a->dtype), (long long)m, (long long)n);
  }
  kiln_tensor *y = kiln_out(c, 0, a->dtype, 2, dims);
  if (!y) return KILN_ERR_NOMEM;
  if (a->dtype == KILN_FLOAT && m && n && k && (!cc || cc->dtype == KILN_FLOAT)) {
    /* y = beta * C (broadcast), then y = alpha * op(A) op(B) + y in the fast GEMM */
    float *py = y->data;
    if (cc) {
      const float *pc = cc->data;
      if (cc->numel == n && cc->rank > 0 && cc->dims[cc->rank - 1] == n) { /* a row vector: the common bias */
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) py[i * n + j] = (float)beta * pc[j];
      } else {
        kiln_bcast bc0;
        kiln_bcast_init(&bc0, 2, dims, cc);
        for (int64_t i = 0; i < y->numel; i++) py[i] = (float)beta * pc[kiln_bcast_index(&bc0, i)];
      }
    }
    kiln_gemm_ctx gctx = {kiln_kpool(c), 0};
    if (kiln_gemm_f32(&gctx, ta, tb, (size_t)m, (size_t)n, (size_t)k, (float)alpha, a->data,
                      (size_t)a->dims[1], b->data, (size_t)b->dims[1], cc ? 1.0f : 0.0f, py,
                      (size_t)n, NULL, c->err) == KILN_OK)
      return KILN_OK;
    return kiln_kfail(c, "%s", c->err ? c->err->message : "GEMM failed");
  }
  void *ao, *bo;
  const void *aw = gemm_operand(a, w, ta, &ao), *bw = gemm_operand(b, w, tb, &bo);
  void *acc = kiln_calloc((size_t)y->numel, work_size(w));
  kiln_code rc = KILN_OK;
  if (!aw || !bw || !acc) {
    rc = kiln_kfail(c, "out of memory");
    goto done;
  }
  work_gemm(w)(m, n, k, aw, bw, acc);
  kiln_bcast bc;
  if (cc) kiln_bcast_init(&bc, 2, dims, cc);
  bool exact_int = w == KILN_UINT64 && alpha == 1 && (!cc || beta == 1);
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t ci = cc ? kiln_bcast_index(&bc, i) : 0;
    if (w == KILN_FLOAT && y->dtype == KILN_FLOAT) {
      float v = (float)alpha * ((const float *)acc)[i];
      if (cc) v += (float)beta * ((const float *)cc->data)[ci];
      ((float *)y->data)[i] = v;
    } else if (exact_int) {
      uint64_t v = ((const uint64_t *)acc)[i] + (cc ? (uint64_t)kiln_get_i64(cc, ci) : 0);
      kiln_set_i64(y, i, (int64_t)v);
    } else {
      double v = w == KILN_FLOAT    ? ((const float *)acc)[i]
                 : w == KILN_DOUBLE ? ((const double *)acc)[i]
                                    : (double)(int64_t)((const uint64_t *)acc)[i];
      v *= alpha;
      if (cc) v += beta * kiln_get_f64(cc, ci);
      kiln_set_f64(y, i, v);
    }
  }
done:
  free(ao);
  free(bo);
  free(acc);
  return rc;
}

/* ---- MatMulInteger / QLinearMatMul -------------------------------------------------------- */

static bool is_q8(kiln_dtype t) { return t == KILN_UINT8 || t == KILN_INT8; }

/* A zero point of x: absent (0), a scalar (*z0), or one value per row (rows: of A, axis rank-2)
 * or column (of B, axis rank-1) in *zs (freed by the caller). */
static kiln_code zero_point_of(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *zp, bool rows,
                               const char *what, int64_t **zs, int64_t *z0) {
  *zs = NULL;
  *z0 = 0;
  int64_t per = rows ? (x->rank >= 2 ? x->dims[x->rank - 2] : 1) : (x->rank >= 2 ? x->dims[x->rank - 1] : 1);
  if (zp && zp->kind == KILN_KIND_NONE) zp = NULL;
  if (!zp) return KILN_OK;
  if (zp->kind != KILN_KIND_TENSOR || zp->dtype != x->dtype || (zp->numel != 1 && (zp->rank != 1 || zp->numel != per)))
    return kiln_kfail(c, "%s must be a %s scalar or have %lld values", what, kiln_dtype_name(x->dtype),
                      (long long)per);
  if (zp->numel == 1) {
    *z0 = kiln_get_i64(zp, 0);
    return KILN_OK;
  }
  if (!(*zs = kiln_malloc(sizeof(int64_t) * (size_t)per))) return kiln_kfail(c, "out of memory");
  for (int64_t i = 0; i < per; i++) (*zs)[i] = kiln_get_i64(zp, i);
  return KILN_OK;
}

/* Checks a and b and plans their product (p); *count: the output's elements. */
static kiln_code int_matmul_plan(kiln_kctx *c, const kiln_tensor *a, const kiln_tensor *b, mm_plan *p,
                                 int64_t *count) {
  if (!is_tensor(a) || !is_tensor(b) || !is_q8(a->dtype) || !is_q8(b->dtype))
    return kiln_kfail(c, "A and B must be uint8 or int8 tensors");
  char msg[160];
  if (!mm_plan_init(p, a->rank, a->dims, b->rank, b->dims, msg, sizeof msg)) return kiln_kfail(c, "%s", msg);
  *count = kiln_numel(p->yrank, p->ydims);
  return *count >= 0 ? KILN_OK : kiln_kfail(c, "the output is too large");
}

/* acc [batches, m, n] = (a - a_zp) @ (b - b_zp) on the integer GEMM (ops/qgemm.c); bi: B's input
 * index (a constant 2-D B is packed once, in the node's cache). */
static kiln_code int_matmul(kiln_kctx *c, const kiln_tensor *a, const kiln_tensor *azp, size_t bi,
                            const kiln_tensor *b, const kiln_tensor *bzp, const mm_plan *p, int32_t *acc) {
  int64_t *zas, *zbs, za0, zb0;
  kiln_code rc = zero_point_of(c, a, azp, true, "a_zero_point", &zas, &za0);
  if (rc) return rc;
  if ((rc = zero_point_of(c, b, bzp, false, "b_zero_point", &zbs, &zb0))) {
    free(zas);
    return rc;
  }
  kiln_q8_pack *owned = NULL;
  const kiln_q8_pack *pb = b->rank == 2 ? kiln_q8_pack_of(c, bi, b, 1, p->k, p->n, 0, &owned) : NULL;
  for (int64_t t = 0; t < p->batches && !rc; t++) {
    int64_t ia, ib;
    mm_batch(p, t, &ia, &ib);
    rc = kiln_qmatmul_run(c, p->m, p->n, p->k, (const uint8_t *)a->data + ia * p->m * p->k, a->dtype == KILN_INT8,
                          zas, za0, (const uint8_t *)b->data + ib * p->k * p->n, b->dtype == KILN_INT8, pb, zbs,
                          zb0, acc + t * p->m * p->n);
  }
  kiln_q8_pack_free(owned);
  free(zas);
  free(zbs);
  return rc;
}

static kiln_code matmulinteger_run(kiln_kctx *c) {
  mm_plan p;
  int64_t count = 0;
  const kiln_tensor *a = kiln_in(c, 0), *b = kiln_in(c, 1);
  kiln_code rc = int_matmul_plan(c, a, b, &p, &count);
  if (rc) return rc;
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_INT32, p.yrank, p.ydims); /* every element is stored */
  if (!y) return KILN_ERR_NOMEM;
  return int_matmul(c, a, kiln_in(c, 2), 1, b, kiln_in(c, 3), &p, y->data);
}

/* Packs a constant 2-D B once at session creation (MatMulInteger: input 1, QLinearMatMul: 3). */
static kiln_code int_matmul_prepare(kiln_kctx *c, size_t bi) {
  const kiln_tensor *b = kiln_in(c, bi);
  if (!b || b->kind != KILN_KIND_TENSOR || !is_q8(b->dtype) || b->rank != 2 || !kiln_in_const(c, bi, b))
    return KILN_ERR_UNSUPPORTED;
  return kiln_q8_pack_of(c, bi, b, 1, b->dims[0], b->dims[1], 0, NULL) ? KILN_OK : KILN_ERR_UNSUPPORTED;
}
static kiln_code matmulinteger_prepare(kiln_kctx *c) { return int_matmul_prepare(c, 1); }
static kiln_code qlinearmatmul_prepare(kiln_kctx *c) { return int_matmul_prepare(c, 3); }

static bool all_finite(const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(v[i])) return false;
  return true;
}

static bool qlmm_scale_type(const kiln_kctx *c, kiln_dtype t) {
  return t == KILN_FLOAT || (c->opset >= 21 && (t == KILN_FLOAT16 || t == KILN_BFLOAT16));
}

/* a_scale's then b_scale's values as float. */
static float *scales_f32(const kiln_tensor *as, const kiln_tensor *bs) {
  float *v = kiln_malloc((size_t)(as->numel + bs->numel) * sizeof *v);
  if (!v) return NULL;
  for (int64_t i = 0; i < as->numel; i++) v[i] = (float)kiln_get_f64(as, i);
  for (int64_t i = 0; i < bs->numel; i++) v[as->numel + i] = (float)kiln_get_f64(bs, i);
  return v;
}

static kiln_code qlinearmatmul_run(kiln_kctx *c) {
  const kiln_tensor *a = kiln_in(c, 0), *as = kiln_in(c, 1), *b = kiln_in(c, 3),
                    *bs = kiln_in(c, 4), *ys = kiln_in(c, 6), *yzp = kiln_in(c, 7);
  mm_plan p;
  int64_t count = 0;
  kiln_code rc = int_matmul_plan(c, a, b, &p, &count);
  if (rc) return rc;
  int32_t *acc = kiln_malloc(sizeof(int32_t) * (size_t)(count ? count : 1));
  if (!acc) return kiln_kfail(c, "out of memory");
  if ((rc = int_matmul(c, a, kiln_in(c, 2), 3, b, kiln_in(c, 5), &p, acc))) {
    free(acc);
    return rc;
  }
  /* Scales: a per row (M values) or b per column (N values) are allowed besides scalars;
   * float, and from opset 21 also float16 or bfloat16 (one type for all three). */
  if (!is_tensor(as) || !qlmm_scale_type(c, as->dtype) || (as->numel != 1 && as->numel != p.m) ||
      !is_tensor(bs) || bs->dtype != as->dtype || (bs->numel != 1 && bs->numel != p.n) ||
      !is_tensor(ys) || ys->dtype != as->dtype || ys->numel != 1 || !is_tensor(yzp) ||
      !is_q8(yzp->dtype) || yzp->numel != 1) {
    free(acc);
    return kiln_kfail(c, "scales must be %s scalars (or per row / column) and y_zero_point "
                         "a uint8 or int8 scalar", c->opset >= 21 ? "float, float16 or bfloat16" : "float");
  }
  float *sv = scales_f32(as, bs);
  if (!sv) {
    free(acc);
    return KILN_ERR_NOMEM;
  }
  const float *asv = sv, *bsv = sv + as->numel, ysv = (float)kiln_get_f64(ys, 0);
  /* y = acc * a_scale * b_scale / y_scale: a zero or non-finite y_scale has no defined result
   * (ONNX Runtime saturates to garbage); refuse it rather than divide by zero. */
  if (!(fabsf(ysv) > 0.0f) || !isfinite(ysv) || !all_finite(asv, as->numel) ||
      !all_finite(bsv, bs->numel)) {
    free(acc);
    free(sv);
    return kiln_kfail(c, "y_scale must be finite and non-zero and a_scale, b_scale finite (y_scale %g)",
                      (double)ysv);
  }
  kiln_tensor *y = kiln_out(c, 0, yzp->dtype, p.yrank, p.ydims);
  if (!y) {
    free(acc);
    free(sv);
    return KILN_ERR_NOMEM;
  }
  double zp = (double)kiln_get_i64(yzp, 0), lo = yzp->dtype == KILN_UINT8 ? 0 : -128,
         hi = yzp->dtype == KILN_UINT8 ? 255 : 127;
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t row = (i / p.n) % p.m, col = i % p.n;
    float scale = asv[as->numel == 1 ? 0 : row] * bsv[bs->numel == 1 ? 0 : col] / ysv;
    double v = rint((double)((float)acc[i] * scale)) + zp;
    if (isnan(v)) v = zp; /* 0 * an overflowed (infinite) scale */
    kiln_set_i64(y, i, (int64_t)(v < lo ? lo : v > hi ? hi : v));
  }
  free(acc);
  free(sv);
  return KILN_OK;
}

/* ---- shape functions ------------------------------------------------------------------------ */

/* Batched product shape; dtype UNDEFINED: A's. a/b are input indices. */
static kiln_code mm_infer_common(kiln_ictx *c, size_t ai, size_t bi, kiln_dtype dtype) {
  const kiln_type *a = ai < c->n_in ? c->in[ai] : NULL, *b = bi < c->n_in ? c->in[bi] : NULL;
  if (!a || !b || a->kind != KILN_T_TENSOR || b->kind != KILN_T_TENSOR) return KILN_OK;
  if (!dtype) dtype = a->dtype;
  if (a->rank < 0 || b->rank < 0) {
    kiln_infer_tensor(c, 0, dtype, -1, NULL);
    return KILN_OK;
  }
  if (a->rank < 1 || b->rank < 1) return kiln_ifail(c, "MatMul inputs must have rank >= 1");
  int64_t ka = a->dims[a->rank - 1], kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return kiln_ifail(c, "inner dimensions differ: %lld vs %lld", (long long)ka, (long long)kb);
  int ba = a->rank > 2 ? a->rank - 2 : 0, bb = b->rank > 2 ? b->rank - 2 : 0;
  int r = ba > bb ? ba : bb, yr = 0;
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) {
    int64_t x = i < r - ba ? 1 : a->dims[i - (r - ba)], y = i < r - bb ? 1 : b->dims[i - (r - bb)];
    if (x == y || y == 1) dims[yr++] = x;
    else if (x == 1) dims[yr++] = y;
    else if (x < 0 || y < 0) dims[yr++] = x < 0 && y < 0 ? -1 : (x < 0 ? y : x);
    else return kiln_ifail(c, "batch dimensions cannot be broadcast");
  }
  if (a->rank > 1) dims[yr++] = a->dims[a->rank - 2];
  if (b->rank > 1) dims[yr++] = b->dims[b->rank - 1];
  kiln_infer_tensor(c, 0, dtype, yr, dims);
  return KILN_OK;
}

static kiln_code matmul_infer(kiln_ictx *c) { return mm_infer_common(c, 0, 1, KILN_UNDEFINED); }
static kiln_code matmulinteger_infer(kiln_ictx *c) { return mm_infer_common(c, 0, 1, KILN_INT32); }
static kiln_code qlinearmatmul_infer(kiln_ictx *c) {
  const kiln_type *zp = c->n_in > 7 ? c->in[7] : NULL;
  return mm_infer_common(c, 0, 3, zp && zp->kind == KILN_T_TENSOR ? zp->dtype : KILN_UNDEFINED);
}

static kiln_code gemm_infer(kiln_ictx *c) {
  const kiln_type *a = c->in[0], *b = c->in[1];
  if (!a || !b || a->kind != KILN_T_TENSOR || b->kind != KILN_T_TENSOR) return KILN_OK;
  if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
    return kiln_ifail(c, "A and B must be 2-D");
  bool ta = kiln_attr_int(c->node, "transA", 0) != 0, tb = kiln_attr_int(c->node, "transB", 0) != 0;
  int64_t dims[2] = {a->rank == 2 ? a->dims[ta] : -1, b->rank == 2 ? b->dims[!tb] : -1};
  kiln_infer_tensor(c, 0, a->dtype, 2, dims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_matmul[] = {
    {.domain = "", .name = "MatMul", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = matmul_infer, .run = matmul_run, .flow = KILN_FLOW_MATMUL, .cost = kiln_cost_matmul},
    {.domain = "", .name = "Gemm", .since = 1, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = gemm_infer, .run = gemm_run, .flow = KILN_FLOW_GEMM, .cost = kiln_cost_gemm},
    {.domain = "", .name = "MatMulInteger", .since = 10, .inputs = {2, 4}, .outputs = {1, 1},
     .infer = matmulinteger_infer, .run = matmulinteger_run, .prepare = matmulinteger_prepare,
     .cost = kiln_cost_matmul},
    {.domain = "", .name = "QLinearMatMul", .since = 10, .inputs = {8, 8}, .outputs = {1, 1},
     .infer = qlinearmatmul_infer, .run = qlinearmatmul_run, .prepare = qlinearmatmul_prepare},
    {0},
};
