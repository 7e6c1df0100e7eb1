/* Fused normalisation, GELU and embedding kernels (domain ai.kiln), float32 only. Each node
 * replaced a chain of standard ops (see src/opt/fuse_layernorm.c, fuse_gelu.c,
 * fuse_embedding.c) and keeps it as its "original" attribute: anything a kernel does not
 * handle (another dtype, a shape it does not expect) fails the node, and the executor then
 * runs the chain instead.
 *
 * LayerNorm(X, [gamma], [beta])            epsilon, axis (normalise dims axis..rank-1)
 * SkipLayerNorm(A, B, [gamma], [beta])     the same over A + B; output 1 (optional): A + B
 * Gelu(X)                                  approximate "none" (erf) | "tanh"
 * BiasGelu(X, bias)                        Gelu(X + bias), bias over the last dim
 * FusedEmbedding(ids, word, pos, [pos_ids], [pos_ends], [gamma], [beta])
 *     word[ids] + P, then Relu when relu=1, then LayerNorm over the last dim (epsilon) when
 *     layernorm=1; output 1 (optional): the value before the LayerNorm. P is pos itself
 *     (broadcast), pos[pos_ids] when pos_ids is given, or pos sliced to [0, pos_ends) on the
 *     axes `pos_axes` when pos_ends is given.
 *
 * Rows are normalised with one pass for the statistics (sums of x - x0 and its square, x0 the
 * row's first value, which keeps the variance free of cancellation for data far from 0) and one
 * writing the output; the row stays in cache between them. No intermediate tensor is made. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm_math.h"
#include "kernels/vec_f32.h"
#include "kernels/cpu.h"
#include "ops/cost.h"
#include "ops/fused.h"
#include "base/threadpool.h"


/* The session's pool is used from PAR_MIN values of output; a task is at least PAR_TASK values
 * (whole rows), far above the ~1 us a task costs to hand out. A row is always computed by one
 * task, in the same order, so results do not depend on the thread count. */
enum { PAR_MIN = 1 << 15, PAR_TASK = 1 << 14 };

static kiln_threadpool *pool_for(kiln_kctx *c, int64_t work) { return work >= PAR_MIN ? kiln_kpool(c) : NULL; }

/* Rows per task for rows of n values. */
static size_t rows_chunk(int64_t n) { return n >= PAR_TASK ? 1 : (size_t)(PAR_TASK / (n ? n : 1)); }





static bool is_float(const kiln_tensor *t) { return t && t->kind == KILN_KIND_TENSOR && t->dtype == KILN_FLOAT; }

/* Optional input i: NULL when absent; *ok false when present but not float32 with n values. */
static const float *vec_in(kiln_kctx *c, size_t i, int64_t n, bool *ok) {
  const kiln_tensor *t = kiln_in(c, i);
  if (!t) return NULL;
  if (!is_float(t) || t->numel != n) *ok = false;
  return t->data;
}

/* Row-wise broadcast: the flat offset of row r of an output whose leading dims are
 * dims[0..rank) in an operand with element strides st[] (0 where it broadcasts). */
typedef struct rowmap {
  int rank;
  int64_t dims[KILN_MAX_RANK], st[KILN_MAX_RANK];
} rowmap;

static int64_t row_offset(const rowmap *m, int64_t r) {
  int64_t off = 0;
  for (int d = m->rank - 1; d >= 0 && r; d--) {
    off += (r % m->dims[d]) * m->st[d];
    r /= m->dims[d];
  }
  return off;
}

/* Map operand dims odims[0..orank) (the leading part, right-aligned to the output's leading
 * dims) with element strides ost[]. False when they do not broadcast. */
