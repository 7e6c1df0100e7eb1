/* Dimension flow analysis (see dimflow.h). One walk over the sorted graph; every rule states
 * only what the op guarantees, so a class never joins two dims that could differ. */
#include "opt/dimflow.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/strmap.h"
#include "ops/op.h"

#define MAXR KILN_MAX_RANK

typedef struct dval {
  int rank;                 /* -1 untracked */
  int64_t d[MAXR];
  int vn;                   /* elements of an int scalar/vector, -1 untracked */
  bool scalar;
  kiln_dimelem v[MAXR];
} dval;

struct kiln_dimflow {
  const kiln_graph *g;
  size_t n_values;
  dval *vals;
  int *parent;              /* union-find over classes */
  int64_t *fixed;           /* per root: the static size the class is known to have, or -1 */
  size_t n_cls, cap_cls;
  kiln_strmap *names;       /* dim_param name -> class */
  bool oom;
};

/* ---- classes ---- */

static int64_t fresh(kiln_dimflow *df) {
  if (df->n_cls == df->cap_cls) {
    size_t cap = df->cap_cls ? 2 * df->cap_cls : 256;
    int *p = realloc(df->parent, cap * sizeof *p);
    if (p) df->parent = p;
    int64_t *f = realloc(df->fixed, cap * sizeof *f);
    if (f) df->fixed = f;
    if (!p || !f) {
      df->oom = true;
      return KILN_DIM_UNKNOWN;
    }
    df->cap_cls = cap;
  }
  df->parent[df->n_cls] = (int)df->n_cls;
  df->fixed[df->n_cls] = -1;
  return -1 - (int64_t)df->n_cls++;
}

static int root(const kiln_dimflow *df, int c) {
  while (df->parent[c] != c) {
    df->parent[c] = df->parent[df->parent[c]]; /* path halving */
    c = df->parent[c];
  }
  return c;
}

/* Canonical token: a static size where the class is known to have one. */
static int64_t canon(const kiln_dimflow *df, int64_t t) {
  if (t >= 0 || t == KILN_DIM_UNKNOWN) return t;
  int r = root(df, (int)(-1 - t));
  return df->fixed[r] >= 0 ? df->fixed[r] : -1 - (int64_t)r;
}

/* Record that two dims are equal (the op requires it). */
static void unite(kiln_dimflow *df, int64_t a, int64_t b) {
  a = canon(df, a);
  b = canon(df, b);
  if (a == KILN_DIM_UNKNOWN || b == KILN_DIM_UNKNOWN || a == b || (a >= 0 && b >= 0)) return;
  if (a >= 0) {
    df->fixed[root(df, (int)(-1 - b))] = a;
    return;
  }
  if (b >= 0) {
    df->fixed[root(df, (int)(-1 - a))] = b;
    return;
  }
  int ra = root(df, (int)(-1 - a)), rb = root(df, (int)(-1 - b));
  df->parent[ra] = rb;
}

bool kiln_dimflow_same(const kiln_dimflow *df, int64_t a, int64_t b) {
  a = canon(df, a);
  b = canon(df, b);
  return a != KILN_DIM_UNKNOWN && a == b;
}

/* ---- reading the graph ---- */

static const dval *in_val(const kiln_dimflow *df, const kiln_node *n, size_t i) {
  if (i >= n->n_in || n->in[i] < 0 || (size_t)n->in[i] >= df->n_values) return NULL;
  return &df->vals[n->in[i]];
}

/* Integer constant input i (at most cap values). */
static bool const_ints(const kiln_graph *g, const kiln_node *n, size_t i, int64_t *out, size_t cap,
                       size_t *count) {
  if (i >= n->n_in || n->in[i] < 0) return false;
  const kiln_value_info *v = &g->values[n->in[i]];
  const kiln_tensor *t = v->init;
  if (!t || v->is_input || t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype) ||
      t->numel < 0 || (size_t)t->numel > cap)
    return false;
  for (int64_t k = 0; k < t->numel; k++) out[k] = kiln_get_i64(t, k);
  *count = (size_t)t->numel;
  return true;
}

