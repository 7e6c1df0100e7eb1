/* Reduction operators: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
 * ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, and ArgMax / ArgMin.
 *
 * The axes to reduce are an attribute up to a version and an optional second input from then
 * on (ReduceSum: opset 13, the others: opset 18); noop_with_empty_axes arrives together with
 * the input form. Floating-point reductions accumulate in double; integer Sum/Prod/Max/Min/
 * SumSquare/L1 accumulate exactly in 64-bit integers (wrapping like the narrower types would).
 * A reduction over an empty set gives the operation's identity: 0 for the sums, 1 for Prod,
 * the type's lowest / highest value for Max / Min, -inf for LogSum and LogSumExp, NaN for Mean.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pool_f32.h"
#include "ops/cost.h"
#include "ops/op.h"

typedef enum rkind {
  R_SUM,
  R_MEAN,
  R_MAX,
  R_MIN,
  R_PROD,
  R_SUMSQ,
  R_L1,
  R_L2,
  R_LOGSUM,
  R_LSE
} rkind;

/* Opset from which the axes are an input rather than an attribute. */
static int axes_input_since(rkind k) { return k == R_SUM ? 13 : 18; }

static bool is_unsigned(kiln_dtype t) {
  return t == KILN_UINT8 || t == KILN_UINT16 || t == KILN_UINT32 || t == KILN_UINT64 ||
         t == KILN_BOOL;
}

/* Lowest and highest value of an integer type, as the int64 bit pattern kiln_get_i64 returns
 * (UINT64's highest is all ones, compared unsigned). */
static void int_limits(kiln_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
    case KILN_INT8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_UINT8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_INT16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_UINT16: *lo = 0; *hi = UINT16_MAX; break;
    case KILN_INT32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_UINT32: *lo = 0; *hi = UINT32_MAX; break;
    case KILN_UINT64: *lo = 0; *hi = -1; break;
    case KILN_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
  }
}

static inline bool int_less(int64_t a, int64_t b, bool uns) {
  return uns ? (uint64_t)a < (uint64_t)b : a < b;
}

/* Collect the axes list (attribute or input) as given, before validation. *from_input tells
 * which form the node's version uses. Returns false when the list is too long to be valid. */
static bool raw_axes(const kiln_node *node, int opset, rkind k, const kiln_tensor *axes_in,
                     int64_t *axes, size_t cap, size_t *n, bool *from_input) {
  *n = 0;
  *from_input = opset >= axes_input_since(k);
  if (*from_input) {
    if (!axes_in || axes_in->kind != KILN_KIND_TENSOR) return true;
    if ((size_t)axes_in->numel > cap) return false;
    for (int64_t i = 0; i < axes_in->numel; i++) axes[i] = kiln_get_i64(axes_in, i);
    *n = (size_t)axes_in->numel;
    return true;
  }
  size_t cnt = 0;
  const int64_t *a = kiln_attr_ints(node, "axes", &cnt);
  if (cnt > cap) return false;
  if (a) memcpy(axes, a, cnt * sizeof *a);
  *n = cnt;
  return true;
}

/* Turn an axes list into a per-dimension mask. An empty list reduces everything, or nothing
 * (*noop) when noop_with_empty_axes is set in a version that has it. Returns false with a
 * message in msg when an axis is out of range or repeated. */
static bool axes_mask(const int64_t *axes, size_t n, int rank, bool noop_attr,
                      bool reduce[KILN_MAX_RANK], bool *noop, char *msg, size_t msg_len) {
  *noop = false;
  for (int d = 0; d < KILN_MAX_RANK; d++) reduce[d] = false;
  if (n == 0) {
    if (noop_attr)
      *noop = true;
    else
      for (int d = 0; d < rank; d++) reduce[d] = true;
    return true;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank || reduce[a]) {
      snprintf(msg, msg_len, "axis %lld is %s for rank %d", (long long)axes[i],
               a < 0 || a >= rank ? "out of range" : "repeated", rank);
      return false;
    }
    reduce[a] = true;
  }
  return true;
}

/* Output shape for a mask. */
static int reduced_shape(int rank, const int64_t *dims, const bool *reduce, bool keepdims,
                         int64_t *out) {
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (!reduce[d])
      out[r++] = dims[d];
    else if (keepdims)
      out[r++] = 1;
  }
  return r;
}