static bool rowmap_init(rowmap *m, int rank, const int64_t *dims, int orank, const int64_t *odims,
                        const int64_t *ost) {
  if (orank > rank) return false;
  m->rank = rank;
  for (int d = 0; d < rank; d++) {
    int j = d - (rank - orank);
    m->dims[d] = dims[d];
    m->st[d] = 0;
    if (j < 0) continue;
    if (odims[j] == dims[d]) m->st[d] = dims[d] == 1 ? 0 : ost[j];
    else if (odims[j] != 1) return false;
  }
  return true;
}

static void contiguous_strides(int rank, const int64_t *dims, int64_t inner, int64_t *st) {
  for (int d = rank - 1; d >= 0; d--) {
    st[d] = inner;
    inner *= dims[d];
  }
}

/* ---- LayerNorm / SkipLayerNorm ---- */

/* An addend of SkipLayerNorm against the output (rank, dims) normalised over its last k dims
 * (n values): it holds whole rows (*inner = 1) or one value per row (*inner = 0, its last k
 * dims all 1), and broadcasts over the leading dims as map says. */
static bool addend_map(const kiln_tensor *t, int rank, const int64_t *dims, int k, int64_t n, rowmap *map,
                       int64_t *inner) {
  bool full = true, one = true;
  for (int d = 1; d <= k; d++) {
    int64_t td = t->rank >= d ? t->dims[t->rank - d] : 1;
    full &= td == dims[rank - d];
    one &= td == 1;
  }
  if (!full && !one) return false;
  *inner = full ? 1 : 0;
  int lead = t->rank > k ? t->rank - k : 0;
  int64_t st[KILN_MAX_RANK];
  contiguous_strides(lead, t->dims, full ? n : 1, st);
  return rowmap_init(map, rank - k, dims, lead, t->dims, st);
}

typedef struct ln_job {
  float *ps, *py;
  const float *pa, *pb, *gamma, *beta;
  const rowmap *ma, *mb;
  int64_t n, sa, sb;
  float eps;
  bool skip, same;
} ln_job;


static void ln_task(void *ctx, size_t begin, size_t end, int thread) {
  const ln_job *j = ctx;
  int64_t n = j->n;
  (void)thread;
  for (int64_t r = (int64_t)begin; r < (int64_t)end; r++) {
    float mean, inv;
    if (!j->skip) {
      kiln_ln_stats_f32(j->pa + r * n, n, j->eps, &mean, &inv);
      kiln_ln_norm_f32(j->py + r * n, j->pa + r * n, n, mean, inv, j->gamma, j->beta);
      continue;
    }
    const float *ra = j->pa + (j->same ? r * n : row_offset(j->ma, r));
    const float *rb = j->pb + (j->same ? r * n : row_offset(j->mb, r));
    float *sum = j->ps ? j->ps + r * n : j->py + r * n;
    if (j->sa && j->sb) {
      kiln_ln_add_stats_f32(sum, ra, rb, n, j->eps, &mean, &inv);
    } else {
      for (int64_t i = 0; i < n; i++) sum[i] = ra[i * j->sa] + rb[i * j->sb];
      kiln_ln_stats_f32(sum, n, j->eps, &mean, &inv);
    }
    kiln_ln_norm_f32(j->py + r * n, sum, n, mean, inv, j->gamma, j->beta);
  }
}

