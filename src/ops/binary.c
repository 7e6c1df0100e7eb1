/* Binary and variadic elementwise operators with numpy broadcasting: arithmetic (Add, Sub,
 * Mul, Div, Pow, Mod), bit shifts, the Bitwise family (And/Or/Xor on integers, Not), logical
 * ops, comparisons (Equal-19 also on strings), Max/Min/Sum/Mean and Where.
 *
 * The output is walked in rows: broadcast_plan merges dimensions until the operands are plain
 * strided runs (stride 1, or 0 where broadcast), so a same-shape or scalar-broadcast op is a
 * single row, and any other broadcast is a few rows each handled by a tight typed loop.
 * float, double, int32 and int64 have typed loops; the other types go through double (float16,
 * bfloat16), int64 (signed) or uint64 (unsigned, bool) per element. */
#include <math.h>
#include <string.h>

#include "ops/cost.h"
#include "ops/op.h"

typedef enum binop {
  B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MOD, B_FMOD, B_MAX, B_MIN,
  B_AND, B_OR, B_XOR, B_SHL, B_SHR, B_BAND, B_BOR, B_BXOR,
  B_EQ, B_LT, B_GT, B_LE, B_GE /* comparisons: bool output */
} binop;

static bool is_cmp(binop op) { return op >= B_EQ; }

static kiln_code out_failed(kiln_kctx *c) { return c->err && c->err->code ? c->err->code : KILN_ERR_NOMEM; }

/* ---- broadcast walk ---- */

enum { MAX_OPS = 3 };

typedef struct bplan {
  int rank;                            /* >= 1 after merging */
  int nops;
  int64_t dims[KILN_MAX_RANK];
  int64_t st[MAX_OPS][KILN_MAX_RANK];  /* element strides per operand, 0 where broadcast */
  int64_t numel;
} bplan;

/* Plan the walk of an output of shape (rank, dims) over operands right-aligned to it. The
 * operands' shapes must already be known to broadcast to dims. */
static void broadcast_plan(bplan *p, int rank, const int64_t *dims, int nops,
                           const kiln_tensor *const *ops) {
  p->nops = nops;
  p->numel = kiln_numel(rank, dims);
  int r = 0;
  int64_t st[MAX_OPS][KILN_MAX_RANK], run[MAX_OPS];
  for (int k = 0; k < nops; k++) run[k] = 1;
  /* strides from the innermost dim outwards; dims of size 1 are dropped */
  int64_t rd[KILN_MAX_RANK];
  for (int d = rank - 1; d >= 0; d--) {
    if (dims[d] == 1) continue;
    for (int k = 0; k < nops; k++) {
      int j = d - (rank - ops[k]->rank);
      int64_t n = j >= 0 ? ops[k]->dims[j] : 1;
      st[k][r] = n == 1 ? 0 : run[k];
      run[k] *= n;
    }
    rd[r++] = dims[d];
  }
  /* merge neighbours (inner index i, outer i+1) when every operand continues its stride */
  int m = 0;
  for (int i = 0; i < r; i++) {
    bool merge = m > 0;
    for (int k = 0; merge && k < nops; k++) merge = st[k][i] == st[k][m - 1] * p->dims[m - 1];
    if (merge) {
      p->dims[m - 1] *= rd[i];
    } else {
      p->dims[m] = rd[i];
      for (int k = 0; k < nops; k++) p->st[k][m] = st[k][i];
      m++;
    }
  }
  if (m == 0) {
    p->dims[m] = 1;
    for (int k = 0; k < nops; k++) p->st[k][m] = 0;
    m++;
  }
  /* stored innermost-first above; flip to the usual outermost-first order */
  p->rank = m;
  for (int i = 0; i < m / 2; i++) {
    int64_t t = p->dims[i];
    p->dims[i] = p->dims[m - 1 - i];
    p->dims[m - 1 - i] = t;
    for (int k = 0; k < nops; k++) {
      t = p->st[k][i];
      p->st[k][i] = p->st[k][m - 1 - i];
      p->st[k][m - 1 - i] = t;
    }
  }
}