/* Axes from attribute `name` or, when absent, from constant input i (-1: none). */
static bool axes_of(const kiln_graph *g, const kiln_node *n, const char *name, size_t i,
                    int64_t *out, size_t *count, bool *given) {
  size_t na;
  const int64_t *a = kiln_attr_ints(n, name, &na);
  *given = true;
  if (a && na <= MAXR) {
    memcpy(out, a, na * sizeof *a);
    *count = na;
    return true;
  }
  if (a) return false;
  if (i < n->n_in && n->in[i] >= 0) return const_ints(g, n, i, out, MAXR, count);
  *given = false;
  *count = 0;
  return true;
}

static bool norm_axis(int64_t *a, int rank) {
  if (*a < 0) *a += rank;
  return *a >= 0 && *a < rank;
}

/* Numpy broadcast of token lists; false when a rank is unknown. */
static bool bcast(kiln_dimflow *df, const dval *const *ins, size_t n, int *rank, int64_t *out) {
  int r = 0;
  for (size_t k = 0; k < n; k++) {
    if (!ins[k]) continue;
    if (ins[k]->rank < 0) return false;
    if (ins[k]->rank > r) r = ins[k]->rank;
  }
  for (int i = 0; i < r; i++) {
    int64_t fixed = -1, cls = 0;
    bool same = true, any = false;
    for (size_t k = 0; k < n; k++) {
      if (!ins[k]) continue;
      int j = i - (r - ins[k]->rank);
      if (j < 0) continue;
      int64_t t = canon(df, ins[k]->d[j]);
      if (t == 1) continue;
      if (t >= 0) {
        fixed = t;
        continue;
      }
      if (!any) cls = t;
      else if (t != cls) same = false;
      any = true;
    }
    out[i] = fixed >= 0 ? fixed : !any ? 1 : same ? cls : KILN_DIM_UNKNOWN;
  }
  *rank = r;
  return true;
}

/* Slice parameters per axis of a tensor of rank r: start, end, step (defaults: whole dim). */
typedef struct slice_p {
  bool sliced[MAXR];
  int64_t start[MAXR], end[MAXR], step[MAXR];
} slice_p;

static bool slice_params(const kiln_graph *g, const kiln_node *n, int r, slice_p *p) {
  int64_t st[MAXR], en[MAXR], ax[MAXR], sp[MAXR];
  size_t ns, ne, na = 0, nsp = 0;
  memset(p, 0, sizeof *p);
  if (n->opset < 10) {
    size_t c1, c2, c3;
    const int64_t *a = kiln_attr_ints(n, "starts", &c1), *b = kiln_attr_ints(n, "ends", &c2),
                  *c = kiln_attr_ints(n, "axes", &c3);
    if (!a || !b || c1 != c2 || c1 > MAXR || (c && c3 != c1)) return false;
    memcpy(st, a, c1 * sizeof *a);
    memcpy(en, b, c1 * sizeof *b);
    if (c) memcpy(ax, c, c1 * sizeof *c);
    ns = ne = c1;
    na = c ? c1 : 0;
  } else {
    if (!const_ints(g, n, 1, st, MAXR, &ns) || !const_ints(g, n, 2, en, MAXR, &ne) || ns != ne)
      return false;
    if (n->n_in > 3 && n->in[3] >= 0 && (!const_ints(g, n, 3, ax, MAXR, &na) || na != ns)) return false;
    if (n->n_in > 4 && n->in[4] >= 0 && (!const_ints(g, n, 4, sp, MAXR, &nsp) || nsp != ns)) return false;
  }
  for (size_t k = 0; k < ns; k++) {
    int64_t a = na ? ax[k] : (int64_t)k;
    if (!norm_axis(&a, r) || p->sliced[a]) return false;
    p->sliced[a] = true;
    p->start[a] = st[k];
    p->end[a] = en[k];
    p->step[a] = nsp ? sp[k] : 1;
    if (!p->step[a]) return false;
  }
  return true;
}

/* ONNX Slice bounds on a dim of static length len: first index, step, count. */
static void slice_range(int64_t len, int64_t s, int64_t e, int64_t step, int64_t *first, int64_t *count) {
  if (s < 0) s += len;
  if (e < 0) e += len;
  if (step > 0) {
    s = s < 0 ? 0 : s > len ? len : s;
    e = e < 0 ? 0 : e > len ? len : e;
    *count = e > s ? (e - s + step - 1) / step : 0;
  } else {
    s = s < 0 ? 0 : s > len - 1 ? len - 1 : s;
    e = e < -1 ? -1 : e > len - 1 ? len - 1 : e;
    *count = s > e ? (s - e + (-step) - 1) / (-step) : 0;
  }
  *first = s;
}