static kiln_code layernorm_common(kiln_kctx *c, bool skip) {
  const kiln_tensor *a = c->in[0], *b = skip ? c->in[1] : NULL;
  if (!is_float(a) || (skip && !is_float(b))) return kiln_kunsup(c, "float32 inputs only");
  int rank = a->rank;
  int64_t dims[KILN_MAX_RANK];
  if (skip && !kiln_broadcast_shape(a->rank, a->dims, b->rank, b->dims, &rank, dims))
    return kiln_kfail(c, "inputs do not broadcast");
  if (!skip) memcpy(dims, a->dims, sizeof dims);
  int axis = kiln_axis(c, kiln_attr_int(c->node, "axis", -1), rank);
  if (axis < 0) return KILN_ERR_RUN;
  int k = rank - axis;
  int64_t n = kiln_numel(k, dims + axis), rows = kiln_numel(axis, dims);
  size_t gi = skip ? 2 : 1;
  bool ok = true;
  const float *gamma = vec_in(c, gi, n, &ok), *beta = vec_in(c, gi + 1, n, &ok);
  if (!ok) return kiln_kfail(c, "gamma and beta must be float32 with %lld values", (long long)n);
  float eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  /* every row of y (and of the sum s) is written below: no zeroing */
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, rank, dims);
  kiln_tensor *s = y && skip && kiln_out_used(c, 1) ? kiln_out_uninit(c, 1, KILN_FLOAT, rank, dims) : NULL;
  if (!y || (skip && kiln_out_used(c, 1) && !s)) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  rowmap ma, mb;
  int64_t sa = 1, sb = 1;
  if (skip && (!addend_map(a, rank, dims, k, n, &ma, &sa) || !addend_map(b, rank, dims, k, n, &mb, &sb)))
    return kiln_kunsup(c, "an addend broadcasts over part of the normalised dims");
  ln_job j = {s ? s->data : NULL, y->data, a->data, b ? b->data : NULL, gamma, beta, &ma, &mb,
              n, sa, sb, eps, skip, skip && kiln_same_shape(a, b) && sa && sb};
  kiln_parallel_for(pool_for(c, rows * n), (size_t)rows, ln_task, &j, rows_chunk(n));
  return KILN_OK;
}

static kiln_code layernorm_run(kiln_kctx *c) { return layernorm_common(c, false); }
static kiln_code skip_layernorm_run(kiln_kctx *c) { return layernorm_common(c, true); }

/* Broadcast of the first n inputs into every output. */
static kiln_code infer_first(kiln_ictx *c, size_t n) {
  kiln_ictx sub = *c;
  sub.n_in = n < c->n_in ? n : c->n_in;
  kiln_code rc = kiln_infer_broadcast(&sub, KILN_FLOAT);
  for (size_t i = 1; !rc && i < c->n_out; i++)
    if (c->out[i] && c->out[0]) kiln_type_copy(c->out[i], c->out[0]);
  return rc;
}

static kiln_code infer_one(kiln_ictx *c) { return infer_first(c, 1); }
static kiln_code infer_two(kiln_ictx *c) { return infer_first(c, 2); }

/* ---- Gelu / BiasGelu ---- */

static bool gelu_tanh_attr(kiln_kctx *c, bool *tanh_form) {
  const char *a = kiln_attr_str(c->node, "approximate", "none");
  *tanh_form = !strcmp(a, "tanh");
  return *tanh_form || !strcmp(a, "none");
}

typedef struct gelu_job {
  const float *px, *pb;
  float *py;
  int64_t n, cols; /* cols: values per task (a row of the last dim with a bias) */
  bool th;
} gelu_job;


static void gelu_task(void *ctx, size_t begin, size_t end, int thread) {
  const gelu_job *j = ctx;
  (void)thread;
  if (!j->pb) {
    int64_t i0 = (int64_t)begin * PAR_TASK, i1 = (int64_t)end * PAR_TASK < j->n ? (int64_t)end * PAR_TASK : j->n;
    kiln_gelu_map_f32(j->py + i0, j->px + i0, NULL, i1 - i0, j->th);
    return;
  }
  for (int64_t r = (int64_t)begin; r < (int64_t)end; r++)
    kiln_gelu_map_f32(j->py + r * j->cols, j->px + r * j->cols, j->pb, j->cols, j->th);
}

