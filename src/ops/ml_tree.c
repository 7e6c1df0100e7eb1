/* ai.onnx.ml TreeEnsemble (opset 5): every tree walks one row of X [N, F] from its root to a
 * leaf, the leaves' weights add (or average, or take the min / max) into the leaf's target of
 * Y [N, n_targets], then an optional post-transform. Semantics follow ONNX's reference
 * (onnx/reference/ops/aionnxml/op_tree_ensemble.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

enum { LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, N_MODES };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };
enum { PT_NONE, PT_SOFTMAX, PT_LOGISTIC, PT_SOFTMAX_ZERO, PT_PROBIT };

typedef struct te_model {
  size_t n_nodes, n_leaves, n_roots;
  const int64_t *feat, *tnode, *tleaf, *fnode, *fleaf, *missing, *roots, *target;
  const kiln_tensor *splits, *modes, *weights, *members;
  int64_t n_targets, agg, post;
  int64_t *member_start; /* per node: its first value in `members` (MEMBER nodes), n_members */
  int64_t *member_len;
} te_model;

static const kiln_tensor *tensor_attr(const kiln_node *n, const char *name) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->kind == KILN_ATTR_TENSOR ? a->t : NULL;
}

static const int64_t *ints_of(const kiln_node *n, const char *name, size_t want, bool *ok) {
  size_t k = 0;
  const int64_t *v = kiln_attr_ints(n, name, &k);
  if (!v || k != want) *ok = false;
  return v;
}

/* Reads and checks the attributes; NULL or an error message. */
static const char *te_read(const kiln_node *nd, te_model *m) {
  memset(m, 0, sizeof *m);
  m->feat = kiln_attr_ints(nd, "nodes_featureids", &m->n_nodes);
  m->splits = tensor_attr(nd, "nodes_splits");
  m->modes = tensor_attr(nd, "nodes_modes");
  m->weights = tensor_attr(nd, "leaf_weights");
  m->members = tensor_attr(nd, "membership_values");
  m->roots = kiln_attr_ints(nd, "tree_roots", &m->n_roots);
  m->target = kiln_attr_ints(nd, "leaf_targetids", &m->n_leaves);
  if (!m->feat || !m->splits || !m->modes || !m->weights || !m->roots || !m->target)
    return "nodes_featureids, nodes_splits, nodes_modes, tree_roots, leaf_targetids and "
           "leaf_weights are required";
  bool ok = true;
  m->tnode = ints_of(nd, "nodes_truenodeids", m->n_nodes, &ok);
  m->tleaf = ints_of(nd, "nodes_trueleafs", m->n_nodes, &ok);
  m->fnode = ints_of(nd, "nodes_falsenodeids", m->n_nodes, &ok);
  m->fleaf = ints_of(nd, "nodes_falseleafs", m->n_nodes, &ok);
  size_t nm = 0;
  m->missing = kiln_attr_ints(nd, "nodes_missing_value_tracks_true", &nm);
  if (!ok || (m->missing && nm != m->n_nodes) || (size_t)m->splits->numel != m->n_nodes ||
      (size_t)m->modes->numel != m->n_nodes || (size_t)m->weights->numel != m->n_leaves)
    return "the nodes_* attributes (and leaf_targetids / leaf_weights) differ in length";
  if (!kiln_dtype_is_float(m->weights->dtype) || !kiln_dtype_is_float(m->splits->dtype))
    return "leaf_weights and nodes_splits must be floating point";
  m->n_targets = kiln_attr_int(nd, "n_targets", 0);
  m->agg = kiln_attr_int(nd, "aggregate_function", AGG_SUM);
  m->post = kiln_attr_int(nd, "post_transform", PT_NONE);
  if (m->n_targets < 1 || m->n_targets > ((int64_t)1 << 30)) return "n_targets must be positive";
  if (m->agg < AGG_AVERAGE || m->agg > AGG_MAX) return "unknown aggregate_function";
  if (m->post < PT_NONE || m->post > PT_PROBIT) return "unknown post_transform";
  for (size_t i = 0; i < m->n_nodes; i++) {
    int64_t mode = kiln_get_i64(m->modes, (int64_t)i);
    if (mode < 0 || mode >= N_MODES) return "unknown node mode";
    if (m->feat[i] < 0) return "a negative feature id";
    if (m->tnode[i] < 0 || m->fnode[i] < 0 ||
        (size_t)m->tnode[i] >= (m->tleaf[i] ? m->n_leaves : m->n_nodes) ||
        (size_t)m->fnode[i] >= (m->fleaf[i] ? m->n_leaves : m->n_nodes))
      return "a node's true or false branch is out of range";
  }
  for (size_t i = 0; i < m->n_leaves; i++)
    if (m->target[i] < 0 || m->target[i] >= m->n_targets) return "a leaf target is out of range";
  for (size_t r = 0; r < m->n_roots; r++)
    if (m->roots[r] < 0 || (size_t)m->roots[r] >= m->n_nodes) return "a tree root is out of range";
  return NULL;
}

