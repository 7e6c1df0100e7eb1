/* ai.kiln::Attention: scaled dot-product attention in one pass, without materialising the
 * Sq x Sk score matrix (made by src/opt/fuse_attention.c).
 *
 *   Attention(Q, K, V, [mask], [cond]) -> Y
 *
 * Each of Q, K, V may first be viewed through a Slice and a Reshape (attributes x_slice =
 * [axis, start, end], a step-1 Slice of the input along one axis, then x_shape, a Reshape
 * target with ONNX's 0 and -1, for x = q, k, v; made by src/opt/fuse_attention.c from the
 * Slices that cut a packed QKV projection and the Reshapes of the head split, so neither is
 * copied). The view is read in place when strides over the input express it (always for a
 * batch of 1); otherwise (the head split merging batch and heads of a larger batch) the
 * kernel copies that view first, as the chain would have. Then it is read through a permutation
 * of its axes (attributes q_perm, k_perm, v_perm; absent = identity), which is how the
 * Transposes of the head split are absorbed:
 *   Q' = transpose(Q, q_perm)   (..., Sq, D)
 *   K' = transpose(K, k_perm)   (..., D, Sk)  -- the second operand of MatMul(Q, K^T), so a
 *                                               pre-transposed K has the identity perm and
 *                                               K of shape (..., Sk, D) swaps the last two axes
 *   V' = transpose(V, v_perm)   (..., Sk, Dv)
 *   S  = scale * Q' K'                      (attribute scale, default 1)
 *   S  = where(cond, S, mask_fill)          (optional bool input cond; cond_keep = 1 keeps S
 *                                            where cond is true, 0 where it is false)
 *   S  = S + mask                           (optional float input, additive; attribute
 *                                            where_after_mask = 1 applies the Where after it)
 *   O  = softmax(S, last axis) V'           (..., Sq, Dv)
 *   Y  = transpose(O, out_perm)             (absorbs the head merge Transpose)
 *   Y  = reshape(Y, out_shape)              (optional; absorbs the head merge Reshape: the
 *                                            data are contiguous, only the dims change)
 * The leading ("batch") axes of Q', K', V', mask and cond broadcast numpy-style, as MatMul
 * and Add would broadcast them; the mask's and cond's last two axes are 1 or Sq, and 1 or Sk.
 * float32 only; any rank >= 2 (rank 4 (B, H, S, D) and rank 3 (B*H, S, D) are the usual).
 *
 * Algorithm (why it is fast): for each batch element, K' is packed once into key blocks of
 * BK columns stored as D x BK panels, and V' into BK x Dv rows (a K or V shared across a batch
 * axis is packed once; V is read in place when its rows are contiguous and Dv is a multiple
 * of DVPAD); then for each block of QB query rows the key blocks are visited in
 * order with a streaming ("online") softmax: scores for the block come from a register-tiled
 * QB x (2 vectors) microkernel (dot products over D as broadcast-multiply-adds, no horizontal
 * sums), the running max m and sum l of each row are updated, the accumulator is rescaled by
 * exp(m_old - m_new) when the max grows, and the probabilities are accumulated into the output
 * with a QB x (2 vectors) axpy microkernel over Dv. Only QB x BK scores exist at any time. Key
 * blocks that the mask removes entirely (-inf, e.g. the upper triangle of a causal mask) are
 * skipped. exp() is a vectorised polynomial (rel. error about 2e-7). The hot path
 * (src/kernels/attention_tiles.h) is compiled for portable 128-bit vectors and, on x86, for
 * AVX2+FMA and AVX-512, chosen once from kiln_cpu_isa() (KILN_ISA=scalar forces the portable
 * one, KILN_ISA=avx2 the AVX2 one). For finite scores the result equals softmax(S) V' up to rounding; a row
 * masked out completely gives NaN, as the chain does. Run-time shapes the node cannot handle
 * (a mask that would grow Sq or Sk) fail the kernel, and the executor runs the chain. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "ops/cost.h"
#include "ops/fused.h"
#include "base/threadpool.h"


/* ---- vectorisable exp for x <= 0 (scores minus their running max) ---- */


/* ---- views: a tensor read through a permutation of its axes ---- */


/* The permutation attribute `name` for rank r (identity when absent); false if invalid. */
static bool read_perm(const kiln_node *n, const char *name, int r, int *perm) {
  size_t cnt;
  const int64_t *p = kiln_attr_ints(n, name, &cnt);
  bool seen[MAXR] = {false};
  if (!p) {
    for (int i = 0; i < r; i++) perm[i] = i;
    return true;
  }
  if ((int)cnt != r) return false;
  for (int i = 0; i < r; i++) {
    if (p[i] < 0 || p[i] >= r || seen[p[i]]) return false;
    seen[p[i]] = true;
    perm[i] = (int)p[i];
  }
  return true;
}

static void row_major(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
}