static kiln_code gelu_common(kiln_kctx *c, bool bias) {
  const kiln_tensor *x = c->in[0], *b = bias ? c->in[1] : NULL;
  bool th;
  if (!gelu_tanh_attr(c, &th)) return kiln_kfail(c, "approximate must be \"none\" or \"tanh\"");
  if (!is_float(x) || (bias && !is_float(b))) return kiln_kunsup(c, "float32 inputs only");
  int64_t cols = x->rank ? x->dims[x->rank - 1] : 1;
  if (bias && (x->rank < 1 || b->numel != cols || b->rank > x->rank))
    return kiln_kunsup(c, "the bias must hold one value per position of the last dim");
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, x->rank, x->dims); /* every element written */
  if (!y) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  int64_t n = x->numel;
  if (n == 0) return KILN_OK;
  gelu_job j = {x->data, b ? b->data : NULL, y->data, n, bias ? cols : n, th};
  /* tasks: rows of the last dim with a bias, else blocks of PAR_TASK values */
  int64_t ntask = bias ? (cols ? n / cols : 0) : (n + PAR_TASK - 1) / PAR_TASK;
  kiln_parallel_for(pool_for(c, n), (size_t)ntask, gelu_task, &j, bias ? rows_chunk(cols) : 1);
  return KILN_OK;
}

static kiln_code gelu_run(kiln_kctx *c) { return gelu_common(c, false); }
static kiln_code bias_gelu_run(kiln_kctx *c) { return gelu_common(c, true); }

/* ---- FusedEmbedding ---- */

enum { E_IDS, E_WORD, E_POS, E_POS_IDS, E_POS_ENDS, E_GAMMA, E_BETA };

static bool int_ids(const kiln_tensor *t) {
  return t && t->kind == KILN_KIND_TENSOR && (t->dtype == KILN_INT64 || t->dtype == KILN_INT32);
}