/* Advance the odometer over all but the innermost dim, keeping operand offsets in step. */
static void plan_next(const bplan *p, int64_t *idx, int64_t *off) {
  for (int d = p->rank - 2; d >= 0; d--) {
    for (int k = 0; k < p->nops; k++) off[k] += p->st[k][d];
    if (++idx[d] < p->dims[d]) return;
    for (int k = 0; k < p->nops; k++) off[k] -= p->st[k][d] * p->dims[d];
    idx[d] = 0;
  }
}

/* Walks `plan`, running BODY once per row with off[k] (element offset of operand k), s[k]
 * (its inner stride), o (output offset) and n (row length) in scope. */
#define FOR_EACH_ROW(plan, BODY)                                                    \
  do {                                                                             \
    const bplan *p_ = (plan);                                                      \
    if (p_->numel <= 0) break;                                                     \
    int64_t idx_[KILN_MAX_RANK] = {0}, off[MAX_OPS] = {0}, s[MAX_OPS];             \
    const int64_t n = p_->dims[p_->rank - 1], rows_ = p_->numel / n;               \
    for (int k_ = 0; k_ < p_->nops; k_++) s[k_] = p_->st[k_][p_->rank - 1];        \
    for (int64_t r_ = 0; r_ < rows_; r_++) {                                       \
      const int64_t o = r_ * n;                                                    \
      BODY;                                                                        \
      plan_next(p_, idx_, off);                                                    \
    }                                                                              \
  } while (0)

/* ---- scalar semantics shared by every type ---- */

/* Integer division truncating toward zero (C, as ONNX Div); x/0 gives 0 rather than a trap. */
static inline int64_t sdiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps instead of trapping */
  return a / b;
}

/* Mod with fmod=0: the remainder takes the divisor's sign (Python / numpy.mod). */
static inline int64_t smod(int64_t a, int64_t b, bool c_style) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

static inline double fmod_py(double a, double b) {
  double r = fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* Integer power by squaring, wrapping like fixed-width integers. A negative exponent gives
 * 1/a^-b truncated toward zero. */
static int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  for (uint64_t e = (uint64_t)b; e; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return (int64_t)r;
}

static double f64_op(binop op, double a, double b) {
  switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow(a, b);
    case B_MOD: return fmod_py(a, b);
    case B_FMOD: return fmod(a, b);
    case B_MAX: return a > b || isnan(a) ? a : b;
    case B_MIN: return a < b || isnan(a) ? a : b;
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
    default: return 0;
  }
}

static int64_t s64_op(binop op, int64_t a, int64_t b) {
  switch (op) {
    case B_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case B_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case B_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case B_DIV: return sdiv(a, b);
    case B_POW: return ipow(a, b);
    case B_MOD: return smod(a, b, false);
    case B_FMOD: return smod(a, b, true);
    case B_MAX: return a > b ? a : b;
    case B_MIN: return a < b ? a : b;
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
    case B_BAND: return a & b;
    case B_BOR: return a | b;
    case B_BXOR: return a ^ b;
    default: return 0;
  }
}

static uint64_t u64_op(binop op, uint64_t a, uint64_t b, int bits) {
  switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return b ? a / b : 0;
    case B_POW: return (uint64_t)ipow((int64_t)a, (int64_t)(b > INT64_MAX ? INT64_MAX : b));
    case B_MOD: case B_FMOD: return b ? a % b : 0;
    case B_MAX: return a > b ? a : b;
    case B_MIN: return a < b ? a : b;
    case B_AND: return a && b;
    case B_OR: return a || b;
    case B_XOR: return !a != !b;
    /* shifting by the width or more empties the value (C would leave it undefined) */
    case B_SHL: return b >= (uint64_t)bits ? 0 : a << b;
    case B_SHR: return b >= (uint64_t)bits ? 0 : a >> b;
    case B_BAND: return a & b;
    case B_BOR: return a | b;
    case B_BXOR: return a ^ b;
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
  }
  return 0;
}

/* ---- typed rows ---- */

