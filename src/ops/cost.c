/* Work counts of the compute-heavy ops: see cost.h. */
#include "ops/cost.h"

static double numel(const kiln_tensor *t) {
  return t && t->kind == KILN_KIND_TENSOR ? (double)t->numel : 0;
}

/* Output 0 when the run made a tensor there, else NULL. */
static const kiln_tensor *out0(const kiln_kctx *c) {
  return c->n_out >= 1 && c->out[0] && c->out[0]->kind == KILN_KIND_TENSOR ? c->out[0] : NULL;
}

/* Dim of t at position `axis` of its view through `perm` (identity when absent). */
static int64_t perm_dim(const kiln_node *n, const char *perm_name, const kiln_tensor *t, int axis) {
  size_t np = 0;
  const int64_t *perm = kiln_attr_ints(n, perm_name, &np);
  int a = perm && (int)np == t->rank && perm[axis] >= 0 && perm[axis] < t->rank ? (int)perm[axis] : axis;
  return t->dims[a];
}

void kiln_cost_attention(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *q = kiln_in(c, 0), *v = kiln_in(c, 2);
  if (!q || !v || q->rank < 2 || v->rank < 2 || !out0(c)) return;
  double d = (double)perm_dim(c->node, "q_perm", q, q->rank - 1);
  double sq = (double)perm_dim(c->node, "q_perm", q, q->rank - 2);
  double dv = (double)perm_dim(c->node, "v_perm", v, v->rank - 1);
  double sk = (double)perm_dim(c->node, "v_perm", v, v->rank - 2);
  if (d <= 0 || sq <= 0) return;
  double batch = numel(q) / (d * sq);
  *flops = 2.0 * batch * sq * sk * (d + dv);
}

/* Elements of a 2-D convolution's output for input x and weights w (attributes of n), -1 if
 * the shapes are not those of one. */
static double conv2d_out_elems(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *w) {
  if (!x || !w || x->rank != 4 || w->rank != 4) return -1;
  size_t ns = 0, np = 0, nd = 0;
  const int64_t *s = kiln_attr_ints(n, "strides", &ns), *p = kiln_attr_ints(n, "pads", &np);
  const int64_t *d = kiln_attr_ints(n, "dilations", &nd);
  double e = (double)x->dims[0] * (double)w->dims[0];
  for (int i = 0; i < 2; i++) {
    int64_t st = s && ns == 2 ? s[i] : 1, dl = d && nd == 2 ? d[i] : 1;
    int64_t pad = p && np == 4 ? p[i] + p[i + 2] : 0;
    int64_t o = st > 0 ? (x->dims[2 + i] + pad - dl * (w->dims[2 + i] - 1) - 1) / st + 1 : 0;
    if (o <= 0) return -1;
    e *= (double)o;
  }
  return e;
}

void kiln_cost_conv(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *y = out0(c), *w = kiln_in(c, 1);
  if (!y || !w || w->rank < 2 || y->rank < 2) return;
  *flops = 2.0 * numel(y) * (numel(w) / (double)w->dims[0]);
}

void kiln_cost_conv_pool(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *w = kiln_in(c, 1);
  if (!out0(c)) return;
  double e = conv2d_out_elems(c->node, kiln_in(c, 0), w);
  if (e > 0) *flops = 2.0 * e * (numel(w) / (double)w->dims[0]);
}

void kiln_cost_matmul(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *y = out0(c), *a = kiln_in(c, 0);
  if (!y || !a || a->rank < 1) return;
  *flops = 2.0 * numel(y) * (double)a->dims[a->rank - 1];
}

void kiln_cost_gemm(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *y = out0(c), *a = kiln_in(c, 0);
  if (!y || !a || a->rank != 2 || y->rank != 2 || y->dims[0] <= 0) return;
  *flops = 2.0 * numel(y) * (numel(a) / (double)y->dims[0]);
}

/* ---- the other families: a few flops per element, so that their roofs are memory roofs ---- */

static void per_elem(const kiln_kctx *c, double *flops, double k) {
  const kiln_tensor *y = out0(c);
  if (y) *flops = k * numel(y);
}

void kiln_cost_elementwise(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  per_elem(c, flops, 1);
}

void kiln_cost_fused_elementwise(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  size_t np = 0;
  kiln_attr_ints(c->node, "program", &np);
  per_elem(c, flops, np > 0 ? (double)(np + 3) / 4 : 1); /* about one op per 4 program words */
}

void kiln_cost_batchnorm(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  per_elem(c, flops, 2);
}

void kiln_cost_norm(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  per_elem(c, flops, 8);
}

void kiln_cost_softmax(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  per_elem(c, flops, 5);
}

void kiln_cost_reduce(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  *flops = numel(kiln_in(c, 0));
}

void kiln_cost_pool(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  size_t nk = 0;
  const int64_t *k = kiln_attr_ints(c->node, "kernel_shape", &nk);
  double taps = 1;
  for (size_t i = 0; k && i < nk; i++) taps *= (double)k[i];
  per_elem(c, flops, taps);
}

void kiln_cost_global_pool(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  *flops = numel(kiln_in(c, 0));
}

void kiln_cost_view(const kiln_kctx *c, double *flops, double *bytes) {
  (void)flops;
  const kiln_tensor *x = kiln_in(c, 0), *y = out0(c);
  if (x && y && x->data == y->data) *bytes = 0; /* the output shares the input's memory */
}