static int64_t id_at(const kiln_tensor *t, int64_t i) {
  return t->dtype == KILN_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* The position term's leading shape (all but its last dim D) and element strides. */
static kiln_code pos_view(kiln_kctx *c, const kiln_tensor *pos, int64_t d, int *rank, int64_t *dims,
                          int64_t *st) {
  const kiln_tensor *pids = kiln_in(c, E_POS_IDS), *ends = kiln_in(c, E_POS_ENDS);
  if (pids) { /* rows of the table pos[P, D] picked by pos_ids: strides over pos_ids */
    if (!int_ids(pids) || pos->rank != 2 || pos->dims[1] != d) return kiln_kunsup(c, "position table layout");
    *rank = pids->rank;
    memcpy(dims, pids->dims, sizeof(int64_t) * (size_t)pids->rank);
    contiguous_strides(pids->rank, pids->dims, 1, st);
    return KILN_OK;
  }
  if (pos->rank < 1 || pos->dims[pos->rank - 1] != d) return kiln_kunsup(c, "position term layout");
  int64_t full[KILN_MAX_RANK], fst[KILN_MAX_RANK];
  memcpy(full, pos->dims, sizeof full);
  contiguous_strides(pos->rank, pos->dims, 1, fst);
  if (ends) { /* pos[..., 0:end, ...] on pos_axes: same strides, shorter dims */
    size_t na = 0;
    const int64_t *axes = kiln_attr_ints(c->node, "pos_axes", &na);
    if (!kiln_dtype_is_int(ends->dtype) || (size_t)ends->numel != na) return kiln_kunsup(c, "slice ends");
    for (size_t i = 0; i < na; i++) {
      int64_t ax = axes[i] < 0 ? axes[i] + pos->rank : axes[i], e = kiln_get_i64(ends, (int64_t)i);
      if (ax < 0 || ax >= pos->rank) return kiln_kunsup(c, "slice axis");
      int64_t dim = pos->dims[ax];
      e = e < 0 ? e + dim : e;
      full[ax] = e < 0 ? 0 : e > dim ? dim : e;
    }
    if (full[pos->rank - 1] != d) return kiln_kunsup(c, "the slice cuts the embedding dim");
  }
  *rank = pos->rank - 1;
  memcpy(dims, full, sizeof(int64_t) * (size_t)*rank);
  memcpy(st, fst, sizeof(int64_t) * (size_t)*rank);
  return KILN_OK;
}

typedef struct emb_job {
  const kiln_tensor *ids, *pids;
  const rowmap *mi, *mp;
  const float *pw, *pp, *gamma, *beta;
  float *py, *ps;
  int64_t v, d, np;
  float eps;
  bool relu, ln;
} emb_job;

static void emb_task(void *ctx, size_t begin, size_t end, int thread) {
  const emb_job *j = ctx;
  int64_t d = j->d;
  (void)thread;
  for (int64_t r = (int64_t)begin; r < (int64_t)end; r++) {
    int64_t id = id_at(j->ids, row_offset(j->mi, r)); /* checked in range by the caller */
    const float *wr = j->pw + (id < 0 ? id + j->v : id) * d, *pr;
    if (j->pids) {
      int64_t p = id_at(j->pids, row_offset(j->mp, r));
      pr = j->pp + (p < 0 ? p + j->np : p) * d;
    } else {
      pr = j->pp + row_offset(j->mp, r);
    }
    float *x = j->ps ? j->ps + r * d : j->py + r * d;
    if (j->relu) /* Relu keeps NaN, like the standard kernel */
      for (int64_t i = 0; i < d; i++) {
        float t = wr[i] + pr[i];
        x[i] = kn_sel(t > 0 || t != t, t, 0.0f);
      }
    else
      for (int64_t i = 0; i < d; i++) x[i] = wr[i] + pr[i];
    if (j->ln) {
      float mean, inv;
      kiln_ln_stats_f32(x, d, j->eps, &mean, &inv);
      kiln_ln_norm_f32(j->py + r * d, x, d, mean, inv, j->gamma, j->beta);
    }
  }
}

static kiln_code embedding_run(kiln_kctx *c) {
  const kiln_tensor *ids = c->in[E_IDS], *word = c->in[E_WORD], *pos = c->in[E_POS];
  const kiln_tensor *pids = kiln_in(c, E_POS_IDS);
  if (!int_ids(ids) || !is_float(word) || word->rank != 2 || !is_float(pos))
    return kiln_kunsup(c, "int ids, a float32 [V, D] table and a float32 position term only");
  int64_t v = word->dims[0], d = word->dims[1];
  int prank = 0;
  int64_t pdims[KILN_MAX_RANK], pst[KILN_MAX_RANK], ist[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  kiln_code rc = pos_view(c, pos, d, &prank, pdims, pst);
  if (rc) return rc;
  int lrank;
  if (ids->rank + 1 > KILN_MAX_RANK || !kiln_broadcast_shape(ids->rank, ids->dims, prank, pdims, &lrank, dims) ||
      lrank + 1 > KILN_MAX_RANK)
    return kiln_kfail(c, "ids and the position term do not broadcast");
  contiguous_strides(ids->rank, ids->dims, 1, ist);
  rowmap mi, mp;
  if (!rowmap_init(&mi, lrank, dims, ids->rank, ids->dims, ist) || !rowmap_init(&mp, lrank, dims, prank, pdims, pst))
    return kiln_kfail(c, "ids and the position term do not broadcast");
  bool relu = kiln_attr_int(c->node, "relu", 0) != 0, ln = kiln_attr_int(c->node, "layernorm", 0) != 0, ok = true;
  const float *gamma = vec_in(c, E_GAMMA, d, &ok), *beta = vec_in(c, E_BETA, d, &ok);
  if (!ok) return kiln_kfail(c, "gamma and beta must be float32 with %lld values", (long long)d);
  float eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  dims[lrank] = d;
  /* every row of y (and of the pre-norm s) is written by emb_task: no zeroing */
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, lrank + 1, dims);
  kiln_tensor *s = y && ln && kiln_out_used(c, 1) ? kiln_out_uninit(c, 1, KILN_FLOAT, lrank + 1, dims) : NULL;
  if (!y || (ln && kiln_out_used(c, 1) && !s)) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  int64_t rows = d ? y->numel / d : 0, np = pids ? pos->dims[0] : 0;
  /* ids are checked first, so that the rows can then run on any thread */
  for (int64_t r = 0; r < rows; r++) {
    int64_t id = id_at(ids, row_offset(&mi, r));
    if (id < -v || id >= v) return kiln_kfail(c, "token id %lld is out of range [%lld, %lld)", (long long)id, (long long)-v, (long long)v);
    if (pids) {
      int64_t p = id_at(pids, row_offset(&mp, r));
      if (p < -np || p >= np) return kiln_kfail(c, "position id %lld is out of range", (long long)p);
    }
  }
  emb_job j = {ids, pids, &mi, &mp, word->data, pos->data, gamma, beta, y->data, s ? s->data : NULL,
               v, d, np, eps, relu, ln};
  kiln_parallel_for(pool_for(c, rows * d), (size_t)rows, emb_task, &j, rows_chunk(d));
  return KILN_OK;
}

/* Output: ids' dims + [D], broadcast with the position term's leading dims (unknown where
 * those are sliced to a length known only at run time). */
static kiln_code embedding_infer(kiln_ictx *c) {
  const kiln_type *ids = c->in[E_IDS], *word = c->in[E_WORD], *pos = c->in[E_POS];
  if (!ids || !word || !pos || ids->rank < 0 || word->rank != 2) return KILN_OK;
  const kiln_type *lead = c->n_in > E_POS_IDS && c->in[E_POS_IDS] ? c->in[E_POS_IDS] : pos;
  int lr = lead == pos ? pos->rank - 1 : lead->rank;
  bool sliced = c->n_in > E_POS_ENDS && c->in[E_POS_ENDS];
  int r = ids->rank > lr ? ids->rank : lr;
  if (lr < 0 || r + 1 > KILN_MAX_RANK) return KILN_OK;
  int64_t dims[KILN_MAX_RANK];
  bool from_ids[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) {
    int ia = i - (r - ids->rank), ib = i - (r - lr);
    int64_t a = ia < 0 ? 1 : ids->dims[ia], b = ib < 0 ? 1 : sliced ? -1 : lead->dims[ib];
    from_ids[i] = ia >= 0 && b == 1;
    dims[i] = a == 1 ? b : b == 1 ? a : a == b ? a : a >= 0 ? a : b;
  }
  dims[r] = word->dims[1];
  kiln_infer_tensor(c, 0, KILN_FLOAT, r + 1, dims);
  for (int i = 0; i < r && c->out[0]; i++) /* symbolic names of the dims that come from ids */
    if (from_ids[i] && dims[i] < 0 && ids->sym[i - (r - ids->rank)])
      c->out[0]->sym[i] = kiln_strdup(ids->sym[i - (r - ids->rank)]);
  if (c->n_out > 1 && c->out[1] && c->out[0]) kiln_type_copy(c->out[1], c->out[0]);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_fused_norm[] = {
    {.domain = KILN_FUSED_DOMAIN, .name = "LayerNorm", .since = 1, .inputs = {1, 3}, .outputs = {1, 1},
     .infer = infer_one, .run = layernorm_run, .cost = kiln_cost_norm},
    {.domain = KILN_FUSED_DOMAIN, .name = "SkipLayerNorm", .since = 1, .inputs = {2, 4}, .outputs = {1, 2},
     .infer = infer_two, .run = skip_layernorm_run, .cost = kiln_cost_norm},
    {.domain = KILN_FUSED_DOMAIN, .name = "Gelu", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = infer_one, .run = gelu_run, .cost = kiln_cost_elementwise},
    {.domain = KILN_FUSED_DOMAIN, .name = "BiasGelu", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_two, .run = bias_gelu_run, .cost = kiln_cost_elementwise},
    {.domain = KILN_FUSED_DOMAIN, .name = "FusedEmbedding", .since = 1, .inputs = {3, 7}, .outputs = {1, 2},
     .infer = embedding_infer, .run = embedding_run},
    {0},
};