/* Output-element stride of each input dimension (0 on reduced ones), so that walking the input
 * in order with a counter gives each element's output slot. */
static void out_strides(int rank, const int64_t *dims, const bool *reduce, int64_t *ostr) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    ostr[d] = reduce[d] ? 0 : s;
    if (!reduce[d]) s *= dims[d];
  }
}

/* Advance the multi-index `idx` over dims by one, keeping `o` (the output offset) in step. */
static inline void step(int rank, const int64_t *dims, const int64_t *ostr, int64_t *idx,
                        int64_t *o) {
  for (int d = rank - 1; d >= 0; d--) {
    *o += ostr[d];
    if (++idx[d] < dims[d]) return;
    *o -= ostr[d] * dims[d];
    idx[d] = 0;
  }
}

/* One input value into its output's accumulator (every kind but LogSumExp), for both float
 * paths below. */
static inline __attribute__((always_inline)) void acc_float(rkind k, double *a, double v) {
  switch (k) {
    /* a NaN stays, and a later one replaces it (no branch: the compiler selects) */
    case R_MAX: *a = v != v ? v : v > *a ? v : *a; break;
    case R_MIN: *a = v != v ? v : v < *a ? v : *a; break;
    case R_PROD: *a *= v; break;
    case R_SUMSQ:
    case R_L2: *a += v * v; break;
    case R_L1: *a += fabs(v); break;
    default: *a += v; break;
  }
}

/* The reduced axes as one block: x as [A][R][B], R the block (dims of size 1 go with either
 * side). False where kept axes lie between reduced ones. */
static bool as_block(int rank, const int64_t *dims, const bool *reduce, int64_t *A, int64_t *R,
                     int64_t *B) {
  int64_t n[3] = {1, 1, 1};
  int part = 0; /* 0: before the block, 1: in it, 2: after it */
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    if (reduce[d] && part == 2) return false;
    part = reduce[d] ? 1 : part == 1 ? 2 : part;
    n[part] *= dims[d];
  }
  *A = n[0];
  *R = n[1];
  *B = n[2];
  return true;
}

/* Columns of B per pass of block_f32 (16 KiB of double accumulators). */
enum { BLOCK_COLS = 2048 };

/* acc[a * B + b] takes x[(a * R + r) * B + b]: for r in order along runs of B; where B is 1,
 * in 8 lanes (lane j the values r = j mod 8, the tail in lane 0, then the lanes in order, as
 * kiln_sum_rows_f32 does for sums:
 * another order than the general walk's, fixed, so the same bits on every run; Max and Min
 * pick the same value unless it is a zero of either sign or a NaN), and products in order,
 * four outputs' rows side by side. */
static inline __attribute__((always_inline)) void block_f32(rkind k, const float *x, int64_t A,
                                                            int64_t R, int64_t B, double *acc) {
  if (B > 1) {
    for (int64_t a = 0; a < A; a++)
      for (int64_t b0 = 0; b0 < B; b0 += BLOCK_COLS) { /* the accumulators stay in L1 */
        int64_t nb = B - b0 < BLOCK_COLS ? B - b0 : BLOCK_COLS;
        double *ac = acc + a * B + b0;
        for (int64_t r = 0; r < R; r++) {
          const float *xr = x + (a * R + r) * B + b0;
          for (int64_t b = 0; b < nb; b++) acc_float(k, &ac[b], xr[b]);
        }
      }
    return;
  }
  int64_t a = 0;
  if (k == R_SUM) { /* the accumulators start at 0, and a sum from +0 is never -0.0 */
    kiln_sum_rows_f32(x, A, R, acc);
    return;
  }
  if (k != R_PROD) { /* in 8 lanes, then the lanes in order into the output's accumulator */
    for (; a < A; a++) {
      const float *xa = x + a * R;
      double lane[8];
      for (int j = 0; j < 8; j++) lane[j] = acc[a];
      int64_t r = 0;
      for (; r + 8 <= R; r += 8)
        for (int j = 0; j < 8; j++) acc_float(k, &lane[j], xa[r + j]);
      for (; r < R; r++) acc_float(k, &lane[0], xa[r]);
      double s = lane[0];
      for (int j = 1; j < 8; j++) {
        if (k == R_MAX || k == R_MIN)
          acc_float(k, &s, lane[j]);
        else
          s += lane[j]; /* partial sums */
      }
      acc[a] = s;
    }
    return;
  }
  for (; a + 4 <= A; a += 4) {
    const float *x0 = x + a * R, *x1 = x0 + R, *x2 = x1 + R, *x3 = x2 + R;
    double a0 = acc[a], a1 = acc[a + 1], a2 = acc[a + 2], a3 = acc[a + 3];
    for (int64_t r = 0; r < R; r++) {
      acc_float(k, &a0, x0[r]);
      acc_float(k, &a1, x1[r]);
      acc_float(k, &a2, x2[r]);
      acc_float(k, &a3, x3[r]);
    }
    acc[a] = a0;
    acc[a + 1] = a1;
    acc[a + 2] = a2;
    acc[a + 3] = a3;
  }
  for (; a < A; a++) {
    double a0 = acc[a];
    for (int64_t r = 0; r < R; r++) acc_float(k, &a0, x[a * R + r]);
    acc[a] = a0;
  }
}

