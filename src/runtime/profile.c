/* Per-node profile: see profile.h. Times are summed with atomics so concurrent runs of one
 * session add up; flops/bytes/shape describe the first run since creation or reset. The
 * per-thread shares assume one run at a time (they are for kiln profile's trace). */
#include "runtime/profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

kiln_profile *kiln_profile_new(size_t n_nodes, kiln_threadpool *pool, bool per_thread) {
  kiln_profile *p = kiln_calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_nodes;
  p->pool = pool;
  p->n_threads = kiln_threadpool_size(pool);
  p->e = kiln_calloc(n_nodes ? n_nodes : 1, sizeof *p->e);
  bool thr = per_thread && pool;
  if (thr) {
    p->thr = kiln_calloc((n_nodes ? n_nodes : 1) * (size_t)p->n_threads, sizeof *p->thr);
    p->snap = kiln_calloc((size_t)p->n_threads, sizeof *p->snap);
  }
  if (!p->e || (thr && (!p->thr || !p->snap))) {
    kiln_profile_free(p);
    return NULL;
  }
  return p;
}

void kiln_profile_free(kiln_profile *p) {
  if (!p) return;
  free(p->e);
  free(p->thr);
  free(p->snap);
  free(p);
}

void kiln_profile_reset(kiln_profile *p) {
  if (!p) return;
  memset(p->e, 0, p->n * sizeof *p->e);
  if (p->thr) memset(p->thr, 0, p->n * (size_t)p->n_threads * sizeof *p->thr);
}

void kiln_profile_begin(kiln_profile *p) {
  if (p && p->thr) kiln_threadpool_thread_times(p->pool, p->snap, NULL);
}

/* Each worker's task time and first start during node idx (thread 0, the caller, is busy for
 * the node's whole wall time). */
static void record_threads(kiln_profile *p, size_t idx, uint64_t t0, uint64_t t1) {
  enum { CAP = 256 };
  unsigned long long busy[CAP], first[CAP];
  if (!p->thr || p->n_threads > CAP) return;
  kiln_threadpool_thread_times(p->pool, busy, first);
  kiln_prof_thread *th = &p->thr[idx * (size_t)p->n_threads];
  for (int t = 0; t < p->n_threads; t++) {
    uint64_t b = t ? busy[t] - p->snap[t] : t1 - t0;
    th[t].busy_ns += b;
    th[t].last_busy_ns = b;
    th[t].last_start_ns = t ? (b ? first[t] : 0) : t0;
  }
}

uint64_t kiln_profile_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static bool is_op(const kiln_node *n, const char *a, const char *b, const char *c) {
  return !strcmp(n->op_type, a) || (b && !strcmp(n->op_type, b)) || (c && !strcmp(n->op_type, c));
}

static double numel(const kiln_tensor *t) {
  return t && t->kind == KILN_KIND_TENSOR ? (double)t->numel : 0;
}

/* Dim of t at position `axis` of its view through `perm` (identity when absent). */
static int64_t perm_dim(const kiln_node *n, const char *perm_name, const kiln_tensor *t, int axis) {
  size_t np = 0;
  const int64_t *perm = kiln_attr_ints(n, perm_name, &np);
  int a = perm && (int)np == t->rank && perm[axis] >= 0 && perm[axis] < t->rank ? (int)perm[axis] : axis;
  return t->dims[a];
}

static double attention_flops(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *const *out) {
  const kiln_tensor *q = in[0], *v = n->n_in > 2 ? in[2] : NULL;
  if (!q || !v || q->rank < 2 || v->rank < 2 || !out[0]) return 0;
  double d = (double)perm_dim(n, "q_perm", q, q->rank - 1);
  double sq = (double)perm_dim(n, "q_perm", q, q->rank - 2);
  double dv = (double)perm_dim(n, "v_perm", v, v->rank - 1);
  double sk = (double)perm_dim(n, "v_perm", v, v->rank - 2);
  if (d <= 0 || sq <= 0) return 0;
  double batch = numel(q) / (d * sq);
  return 2.0 * batch * sq * sk * (d + dv);
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

double kiln_node_flops(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *const *out) {
  if (n->n_out < 1 || !out[0] || out[0]->kind != KILN_KIND_TENSOR) return 0;
  const kiln_tensor *y = out[0];
  if (is_op(n, "Conv", "FusedConv", "ConvInteger")) {
    const kiln_tensor *w = n->n_in > 1 ? in[1] : NULL;
    if (!w || w->rank < 2 || y->rank < 2) return 0;
    /* every output element sums (C/group) * kernel taps products */
    return 2.0 * numel(y) * (numel(w) / (double)w->dims[0]);
  }
  if (is_op(n, "FusedConvMaxPool", NULL, NULL)) { /* the convolution's products; pooling is free */
    const kiln_tensor *w = n->n_in > 1 ? in[1] : NULL;
    double e = conv2d_out_elems(n, in[0], w);
    return e > 0 ? 2.0 * e * (numel(w) / (double)w->dims[0]) : 0;
  }
  if (is_op(n, "MatMul", "FusedMatMul", "MatMulInteger")) {
    const kiln_tensor *a = in[0];
    if (!a || a->rank < 1) return 0;
    return 2.0 * numel(y) * (double)a->dims[a->rank - 1];
  }
  if (is_op(n, "Gemm", "FusedGemm", NULL)) {
    const kiln_tensor *a = in[0];
    if (!a || a->rank != 2 || y->rank != 2 || y->dims[0] <= 0) return 0;
    return 2.0 * numel(y) * (numel(a) / (double)y->dims[0]);
  }
  if (is_op(n, "Attention", NULL, NULL) && !strcmp(n->domain, "ai.kiln")) return attention_flops(n, in, out);
  return 0;
}

void kiln_profile_record(kiln_profile *p, size_t idx, const kiln_node *n,
                         const kiln_tensor *const *in, kiln_tensor *const *out, uint64_t t0,
                         uint64_t t1) {
  if (!p || idx >= p->n) return;
  kiln_prof_entry *e = &p->e[idx];
  __atomic_add_fetch(&e->ns, t1 - t0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->last_start_ns, t0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->last_ns, t1 - t0, __ATOMIC_RELAXED);
  record_threads(p, idx, t0, t1);
  /* the work and shape of the first run since creation or reset: one writer, no race */
  if (__atomic_add_fetch(&e->runs, 1, __ATOMIC_ACQ_REL) != 1) return;
  double bytes = 0;
  for (size_t i = 0; i < n->n_in; i++)
    if (in[i] && in[i]->kind == KILN_KIND_TENSOR) bytes += (double)in[i]->nbytes;
  for (size_t i = 0; i < n->n_out; i++)
    if (out[i] && out[i]->kind == KILN_KIND_TENSOR) bytes += (double)out[i]->nbytes;
  e->bytes = bytes;
  e->flops = kiln_node_flops(n, in, out);
  if (n->n_out > 0 && out[0]) kiln_shape_str(out[0], e->shape, sizeof e->shape);
}