/* Whether a slice keeps a whole dim whatever its length. */
static bool slice_keeps_all(const slice_p *p, int a) {
  return !p->sliced[a] || (p->start[a] == 0 && p->step[a] == 1 && p->end[a] >= INT32_MAX);
}

/* ---- elements of shape vectors ---- */

static kiln_dimelem elem_const(int64_t v) { return (kiln_dimelem){KILN_ELEM_CONST, v, -1, -1}; }
static kiln_dimelem elem_unknown(void) { return (kiln_dimelem){KILN_ELEM_UNKNOWN, 0, -1, -1}; }

/* An element copied from dim `dim` of value `src`, whose token is tok. */
static kiln_dimelem elem_dim(const kiln_dimflow *df, int64_t tok, int src, int dim) {
  tok = canon(df, tok);
  if (tok == KILN_DIM_UNKNOWN) return elem_unknown();
  return (kiln_dimelem){tok >= 0 ? KILN_ELEM_CONST : KILN_ELEM_SYM, tok, src, dim};
}

/* The element as a dim token (a negative constant is no dim: unknown). */
static int64_t elem_tok(const kiln_dimflow *df, kiln_dimelem e) {
  if (e.kind == KILN_ELEM_SYM) return canon(df, e.val);
  return e.kind == KILN_ELEM_CONST && e.val >= 0 ? e.val : KILN_DIM_UNKNOWN;
}

/* Constant value of an element, if it has one. */
static bool elem_value(const kiln_dimflow *df, kiln_dimelem e, int64_t *v) {
  if (e.kind == KILN_ELEM_CONST) return *v = e.val, true;
  int64_t t = e.kind == KILN_ELEM_SYM ? canon(df, e.val) : KILN_DIM_UNKNOWN;
  return t >= 0 ? (*v = t, true) : false;
}

/* ---- dims of node outputs ---- */

/* The -1 dim `at` of a Reshape of x to dims d (rank r): x's element count over the other dims',
 * where the symbolic dims cancel (each of d's matched by an equal one of x's) and what is left of
 * x is a static count or one symbolic dim over 1. Unknown (and zero-size) dims give unknown. */
static int64_t inferred_dim(const kiln_dimflow *df, const dval *x, const int64_t *d, int r, int at) {
  int64_t left[MAXR], pin = 1, pout = 1;
  int nl = 0;
  if (x->rank < 0) return KILN_DIM_UNKNOWN;
  for (int i = 0; i < x->rank; i++) {
    int64_t t = canon(df, x->d[i]);
    if (t == KILN_DIM_UNKNOWN || t == 0 || (t > 0 && pin > INT64_MAX / t)) return KILN_DIM_UNKNOWN;
    if (t > 0) pin *= t;
    else left[nl++] = t;
  }
  for (int i = 0; i < r; i++) {
    if (i == at) continue;
    int64_t t = canon(df, d[i]);
    if (t == KILN_DIM_UNKNOWN || t == 0 || (t > 0 && pout > INT64_MAX / t)) return KILN_DIM_UNKNOWN;
    if (t > 0) {
      pout *= t;
      continue;
    }
    int k = 0;
    while (k < nl && left[k] != t) k++;
    if (k == nl) return KILN_DIM_UNKNOWN;
    left[k] = left[--nl];
  }
  if (pin % pout) return KILN_DIM_UNKNOWN;
  if (nl == 0) return pin / pout;
  return nl == 1 && pin == pout ? left[0] : KILN_DIM_UNKNOWN;
}

/* Candidate dims of output 0 (and, for Split, the others); rank -1 when nothing is known. */
static kiln_flow flow_of(const kiln_node *n) { return n->schema ? n->schema->flow : KILN_FLOW_NONE; }

