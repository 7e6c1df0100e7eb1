#include "ops/op.h"

#include "kernels/gemm_amx.h"
#include "base/threadpool.h"
#include "kiln/kiln.h"

#include <stdio.h>
#include <string.h>

static const char *node_name(const kiln_node *n) { return n->name && *n->name ? n->name : "<unnamed>"; }

KILN_PRINTF(4, 0) static kiln_code vkfail(kiln_error *err, const kiln_node *n, kiln_code code, const char *fmt,
                        va_list ap) {
  char msg[900];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return kiln_fail(err, code, "node '%s' (%s): %s", node_name(n), n->op_type, msg);
}

kiln_code kiln_kfail(kiln_kctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_code rc = vkfail(c->err, c->node, KILN_ERR_RUN, fmt, ap);
  va_end(ap);
  return rc;
}

kiln_code kiln_kunsup(kiln_kctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_code rc = vkfail(c->err, c->node, KILN_ERR_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return rc;
}

kiln_code kiln_ifail(kiln_ictx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_code rc = vkfail(c->err, c->node, KILN_ERR_MODEL, fmt, ap);
  va_end(ap);
  return rc;
}

bool kiln_node_has(const kiln_node *n, unsigned f) { return n->schema && (n->schema->flags & f); }

bool kiln_op_in_place_ok(const kiln_node *n) { return n->n_out == 1 && kiln_node_has(n, KILN_OPF_IN_PLACE); }

/* Whether p is the data of one of the node's inputs (an output the plan put in place). */
static bool is_input_data(const kiln_kctx *c, const void *p) {
  for (size_t k = 0; k < c->n_in; k++)
    if (c->in[k] && c->in[k]->kind == KILN_KIND_TENSOR && c->in[k]->data == p) return true;
  return false;
}

static kiln_tensor *out_alloc(kiln_kctx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims,
                              bool zero) {
  if (i >= c->n_out) {
    kiln_kfail(c, "output %zu requested but the node has %zu outputs", i, c->n_out);
    return NULL;
  }
  kiln_tensor *t = NULL;
  int64_t numel = rank >= 0 && rank <= KILN_MAX_RANK ? kiln_numel(rank, dims) : -1;
  if (c->max_out_elems > 0 && (numel < 0 || numel > c->max_out_elems)) {
    kiln_kfail(c, "output %zu has more than %lld elements", i, (long long)c->max_out_elems);
    return NULL;
  }
  int64_t cap = c->rt && c->rt->opts ? c->rt->opts->max_memory_bytes : 0;
  int64_t need = cap > 0 ? kiln_tensor_footprint(dtype, rank, dims) : 0;
  if (cap > 0 && (need > cap || (need < 0 && kiln_dtype_size(dtype)))) { /* < 0: it overflows */
    char nb[32];
    snprintf(nb, sizeof nb, need < 0 ? "more than 2^63" : "%lld", (long long)need);
    kiln_kfail(c, "output %zu (%s%s) needs %s bytes, over the limit max_memory_bytes = %lld; "
               "raise it with the session option kiln_options.max_memory_bytes (kiln run --limit "
               "max_memory_bytes=N)", i, kiln_dtype_name(dtype),
               kiln_dims_str(rank, dims, (char[256]){0}, 256), nb, (long long)cap);
    return NULL;
  }
  /* Intermediates of the main graph come from the run's arena when the plan has a slot. */
  int64_t bytes = c->rt && c->rt->out_slot && i < c->node->n_out ? kiln_tensor_bytes(dtype, rank, dims) : -1;
  void *slot = bytes > 0 ? c->rt->out_slot(c->rt->rt, c, i, (size_t)bytes) : NULL;
  /* an output placed over its input (kiln_op_in_place_ok) must not be cleared first */
  if (slot && (t = kiln_tensor_wrap(dtype, rank, dims, slot, c->err)) && zero && !is_input_data(c, slot))
    memset(slot, 0, (size_t)bytes);
  if (!t) t = zero ? kiln_tensor_new(dtype, rank, dims, c->err) : kiln_tensor_new_uninit(dtype, rank, dims, c->err);
  if (!t) {
    kiln_error_prefix(c->err, "node '%s' (%s) output %zu", node_name(c->node), c->node->op_type, i);
    return NULL;
  }
  kiln_tensor_free(c->out[i]);
  c->out[i] = t;
  return t;
}

kiln_tensor *kiln_out(kiln_kctx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims) {
  return out_alloc(c, i, dtype, rank, dims, true);
}

kiln_tensor *kiln_out_uninit(kiln_kctx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims) {
  /* strings hold pointers that must start NULL */
  return out_alloc(c, i, dtype, rank, dims, dtype == KILN_STRING);
}

void kiln_set_out(kiln_kctx *c, size_t i, kiln_tensor *v) {
  if (i >= c->n_out) {
    kiln_tensor_free(v);
    return;
  }
  kiln_tensor_free(c->out[i]);
  c->out[i] = v;
}

struct kiln_threadpool *kiln_kpool(const kiln_kctx *c) {
  return c->rt ? c->rt->pool : NULL;
}

bool kiln_kstrict_fp32(const kiln_kctx *c) { return c->rt && c->rt->opts && c->rt->opts->strict_fp32; }

kiln_code kiln_subgraph_run(kiln_kctx *c, const kiln_graph *g, size_t n_inputs,
                            const kiln_tensor *const *inputs, kiln_tensor **outputs) {
  if (!c->rt || !c->rt->subgraph) return kiln_kunsup(c, "subgraphs run only in a session");
  if (n_inputs > g->n_inputs)
    return kiln_kfail(c, "subgraph '%s' takes %zu inputs, given %zu", g->name, g->n_inputs, n_inputs);
  return c->rt->subgraph(c->rt->rt, c, g, n_inputs, inputs, outputs);
}

bool kiln_in_const(const kiln_kctx *c, size_t i, const kiln_tensor *t) {
  const kiln_graph *g = c->rt ? c->rt->graph : NULL;
  int id = i < c->node->n_in ? c->node->in[i] : -1;
  const kiln_tensor *init = g && id >= 0 && (size_t)id < g->n_values ? g->values[id].init : NULL;
  return t && t->data && init && init->data == t->data;
}

bool kiln_kamx(const kiln_kctx *c) {
  if (kiln_kstrict_fp32(c)) return false;
  return kiln_amx_available() != 0;
}

void *kiln_cache_get(const kiln_kctx *c) {
  return c->state ? __atomic_load_n(&c->state->cache, __ATOMIC_ACQUIRE) : NULL;
}

void *kiln_cache_publish(kiln_kctx *c, void *mine, void (*free_fn)(void *)) {
  void *expected = NULL;
  if (!c->state) {
    free_fn(mine);
    return NULL;
  }
  if (__atomic_compare_exchange_n(&c->state->cache, &expected, mine, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&c->state->cache_free, free_fn, __ATOMIC_RELEASE); /* only the winner */
    return mine;
  }
  free_fn(mine);
  return expected;
}

void *kiln_kscratch_take(kiln_kctx *c) {
  return c->rt && c->rt->scratch_take ? c->rt->scratch_take(c->rt->rt, c) : NULL;
}

void kiln_kscratch_put(kiln_kctx *c, void *v, void (*free_fn)(void *)) {
  if (!v) return;
  if (c->rt && c->rt->scratch_put)
    c->rt->scratch_put(c->rt->rt, c, v, free_fn);
  else
    free_fn(v);
}

const kiln_tensor *kiln_in(const kiln_kctx *c, size_t i) { return i < c->n_in ? c->in[i] : NULL; }

bool kiln_out_used(const kiln_kctx *c, size_t i) {
  return i < c->node->n_out && c->node->out[i] >= 0;
}

int kiln_axis(kiln_kctx *c, int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= (rank ? rank : 1)) {
    kiln_kfail(c, "axis %lld is out of range for rank %d", (long long)axis, rank);
    return -1;
  }
  return (int)a;
}