/* v = the strided array (dims, st) with its axes permuted by perm (NULL: identity) */
static void make_strided_view(view *v, int rank, const int64_t *dims, const int64_t *st, const int *perm) {
  v->rank = rank;
  for (int i = 0; i < rank; i++) {
    v->dims[i] = dims[perm ? perm[i] : i];
    v->stride[i] = st[perm ? perm[i] : i];
  }
}

static void make_view(view *v, int rank, const int64_t *dims, const int *perm) {
  int64_t st[MAXR];
  row_major(rank, dims, st);
  make_strided_view(v, rank, dims, st, perm);
}

/* Resolve a Reshape target (ONNX, allowzero 0: 0 copies the input dim, one -1 is inferred)
 * for input dims in[r]; dims of -1 in `in` (unknown, at load time) give -1 where they matter.
 * False when the target cannot fit. */
static bool reshape_target(int r, const int64_t *in, const int64_t *s, size_t n, int64_t *out) {
  int neg = -1;
  int64_t total = 1, prod = 1;
  bool known = true;
  if (n > MAXR) return false;
  for (int k = 0; k < r; k++) {
    if (in[k] < 0) known = false;
    else total *= in[k];
  }
  for (size_t k = 0; k < n; k++) {
    if (s[k] < -1 || (s[k] == -1 && neg >= 0)) return false;
    if (s[k] == -1) {
      neg = (int)k;
      continue;
    }
    if (s[k] == 0 && (int)k >= r) return false;
    out[k] = s[k] == 0 ? in[k] : s[k];
    if (out[k] < 0) known = false;
    else prod *= out[k];
  }
  if (neg >= 0) {
    out[neg] = -1;
    if (known) {
      if (prod == 0 || total % prod) return false;
      out[neg] = total / prod;
    }
  } else if (known && prod != total) {
    return false;
  }
  return true;
}

/* Strides for viewing the strided array (od, os) of rank orank as dims nd[nr] without a copy
 * (numpy's rule: each group of old axes merged or split must be contiguous among itself);
 * false when that needs a copy. Same element count assumed, and not zero. */
static bool reshape_strides(int orank, const int64_t *od, const int64_t *os, int nr, const int64_t *nd,
                            int64_t *ns) {
  int64_t d[MAXR], st[MAXR];
  int n = 0;
  for (int i = 0; i < orank; i++) /* axes of 1 carry no layout */
    if (od[i] != 1) {
      d[n] = od[i];
      st[n++] = os[i];
    }
  int oi = 0, ni = 0;
  while (ni < nr && oi < n) {
    int64_t np = nd[ni], op = d[oi];
    int nj = ni + 1, oj = oi + 1;
    while (np != op) {
      if (np < op) {
        if (nj >= nr) return false;
        np *= nd[nj++];
      } else {
        if (oj >= n) return false;
        op *= d[oj++];
      }
    }
    for (int k = oi; k < oj - 1; k++)
      if (st[k] != d[k + 1] * st[k + 1]) return false;
    ns[nj - 1] = st[oj - 1];
    for (int k = nj - 1; k > ni; k--) ns[k - 1] = ns[k] * nd[k];
    ni = nj;
    oi = oj;
  }
  for (; ni < nr; ni++) ns[ni] = 1; /* trailing axes of 1 */
  return true;
}

/* The x_slice attribute ([axis, start, end]) on dims[r]: the first index and count along the
 * axis (ONNX Slice clamping, step 1); false when absent. *ok is false when it is malformed. */
static bool read_slice(const kiln_node *n, const char *name, int r, const int64_t *dims, int *axis,
                       int64_t *first, int64_t *count, bool *ok) {
  size_t cnt;
  const int64_t *sl = kiln_attr_ints(n, name, &cnt);
  *ok = true;
  if (!sl) return false;
  int64_t a = cnt == 3 ? (sl[0] < 0 ? sl[0] + r : sl[0]) : -1;
  if (a < 0 || a >= r) {
    *ok = false;
    return true;
  }
  int64_t dim = dims[a], s = sl[1], e = sl[2];
  *axis = (int)a;
  if (dim < 0) { /* unknown (load time) */
    *first = 0;
    *count = -1;
    return true;
  }
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  s = s < 0 ? 0 : s > dim ? dim : s;
  e = e < 0 ? 0 : e > dim ? dim : e;
  *first = s;
  *count = e > s ? e - s : 0;
  return true;
}