static void node_dims(kiln_dimflow *df, const kiln_node *n, int *rank, int64_t *d) {
  const kiln_graph *g = df->g;
  const dval *x = in_val(df, n, 0);
  kiln_flow fl = flow_of(n);
  *rank = -1;
  if (!x || fl == KILN_FLOW_NONE) return;
  if (fl == KILN_FLOW_SAME || fl == KILN_FLOW_COPY) {
    *rank = x->rank;
    memcpy(d, x->d, sizeof x->d);
  } else if (fl == KILN_FLOW_BROADCAST || fl == KILN_FLOW_ADD || fl == KILN_FLOW_SUB ||
             fl == KILN_FLOW_MUL || fl == KILN_FLOW_DIV) {
    const dval *ins[64];
    if (n->n_in > 64) return;
    for (size_t k = 0; k < n->n_in; k++) ins[k] = in_val(df, n, k);
    bcast(df, ins, n->n_in, rank, d);
  } else if (fl == KILN_FLOW_TRANSPOSE) {
    size_t np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    if (x->rank < 0 || (perm && np != (size_t)x->rank)) return;
    for (int i = 0; i < x->rank; i++) {
      int64_t p = perm ? perm[i] : x->rank - 1 - i;
      if (p < 0 || p >= x->rank) return;
      d[i] = x->d[p];
    }
    *rank = x->rank;
  } else if (fl == KILN_FLOW_MATMUL) {
    const dval *b = in_val(df, n, 1);
    if (!b || x->rank < 1 || b->rank < 1) return;
    unite(df, x->d[x->rank - 1], b->d[b->rank >= 2 ? b->rank - 2 : 0]);
    if (x->rank >= 2 && b->rank >= 2) {
      dval ba = *x, bb = *b;
      ba.rank -= 2;
      bb.rank -= 2;
      const dval *ins[2] = {&ba, &bb};
      if (!bcast(df, ins, 2, rank, d)) return;
      d[*rank] = x->d[x->rank - 2];
      d[*rank + 1] = b->d[b->rank - 1];
      *rank += 2;
    } else if (x->rank >= 2) { /* b is a vector */
      *rank = x->rank - 1;
      memcpy(d, x->d, (size_t)*rank * sizeof *d);
    } else if (b->rank >= 2) { /* a is a vector */
      *rank = b->rank - 1;
      memcpy(d, b->d, (size_t)(b->rank - 2) * sizeof *d);
      d[*rank - 1] = b->d[b->rank - 1];
    } else {
      *rank = 0;
    }
  } else if (fl == KILN_FLOW_GEMM) {
    const dval *b = in_val(df, n, 1);
    if (!b || x->rank != 2 || b->rank != 2) return;
    int ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    unite(df, x->d[1 - ta], b->d[tb]);
    d[0] = x->d[ta];
    d[1] = b->d[1 - tb];
    *rank = 2;
  } else if (fl == KILN_FLOW_GATHER) {
    const dval *ix = in_val(df, n, 1);
    int64_t axis = kiln_attr_int(n, "axis", 0);
    if (!ix || x->rank < 0 || ix->rank < 0 || !norm_axis(&axis, x->rank) ||
        x->rank - 1 + ix->rank > MAXR)
      return;
    int r = 0;
    for (int i = 0; i < axis; i++) d[r++] = x->d[i];
    for (int i = 0; i < ix->rank; i++) d[r++] = ix->d[i];
    for (int i = (int)axis + 1; i < x->rank; i++) d[r++] = x->d[i];
    *rank = r;
  } else if (fl == KILN_FLOW_SLICE) {
    slice_p p;
    if (x->rank < 0 || !slice_params(g, n, x->rank, &p)) return;
    for (int i = 0; i < x->rank; i++) {
      int64_t t = canon(df, x->d[i]), first, count;
      if (slice_keeps_all(&p, i)) d[i] = t;
      else if (t >= 0) slice_range(t, p.start[i], p.end[i], p.step[i], &first, &count), d[i] = count;
      else d[i] = KILN_DIM_UNKNOWN;
    }
    *rank = x->rank;
  } else if (fl == KILN_FLOW_RESHAPE) {
    const dval *s = in_val(df, n, 1);
    bool allowzero = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0);
    if (!s || s->vn < 0 || s->scalar) return;
    int infer = -1;
    for (int i = 0; i < s->vn; i++) {
      int64_t t = elem_tok(df, s->v[i]);
      if (t == 0 && !allowzero) t = x->rank > i ? x->d[i] : KILN_DIM_UNKNOWN;
      if (s->v[i].kind == KILN_ELEM_CONST && s->v[i].val == -1) infer = i;
      d[i] = t;
    }
    *rank = s->vn;
    if (infer >= 0) d[infer] = inferred_dim(df, x, d, s->vn, infer);
  } else if (fl == KILN_FLOW_UNSQUEEZE || fl == KILN_FLOW_SQUEEZE) {
    int64_t ax[MAXR];
    size_t na;
    bool given, unsq = fl == KILN_FLOW_UNSQUEEZE;
    if (x->rank < 0 || !axes_of(g, n, "axes", 1, ax, &na, &given)) return;
    if (!unsq && na == 0) given = false; /* Squeeze with empty axes: all size-1 dims */
    int r = unsq ? x->rank + (int)na : x->rank;
    bool mark[MAXR + 1] = {0};
    if (r > MAXR) return;
    for (size_t k = 0; k < na; k++) {
      if (!norm_axis(&ax[k], unsq ? r : x->rank) || mark[ax[k]]) return;
      mark[ax[k]] = true;
    }
    int o = 0;
    if (unsq) {
      for (int i = 0, j = 0; i < r; i++) d[o++] = mark[i] ? 1 : x->d[j++];
    } else {
      for (int i = 0; i < x->rank; i++) {
        int64_t t = canon(df, x->d[i]);
        if (!given && t < 0) return; /* which dims go depends on run-time sizes */
        if (given ? mark[i] : t == 1) continue;
        d[o++] = x->d[i];
      }
    }
    *rank = o;
  } else if (fl == KILN_FLOW_CONCAT) {
    int64_t axis = kiln_attr_int(n, "axis", 0), sum = 0;
    if (x->rank < 0 || !norm_axis(&axis, x->rank)) return;
    for (size_t k = 0; k < n->n_in; k++) {
      const dval *y = in_val(df, n, k);
      if (!y || y->rank != x->rank) return;
      for (int i = 0; i < x->rank; i++)
        if (i != axis) unite(df, x->d[i], y->d[i]);
      int64_t t = canon(df, y->d[axis]);
      sum = sum >= 0 && t >= 0 ? sum + t : -1;
    }
    *rank = x->rank;
    memcpy(d, x->d, sizeof x->d);
    d[axis] = sum >= 0 ? sum : KILN_DIM_UNKNOWN;
  } else if (fl == KILN_FLOW_FLATTEN) {
    int64_t axis = kiln_attr_int(n, "axis", 1), p[2] = {1, 1};
    if (x->rank < 0 || (axis < 0 && (axis += x->rank) < 0) || axis > x->rank) return;
    for (int i = 0; i < x->rank; i++) {
      int64_t t = canon(df, x->d[i]), *q = &p[i >= axis], prod;
      *q = *q >= 0 && t >= 0 && kiln_mul_ok(*q, t, &prod) ? prod : -1;
    }
    /* a side made of one dim is that dim */
    d[0] = axis == 1 ? x->d[0] : p[0] >= 0 ? p[0] : KILN_DIM_UNKNOWN;
    d[1] = axis == x->rank - 1 ? x->d[axis] : p[1] >= 0 ? p[1] : KILN_DIM_UNKNOWN;
    *rank = 2;
  } else if (fl == KILN_FLOW_SPLIT) {
    int64_t axis = kiln_attr_int(n, "axis", 0);
    if (x->rank < 0 || !norm_axis(&axis, x->rank)) return;
    *rank = x->rank;
    memcpy(d, x->d, sizeof x->d);
    d[axis] = KILN_DIM_UNKNOWN;
  } else if (fl == KILN_FLOW_REDUCE || fl == KILN_FLOW_ARG_REDUCE) {
    int64_t ax[MAXR];
    size_t na = 0;
    bool given = true, keep = kiln_attr_int(n, "keepdims", 1) != 0, arg = fl == KILN_FLOW_ARG_REDUCE;
    if (x->rank < 0) return;
    if (arg) ax[0] = kiln_attr_int(n, "axis", 0), na = 1;
    else if (!axes_of(g, n, "axes", 1, ax, &na, &given)) return;
    bool mark[MAXR] = {0};
    if (!arg && na == 0 && kiln_attr_int(n, "noop_with_empty_axes", 0)) na = 0; /* no reduction */
    else if (!arg && na == 0) for (int i = 0; i < x->rank; i++) mark[i] = true;
    for (size_t k = 0; k < na; k++) {
      if (!norm_axis(&ax[k], x->rank)) return;
      mark[ax[k]] = true;
    }
    int o = 0;
    for (int i = 0; i < x->rank; i++) {
      if (!mark[i]) d[o++] = x->d[i];
      else if (keep) d[o++] = 1;
    }
    *rank = o;
  } else if (fl == KILN_FLOW_EXPAND) {
    const dval *s = in_val(df, n, 1);
    if (!s || s->vn < 0 || s->scalar) return;
    dval sv = {.rank = s->vn};
    for (int i = 0; i < s->vn; i++) sv.d[i] = elem_tok(df, s->v[i]);
    const dval *ins[2] = {x, &sv};
    bcast(df, ins, 2, rank, d);
  } else if (fl == KILN_FLOW_CONSTANT_OF_SHAPE) {
    if (x->vn < 0 || x->scalar) return;
    for (int i = 0; i < x->vn; i++) d[i] = elem_tok(df, x->v[i]);
    *rank = x->vn;
  } else if (fl == KILN_FLOW_BATCH) {
    if (x->rank < 1) return;
    *rank = x->rank;
    d[0] = x->d[0];
    for (int i = 1; i < x->rank; i++) d[i] = KILN_DIM_UNKNOWN;
  }
}