/* The row functions below define `elem` as their element type. */
#define LOOP(EXPR)                                  \
  for (int64_t i = 0; i < n; i++) {                 \
    const elem x = a[i * sa], z = b[i * sb];        \
    y[i] = (EXPR);                                  \
  }                                                 \
  return

#define CMP_ROWS(T)                                 \
  typedef T elem;                                   \
  switch (op) {                                     \
    case B_EQ: LOOP(x == z);                        \
    case B_LT: LOOP(x < z);                         \
    case B_GT: LOOP(x > z);                         \
    case B_LE: LOOP(x <= z);                        \
    case B_GE: LOOP(x >= z);                        \
    default: return;                                \
  }

#define FLOAT_ROW(NAME, T)                                                                    \
  static void NAME(binop op, const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n) { \
    typedef T elem;                                                                           \
    switch (op) {                                                                             \
      case B_ADD: LOOP(x + z);                                                                \
      case B_SUB: LOOP(x - z);                                                                \
      case B_MUL: LOOP(x * z);                                                                \
      case B_DIV: LOOP(x / z);                                                                \
      case B_POW:                                                                             \
        if (sb == 0 && b[0] == 2) { /* the common square */                                   \
          for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] * a[i * sa];                      \
          return;                                                                             \
        }                                                                                     \
        LOOP((T)pow(x, z));                                                                   \
      case B_MAX: LOOP(x > z || isnan(x) ? x : z); /* NaN propagates, as numpy.maximum */    \
      case B_MIN: LOOP(x < z || isnan(x) ? x : z);                                            \
      default: for (int64_t i = 0; i < n; i++) y[i] = (T)f64_op(op, a[i * sa], b[i * sb]);    \
    }                                                                                         \
  }                                                                                           \
  static void NAME##_cmp(binop op, const T *a, int64_t sa, const T *b, int64_t sb, uint8_t *y, \
                         int64_t n) {                                                         \
    CMP_ROWS(T)                                                                               \
  }

/* U is the unsigned type of the same width, for wrapping arithmetic without overflow UB. */
#define INT_ROW(NAME, T, U)                                                                   \
  static void NAME(binop op, const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n) { \
    typedef T elem;                                                                           \
    switch (op) {                                                                             \
      case B_ADD: LOOP((T)((U)x + (U)z));                                                     \
      case B_SUB: LOOP((T)((U)x - (U)z));                                                     \
      case B_MUL: LOOP((T)((U)x * (U)z));                                                     \
      case B_MAX: LOOP(x > z ? x : z);                                                        \
      case B_MIN: LOOP(x < z ? x : z);                                                        \
      default: for (int64_t i = 0; i < n; i++) y[i] = (T)s64_op(op, a[i * sa], b[i * sb]);    \
    }                                                                                         \
  }                                                                                           \
  static void NAME##_cmp(binop op, const T *a, int64_t sa, const T *b, int64_t sb, uint8_t *y, \
                         int64_t n) {                                                         \
    CMP_ROWS(T)                                                                               \
  }

FLOAT_ROW(row_f32, float)
FLOAT_ROW(row_f64, double)
INT_ROW(row_i32, int32_t, uint32_t)
INT_ROW(row_i64, int64_t, uint64_t)

/* bool: the logic ops and Equal, all writing bool. */
static void row_bool(binop op, const uint8_t *a, int64_t sa, const uint8_t *b, int64_t sb,
                     uint8_t *y, int64_t n) {
  typedef uint8_t elem;
  switch (op) {
    case B_AND: LOOP(x && z);
    case B_OR: LOOP(x || z);
    case B_XOR: LOOP(!x != !z);
    case B_EQ: LOOP(!x == !z);
    default: for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)u64_op(op, a[i * sa], b[i * sb], 8);
  }
}