/* dst = the strided array (dims, st) of src, copied in row-major order */
static void gather_strided(float *dst, const float *src, int rank, const int64_t *dims, const int64_t *st) {
  int64_t idx[MAXR] = {0}, inner = rank ? dims[rank - 1] : 1, is = rank ? st[rank - 1] : 1, outer = 1;
  for (int d = 0; d + 1 < rank; d++) outer *= dims[d];
  for (int64_t o = 0; o < outer; o++) {
    const float *sp = src;
    for (int d = 0; d + 1 < rank; d++) sp += idx[d] * st[d];
    for (int64_t k = 0; k < inner; k++) dst[k] = sp[k * is];
    dst += inner;
    for (int d = rank - 2; d >= 0; d--) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

/* Input i's dims and strides after its x_slice and x_shape attributes, and where its data
 * start (*data); false, with a message in c, when they do not fit. A view that strides cannot
 * express (a Reshape merging axes the Slice left apart, e.g. batch and heads when the batch
 * is over 1) is copied into *owned (the caller frees it), as the chain would have. */
static bool input_view(kiln_kctx *c, size_t i, const kiln_tensor *t, int *rank, int64_t *dims, int64_t *st,
                       const float **data, float **owned) {
  static const char *slices[3] = {"q_slice", "k_slice", "v_slice"}, *shapes[3] = {"q_shape", "k_shape", "v_shape"};
  int r = t->rank, axis;
  int64_t first, count;
  bool ok;
  memcpy(dims, t->dims, (size_t)r * sizeof *dims);
  row_major(r, dims, st);
  *data = t->data;
  if (read_slice(c->node, slices[i], r, dims, &axis, &first, &count, &ok)) {
    if (!ok) return kiln_kfail(c, "%s is not [axis, start, end] for rank %d", slices[i], r), false;
    *data += first * st[axis];
    dims[axis] = count;
  }
  size_t n;
  const int64_t *shape = kiln_attr_ints(c->node, shapes[i], &n);
  if (shape) {
    int64_t nd[MAXR], ns[MAXR], numel = 1;
    if (!reshape_target(r, dims, shape, n, nd))
      return kiln_kfail(c, "%s does not fit the input's %d dims", shapes[i], r), false;
    for (int k = 0; k < r; k++) numel *= dims[k];
    if (numel == 0 || !reshape_strides(r, dims, st, (int)n, nd, ns)) {
      row_major((int)n, nd, ns);
      if (numel && !(*owned = malloc((size_t)numel * sizeof **owned)))
        return kiln_kfail(c, "out of memory for the attention's %s view", shapes[i]), false;
      if (numel) gather_strided(*owned, *data, r, dims, st);
      *data = *owned;
    }
    r = (int)n;
    memcpy(dims, nd, n * sizeof *dims);
    memcpy(st, ns, n * sizeof *st);
  }
  *rank = r;
  return true;
}

/* Broadcast the batch axes (all but the last two) of views into dims[nb]; false on mismatch. */
static bool batch_shape(view *const *vs, size_t nv, int *nb, int64_t *dims) {
  *nb = 0;
  for (size_t k = 0; k < nv; k++)
    if (vs[k] && vs[k]->rank - 2 > *nb) *nb = vs[k]->rank - 2;
  for (int i = 0; i < *nb; i++) dims[i] = 1;
  for (size_t k = 0; k < nv; k++) {
    if (!vs[k]) continue;
    int off = *nb - (vs[k]->rank - 2);
    for (int i = 0; i < vs[k]->rank - 2; i++) {
      int64_t d = vs[k]->dims[i];
      if (d == dims[off + i] || d == 1) continue;
      if (dims[off + i] != 1) return false;
      dims[off + i] = d;
    }
  }
  return true;
}

/* Per-batch-axis strides of view v (0 where it broadcasts), right-aligned to nb axes. */
static void batch_strides(const view *v, int nb, int64_t *bs) {
  int off = nb - (v->rank - 2);
  for (int i = 0; i < nb; i++) {
    int j = i - off;
    bs[i] = j < 0 || v->dims[j] == 1 ? 0 : v->stride[j];
  }
}

/* ---- the kernel ---- */


/* The sizes, the masks' trailing axes and the batch broadcast of a plan whose q, k, v (and m, c)
 * views are set. */
static kiln_code plan_common(kiln_kctx *c, attn_plan *p) {
  p->sq = p->q.dims[p->q.rank - 2];
  p->d = p->q.dims[p->q.rank - 1];
  p->sk = p->k.dims[p->k.rank - 1];
  p->dv = p->v.dims[p->v.rank - 1];
  if (p->k.dims[p->k.rank - 2] != p->d || p->v.dims[p->v.rank - 2] != p->sk)
    return kiln_kfail(c, "Q, K, V do not line up: D %lld vs %lld, Sk %lld vs %lld", (long long)p->d,
                      (long long)p->k.dims[p->k.rank - 2], (long long)p->sk, (long long)p->v.dims[p->v.rank - 2]);
  view *ms[2] = {p->has_mask ? &p->m : NULL, p->has_cond ? &p->c : NULL};
  for (size_t i = 0; i < 2; i++) {
    if (!ms[i]) continue;
    /* a rank-1 mask is one row over the keys: view it as (1, Sk) */
    if (ms[i]->rank == 1) {
      ms[i]->dims[1] = ms[i]->dims[0];
      ms[i]->stride[1] = ms[i]->stride[0];
      ms[i]->dims[0] = 1;
      ms[i]->stride[0] = 0;
      ms[i]->rank = 2;
    } else if (ms[i]->rank == 0) {
      ms[i]->rank = 2;
      ms[i]->dims[0] = ms[i]->dims[1] = 1;
      ms[i]->stride[0] = ms[i]->stride[1] = 0;
    }
    int64_t a = ms[i]->dims[ms[i]->rank - 2], b = ms[i]->dims[ms[i]->rank - 1];
    if ((a != 1 && a != p->sq) || (b != 1 && b != p->sk))
      return kiln_kfail(c, "%s of trailing shape (%lld, %lld) does not broadcast to the scores (%lld, %lld)",
                        i ? "cond" : "mask", (long long)a, (long long)b, (long long)p->sq, (long long)p->sk);
    if (a == 1) ms[i]->stride[ms[i]->rank - 2] = 0;
    if (b == 1) ms[i]->stride[ms[i]->rank - 1] = 0;
  }
  view *all[5] = {&p->q, &p->k, &p->v, ms[0], ms[1]};
  if (!batch_shape(all, 5, &p->nb, p->bdims)) return kiln_kfail(c, "the batch axes of the inputs do not broadcast");
  batch_strides(&p->q, p->nb, p->qbs);
  batch_strides(&p->k, p->nb, p->kbs);
  batch_strides(&p->v, p->nb, p->vbs);
  if (p->has_mask) batch_strides(&p->m, p->nb, p->mbs);
  if (p->has_cond) batch_strides(&p->c, p->nb, p->cbs);
  return KILN_OK;
}

static kiln_code plan_views(kiln_kctx *c, attn_plan *p, kiln_tensor **yout) {
  const kiln_tensor *t[5];
  for (size_t i = 0; i < 5; i++) {
    t[i] = kiln_in(c, i);
    if (i < 3 && !t[i]) return kiln_kfail(c, "input %zu is missing", i);
    if (t[i] && t[i]->kind != KILN_KIND_TENSOR) return kiln_kfail(c, "input %zu must be a tensor", i);
  }
  for (size_t i = 0; i < 4; i++)
    if (t[i] && t[i]->dtype != KILN_FLOAT)
      return kiln_kunsup(c, "Attention supports float32 only, input %zu is %s", i, kiln_dtype_name(t[i]->dtype));
  if (t[4] && t[4]->dtype != KILN_BOOL) return kiln_kfail(c, "cond must be bool");
  static const char *perms[3] = {"q_perm", "k_perm", "v_perm"};
  view *vw[3] = {&p->q, &p->k, &p->v};
  for (size_t i = 0; i < 3; i++) {
    int perm[MAXR], r;
    int64_t dims[MAXR], st[MAXR];
    if (!input_view(c, i, t[i], &r, dims, st, &p->in_data[i], &p->owned[i])) return c->err->code;
    if (r < 2) return kiln_kfail(c, "input %zu must have rank >= 2", i);
    if (!read_perm(c->node, perms[i], r, perm)) return kiln_kfail(c, "%s is not a permutation of %d axes", perms[i], r);
    make_strided_view(vw[i], r, dims, st, perm);
  }
  p->has_mask = t[3] != NULL;
  p->has_cond = t[4] != NULL;
  if (p->has_mask) make_view(&p->m, t[3]->rank, t[3]->dims, NULL);
  if (p->has_cond) make_view(&p->c, t[4]->rank, t[4]->dims, NULL);
  kiln_code rc = plan_common(c, p);
  if (rc) return rc;
  /* The output: logical (batch..., Sq, Dv), stored transposed by out_perm. */
  int r = p->nb + 2, perm[MAXR];
  int64_t od[MAXR], yd[MAXR];
  memcpy(od, p->bdims, (size_t)p->nb * sizeof *od);
  od[r - 2] = p->sq;
  od[r - 1] = p->dv;
  if (!read_perm(c->node, "out_perm", r, perm)) return kiln_kfail(c, "out_perm is not a permutation of %d axes", r);
  for (int i = 0; i < r; i++) yd[i] = od[perm[i]];
  /* out_shape relabels the contiguous output's dims; the layout below is yd's */
  size_t nos;
  const int64_t *os = kiln_attr_ints(c->node, "out_shape", &nos);
  int64_t sd[MAXR];
  if (os && !reshape_target(r, yd, os, nos, sd)) return kiln_kfail(c, "out_shape does not fit the output");
  /* every output row is written (values, or NaN for a row masked out): no zeroing */
  kiln_tensor *y = os ? kiln_out_uninit(c, 0, KILN_FLOAT, (int)nos, sd) : kiln_out_uninit(c, 0, KILN_FLOAT, r, yd);
  if (!y) return c->err->code;
  view yv;
  make_view(&yv, r, yd, NULL);
  p->o.rank = r;
  for (int i = 0; i < r; i++) {
    p->o.dims[perm[i]] = yd[i];
    p->o.stride[perm[i]] = yv.stride[i];
  }
  memcpy(p->obs, p->o.stride, (size_t)p->nb * sizeof *p->obs);
  p->scale = kiln_attr_float(c->node, "scale", 1.0f);
  p->fill = kiln_attr_float(c->node, "mask_fill", -INFINITY);
  p->keep_true = kiln_attr_int(c->node, "cond_keep", 1) != 0;
  p->where_after = kiln_attr_int(c->node, "where_after_mask", 0) != 0;
  *yout = y;
  return KILN_OK;
}


/* All buffers of one run: nslot packed K/V slots (one per batch element of a group) and
 * per-thread tiles for nthr threads, plus the slot maps of a group. */
typedef struct attn_bufs {
  float *kp, *vp, *q, *s, *acc;
  size_t kpn, vpn, qn, sn, accn; /* floats per slot / per thread */
  size_t nslot, nthr;
  int64_t sk, dv; /* the padding (past Sk, past Dv) depends on them, not only on the sizes */
  size_t *slots;  /* 2 * nslot */
} attn_bufs;

/* n floats rounded up to whole 64-byte lines, plus one line of padding */
static size_t pad_line(size_t n) { return (n + 15) / 16 * 16 + 16; }

static void bufs_sizes(attn_bufs *w, const attn_plan *p, size_t nslot, size_t nthr) {
  memset(w, 0, sizeof *w);
  w->kpn = (size_t)p->nkb * BK * (size_t)p->d;
  w->vpn = (size_t)p->nkb * BK * (size_t)p->dvp;
  /* per-thread pieces padded so that no two threads write one cache line */
  w->qn = pad_line((size_t)QB * (size_t)(p->d ? p->d : 1));
  w->sn = pad_line((size_t)QB * BK);
  w->accn = pad_line((size_t)QB * (size_t)(p->dvp ? p->dvp : 1));
  w->nslot = nslot;
  w->nthr = nthr;
  w->sk = p->sk;
  w->dv = p->dv;
}

static void bufs_free(void *wp) {
  attn_bufs *w = wp;
  if (!w) return;
  free(w->kp);
  free(w->vp);
  free(w->q);
  free(w->s);
  free(w->acc);
  free(w->slots);
  free(w);
}

/* The work buffers for a run of plan p: the set the node's last run in this run context left
 * (kiln_kscratch_take: never shared with a concurrent run) when it has the same geometry, else
 * a fresh zeroed set. A
 * set's padding (key columns past Sk, value columns past Dv) is zeroed at allocation and never
 * written, so it stays valid for every run of the same geometry; reusing the set saves the
 * allocation, the zeroing and the page faults of about 100 KiB per node and run. */
static attn_bufs *bufs_take(kiln_kctx *c, const attn_plan *p, size_t nslot, size_t nthr) {
  attn_bufs want, *w = kiln_kscratch_take(c);
  bufs_sizes(&want, p, nslot, nthr);
  if (w && w->kpn == want.kpn && w->vpn == want.vpn && w->qn == want.qn && w->sn == want.sn &&
      w->accn == want.accn && w->nslot == nslot && w->nthr == nthr && w->sk == want.sk && w->dv == want.dv)
    return w;
  bufs_free(w);
  if (!(w = malloc(sizeof *w))) return NULL;
  *w = want;
  w->kp = calloc(w->kpn * nslot + 1, sizeof(float));
  w->vp = calloc(w->vpn * nslot + 1, sizeof(float));
  w->q = calloc(w->qn * nthr, sizeof(float));
  w->s = calloc(w->sn * nthr, sizeof(float));
  w->acc = calloc(w->accn * nthr, sizeof(float));
  w->slots = calloc(2 * nslot, sizeof *w->slots);
  if (w->kp && w->vp && w->q && w->s && w->acc && w->slots) return w;
  bufs_free(w);
  return NULL;
}

/* Put the set back into the run context for the node's next run (freed without one). */
static void bufs_give(kiln_kctx *c, attn_bufs *w) { kiln_kscratch_put(c, w, bufs_free); }


static void pack_k(const attn_plan *p, const float *k, float *kp) {
  int64_t sd = p->k.stride[p->k.rank - 2], sj = p->k.stride[p->k.rank - 1];
  for (int64_t kb = 0; kb < p->nkb; kb++) {
    int64_t j0 = kb * BK, nk = p->sk - j0 < BK ? p->sk - j0 : BK;
    float *panel = kp + kb * p->d * BK;
    if (sd == 1 && sj != 1 && p->pack_rows) {
      p->pack_rows(k + j0 * sj, sj, nk, p->d, panel);
      continue;
    }
    if (sd == 1 && sj != 1) {
      /* K stored (Sk, D), the usual layout: read each key's D values in a row and scatter
       * them down the panel's column (the panel, D x BK floats, stays in L1), instead of
       * gathering every column with a stride of a whole key row */
      for (int64_t j = 0; j < nk; j++) {
        const float *src = k + (j0 + j) * sj;
        for (int64_t d = 0; d < p->d; d++) panel[d * BK + j] = src[d];
      }
      continue;
    }
    for (int64_t d = 0; d < p->d; d++) {
      float *dst = panel + d * BK;
      const float *src = k + d * sd + j0 * sj;
      if (sj == 1) memcpy(dst, src, (size_t)nk * sizeof *dst);
      else
        for (int64_t j = 0; j < nk; j++) dst[j] = src[j * sj];
    }
  }
}

static void pack_v(const attn_plan *p, const float *v, float *vp) {
  int64_t sj = p->v.stride[p->v.rank - 2], sc = p->v.stride[p->v.rank - 1];
  for (int64_t j = 0; j < p->sk; j++) {
    float *dst = vp + j * p->dvp;
    const float *src = v + j * sj;
    if (sc == 1) memcpy(dst, src, (size_t)p->dv * sizeof *dst);
    else
      for (int64_t c = 0; c < p->dv; c++) dst[c] = src[c * sc];
  }
}


/* Element offsets of batch element b in each operand: q, k, v, mask, cond, y. */
static void batch_offsets(const attn_plan *p, int64_t b, int64_t *off) {
  memset(off, 0, 6 * sizeof *off);
  for (int i = p->nb - 1; i >= 0; i--) {
    int64_t x = b % p->bdims[i];
    b /= p->bdims[i];
    off[0] += x * p->qbs[i];
    off[1] += x * p->kbs[i];
    off[2] += x * p->vbs[i];
    if (p->has_mask) off[3] += x * p->mbs[i];
    if (p->has_cond) off[4] += x * p->cbs[i];
    off[5] += x * p->obs[i];
  }
}

/* One group of batch elements [b0, b0 + nbat) of a run. Slot g holds batch b0 + g's packed K
 * and V, or reuses slot kslot[g] / vslot[g] of an earlier element with the same K or V. */
typedef struct attn_job {
  const attn_plan *p;
  attn_bufs *w;
  kiln_attend_fn attend;
  const float *qd, *kd, *vd, *md;
  const uint8_t *cd;
  float *yd;
  int64_t b0, nbat, nqt, qt; /* query tiles of qt rows per batch element */
  size_t *kslot, *vslot;
} attn_job;

static void pack_task(void *ctx, size_t begin, size_t end, int thread) {
  const attn_job *j = ctx;
  (void)thread;
  for (size_t g = begin; g < end; g++) {
    int64_t off[6];
    batch_offsets(j->p, j->b0 + (int64_t)g, off);
    if (j->kslot[g] == g) pack_k(j->p, j->kd + off[1], j->w->kp + g * j->w->kpn);
    if (j->vslot[g] == g && !j->p->v_direct) pack_v(j->p, j->vd + off[2], j->w->vp + g * j->w->vpn);
  }
}

/* Task t: batch element t / nqt of the group, query rows of tile t % nqt. Each row is computed
 * by one task with the same instructions whatever the thread count. */
static void attend_task(void *ctx, size_t begin, size_t end, int thread) {
  const attn_job *j = ctx;
  const attn_plan *p = j->p;
  attn_bufs *b = j->w;
  size_t th = (size_t)thread;
  for (size_t t = begin; t < end; t++) {
    size_t g = t / (size_t)j->nqt;
    int64_t i0 = (int64_t)(t % (size_t)j->nqt) * j->qt, i1 = i0 + j->qt < p->sq ? i0 + j->qt : p->sq, off[6];
    batch_offsets(p, j->b0 + (int64_t)g, off);
    attn_work w = {b->kp + j->kslot[g] * b->kpn, b->vp + j->vslot[g] * b->vpn, p->dvp, b->q + th * b->qn,
                   b->s + th * b->sn, b->acc + th * b->accn};
    if (p->v_direct) {
      w.v = j->vd + off[2];
      w.vs = p->v.stride[p->v.rank - 2];
    }
    j->attend(p, &w, j->qd + off[0], j->md ? j->md + off[3] : NULL, j->cd ? j->cd + off[4] : NULL, j->yd + off[5],
              i0, i1);
  }
}

/* Run plan p (views and batch broadcast set by plan_common) into y: md, cd the mask's and
 * cond's data or NULL. */
static kiln_code exec_plan(kiln_kctx *c, attn_plan *pp, const float *md, const uint8_t *cd, kiln_tensor *y) {
  attn_plan p = *pp;
  p.dvp = (p.dv + DVPAD - 1) / DVPAD * DVPAD;
  p.v_direct = p.v.stride[p.v.rank - 1] == 1 && p.dv == p.dvp;
  p.nkb = (p.sk + BK - 1) / BK;
  if (y->numel == 0) return KILN_OK;
  if (p.sk == 0) { /* softmax over nothing times an empty V: zeros, as MatMul gives */
    memset(y->data, 0, y->nbytes);
    return KILN_OK;
  }
  /* The packed K and V hold nkb*BK x max(D, dvp) floats: refuse sizes that overflow. */
  if (p.nkb > INT64_MAX / BK / (p.d + p.dvp + 1)) return kiln_kfail(c, "attention too large");
  int64_t nbatch = 1;
  for (int i = 0; i < p.nb; i++) nbatch *= p.bdims[i];
  /* Threads split (batch element, tile of query rows); small problems run inline. */
  double work = (double)nbatch * (double)p.sq * (double)p.sk * (double)(p.d + p.dv);
  kiln_threadpool *pool = work >= 1 << 17 ? kiln_kpool(c) : NULL;
  size_t nthr = (size_t)kiln_threadpool_size(pool);
  /* Batch elements go in groups whose packed K and V fit in about half an L2 (at least one
   * element per thread): the group's panels are still in cache when its query tiles read
   * them, and a small problem (one BERT layer's heads) is one group, i.e. two parallel loops
   * per node rather than two per thread's worth of heads. */
  int64_t per_elem = p.nkb * BK * (p.d + p.dvp) * (int64_t)sizeof(float);
  int64_t group = ((int64_t)1 << 20) / (per_elem ? per_elem : 1);
  if (group < (int64_t)nthr) group = (int64_t)nthr;
  if (group > nbatch) group = nbatch;
  attn_bufs *w = bufs_take(c, &p, (size_t)group, nthr);
  if (!w) return kiln_kfail(c, "out of memory for attention work buffers");
  const kiln_attn_kernels *kern = kiln_attn_kernels_get(); /* chosen once from kiln_cpu_isa() */
  kiln_attend_fn attend = kern->attend;
  p.pack_rows = kern->pack_rows;
  /* query tiles: 8 microkernel tiles, or fewer when there are few batch elements to share */
  int64_t qt = QB * 8;
  while (qt > QB && nbatch * ((p.sq + qt - 1) / qt) < 4 * (int64_t)nthr) qt /= 2;
  attn_job j = {&p, w, attend, p.in_data[0], p.in_data[1], p.in_data[2], md, cd, y->data,
                0, 0, (p.sq + qt - 1) / qt, qt, w->slots, w->slots + group};
  for (int64_t b0 = 0; b0 < nbatch; b0 += group) {
    j.b0 = b0;
    j.nbat = nbatch - b0 < group ? nbatch - b0 : group;
    /* K or V broadcast over a batch axis (shared heads) is packed once per run of equal ones */
    int64_t prev[6] = {0};
    for (int64_t g = 0; g < j.nbat; g++) {
      int64_t off[6];
      batch_offsets(&p, b0 + g, off);
      j.kslot[g] = g && off[1] == prev[1] ? j.kslot[g - 1] : (size_t)g;
      j.vslot[g] = g && off[2] == prev[2] ? j.vslot[g - 1] : (size_t)g;
      memcpy(prev, off, sizeof prev);
    }
    kiln_parallel_for(pool, (size_t)j.nbat, pack_task, &j, 1);
    kiln_parallel_for(pool, (size_t)(j.nbat * j.nqt), attend_task, &j, 1);
  }
  bufs_give(c, w);
  return KILN_OK;
}

static kiln_code attention_exec(kiln_kctx *c, attn_plan *p) {
  kiln_tensor *y = NULL;
  kiln_code rc = plan_views(c, p, &y);
  if (rc) return rc;
  return exec_plan(c, p, p->has_mask ? kiln_in(c, 3)->data : NULL, p->has_cond ? kiln_in(c, 4)->data : NULL, y);
}

kiln_code kiln_attention_run_views(kiln_kctx *c, attn_plan *p, const float *mask, kiln_tensor *y) {
  p->has_cond = false;
  kiln_code rc = plan_common(c, p);
  if (rc) return rc;
  if (p->o.rank != p->nb + 2) return kiln_kfail(c, "the output view has rank %d, not %d", p->o.rank, p->nb + 2);
  for (int i = 0; i < p->nb; i++) {
    if (p->o.dims[i] != p->bdims[i]) return kiln_kfail(c, "the output view does not match the batch axes");
    p->obs[i] = p->o.stride[i];
  }
  return exec_plan(c, p, mask, NULL, y);
}

static kiln_code attention_run(kiln_kctx *c) {
  attn_plan p;
  memset(&p, 0, sizeof p);
  kiln_code rc = attention_exec(c, &p);
  for (size_t i = 0; i < 3; i++) free(p.owned[i]);
  return rc;
}

/* ---- shape function: the same views on the static types ---- */

static void type_view(const kiln_type *t, const int *perm, int64_t *dims, const char **sym) {
  for (int i = 0; i < t->rank; i++) {
    int a = perm ? perm[i] : i;
    dims[i] = t->dims[a];
    sym[i] = t->sym[a];
  }
}

/* The static type of input i viewed through its x_slice and x_shape (see input_view); dims of
 * -1 where unknown (a Reshape keeps the names of the dims it copies). False when it cannot fit. */
static bool type_input_view(const kiln_node *n, size_t i, const kiln_type *t, kiln_type *out) {
  static const char *slices[3] = {"q_slice", "k_slice", "v_slice"}, *shapes[3] = {"q_shape", "k_shape", "v_shape"};
  int axis;
  int64_t first, count;
  bool ok;
  *out = *t;
  if (read_slice(n, slices[i], t->rank, t->dims, &axis, &first, &count, &ok)) {
    if (!ok) return false;
    out->dims[axis] = count;
    out->sym[axis] = NULL;
  }
  size_t cnt;
  const int64_t *shape = kiln_attr_ints(n, shapes[i], &cnt);
  if (!shape) return true;
  int64_t nd[MAXR];
  const char *ns[MAXR];
  if (!reshape_target(out->rank, out->dims, shape, cnt, nd)) return false;
  for (size_t k = 0; k < cnt; k++) ns[k] = shape[k] == 0 ? out->sym[k] : NULL;
  out->rank = (int)cnt;
  memcpy(out->dims, nd, cnt * sizeof *nd);
  memcpy(out->sym, ns, cnt * sizeof *ns);
  return true;
}

static kiln_code attention_infer(kiln_ictx *c) {
  const kiln_type *t[5];
  for (size_t i = 0; i < 5; i++) {
    t[i] = i < c->n_in ? c->in[i] : NULL;
    if (t[i] && t[i]->kind != KILN_T_TENSOR) return KILN_OK;
  }
  if (!t[0] || !t[1] || !t[2]) return KILN_OK;
  for (size_t i = 0; i < 5; i++)
    if (t[i] && t[i]->rank < 0) {
      kiln_infer_tensor(c, 0, KILN_FLOAT, -1, NULL);
      return KILN_OK;
    }
  static const char *perms[3] = {"q_perm", "k_perm", "v_perm"};
  int64_t d[5][MAXR];
  const char *s[5][MAXR];
  int rk[5];
  for (size_t i = 0; i < 5; i++) {
    if (!t[i]) continue;
    int perm[MAXR];
    kiln_type vt;
    if (i < 3 && !type_input_view(c->node, i, t[i], &vt)) return kiln_ifail(c, "input %zu: the slice or shape does not fit", i);
    const kiln_type *ti = i < 3 ? &vt : t[i];
    rk[i] = ti->rank;
    if (i < 3 && (rk[i] < 2 || !read_perm(c->node, perms[i], rk[i], perm)))
      return kiln_ifail(c, "input %zu: rank %d or %s does not fit", i, rk[i], perms[i]);
    type_view(ti, i < 3 ? perm : NULL, d[i], s[i]);
  }
  /* batch axes: broadcast like kiln_infer_broadcast, keeping symbolic names */
  int nb = 0;
  for (size_t i = 0; i < 5; i++)
    if (t[i] && rk[i] - 2 > nb) nb = rk[i] - 2;
  int64_t od[MAXR], yd[MAXR];
  const char *os[MAXR], *ys[MAXR];
  for (int a = 0; a < nb; a++) {
    od[a] = 1;
    os[a] = NULL;
    for (size_t i = 0; i < 5; i++) {
      int j = a - (nb - (rk[i] - 2));
      if (!t[i] || j < 0) continue;
      int64_t x = d[i][j];
      if (x == 1 || (x == od[a] && x >= 0)) continue;
      if (od[a] == 1) {
        od[a] = x;
        os[a] = s[i][j];
      } else if (od[a] >= 0 && x >= 0) {
        return kiln_ifail(c, "batch axes do not broadcast: %lld vs %lld", (long long)od[a], (long long)x);
      } else if (od[a] < 0 && x >= 0) {
        od[a] = x;
        os[a] = NULL;
      }
    }
  }
  int r = nb + 2, perm[MAXR];
  od[r - 2] = d[0][rk[0] - 2];
  os[r - 2] = s[0][rk[0] - 2];
  od[r - 1] = d[2][rk[2] - 1];
  os[r - 1] = s[2][rk[2] - 1];
  if (!read_perm(c->node, "out_perm", r, perm)) return kiln_ifail(c, "out_perm does not fit rank %d", r);
  for (int i = 0; i < r; i++) {
    yd[i] = od[perm[i]];
    ys[i] = yd[i] < 0 ? os[perm[i]] : NULL;
  }
  size_t nos;
  const int64_t *osh = kiln_attr_ints(c->node, "out_shape", &nos);
  if (osh) { /* the head merge Reshape: dims it copies (0) keep their names */
    int64_t sd[MAXR];
    const char *ss[MAXR];
    if (!reshape_target(r, yd, osh, nos, sd)) return kiln_ifail(c, "out_shape does not fit the output");
    for (size_t k = 0; k < nos; k++) ss[k] = osh[k] == 0 && sd[k] < 0 ? ys[k] : NULL;
    r = (int)nos;
    memcpy(yd, sd, nos * sizeof *sd);
    memcpy(ys, ss, nos * sizeof *ss);
  }
  kiln_infer_tensor(c, 0, KILN_FLOAT, r, yd);
  if (c->n_out && c->out[0])
    for (int i = 0; i < r; i++)
      if (ys[i]) c->out[0]->sym[i] = kiln_strdup(ys[i]);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_fused_attention[] = {
    {.domain = KILN_FUSED_DOMAIN, .name = "Attention", .since = 1, .inputs = {3, 5}, .outputs = {1, 1},
     .infer = attention_infer, .run = attention_run, .cost = kiln_cost_attention},
    {0},
};