/* ---- contents of integer shape vectors ---- */

static bool int_value(const kiln_graph *g, int v) {
  const kiln_type *t = &g->values[v].type;
  return t->kind == KILN_T_TENSOR && (t->dtype == KILN_INT64 || t->dtype == KILN_INT32);
}

static void node_vec(kiln_dimflow *df, const kiln_node *n, dval *o) {
  const kiln_graph *g = df->g;
  const dval *x = in_val(df, n, 0);
  kiln_flow fl = flow_of(n);
  o->vn = -1;
  if (!x || n->n_out < 1 || n->out[0] < 0 || !int_value(g, n->out[0])) return;
  if (fl == KILN_FLOW_SHAPE) {
    if (x->rank < 0) return;
    int64_t s = 0, e = x->rank;
    if (n->opset >= 15) s = kiln_attr_int(n, "start", 0), e = kiln_attr_int(n, "end", x->rank);
    if (s < 0) s += x->rank;
    if (e < 0) e += x->rank;
    s = s < 0 ? 0 : s > x->rank ? x->rank : s;
    e = e < s ? s : e > x->rank ? x->rank : e;
    o->vn = 0;
    for (int64_t i = s; i < e; i++) o->v[o->vn++] = elem_dim(df, x->d[i], n->in[0], (int)i);
    return;
  }
  if (fl == KILN_FLOW_SIZE) {
    int64_t p = 1;
    for (int i = 0; x->rank >= 0 && i < x->rank && p >= 0; i++) {
      int64_t t = canon(df, x->d[i]);
      if (t < 0 || !kiln_mul_ok(p, t, &p)) p = -1;
    }
    o->vn = 1;
    o->scalar = true;
    o->v[0] = x->rank >= 0 && p >= 0 ? elem_const(p) : elem_unknown();
    return;
  }
  if (x->vn < 0) return;
  if (fl == KILN_FLOW_COPY) {
    o->vn = x->vn;
    o->scalar = x->scalar;
    memcpy(o->v, x->v, sizeof x->v);
  } else if (fl == KILN_FLOW_GATHER) {
    int64_t idx[MAXR], axis = kiln_attr_int(n, "axis", 0);
    size_t ni;
    const kiln_tensor *it = n->n_in > 1 && n->in[1] >= 0 ? g->values[n->in[1]].init : NULL;
    if (x->scalar || (axis != 0 && axis != -1) || !it || it->rank > 1 ||
        !const_ints(g, n, 1, idx, MAXR, &ni))
      return;
    for (size_t k = 0; k < ni; k++) {
      int64_t i = idx[k] < 0 ? idx[k] + x->vn : idx[k];
      if (i < 0 || i >= x->vn) return;
      o->v[k] = x->v[i];
    }
    o->vn = (int)ni;
    o->scalar = it->rank == 0;
  } else if (fl == KILN_FLOW_UNSQUEEZE || fl == KILN_FLOW_SQUEEZE) {
    int64_t ax[MAXR];
    size_t na;
    bool given, unsq = fl == KILN_FLOW_UNSQUEEZE;
    if (!axes_of(g, n, "axes", 1, ax, &na, &given)) return;
    if (unsq ? !(x->scalar && na == 1 && (ax[0] == 0 || ax[0] == -1))
             : !(!x->scalar && x->vn == 1 && (!given || (na == 1 && (ax[0] == 0 || ax[0] == -1)))))
      return;
    o->vn = 1;
    o->scalar = !unsq;
    o->v[0] = x->v[0];
  } else if (fl == KILN_FLOW_CONCAT) {
    int64_t axis = kiln_attr_int(n, "axis", 0);
    if (axis != 0 && axis != -1) return;
    int k = 0;
    for (size_t i = 0; i < n->n_in; i++) {
      const dval *y = in_val(df, n, i);
      if (!y || y->vn < 0 || y->scalar || k + y->vn > MAXR) return;
      memcpy(&o->v[k], y->v, (size_t)y->vn * sizeof *y->v);
      k += y->vn;
    }
    o->vn = k;
    o->scalar = false;
  } else if (fl == KILN_FLOW_SLICE) {
    slice_p p;
    if (x->scalar || !slice_params(g, n, 1, &p)) return;
    int64_t first, count;
    if (!p.sliced[0]) p.start[0] = 0, p.end[0] = INT64_MAX, p.step[0] = 1;
    slice_range(x->vn, p.start[0], p.end[0], p.step[0], &first, &count);
    for (int64_t k = 0; k < count; k++) o->v[k] = x->v[first + k * p.step[0]];
    o->vn = (int)count;
    o->scalar = false;
  } else if (fl == KILN_FLOW_ADD || fl == KILN_FLOW_SUB || fl == KILN_FLOW_MUL || fl == KILN_FLOW_DIV) {
    const dval *y = in_val(df, n, 1);
    if (!y || y->vn < 0 || (x->vn != y->vn && x->vn != 1 && y->vn != 1)) return;
    int m = x->vn > y->vn ? x->vn : y->vn;
    for (int k = 0; k < m; k++) {
      kiln_dimelem a = x->v[x->vn == 1 ? 0 : k], b = y->v[y->vn == 1 ? 0 : k], r = elem_unknown();
      int64_t ta = 0, tb = 0;
      bool ka = elem_value(df, a, &ta), kb = elem_value(df, b, &tb);
      char c = fl == KILN_FLOW_DIV ? '/' : fl == KILN_FLOW_MUL ? '*' : fl == KILN_FLOW_ADD ? '+' : '-';
      const int64_t big = (int64_t)1 << 40; /* shape arithmetic stays far from overflow */
      if (ka && kb && ta > -big && ta < big && tb > -big && tb < big) {
        /* integer Div truncates toward zero in kiln, like C */
        if (c == '+') r = elem_const(ta + tb);
        else if (c == '-') r = elem_const(ta - tb);
        else if (c == '*') r = elem_const(ta * tb);
        else if (tb != 0) r = elem_const(ta / tb);
      } else if ((kb && c == '*' && tb == 1) || (kb && (c == '+' || c == '-') && tb == 0) ||
                 (kb && c == '/' && tb == 1)) {
        r = a;
      } else if ((ka && c == '*' && ta == 1) || (ka && c == '+' && ta == 0)) {
        r = b;
      }
      o->v[k] = r;
    }
    o->vn = m;
    o->scalar = x->scalar && y->scalar;
  }
}