/* Any element type, one element at a time. A and B may differ in type only for Pow. */
static void row_generic(binop op, const kiln_tensor *A, int64_t ia, int64_t sa,
                        const kiln_tensor *B, int64_t ib, int64_t sb, kiln_tensor *Y, int64_t o,
                        int64_t n) {
  const kiln_dtype t = A->dtype;
  const int bits = (int)kiln_dtype_size(t) * 8;
  for (int64_t i = 0; i < n; i++) {
    const int64_t ja = ia + i * sa, jb = ib + i * sb, jy = o + i;
    if (t == KILN_STRING) { /* Equal-19 */
      const char *x = ((char *const *)A->data)[ja], *z = ((char *const *)B->data)[jb];
      ((uint8_t *)Y->data)[jy] = x && z ? !strcmp(x, z) : x == z;
    } else if (kiln_dtype_is_float(t) || (op == B_POW && kiln_dtype_is_float(B->dtype))) {
      /* float operands, or an integer base raised to a float exponent (truncated back) */
      kiln_set_f64(Y, jy, f64_op(op, kiln_get_f64(A, ja), kiln_get_f64(B, jb)));
    } else if (op == B_POW) {
      kiln_set_i64(Y, jy, ipow(kiln_get_i64(A, ja), kiln_get_i64(B, jb)));
    } else if (kiln_dtype_is_signed(t)) {
      kiln_set_i64(Y, jy, s64_op(op, kiln_get_i64(A, ja), kiln_get_i64(B, jb)));
    } else {
      kiln_set_u64(Y, jy, u64_op(op, kiln_get_u64(A, ja), kiln_get_u64(B, jb), bits));
    }
  }
}