/* Per MEMBER node (in node order), its NaN-separated group of membership_values. */
static const char *te_members(te_model *m) {
  m->member_start = kiln_calloc(m->n_nodes, sizeof *m->member_start);
  m->member_len = kiln_calloc(m->n_nodes, sizeof *m->member_len);
  if (!m->member_start || !m->member_len) return "out of memory";
  int64_t pos = 0, n = m->members ? m->members->numel : 0;
  for (size_t i = 0; i < m->n_nodes; i++) {
    if (kiln_get_i64(m->modes, (int64_t)i) != MEMBER) continue;
    if (pos > n || !m->members) return "membership_values has fewer sets than MEMBER nodes";
    m->member_start[i] = pos;
    while (pos < n && !isnan(kiln_get_f64(m->members, pos))) pos++;
    m->member_len[i] = pos - m->member_start[i];
    pos++; /* the NaN separator */
  }
  return NULL;
}

static bool te_true(const te_model *m, size_t i, double x) {
  if (isnan(x) && m->missing && m->missing[i]) return true;
  double s = kiln_get_f64(m->splits, (int64_t)i);
  switch (kiln_get_i64(m->modes, (int64_t)i)) {
    case LEQ: return x <= s;
    case LT: return x < s;
    case GTE: return x >= s;
    case GT: return x > s;
    case EQ: return x == s;
    case NEQ: return x != s;
    default:
      for (int64_t k = 0; k < m->member_len[i]; k++)
        if (kiln_get_f64(m->members, m->member_start[i] + k) == x) return true;
      return false;
  }
}

/* The leaf tree r reaches for row `row` of x ([N, F]), or -1 (a cycle in the nodes). */
static int64_t te_walk(const te_model *m, size_t r, const kiln_tensor *x, int64_t row, int64_t f) {
  size_t node = (size_t)m->roots[r];
  for (size_t steps = 0; steps <= m->n_nodes; steps++) {
    int64_t fi = m->feat[node];
    double v = fi < f ? kiln_get_f64(x, row * f + fi) : NAN;
    bool t = te_true(m, node, v);
    int64_t next = t ? m->tnode[node] : m->fnode[node];
    if (t ? m->tleaf[node] : m->fleaf[node]) return next;
    node = (size_t)next;
  }
  return -1;
}

/* ONNX's PROBIT: sqrt(2) * erfinv(2p - 1), from Winitzki's approximation refined by Newton
 * steps on erf. */