/* ---- the walk ---- */

static int64_t name_class(kiln_dimflow *df, const char *name) {
  int c = kiln_strmap_get(df->names, name);
  if (c >= 0) return -1 - (int64_t)c;
  int64_t t = fresh(df);
  if (t != KILN_DIM_UNKNOWN && kiln_strmap_put(df->names, name, (int)(-1 - t))) df->oom = true;
  return t;
}

/* Settle value v's dims: the candidate from its op merged with what its type states. */
static void settle(kiln_dimflow *df, int v, int crank, const int64_t *cand) {
  const kiln_value_info *vi = &df->g->values[v];
  const kiln_type *t = kiln_value_type(df->g, v);
  dval *o = &df->vals[v];
  /* integer constants: their elements */
  const kiln_tensor *c = vi->init;
  o->vn = -1;
  if (c && !vi->is_input && c->kind == KILN_KIND_TENSOR && kiln_dtype_is_int(c->dtype) &&
      c->rank <= 1 && c->numel <= MAXR) {
    o->vn = (int)c->numel;
    o->scalar = c->rank == 0;
    for (int64_t k = 0; k < c->numel; k++) o->v[k] = elem_const(kiln_get_i64(c, k));
  }
  o->rank = -1;
  if (t->kind == KILN_T_UNKNOWN && c && c->kind == KILN_KIND_TENSOR) { /* a constant not yet typed */
    o->rank = c->rank;
    memcpy(o->d, c->dims, (size_t)c->rank * sizeof *c->dims);
    return;
  }
  if (t->kind != KILN_T_TENSOR) return;
  bool use = crank >= 0 && (t->rank < 0 || t->rank == crank);
  int r = t->rank >= 0 ? t->rank : crank;
  if (r < 0 || r > MAXR) return;
  for (int k = 0; k < r; k++) {
    int64_t tok = use ? canon(df, cand[k]) : KILN_DIM_UNKNOWN;
    if (tok == KILN_DIM_UNKNOWN) tok = fresh(df); /* a real dim: equal to itself */
    if (t->rank >= 0 && t->dims[k] >= 0) {
      unite(df, tok, t->dims[k]);
      tok = t->dims[k];
    }
    if (t->rank >= 0 && t->sym[k] && *t->sym[k]) unite(df, tok, name_class(df, t->sym[k]));
    o->d[k] = canon(df, tok);
  }
  o->rank = r;
}