/* float32 input whose reduced axes form one block: block_f32 with the kind fixed at compile
 * time. False (nothing done) otherwise; then the general walk runs. */
static bool reduce_block_f32(rkind k, const kiln_tensor *x, const bool *reduce, double *acc) {
  int64_t A, R, B;
  if (x->dtype != KILN_FLOAT || !as_block(x->rank, x->dims, reduce, &A, &R, &B)) return false;
  const float *xp = x->data;
  switch (k) {
    case R_MAX: block_f32(R_MAX, xp, A, R, B, acc); break;
    case R_MIN: block_f32(R_MIN, xp, A, R, B, acc); break;
    case R_PROD: block_f32(R_PROD, xp, A, R, B, acc); break;
    case R_SUMSQ:
    case R_L2: block_f32(R_SUMSQ, xp, A, R, B, acc); break;
    case R_L1: block_f32(R_L1, xp, A, R, B, acc); break;
    case R_LSE: return false;
    default: block_f32(R_SUM, xp, A, R, B, acc); break;
  }
  return true;
}

static void reduce_float(rkind k, const kiln_tensor *x, kiln_tensor *y, const bool *reduce,
                         double *acc, double *mx) {
  int rank = x->rank;
  int64_t ostr[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
  out_strides(rank, x->dims, reduce, ostr);
  int64_t nout = y->numel, count = nout ? x->numel / nout : 0;
  double init = k == R_PROD ? 1.0 : k == R_MAX ? -INFINITY : k == R_MIN ? INFINITY : 0.0;
  for (int64_t o = 0; o < nout; o++) acc[o] = init;

  if (k == R_LSE) {
    /* Two passes: the maximum keeps exp() from overflowing. */
    for (int64_t o = 0; o < nout; o++) mx[o] = -INFINITY;
    int64_t o = 0;
    for (int64_t i = 0; i < x->numel; i++) {
      double v = kiln_load_f64(x, i);
      if (v > mx[o] || isnan(v)) mx[o] = v;
      step(rank, x->dims, ostr, idx, &o);
    }
    o = 0;
    memset(idx, 0, sizeof idx);
    for (int64_t i = 0; i < x->numel; i++) {
      if (isfinite(mx[o])) acc[o] += exp(kiln_load_f64(x, i) - mx[o]);
      step(rank, x->dims, ostr, idx, &o);
    }
  } else if (!reduce_block_f32(k, x, reduce, acc)) {
    int64_t o = 0;
    for (int64_t i = 0; i < x->numel; i++) {
      acc_float(k, &acc[o], kiln_load_f64(x, i));
      step(rank, x->dims, ostr, idx, &o);
    }
  }

  for (int64_t o = 0; o < nout; o++) {
    double r = acc[o];
    switch (k) {
      case R_MEAN: r = r / (double)count; break;
      case R_L2: r = sqrt(r); break;
      case R_LOGSUM: r = log(r); break;
      case R_LSE: r = isfinite(mx[o]) ? mx[o] + log(r) : mx[o]; break;
      default: break;
    }
    kiln_store_f64(y, o, r);
  }
}

static void reduce_int(rkind k, const kiln_tensor *x, kiln_tensor *y, const bool *reduce,
                       int64_t *acc) {
  int rank = x->rank;
  int64_t ostr[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
  out_strides(rank, x->dims, reduce, ostr);
  bool uns = is_unsigned(x->dtype);
  int64_t lo, hi;
  int_limits(x->dtype, &lo, &hi);
  int64_t init = k == R_PROD ? 1 : k == R_MAX ? lo : k == R_MIN ? hi : 0;
  for (int64_t o = 0; o < y->numel; o++) acc[o] = init;
  int64_t o = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    /* Unsigned arithmetic so overflow wraps instead of being undefined. */
    uint64_t v = (uint64_t)kiln_get_i64(x, i), a = (uint64_t)acc[o];
    switch (k) {
      case R_MAX: if (int_less(acc[o], (int64_t)v, uns)) acc[o] = (int64_t)v; break;
      case R_MIN: if (int_less((int64_t)v, acc[o], uns)) acc[o] = (int64_t)v; break;
      case R_PROD: acc[o] = (int64_t)(a * v); break;
      case R_SUMSQ: acc[o] = (int64_t)(a + v * v); break;
      case R_L1: {
        uint64_t m = !uns && (int64_t)v < 0 ? (uint64_t)0 - v : v;
        acc[o] = (int64_t)(a + m);
        break;
      }
      default: acc[o] = (int64_t)(a + v); break;
    }
    step(rank, x->dims, ostr, idx, &o);
  }
  for (int64_t j = 0; j < y->numel; j++) kiln_set_i64(y, j, acc[j]);
}

static kiln_code reduce_run(kiln_kctx *c, rkind k) {
  const kiln_tensor *x = c->in[0];
  if (!x || x->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 'data' must be a tensor");
  if (x->dtype == KILN_STRING || x->dtype == KILN_COMPLEX64 || x->dtype == KILN_COMPLEX128)
    return kiln_kfail(c, "unsupported input type %s", kiln_dtype_name(x->dtype));

  int64_t axes[KILN_MAX_RANK * 4];
  size_t n;
  bool from_input;
  const kiln_tensor *axes_in = kiln_in(c, 1);
  if (axes_in && (axes_in->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(axes_in->dtype)))
    return kiln_kfail(c, "input 'axes' must be an integer tensor");
  if (!raw_axes(c->node, c->opset, k, axes_in, axes, sizeof axes / sizeof axes[0], &n,
                &from_input))
    return kiln_kfail(c, "too many axes for rank %d", x->rank);
  if (!from_input && axes_in)
    return kiln_kfail(c, "opset %d takes axes as an attribute, not an input", c->opset);
  bool noop_attr = from_input && kiln_attr_int(c->node, "noop_with_empty_axes", 0) != 0;
  bool keepdims = kiln_attr_int(c->node, "keepdims", 1) != 0;

  bool reduce[KILN_MAX_RANK], noop;
  char msg[128];
  if (!axes_mask(axes, n, x->rank, noop_attr, reduce, &noop, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  if (noop) {
    kiln_tensor *y = kiln_tensor_clone(x, c->err);
    if (!y) return c->err->code;
    kiln_set_out(c, 0, y);
    return KILN_OK;
  }

  int64_t odims[KILN_MAX_RANK];
  int orank = reduced_shape(x->rank, x->dims, reduce, keepdims, odims);
  kiln_tensor *y = kiln_out(c, 0, x->dtype, orank, odims);
  if (!y) return c->err->code;
  if (y->numel == 0) return KILN_OK;

  bool exact_int = !kiln_dtype_is_float(x->dtype) &&
                   (k == R_SUM || k == R_PROD || k == R_MAX || k == R_MIN || k == R_SUMSQ ||
                    k == R_L1);
  if (exact_int) {
    int64_t *acc = malloc((size_t)y->numel * sizeof *acc);
    if (!acc) return kiln_kfail(c, "out of memory");
    reduce_int(k, x, y, reduce, acc);
    free(acc);
  } else {
    double *acc = malloc((size_t)y->numel * sizeof *acc * (k == R_LSE ? 2 : 1));
    if (!acc) return kiln_kfail(c, "out of memory");
    reduce_float(k, x, y, reduce, acc, acc + y->numel);
    free(acc);
  }
  return KILN_OK;
}

/* Shape function shared by the Reduce* ops: exact when the axes are known at load. */
static kiln_code reduce_infer(kiln_ictx *c, rkind k) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  bool keepdims = kiln_attr_int(c->node, "keepdims", 1) != 0;
  if (x->rank < 0) {
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
    return KILN_OK;
  }
  const kiln_type *ta = c->n_in > 1 ? c->in[1] : NULL;
  const kiln_tensor *ca = c->n_in > 1 ? c->cin[1] : NULL;
  bool from_input = c->opset >= axes_input_since(k);
  if (from_input && ta && (!ca || ca->kind != KILN_KIND_TENSOR)) {
    /* Axes only known at run time: keepdims still fixes the rank (a noop keeps it too). */
    kiln_infer_tensor(c, 0, x->dtype, keepdims ? x->rank : -1, NULL);
    return KILN_OK;
  }
  int64_t axes[KILN_MAX_RANK * 4];
  size_t n;
  if (!raw_axes(c->node, c->opset, k, ca, axes, sizeof axes / sizeof axes[0], &n, &from_input))
    return kiln_ifail(c, "too many axes for rank %d", x->rank);
  bool noop_attr = from_input && kiln_attr_int(c->node, "noop_with_empty_axes", 0) != 0;
  bool reduce[KILN_MAX_RANK], noop;
  char msg[128];
  if (!axes_mask(axes, n, x->rank, noop_attr, reduce, &noop, msg, sizeof msg))
    return kiln_ifail(c, "%s", msg);
  if (noop) {
    kiln_infer_same(c, 0, 0);
    return KILN_OK;
  }
  int64_t odims[KILN_MAX_RANK];
  int orank = reduced_shape(x->rank, x->dims, reduce, keepdims, odims);
  kiln_infer_tensor(c, 0, x->dtype, orank, odims);
  return KILN_OK;
}

#define REDUCE_OP(fn, kind)                                             \
  static kiln_code fn##_run(kiln_kctx *c) { return reduce_run(c, kind); } \
  static kiln_code fn##_infer(kiln_ictx *c) { return reduce_infer(c, kind); }

REDUCE_OP(rsum, R_SUM)
REDUCE_OP(rmean, R_MEAN)
REDUCE_OP(rmax, R_MAX)
REDUCE_OP(rmin, R_MIN)
REDUCE_OP(rprod, R_PROD)
REDUCE_OP(rsumsq, R_SUMSQ)
REDUCE_OP(rl1, R_L1)
REDUCE_OP(rl2, R_L2)
REDUCE_OP(rlogsum, R_LOGSUM)
REDUCE_OP(rlse, R_LSE)

/* ---- ArgMax / ArgMin ---- */

static kiln_code arg_run(kiln_kctx *c, bool is_max) {
  const kiln_tensor *x = c->in[0];
  if (!x || x->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input 'data' must be a tensor");
  if (x->dtype == KILN_STRING || x->dtype == KILN_COMPLEX64 || x->dtype == KILN_COMPLEX128)
    return kiln_kfail(c, "unsupported input type %s", kiln_dtype_name(x->dtype));
  if (x->rank < 1) return kiln_kfail(c, "input must have rank >= 1");
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", 0), x->rank);
  if (axis < 0) return KILN_ERR_RUN;
  bool keepdims = kiln_attr_int(c->node, "keepdims", 1) != 0;
  bool last = c->opset >= 12 && kiln_attr_int(c->node, "select_last_index", 0) != 0;

  bool reduce[KILN_MAX_RANK] = {false};
  reduce[axis] = true;
  int64_t odims[KILN_MAX_RANK];
  int orank = reduced_shape(x->rank, x->dims, reduce, keepdims, odims);
  kiln_tensor *y = kiln_out(c, 0, KILN_INT64, orank, odims);
  if (!y) return c->err->code;
  if (y->numel == 0) return KILN_OK;
  int64_t len = x->dims[axis];
  if (len == 0) return kiln_kfail(c, "cannot take the arg%s of an empty axis", is_max ? "max" : "min");

  int64_t inner = 1;
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  int64_t outer = y->numel / inner;
  int64_t *out = y->data;
  bool flt = kiln_dtype_is_float(x->dtype), uns = is_unsigned(x->dtype);
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in, best = 0;
      if (flt) {
        /* NaN wins, as with numpy: the first one (the last one with select_last_index). */
        double bv = kiln_load_f64(x, base);
        for (int64_t j = 1; j < len; j++) {
          double v = kiln_load_f64(x, base + j * inner);
          bool better = is_max ? v > bv : v < bv;
          if (isnan(bv) && !(last && isnan(v))) better = false;
          else if (isnan(v) || (last && v == bv)) better = true;
          if (better) {
            bv = v;
            best = j;
          }
        }
      } else {
        int64_t bv = kiln_get_i64(x, base);
        for (int64_t j = 1; j < len; j++) {
          int64_t v = kiln_get_i64(x, base + j * inner);
          bool better = is_max ? int_less(bv, v, uns) : int_less(v, bv, uns);
          if (better || (last && v == bv)) {
            bv = v;
            best = j;
          }
        }
      }
      out[o * inner + in] = best;
    }
  }
  return KILN_OK;
}

static kiln_code argmax_run(kiln_kctx *c) { return arg_run(c, true); }
static kiln_code argmin_run(kiln_kctx *c) { return arg_run(c, false); }

static kiln_code arg_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank < 0) {
    kiln_infer_tensor(c, 0, KILN_INT64, -1, NULL);
    return KILN_OK;
  }
  if (x->rank < 1) return kiln_ifail(c, "input must have rank >= 1");
  int64_t axis = kiln_attr_int(c->node, "axis", 0);
  int64_t a = axis < 0 ? axis + x->rank : axis;
  if (a < 0 || a >= x->rank)
    return kiln_ifail(c, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
  bool reduce[KILN_MAX_RANK] = {false};
  reduce[a] = true;
  int64_t odims[KILN_MAX_RANK];
  int orank =
      reduced_shape(x->rank, x->dims, reduce, kiln_attr_int(c->node, "keepdims", 1) != 0, odims);
  kiln_infer_tensor(c, 0, KILN_INT64, orank, odims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_reduce[] = {
    {.domain = "", .name = "ReduceSum", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rsum_infer, .run = rsum_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceSum", .since = 13, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rsum_infer, .run = rsum_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMean", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rmean_infer, .run = rmean_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMean", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rmean_infer, .run = rmean_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMax", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rmax_infer, .run = rmax_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMax", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rmax_infer, .run = rmax_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMin", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rmin_infer, .run = rmin_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceMin", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rmin_infer, .run = rmin_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceProd", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rprod_infer, .run = rprod_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceProd", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rprod_infer, .run = rprod_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceSumSquare", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rsumsq_infer, .run = rsumsq_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceSumSquare", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rsumsq_infer, .run = rsumsq_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceL1", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rl1_infer, .run = rl1_run, .flow = KILN_FLOW_REDUCE},
    {.domain = "", .name = "ReduceL1", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rl1_infer, .run = rl1_run, .flow = KILN_FLOW_REDUCE},
    {.domain = "", .name = "ReduceL2", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rl2_infer, .run = rl2_run, .flow = KILN_FLOW_REDUCE},
    {.domain = "", .name = "ReduceL2", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rl2_infer, .run = rl2_run, .flow = KILN_FLOW_REDUCE},
    {.domain = "", .name = "ReduceLogSum", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rlogsum_infer, .run = rlogsum_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceLogSum", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rlogsum_infer, .run = rlogsum_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceLogSumExp", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = rlse_infer, .run = rlse_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ReduceLogSumExp", .since = 18, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = rlse_infer, .run = rlse_run, .flow = KILN_FLOW_REDUCE, .cost = kiln_cost_reduce},
    {.domain = "", .name = "ArgMax", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = arg_infer, .run = argmax_run, .flow = KILN_FLOW_ARG_REDUCE},
    {.domain = "", .name = "ArgMin", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = arg_infer, .run = argmin_run, .flow = KILN_FLOW_ARG_REDUCE},
    {0},
};