/* Y = A op B, where Y already has the broadcast shape. Y may alias A when A has Y's shape. */
static void apply(binop op, const kiln_tensor *A, const kiln_tensor *B, kiln_tensor *Y) {
  const kiln_tensor *ops[2] = {A, B};
  bplan p;
  broadcast_plan(&p, Y->rank, Y->dims, 2, ops);
  const bool same = A->dtype == B->dtype, cmp = is_cmp(op);
#define TYPED(FN, T)                                                                         \
  do {                                                                                       \
    const T *a = A->data, *b = B->data;                                                      \
    if (cmp)                                                                                 \
      FOR_EACH_ROW(&p, FN##_cmp(op, a + off[0], s[0], b + off[1], s[1], (uint8_t *)Y->data + o, n)); \
    else                                                                                     \
      FOR_EACH_ROW(&p, FN(op, a + off[0], s[0], b + off[1], s[1], (T *)Y->data + o, n));    \
  } while (0)
  if (same && A->dtype == KILN_FLOAT)
    TYPED(row_f32, float);
  else if (same && A->dtype == KILN_DOUBLE)
    TYPED(row_f64, double);
  else if (same && A->dtype == KILN_INT32)
    TYPED(row_i32, int32_t);
  else if (same && A->dtype == KILN_INT64)
    TYPED(row_i64, int64_t);
  else if (same && A->dtype == KILN_BOOL)
    FOR_EACH_ROW(&p, row_bool(op, (const uint8_t *)A->data + off[0], s[0],
                              (const uint8_t *)B->data + off[1], s[1], (uint8_t *)Y->data + o, n));
  else
    FOR_EACH_ROW(&p, row_generic(op, A, off[0], s[0], B, off[1], s[1], Y, o, n));
#undef TYPED
}

/* ---- type rules ---- */

enum { C_FLOAT = 1, C_SINT = 2, C_UINT = 4, C_BOOL = 8, C_STR = 16 };
#define C_NUM (C_FLOAT | C_SINT | C_UINT)

static int dtype_class(kiln_dtype t) {
  if (kiln_dtype_is_float(t)) return C_FLOAT;
  if (t == KILN_BOOL) return C_BOOL;
  if (t == KILN_STRING) return C_STR;
  if (kiln_dtype_is_int(t)) return kiln_dtype_is_signed(t) ? C_SINT : C_UINT;
  return 0;
}

static int op_accepts(binop op) {
  switch (op) {
    case B_AND: case B_OR: case B_XOR: return C_BOOL;
    case B_SHL: case B_SHR: return C_UINT;
    case B_BAND: case B_BOR: case B_BXOR: return C_SINT | C_UINT;
    case B_EQ: return C_NUM | C_BOOL | C_STR;
    default: return C_NUM;
  }
}

static kiln_code check_input(kiln_kctx *c, size_t i, int accept) {
  const kiln_tensor *t = kiln_in(c, i);
  if (!t || t->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input %zu must be a tensor", i);
  if (!(dtype_class(t->dtype) & accept))
    return kiln_kfail(c, "input %zu has element type %s, which this op does not take", i,
                      kiln_dtype_name(t->dtype));
  return KILN_OK;
}

/* Broadcast shape of tensors ts[0..n), failing the node on a mismatch. */
static kiln_code out_shape(kiln_kctx *c, size_t n, const kiln_tensor *const *ts, int *rank,
                           int64_t *dims) {
  *rank = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t nd[KILN_MAX_RANK];
    if (!kiln_broadcast_shape(*rank, dims, ts[i]->rank, ts[i]->dims, rank, nd)) {
      char a[200], b[200];
      return kiln_kfail(c, "input %zu %s does not broadcast with shape %s", i,
                        kiln_shape_str(ts[i], a, sizeof a), kiln_dims_str(*rank, dims, b, sizeof b));
    }
    memcpy(dims, nd, (size_t)*rank * sizeof *nd);
  }
  return KILN_OK;
}

/* Ops that had the `broadcast`/`axis` attributes before opset 7. */
static bool legacy_broadcast(const kiln_kctx *c) { return c->opset < 7; }

/* Before opset 7, B was broadcast to A only with broadcast=1, its dims lined up with A's from
 * `axis` (default: aligned to the end). `view` receives B reshaped to A's rank for that. */
static kiln_code legacy_view(kiln_kctx *c, const kiln_tensor *A, const kiln_tensor *B,
                             kiln_tensor *view) {
  char a[200], b[200];
  *view = *B;
  if (kiln_same_shape(A, B)) return KILN_OK;
  if (!kiln_attr_int(c->node, "broadcast", 0))
    return kiln_kfail(c, "shapes %s and %s differ and broadcast is not set",
                      kiln_shape_str(A, a, sizeof a), kiln_shape_str(B, b, sizeof b));
  int64_t axis = kiln_attr_int(c->node, "axis", A->rank - B->rank);
  if (axis < 0) axis += A->rank;
  if (B->rank > A->rank || axis < 0 || axis + B->rank > A->rank)
    return kiln_kfail(c, "cannot broadcast %s to %s at axis %lld", kiln_shape_str(B, b, sizeof b),
                      kiln_shape_str(A, a, sizeof a), (long long)axis);
  view->rank = A->rank;
  for (int d = 0; d < A->rank; d++) {
    int j = d - (int)axis;
    view->dims[d] = j >= 0 && j < B->rank ? B->dims[j] : 1;
    if (view->dims[d] != 1 && view->dims[d] != A->dims[d])
      return kiln_kfail(c, "cannot broadcast %s to %s at axis %lld",
                        kiln_shape_str(B, b, sizeof b), kiln_shape_str(A, a, sizeof a),
                        (long long)axis);
  }
  return KILN_OK;
}

/* ---- kernels ---- */

static kiln_code binary_run(kiln_kctx *c, binop op, bool legacy) {
  kiln_code rc;
  const int accept = op_accepts(op) & (op == B_EQ && c->opset < 19 ? ~C_STR : ~0);
  if ((rc = check_input(c, 0, accept)) || (rc = check_input(c, 1, accept))) return rc;
  const kiln_tensor *A = c->in[0], *B = c->in[1];
  if (op != B_POW && A->dtype != B->dtype)
    return kiln_kfail(c, "inputs have different element types (%s, %s)", kiln_dtype_name(A->dtype),
                      kiln_dtype_name(B->dtype));
  kiln_tensor view;
  if (legacy && legacy_broadcast(c)) {
    if ((rc = legacy_view(c, A, B, &view))) return rc;
    B = &view;
  }
  int rank;
  int64_t dims[KILN_MAX_RANK];
  const kiln_tensor *pair[2] = {A, B};
  if ((rc = out_shape(c, 2, pair, &rank, dims))) return rc;
  kiln_dtype yt = is_cmp(op) ? KILN_BOOL : A->dtype;
  /* the typed row loops of apply() write every element */
  bool typed = A->dtype == B->dtype && (A->dtype == KILN_FLOAT || A->dtype == KILN_DOUBLE ||
                                        A->dtype == KILN_INT32 || A->dtype == KILN_INT64 ||
                                        A->dtype == KILN_BOOL);
  kiln_tensor *Y = typed ? kiln_out_uninit(c, 0, yt, rank, dims) : kiln_out(c, 0, yt, rank, dims);
  if (!Y) return out_failed(c);
  apply(op, A, B, Y);
  return KILN_OK;
}

#define BINARY(NAME, OP, LEGACY) \
  static kiln_code NAME##_run(kiln_kctx *c) { return binary_run(c, OP, LEGACY); }

BINARY(add, B_ADD, true)
BINARY(sub, B_SUB, true)
BINARY(mul, B_MUL, true)
BINARY(div, B_DIV, true)
BINARY(pow, B_POW, true)
BINARY(and, B_AND, true)
BINARY(or, B_OR, true)
BINARY(xor, B_XOR, true)
BINARY(equal, B_EQ, true)
BINARY(less, B_LT, true)
BINARY(greater, B_GT, true)
BINARY(less_equal, B_LE, false)
BINARY(greater_equal, B_GE, false)
BINARY(bitwise_and, B_BAND, false)
BINARY(bitwise_or, B_BOR, false)
BINARY(bitwise_xor, B_BXOR, false)

/* BitwiseNot (opset 18): ~x on any integer type. */
static kiln_code bitwise_not_run(kiln_kctx *c) {
  kiln_code rc = check_input(c, 0, C_SINT | C_UINT);
  if (rc) return rc;
  const kiln_tensor *X = c->in[0];
  kiln_tensor *Y = kiln_out_uninit(c, 0, X->dtype, X->rank, X->dims);
  if (!Y) return out_failed(c);
  for (int64_t i = 0; i < X->numel; i++) kiln_set_u64(Y, i, ~kiln_get_u64(X, i));
  return KILN_OK;
}

static kiln_code mod_run(kiln_kctx *c) {
  return binary_run(c, kiln_attr_int(c->node, "fmod", 0) ? B_FMOD : B_MOD, false);
}

static kiln_code bitshift_run(kiln_kctx *c) {
  const char *dir = kiln_attr_str(c->node, "direction", "");
  if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
    return kiln_kfail(c, "direction must be \"LEFT\" or \"RIGHT\", got \"%s\"", dir);
  return binary_run(c, strcmp(dir, "LEFT") ? B_SHR : B_SHL, false);
}

/* Copy X, broadcast, into Y (which has the broadcast shape). */
static void broadcast_copy(const kiln_tensor *X, kiln_tensor *Y) {
  const kiln_tensor *ops[1] = {X};
  bplan p;
  broadcast_plan(&p, Y->rank, Y->dims, 1, ops);
  const size_t esz = kiln_dtype_size(X->dtype);
  char *y = Y->data;
  const char *x = X->data;
  FOR_EACH_ROW(&p, {
    if (s[0] == 1)
      memcpy(y + (size_t)o * esz, x + (size_t)off[0] * esz, (size_t)n * esz);
    else
      for (int64_t i = 0; i < n; i++) memcpy(y + (size_t)(o + i) * esz, x + (size_t)off[0] * esz, esz);
  });
}

/* Max, Min, Sum, Mean: a left fold of the binary op over all inputs, broadcast together. */
static kiln_code variadic_run(kiln_kctx *c, binop op, int accept, bool mean) {
  kiln_code rc;
  if (c->n_in == 0) return kiln_kfail(c, "needs at least one input");
  for (size_t i = 0; i < c->n_in; i++) {
    if ((rc = check_input(c, i, accept))) return rc;
    if (c->in[i]->dtype != c->in[0]->dtype)
      return kiln_kfail(c, "input %zu is %s but input 0 is %s", i, kiln_dtype_name(c->in[i]->dtype),
                        kiln_dtype_name(c->in[0]->dtype));
  }
  int rank;
  int64_t dims[KILN_MAX_RANK];
  if ((rc = out_shape(c, c->n_in, c->in, &rank, dims))) return rc;
  kiln_tensor *Y = kiln_out(c, 0, c->in[0]->dtype, rank, dims);
  if (!Y) return out_failed(c);
  broadcast_copy(c->in[0], Y);
  for (size_t i = 1; i < c->n_in; i++) apply(op, Y, c->in[i], Y);
  if (mean && c->n_in > 1) {
    const double k = (double)c->n_in;
    if (Y->dtype == KILN_FLOAT) {
      float *y = Y->data;
      for (int64_t i = 0; i < Y->numel; i++) y[i] = (float)(y[i] / k);
    } else {
      for (int64_t i = 0; i < Y->numel; i++) kiln_set_f64(Y, i, kiln_get_f64(Y, i) / k);
    }
  }
  return KILN_OK;
}

static kiln_code max_run(kiln_kctx *c) { return variadic_run(c, B_MAX, C_NUM, false); }
static kiln_code min_run(kiln_kctx *c) { return variadic_run(c, B_MIN, C_NUM, false); }
static kiln_code sum_run(kiln_kctx *c) { return variadic_run(c, B_ADD, C_FLOAT, false); }
static kiln_code mean_run(kiln_kctx *c) { return variadic_run(c, B_ADD, C_FLOAT, true); }

static kiln_code where_run(kiln_kctx *c) {
  kiln_code rc;
  if ((rc = check_input(c, 0, C_BOOL)) || (rc = check_input(c, 1, C_NUM | C_BOOL | C_STR)) ||
      (rc = check_input(c, 2, C_NUM | C_BOOL | C_STR)))
    return rc;
  const kiln_tensor *X = c->in[1], *Z = c->in[2];
  if (X->dtype != Z->dtype)
    return kiln_kfail(c, "X is %s but Y is %s", kiln_dtype_name(X->dtype), kiln_dtype_name(Z->dtype));
  int rank;
  int64_t dims[KILN_MAX_RANK];
  if ((rc = out_shape(c, 3, c->in, &rank, dims))) return rc;
  kiln_tensor *Y = kiln_out(c, 0, X->dtype, rank, dims);
  if (!Y) return out_failed(c);
  bplan p;
  broadcast_plan(&p, rank, dims, 3, c->in);
  const uint8_t *cond = c->in[0]->data;
#define SELECT(T)                                                                      \
  do {                                                                                 \
    const T *x = X->data, *z = Z->data;                                                \
    T *y = Y->data;                                                                    \
    FOR_EACH_ROW(&p, for (int64_t i = 0; i < n; i++) y[o + i] =                        \
                         cond[off[0] + i * s[0]] ? x[off[1] + i * s[1]] : z[off[2] + i * s[2]]); \
  } while (0)
  switch (X->dtype == KILN_STRING ? 0 : kiln_dtype_size(X->dtype)) {
    case 1: SELECT(uint8_t); break;
    case 2: SELECT(uint16_t); break;
    case 4: SELECT(uint32_t); break;
    case 8: SELECT(uint64_t); break;
    default:
      FOR_EACH_ROW(&p, for (int64_t i = 0; i < n; i++) {
        if (cond[off[0] + i * s[0]])
          kiln_copy_elem(Y, o + i, X, off[1] + i * s[1]);
        else
          kiln_copy_elem(Y, o + i, Z, off[2] + i * s[2]);
      });
  }
#undef SELECT
  return KILN_OK;
}

/* ---- shape functions ---- */

static kiln_code infer_arith(kiln_ictx *c) {
  /* before opset 7 B was broadcast into A's shape (checked at run time) */
  if (c->opset < 7) return kiln_infer_unary(c);
  return kiln_infer_broadcast(c, KILN_UNDEFINED);
}

static kiln_code infer_arith_new(kiln_ictx *c) { return kiln_infer_broadcast(c, KILN_UNDEFINED); }

static kiln_code infer_cmp(kiln_ictx *c) {
  if (c->opset < 7) {
    kiln_infer_same(c, 0, 0);
    if (c->out[0] && c->out[0]->kind == KILN_T_TENSOR) c->out[0]->dtype = KILN_BOOL;
    return KILN_OK;
  }
  return kiln_infer_broadcast(c, KILN_BOOL);
}

static kiln_code infer_where(kiln_ictx *c) {
  kiln_code rc = kiln_infer_broadcast(c, KILN_UNDEFINED);
  if (rc || !c->out[0] || c->out[0]->kind != KILN_T_TENSOR) return rc;
  /* the element type is X's (or Y's), never the condition's bool */
  kiln_dtype t = KILN_UNDEFINED;
  for (size_t i = 1; i < 3 && !t; i++)
    if (c->in[i] && c->in[i]->kind == KILN_T_TENSOR) t = c->in[i]->dtype;
  c->out[0]->dtype = t;
  return KILN_OK;
}

#define OP2(op, ver, fn, inf)                                                                   \
  {.domain = "", .name = op, .since = ver, .inputs = {2, 2}, .outputs = {1, 1}, .infer = inf,   \
   .run = fn##_run, .flow = KILN_FLOW_BROADCAST, .cost = kiln_cost_elementwise}
/* binary_run's row loops read a[i * s], b[i * s] before writing y[i]: safe in place */
#define OP2_IN_PLACE(op, ver, fn, flw)                                                          \
  {.domain = "", .name = op, .since = ver, .inputs = {2, 2}, .outputs = {1, 1},               \
   .infer = infer_arith, .run = fn##_run, .flags = KILN_OPF_IN_PLACE, .flow = flw,           \
   .cost = kiln_cost_elementwise}
#define OPN(op, ver, fn)                                                                        \
  {.domain = "", .name = op, .since = ver, .inputs = {1, KILN_VARIADIC}, .outputs = {1, 1},   \
   .infer = infer_arith_new, .run = fn##_run, .flow = KILN_FLOW_BROADCAST,    \
   .cost = kiln_cost_elementwise}

const kiln_op_schema kiln_ops_binary[] = {
    OP2_IN_PLACE("Add", 1, add, KILN_FLOW_ADD),
    OP2_IN_PLACE("Sub", 1, sub, KILN_FLOW_SUB),
    OP2_IN_PLACE("Mul", 1, mul, KILN_FLOW_MUL),
    OP2_IN_PLACE("Div", 1, div, KILN_FLOW_DIV),
    OP2("Pow", 1, pow, infer_arith),
    OP2("Mod", 10, mod, infer_arith_new),
    OP2("BitShift", 11, bitshift, infer_arith_new),
    OP2("And", 1, and, infer_cmp),
    OP2("Or", 1, or, infer_cmp),
    OP2("Xor", 1, xor, infer_cmp),
    OP2("Equal", 1, equal, infer_cmp),
    OP2("Less", 1, less, infer_cmp),
    OP2("Greater", 1, greater, infer_cmp),
    OP2("LessOrEqual", 12, less_equal, infer_cmp),
    OP2("GreaterOrEqual", 12, greater_equal, infer_cmp),
    OP2("BitwiseAnd", 18, bitwise_and, infer_arith_new),
    OP2("BitwiseOr", 18, bitwise_or, infer_arith_new),
    OP2("BitwiseXor", 18, bitwise_xor, infer_arith_new),
    {.domain = "", .name = "BitwiseNot", .since = 18, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = kiln_infer_unary, .run = bitwise_not_run, .flags = KILN_OPF_IN_PLACE,
     .flow = KILN_FLOW_SAME},
    OPN("Max", 1, max),
    OPN("Min", 1, min),
    OPN("Sum", 1, sum),
    OPN("Mean", 1, mean),
    {.domain = "", .name = "Where", .since = 9, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = infer_where, .run = where_run, .flow = KILN_FLOW_BROADCAST},
    {0},
};