kiln_dimflow *kiln_dimflow_new(const kiln_graph *g) {
  kiln_dimflow *df = kiln_calloc(1, sizeof *df);
  if (!df) return NULL;
  df->g = g;
  df->n_values = g->n_values;
  df->vals = kiln_calloc(g->n_values ? g->n_values : 1, sizeof *df->vals);
  df->names = kiln_strmap_new();
  if (!df->vals || !df->names) goto fail;
  for (size_t v = 0; v < g->n_values; v++) {
    df->vals[v].rank = -1;
    df->vals[v].vn = -1;
  }
  for (size_t v = 0; v < g->n_values; v++)
    if (g->values[v].producer < 0) settle(df, (int)v, -1, NULL);
  for (size_t i = 0; i < g->n_nodes && !df->oom; i++) {
    const kiln_node *n = &g->nodes[i];
    int rank;
    int64_t d[MAXR];
    node_dims(df, n, &rank, d);
    for (size_t k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || (size_t)v >= df->n_values) continue;
      bool split_like = k > 0 && flow_of(n) == KILN_FLOW_SPLIT;
      settle(df, v, k == 0 || split_like ? rank : -1, d);
      if (g->values[v].init) continue; /* a folded constant keeps its elements */
      dval *o = &df->vals[v];
      if (k == 0) node_vec(df, n, o);
    }
  }
  if (df->oom) goto fail;
  return df;