static double probit(double p) {
  const double y = 2 * p - 1, a = 0.147;
  if (!(y > -1 && y < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
  const double w = log(1 - y * y), t = 2 / (M_PI * a) + w / 2;
  double x = copysign(sqrt(sqrt(t * t - w / a) - t), y);
  for (int k = 0; k < 3; k++) x -= (erf(x) - y) / (2 / sqrt(M_PI) * exp(-x * x));
  return sqrt(2.0) * x;
}

static void te_post(const te_model *m, double *v) {
  const int64_t n = m->n_targets;
  if (m->post == PT_LOGISTIC) {
    for (int64_t k = 0; k < n; k++) v[k] = 1 / (1 + exp(-v[k]));
  } else if (m->post == PT_PROBIT) {
    for (int64_t k = 0; k < n; k++) v[k] = probit(v[k]);
  } else if (m->post == PT_SOFTMAX || m->post == PT_SOFTMAX_ZERO) {
    bool zero = m->post == PT_SOFTMAX_ZERO;
    double mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; k++)
      if (!(zero && v[k] == 0) && v[k] > mx) mx = v[k];
    for (int64_t k = 0; k < n; k++) {
      v[k] = zero && v[k] == 0 ? 0 : exp(v[k] - mx);
      sum += v[k];
    }
    for (int64_t k = 0; k < n && sum > 0; k++) v[k] /= sum;
  }
}

static kiln_code te_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  const kiln_attr *w = kiln_node_attr(c->node, "leaf_weights");
  if (x && x->rank >= 0 && x->rank != 2) return kiln_ifail(c, "X must be [N, F]");
  int64_t dims[2] = {x && x->rank == 2 ? x->dims[0] : -1, kiln_attr_int(c->node, "n_targets", -1)};
  kiln_infer_tensor(c, 0, w && w->kind == KILN_ATTR_TENSOR && w->t ? w->t->dtype : KILN_UNDEFINED, 2, dims);
  return KILN_OK;
}

static kiln_code te_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  if (x->rank != 2 || !kiln_dtype_is_float(x->dtype)) return kiln_kfail(c, "X must be a float [N, F]");
  te_model m;
  const char *e = te_read(c->node, &m);
  if (!e) e = te_members(&m);
  double *acc = e ? NULL : kiln_malloc((size_t)m.n_targets * sizeof *acc);
  bool *hit = e ? NULL : kiln_malloc((size_t)m.n_targets * sizeof *hit);
  if (!e && (!acc || !hit)) e = "out of memory";
  int64_t dims[2] = {x->dims[0], m.n_targets};
  kiln_tensor *y = e ? NULL : kiln_out_uninit(c, 0, m.weights->dtype, 2, dims);
  for (int64_t row = 0; y && !e && row < x->dims[0]; row++) {
    /* a target no leaf reaches stays 0, for MIN and MAX too (as ONNX Runtime) */
    for (int64_t k = 0; k < m.n_targets; k++) acc[k] = 0, hit[k] = false;
    for (size_t r = 0; r < m.n_roots && !e; r++) {
      int64_t leaf = te_walk(&m, r, x, row, x->dims[1]);
      if (leaf < 0) {
        e = "a tree's nodes form a cycle";
        break;
      }
      const int64_t t = m.target[leaf];
      double w = kiln_get_f64(m.weights, leaf), *a = &acc[t];
      *a = !hit[t] ? w : m.agg == AGG_MIN ? fmin(*a, w) : m.agg == AGG_MAX ? fmax(*a, w) : *a + w;
      hit[t] = true;
    }
    if (m.agg == AGG_AVERAGE && m.n_roots)
      for (int64_t k = 0; k < m.n_targets; k++) acc[k] /= (double)m.n_roots;
    te_post(&m, acc);
    for (int64_t k = 0; k < m.n_targets; k++) kiln_set_f64(y, row * m.n_targets + k, acc[k]);
  }
  free(acc);
  free(hit);
  free(m.member_start);
  free(m.member_len);
  if (e) return kiln_kfail(c, "%s", e);
  return y ? KILN_OK : c->err->code;
}

const kiln_op_schema kiln_ops_ml_tree[] = {
    {.domain = "ai.onnx.ml", .name = "TreeEnsemble", .since = 5, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = te_infer, .run = te_run},
    {0},
};