bool kiln_broadcast_shape(int ra, const int64_t *da, int rb, const int64_t *db, int *rout,
                          int64_t *dout) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int64_t a = i < r - ra ? 1 : da[i - (r - ra)];
    int64_t b = i < r - rb ? 1 : db[i - (r - rb)];
    if (a == b || b == 1)
      dout[i] = a;
    else if (a == 1)
      dout[i] = b;
    else
      return false;
  }
  *rout = r;
  return true;
}

void kiln_bcast_init(kiln_bcast *b, int rank, const int64_t *dims, const kiln_tensor *in) {
  b->rank = rank;
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    b->dims[i] = dims[i];
    int j = i - (rank - in->rank);
    int64_t d = j >= 0 ? in->dims[j] : 1;
    b->stride[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

int64_t kiln_bcast_index(const kiln_bcast *b, int64_t i) {
  int64_t idx = 0;
  for (int d = b->rank - 1; d >= 0; d--) {
    int64_t q = b->dims[d] ? i / b->dims[d] : 0;
    idx += (i - q * b->dims[d]) * b->stride[d];
    i = q;
  }
  return idx;
}

kiln_code kiln_read_ints(kiln_kctx *c, const kiln_tensor *t, int64_t *out, size_t cap,
                         size_t *count) {
  if (!t || t->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "expected an integer tensor input");
  if (!kiln_dtype_is_int(t->dtype)) return kiln_kfail(c, "expected an integer tensor, got %s",
                                                      kiln_dtype_name(t->dtype));
  if ((size_t)t->numel > cap) return kiln_kfail(c, "integer list of %lld items is too long",
                                                (long long)t->numel);
  for (int64_t i = 0; i < t->numel; i++) out[i] = kiln_get_i64(t, i);
  *count = (size_t)t->numel;
  return KILN_OK;
}

kiln_code kiln_scalar_int(kiln_kctx *c, const kiln_tensor *t, const char *what, int64_t *v) {
  if (!kiln_dtype_is_int(t->dtype) || t->numel != 1)
    return kiln_kfail(c, "%s must be a single integer", what);
  *v = kiln_get_i64(t, 0);
  return KILN_OK;
}

void kiln_infer_tensor(kiln_ictx *c, size_t i, kiln_dtype dtype, int rank, const int64_t *dims) {
  if (i >= c->n_out || !c->out[i]) return;
  kiln_type *t = c->out[i];
  kiln_type_clear(t);
  t->kind = KILN_T_TENSOR;
  t->dtype = dtype;
  t->rank = rank;
  for (int d = 0; d < rank && d < KILN_MAX_RANK; d++) t->dims[d] = dims ? dims[d] : -1;
}

void kiln_infer_same(kiln_ictx *c, size_t i, size_t j) {
  if (i >= c->n_out || !c->out[i] || j >= c->n_in || !c->in[j]) return;
  kiln_type_copy(c->out[i], c->in[j]);
}

kiln_code kiln_infer_unary(kiln_ictx *c) {
  kiln_infer_same(c, 0, 0);
  return KILN_OK;
}

kiln_code kiln_infer_broadcast(kiln_ictx *c, kiln_dtype dtype) {
  int rank = 0;
  int64_t dims[KILN_MAX_RANK];
  const char *sym[KILN_MAX_RANK] = {0}; /* symbolic names carried through (borrowed) */
  kiln_dtype dt = KILN_UNDEFINED;
  for (size_t k = 0; k < c->n_in; k++) {
    const kiln_type *t = c->in[k];
    if (!t || t->kind != KILN_T_TENSOR) return KILN_OK;
    if (k == 0) dt = t->dtype;
    if (t->rank < 0) {
      kiln_infer_tensor(c, 0, dtype ? dtype : dt, -1, NULL);
      return KILN_OK;
    }
    int r = rank > t->rank ? rank : t->rank;
    int64_t nd[KILN_MAX_RANK];
    const char *ns[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) {
      int ia = i - (r - rank), ib = i - (r - t->rank);
      int64_t a = ia < 0 ? 1 : dims[ia], b = ib < 0 ? 1 : t->dims[ib];
      const char *sa = ia < 0 ? NULL : sym[ia], *sb = ib < 0 ? NULL : t->sym[ib];
      if (a == b && a >= 0) {
        nd[i] = a;
        ns[i] = NULL;
      } else if (b == 1) {
        nd[i] = a;
        ns[i] = sa;
      } else if (a == 1) {
        nd[i] = b;
        ns[i] = sb;
      } else if (a < 0 || b < 0) {
        nd[i] = a < 0 && b < 0 ? -1 : (a < 0 ? b : a);
        ns[i] = nd[i] >= 0 ? NULL : (sa && sb && !strcmp(sa, sb) ? sa : NULL);
      } else {
        return kiln_ifail(c, "input shapes cannot be broadcast: dim %d is %lld vs %lld", i,
                          (long long)a, (long long)b);
      }
    }
    rank = r;
    memcpy(dims, nd, sizeof nd);
    memcpy(sym, ns, sizeof ns);
  }
  kiln_infer_tensor(c, 0, dtype ? dtype : dt, rank, dims);
  if (c->n_out && c->out[0])
    for (int i = 0; i < rank; i++)
      if (sym[i]) c->out[0]->sym[i] = kiln_strdup(sym[i]);
  return KILN_OK;
}

kiln_code kiln_need_tensors(kiln_kctx *c, size_t required) {
  for (size_t i = 0; i < c->n_in; i++) {
    const kiln_tensor *t = c->in[i];
    if (!t) {
      if (i < required) return kiln_kfail(c, "input %zu is required", i);
      continue;
    }
    if (t->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input %zu must be a tensor", i);
  }
  return KILN_OK;
}

const kiln_type *kiln_itype(const kiln_ictx *c, size_t i) {
  if (i >= c->n_in || !c->in[i] || c->in[i]->kind != KILN_T_TENSOR) return NULL;
  return c->in[i];
}

kiln_dtype kiln_idtype(const kiln_ictx *c, size_t i) {
  const kiln_type *t = kiln_itype(c, i);
  return t ? t->dtype : KILN_UNDEFINED;
}

int kiln_irank(const kiln_ictx *c, size_t i) {
  const kiln_type *t = kiln_itype(c, i);
  return t && t->rank <= KILN_MAX_RANK ? t->rank : -1;
}

bool kiln_iconst_ints(const kiln_ictx *c, size_t i, int64_t *out, size_t cap, size_t *n) {
  const kiln_tensor *t = i < c->n_in ? c->cin[i] : NULL;
  if (!t || t->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(t->dtype) || (size_t)t->numel > cap)
    return false;
  for (int64_t k = 0; k < t->numel; k++) out[k] = kiln_get_i64(t, k);
  *n = (size_t)t->numel;
  return true;
}

int64_t kiln_ilist_len(const kiln_ictx *c, size_t i) {
  const kiln_type *t = kiln_itype(c, i);
  return t && t->rank == 1 ? t->dims[0] : -1;
}