fail:
  kiln_dimflow_free(df);
  return NULL;
}

void kiln_dimflow_free(kiln_dimflow *df) {
  if (!df) return;
  free(df->vals);
  free(df->parent);
  free(df->fixed);
  kiln_strmap_free(df->names);
  free(df);
}

int kiln_dimflow_rank(const kiln_dimflow *df, int v) {
  return v >= 0 && (size_t)v < df->n_values ? df->vals[v].rank : -1;
}

int64_t kiln_dimflow_dim(const kiln_dimflow *df, int v, int k) {
  if (v < 0 || (size_t)v >= df->n_values || k < 0 || k >= df->vals[v].rank) return KILN_DIM_UNKNOWN;
  return canon(df, df->vals[v].d[k]);
}

int kiln_dimflow_vec(const kiln_dimflow *df, int v, kiln_dimelem *elems, bool *scalar) {
  if (v < 0 || (size_t)v >= df->n_values || df->vals[v].vn < 0) return -1;
  const dval *o = &df->vals[v];
  for (int k = 0; k < o->vn; k++) {
    elems[k] = o->v[k];
    if (elems[k].kind == KILN_ELEM_SYM) {
      int64_t t = canon(df, elems[k].val);
      elems[k].val = t;
      if (t >= 0) elems[k].kind = KILN_ELEM_CONST;
    }
  }
  *scalar = o->scalar;
  return o->vn;
}
