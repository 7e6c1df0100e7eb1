/* The standard Attention op (opsets 23 and 24): scaled dot-product attention with multi-head,
 * grouped-query (kv heads dividing q heads: q head h reads kv head h / (Hq / Hkv)) and
 * multi-query forms, a KV cache and masks.
 *
 *   Attention(Q, K, V, [attn_mask], [past_key], [past_value], [nonpad_kv_seqlen]) ->
 *     Y, [present_key], [present_value], [qk_matmul_output]
 *   4-D: Q (B, Hq, Sq, D), K (B, Hkv, Skv, D), V (B, Hkv, Skv, Dv), Y (B, Hq, Sq, Dv)
 *   3-D: Q (B, Sq, Hq*D), K (B, Skv, Hkv*D), V (B, Skv, Hkv*Dv), Y (B, Sq, Hq*Dv), with the
 *        q_num_heads and kv_num_heads attributes
 *   present_key = concat(past_key, K) along the sequence (B, Hkv, St, D), present_value alike
 *   S = scale * Q K^T (scale defaults to 1/sqrt(D)); S = softcap * tanh(S / softcap) when
 *   softcap > 0; S += bias; Y = softmax(S) V.
 * The bias: attn_mask (bool: false removes a key; float: added), broadcast to (B, Hq, Sq, St),
 * a last dim shorter than St padded with removed keys; is_causal removes key j from query i
 * when j > i + offset (offset: the past length, or nonpad_kv_seqlen[b] - Sq with no past, else
 * 0); nonpad_kv_seqlen[b] removes keys from that position on.
 *
 * float32 runs on ai.kiln::Attention's streaming-softmax kernel (src/ops/fused_attention.c,
 * kiln_attention_run_views): Q, K, V and Y are read and written in place through strided
 * 5-D views (B, Hkv, G, S, D) with K and V broadcast over the G = Hq / Hkv query heads of a
 * group, so no head is copied or repeated; causality alone is the kernel's (the key blocks
 * after a query tile's last visible key are never visited), any other bias is made as a float
 * tensor (Bb, Hb, Sq, St) and key blocks it masks out are skipped. A wanted qk_matmul_output
 * and other float types (float16, bfloat16, double) run the reference below, in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "ops/fused.h"
#include "ops/op.h"

enum { IN_Q, IN_K, IN_V, IN_MASK, IN_PK, IN_PV, IN_NONPAD };

/* The geometry of one node execution. */
typedef struct sdpa {
  int rank;                  /* 3 or 4 */
  int64_t b, hq, hkv, g, sq, skv, sp, st, d, dv;
  int64_t qs[4], ks[4], vs[4]; /* strides (batch, head, seq, elem) of Q and of the new K, V */
} sdpa;

/* Strides (batch, head, seq, elem) of a (B, H, S, X) tensor or of a (B, S, H*X) one. */
static void bhsx_strides(int rank, int64_t h, int64_t s, int64_t x, int64_t *st) {
  st[3] = 1;
  if (rank == 4) {
    st[2] = x, st[1] = s * x, st[0] = h * s * x;
  } else {
    st[1] = x, st[2] = h * x, st[0] = s * h * x;
  }
}

static kiln_code sdpa_shape(kiln_kctx *c, sdpa *a) {
  const kiln_tensor *q = kiln_in(c, IN_Q), *k = kiln_in(c, IN_K), *v = kiln_in(c, IN_V), *pk = kiln_in(c, IN_PK),
                    *pv = kiln_in(c, IN_PV);
  a->rank = q->rank;
  if ((q->rank != 3 && q->rank != 4) || k->rank != q->rank || v->rank != q->rank)
    return kiln_kfail(c, "Q, K and V must all be 3-D or all 4-D");
  int64_t qn = kiln_attr_int(c->node, "q_num_heads", 0), kn = kiln_attr_int(c->node, "kv_num_heads", 0);
  a->b = q->dims[0];
  if (q->rank == 4) {
    a->hq = q->dims[1], a->sq = q->dims[2], a->d = q->dims[3];
    a->hkv = k->dims[1], a->skv = k->dims[2], a->dv = v->dims[3];
    if (k->dims[3] != a->d || v->dims[1] != a->hkv || v->dims[2] != a->skv)
      return kiln_kfail(c, "K (B, Hkv, Skv, %lld) and V (B, Hkv, Skv, Dv) do not line up with Q", (long long)a->d);
  } else {
    if (qn <= 0 || kn <= 0) return kiln_kfail(c, "3-D inputs need the q_num_heads and kv_num_heads attributes");
    if (q->dims[2] % qn || k->dims[2] % kn || v->dims[2] % kn)
      return kiln_kfail(c, "the hidden sizes are not multiples of the head counts");
    a->hq = qn, a->sq = q->dims[1], a->d = q->dims[2] / qn;
    a->hkv = kn, a->skv = k->dims[1], a->dv = v->dims[2] / kn;
    if (k->dims[2] / kn != a->d || v->dims[1] != a->skv) return kiln_kfail(c, "K and V do not line up with Q");
  }
  if (k->dims[0] != a->b || v->dims[0] != a->b) return kiln_kfail(c, "Q, K and V differ in batch size");
  if (a->hkv <= 0 || a->hq % a->hkv)
    return kiln_kfail(c, "q heads (%lld) must be a multiple of kv heads (%lld)", (long long)a->hq, (long long)a->hkv);
  a->g = a->hq / a->hkv;
  a->sp = 0;
  if (!pk != !pv) return kiln_kfail(c, "past_key and past_value come together");
  if (pk) {
    if (pk->rank != 4 || pv->rank != 4 || pk->dims[0] != a->b || pk->dims[1] != a->hkv || pk->dims[3] != a->d ||
        pv->dims[0] != a->b || pv->dims[1] != a->hkv || pv->dims[2] != pk->dims[2] || pv->dims[3] != a->dv)
      return kiln_kfail(c, "past_key / past_value must be (B, Hkv, Spast, D) / (B, Hkv, Spast, Dv)");
    a->sp = pk->dims[2];
  }
  a->st = a->sp + a->skv;
  bhsx_strides(a->rank, a->hq, a->sq, a->d, a->qs);
  bhsx_strides(a->rank, a->hkv, a->skv, a->d, a->ks);
  bhsx_strides(a->rank, a->hkv, a->skv, a->dv, a->vs);
  return KILN_OK;
}

/* present = concat(past, new) as (B, Hkv, St, X) into dst (any float type: bytes). */
static void concat_cache(const sdpa *a, const kiln_tensor *past, const kiln_tensor *nw, const int64_t *ns, int64_t x,
                         kiln_tensor *dst) {
  size_t esz = kiln_dtype_size(dst->dtype);
  char *o = dst->data;
  for (int64_t b = 0; b < a->b; b++)
    for (int64_t h = 0; h < a->hkv; h++) {
      if (past)
        memcpy(o, (const char *)past->data + (size_t)((b * a->hkv + h) * a->sp * x) * esz, (size_t)(a->sp * x) * esz);
      o += (size_t)(a->sp * x) * esz;
      for (int64_t s = 0; s < a->skv; s++, o += (size_t)x * esz)
        memcpy(o, (const char *)nw->data + (size_t)(b * ns[0] + h * ns[1] + s * ns[2]) * esz, (size_t)x * esz);
    }
}

/* The additive bias (Bb, Hb, Sq, St) of mask, causality and nonpad_kv_seqlen, or NULL with
 * *none set when there is none (NULL with c->err set on error). */
static float *make_bias(kiln_kctx *c, const sdpa *a, int64_t *bb, int64_t *hb, bool *none) {
  const kiln_tensor *m = kiln_in(c, IN_MASK), *np = kiln_in(c, IN_NONPAD);
  bool causal = kiln_attr_int(c->node, "is_causal", 0) != 0;
  /* causality alone is the kernel's (kiln_attention_run_views), without a tensor, in float32 */
  if (causal && !m && !np && kiln_in(c, IN_Q)->dtype == KILN_FLOAT && !kiln_out_used(c, 3)) causal = false;
  *none = !m && !np && !causal;
  if (*none) return NULL;
  int64_t md[4] = {1, 1, 1, 1};
  if (m) {
    if (m->rank > 4 || m->rank < 1) return kiln_kfail(c, "attn_mask must have rank 1 to 4"), NULL;
    if (m->dtype != KILN_BOOL && m->dtype != kiln_in(c, IN_Q)->dtype)
      return kiln_kfail(c, "attn_mask must be bool or Q's type, not %s", kiln_dtype_name(m->dtype)), NULL;
    memcpy(md + 4 - m->rank, m->dims, (size_t)m->rank * sizeof *md);
    if ((md[0] != 1 && md[0] != a->b) || (md[1] != 1 && md[1] != a->hq) || (md[2] != 1 && md[2] != a->sq) ||
        md[3] > a->st || md[3] < 1)
      return kiln_kfail(c, "attn_mask does not broadcast to (B, Hq, Sq, St) = (%lld, %lld, %lld, %lld)",
                        (long long)a->b, (long long)a->hq, (long long)a->sq, (long long)a->st), NULL;
  }
  if (np && (!kiln_dtype_is_int(np->dtype) || np->numel != a->b))
    return kiln_kfail(c, "nonpad_kv_seqlen must hold one integer per batch element"), NULL;
  *bb = md[0] > 1 || np ? a->b : 1;
  *hb = md[1];
  int64_t plane = a->sq * a->st;
  int64_t nbias = *bb * *hb * plane;
  float *bias = malloc((size_t)(nbias > 0 ? nbias : 1) * sizeof *bias);
  if (!bias) return kiln_kfail(c, "out of memory for the attention bias"), NULL;
  for (int64_t b = 0; b < *bb; b++)
    for (int64_t h = 0; h < *hb; h++)
      for (int64_t i = 0; i < a->sq; i++) {
        float *row = bias + ((b * *hb + h) * a->sq + i) * a->st;
        int64_t lim = np ? kiln_get_i64(np, b) : a->st; /* keys from lim on are padding */
        int64_t off = a->sp ? a->sp : np ? lim - a->sq : 0;
        for (int64_t j = 0; j < a->st; j++) {
          float v = 0.0f;
          if (m) {
            if (j >= md[3]) {
              v = -INFINITY;
            } else {
              int64_t mi = (((md[0] > 1 ? b : 0) * md[1] + (md[1] > 1 ? h : 0)) * md[2] + (md[2] > 1 ? i : 0)) * md[3] + j;
              v = m->dtype == KILN_BOOL ? (((const uint8_t *)m->data)[mi] ? 0.0f : -INFINITY) : (float)kiln_load_f64(m, mi);
            }
          }
          if ((causal && j > i + off) || j >= lim) v = -INFINITY;
          row[j] = v;
        }
      }
  return bias;
}

/* ---- float32: the streaming kernel ---- */

/* view (B, Hkv, G, S, X) of a (batch, head, seq, elem) strided tensor read per q head (q_like:
 * its heads are Hkv * G) or shared by the G heads of a group (stride 0) */
static void view5(view *v, const sdpa *a, const int64_t *st, int64_t s, int64_t x, bool q_like, bool transposed) {
  v->rank = 5;
  int64_t d[5] = {a->b, a->hkv, q_like ? a->g : 1, s, x};
  int64_t t[5] = {st[0], q_like ? a->g * st[1] : st[1], q_like ? st[1] : 0, st[2], st[3]};
  if (transposed) { /* (..., X, S): K as the second operand of Q K^T */
    int64_t dd = d[3], tt = t[3];
    d[3] = d[4], t[3] = t[4], d[4] = dd, t[4] = tt;
  }
  memcpy(v->dims, d, sizeof d);
  memcpy(v->stride, t, sizeof t);
}

static kiln_code run_stream(kiln_kctx *c, const sdpa *a, const float *k, const int64_t *kst, const float *v,
                            const int64_t *vst, const float *bias, int64_t bb, int64_t hb, kiln_tensor *y) {
  attn_plan p;
  memset(&p, 0, sizeof p);
  int64_t ost[4];
  bhsx_strides(a->rank, a->hq, a->sq, a->dv, ost);
  view5(&p.q, a, a->qs, a->sq, a->d, true, false);
  view5(&p.k, a, kst, a->st, a->d, false, true);
  view5(&p.v, a, vst, a->st, a->dv, false, false);
  view5(&p.o, a, ost, a->sq, a->dv, true, false);
  p.in_data[0] = kiln_in(c, IN_Q)->data;
  p.in_data[1] = k;
  p.in_data[2] = v;
  if (bias) {
    int64_t bst[4] = {bb > 1 ? hb * a->sq * a->st : 0, hb > 1 ? a->sq * a->st : 0, a->st, 1};
    sdpa ba = *a;
    ba.b = bb;
    view5(&p.m, &ba, bst, a->sq, a->st, hb > 1, false);
    if (hb == 1) p.m.dims[1] = 1, p.m.stride[1] = 0;
    p.has_mask = true;
  }
  p.scale = kiln_attr_float(c->node, "scale", 1.0f / sqrtf((float)a->d));
  p.softcap = kiln_attr_float(c->node, "softcap", 0.0f);
  p.fill = -INFINITY;
  p.causal = !bias && kiln_attr_int(c->node, "is_causal", 0) != 0;
  p.causal_off = a->sp;
  return kiln_attention_run_views(c, &p, bias, y);
}

/* ---- the reference: every float type, and the qk_matmul_output ---- */

typedef struct ref_io {
  const kiln_tensor *q, *k, *v; /* k, v: (B, Hkv, St, X) contiguous or the new ones */
  const int64_t *kst, *vst;
  const float *bias;
  int64_t bb, hb;
  kiln_tensor *y, *qk;
  int mode;
} ref_io;

static void ref_row(const sdpa *a, const ref_io *r, int64_t b, int64_t h, int64_t i, double scale, double cap, double *s) {
  int64_t kh = h / a->g;
  for (int64_t j = 0; j < a->st; j++) {
    double dot = 0;
    for (int64_t d = 0; d < a->d; d++)
      dot += kiln_load_f64(r->q, b * a->qs[0] + h * a->qs[1] + i * a->qs[2] + d) *
             kiln_load_f64(r->k, b * r->kst[0] + kh * r->kst[1] + j * r->kst[2] + d);
    s[j] = dot * scale;
  }
  if (r->qk && r->mode == 0) /* mode 0: the scaled product; 1: after the softcap; 2: after the bias */
    for (int64_t j = 0; j < a->st; j++) kiln_store_f64(r->qk, ((b * a->hq + h) * a->sq + i) * a->st + j, s[j]);
  if (cap > 0)
    for (int64_t j = 0; j < a->st; j++) s[j] = cap * tanh(s[j] / cap);
  if (r->qk && r->mode == 1)
    for (int64_t j = 0; j < a->st; j++) kiln_store_f64(r->qk, ((b * a->hq + h) * a->sq + i) * a->st + j, s[j]);
  if (r->bias) {
    const float *br = r->bias + (((r->bb > 1 ? b : 0) * r->hb + (r->hb > 1 ? h : 0)) * a->sq + i) * a->st;
    for (int64_t j = 0; j < a->st; j++) s[j] += br[j];
  }
  if (r->qk && r->mode == 2)
    for (int64_t j = 0; j < a->st; j++) kiln_store_f64(r->qk, ((b * a->hq + h) * a->sq + i) * a->st + j, s[j]);
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < a->st; j++) mx = s[j] > mx ? s[j] : mx;
  for (int64_t j = 0; j < a->st; j++) sum += s[j] = exp(s[j] - mx);
  for (int64_t j = 0; j < a->st; j++) s[j] /= sum;
  if (r->qk && r->mode == 3)
    for (int64_t j = 0; j < a->st; j++) kiln_store_f64(r->qk, ((b * a->hq + h) * a->sq + i) * a->st + j, s[j]);
  int64_t ost[4];
  bhsx_strides(a->rank, a->hq, a->sq, a->dv, ost);
  for (int64_t e = 0; e < a->dv; e++) {
    double acc = 0;
    for (int64_t j = 0; j < a->st; j++) acc += s[j] * kiln_load_f64(r->v, b * r->vst[0] + kh * r->vst[1] + j * r->vst[2] + e);
    kiln_store_f64(r->y, b * ost[0] + h * ost[1] + i * ost[2] + e, acc);
  }
}

static kiln_code run_reference(kiln_kctx *c, const sdpa *a, const ref_io *r) {
  double *s = malloc((size_t)(a->st ? a->st : 1) * sizeof *s);
  if (!s) return kiln_kfail(c, "out of memory");
  double scale = kiln_attr_float(c->node, "scale", (float)(1.0 / sqrt((double)a->d)));
  double cap = kiln_attr_float(c->node, "softcap", 0.0f);
  for (int64_t b = 0; b < a->b; b++)
    for (int64_t h = 0; h < a->hq; h++)
      for (int64_t i = 0; i < a->sq; i++) ref_row(a, r, b, h, i, scale, cap, s);
  free(s);
  return KILN_OK;
}

/* ---- the op ---- */

static kiln_code sdpa_exec(kiln_kctx *c, const sdpa *a, kiln_tensor *pk, kiln_tensor *pv, float **bias_out) {
  const kiln_tensor *q = kiln_in(c, IN_Q);
  int64_t bb = 1, hb = 1;
  bool none;
  float *bias = make_bias(c, a, &bb, &hb, &none);
  *bias_out = bias;
  if (!bias && !none) return c->err->code;
  int64_t yd[4] = {a->b, a->hq, a->sq, a->dv}, y3[3] = {a->b, a->sq, a->hq * a->dv};
  kiln_tensor *y = a->rank == 4 ? kiln_out_uninit(c, 0, q->dtype, 4, yd) : kiln_out_uninit(c, 0, q->dtype, 3, y3);
  if (!y) return c->err->code;
  /* K and V as read: the present caches when they exist, else the inputs themselves */
  int64_t pks[4] = {a->hkv * a->st * a->d, a->st * a->d, a->d, 1}, pvs[4] = {a->hkv * a->st * a->dv, a->st * a->dv, a->dv, 1};
  const kiln_tensor *kk = pk ? pk : kiln_in(c, IN_K), *vv = pv ? pv : kiln_in(c, IN_V);
  const int64_t *kst = pk ? pks : a->ks, *vst = pv ? pvs : a->vs;
  kiln_tensor *qk = NULL;
  if (kiln_out_used(c, 3)) {
    int64_t qd[4] = {a->b, a->hq, a->sq, a->st};
    if (!(qk = kiln_out_uninit(c, 3, q->dtype, 4, qd))) return c->err->code;
  }
  int mode = (int)kiln_attr_int(c->node, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return kiln_kfail(c, "qk_matmul_output_mode must be 0 to 3, not %d", mode);
  if (q->dtype == KILN_FLOAT && !qk)
    return run_stream(c, a, kk->data, kst, vv->data, vst, bias, bb, hb, y);
  ref_io r = {q, kk, vv, kst, vst, bias, bb, hb, y, qk, mode};
  return run_reference(c, a, &r);
}

static kiln_code sdpa_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *q = kiln_in(c, IN_Q);
  if (!kiln_dtype_is_float(q->dtype)) return kiln_kfail(c, "Q must be a float tensor, not %s", kiln_dtype_name(q->dtype));
  for (size_t i = 1; i < 6; i++)
    if (i != IN_MASK && kiln_in(c, i) && kiln_in(c, i)->dtype != q->dtype)
      return kiln_kfail(c, "input %zu must have Q's type %s", i, kiln_dtype_name(q->dtype));
  sdpa a;
  if ((rc = sdpa_shape(c, &a))) return rc;
  /* the caches: outputs when wanted, else work copies when there is a past to join */
  bool want_k = kiln_out_used(c, 1), want_v = kiln_out_used(c, 2), past = kiln_in(c, IN_PK) != NULL;
  int64_t kd[4] = {a.b, a.hkv, a.st, a.d}, vd[4] = {a.b, a.hkv, a.st, a.dv};
  kiln_tensor *pk = NULL, *pv = NULL, *tk = NULL, *tv = NULL;
  if (want_k) pk = kiln_out_uninit(c, 1, q->dtype, 4, kd);
  else if (past) pk = tk = kiln_tensor_new_uninit(q->dtype, 4, kd, c->err);
  if (want_v) pv = kiln_out_uninit(c, 2, q->dtype, 4, vd);
  else if (past) pv = tv = kiln_tensor_new_uninit(q->dtype, 4, vd, c->err);
  float *bias = NULL;
  if ((want_k || past) && !pk) rc = c->err->code ? c->err->code : KILN_ERR_NOMEM;
  else if ((want_v || past) && !pv) rc = c->err->code ? c->err->code : KILN_ERR_NOMEM;
  if (!rc) {
    if (pk) concat_cache(&a, kiln_in(c, IN_PK), kiln_in(c, IN_K), a.ks, a.d, pk);
    if (pv) concat_cache(&a, kiln_in(c, IN_PV), kiln_in(c, IN_V), a.vs, a.dv, pv);
    rc = sdpa_exec(c, &a, pk, pv, &bias);
  }
  free(bias);
  kiln_tensor_free(tk);
  kiln_tensor_free(tv);
  return rc;
}

/* The profiler's count: 2 * B * Hq * Sq * St * (D + Dv) (the two products). */
static void sdpa_cost(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *q = kiln_in(c, IN_Q), *k = kiln_in(c, IN_K), *v = kiln_in(c, IN_V), *pk = kiln_in(c, IN_PK);
  if (!q || !k || !v || q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4)) return;
  double b = (double)q->dims[0], hq, sq, d, st, dv, past = pk && pk->rank == 4 ? (double)pk->dims[2] : 0;
  if (q->rank == 4) {
    hq = (double)q->dims[1], sq = (double)q->dims[2], d = (double)q->dims[3];
    st = past + (double)k->dims[2], dv = (double)v->dims[3];
  } else {
    int64_t qn = kiln_attr_int(c->node, "q_num_heads", 0), kn = kiln_attr_int(c->node, "kv_num_heads", 0);
    if (qn <= 0 || kn <= 0) return;
    hq = (double)qn, sq = (double)q->dims[1], d = (double)q->dims[2] / (double)qn;
    st = past + (double)k->dims[1], dv = (double)v->dims[2] / (double)kn;
  }
  *flops = 2.0 * b * hq * sq * st * (d + dv);
}

/* ---- shape function ---- */

static int64_t idim(const kiln_type *t, int i) { return t && t->rank > i ? t->dims[i] : -1; }

static kiln_code sdpa_infer(kiln_ictx *c) {
  const kiln_type *q = kiln_itype(c, IN_Q), *k = kiln_itype(c, IN_K), *v = kiln_itype(c, IN_V),
                  *pk = kiln_itype(c, IN_PK);
  kiln_dtype dt = kiln_idtype(c, IN_Q);
  if (!q || !k || !v || q->rank < 0 || k->rank < 0 || v->rank < 0) {
    kiln_infer_tensor(c, 0, dt, -1, NULL);
    return KILN_OK;
  }
  if ((q->rank != 3 && q->rank != 4) || k->rank != q->rank || v->rank != q->rank)
    return kiln_ifail(c, "Q, K and V must all be 3-D or all 4-D");
  int64_t qn = kiln_attr_int(c->node, "q_num_heads", 0), kn = kiln_attr_int(c->node, "kv_num_heads", 0);
  int64_t b = idim(q, 0), hq, sq, d, hkv, skv, dv;
  if (q->rank == 4) {
    hq = idim(q, 1), sq = idim(q, 2), d = idim(q, 3), hkv = idim(k, 1), skv = idim(k, 2), dv = idim(v, 3);
    int64_t yd[4] = {b, hq, sq, dv};
    kiln_infer_tensor(c, 0, dt, 4, yd);
  } else {
    if (qn <= 0 || kn <= 0) return kiln_ifail(c, "3-D inputs need the q_num_heads and kv_num_heads attributes");
    hq = qn, sq = idim(q, 1), hkv = kn, skv = idim(k, 1);
    d = idim(q, 2) < 0 ? -1 : idim(q, 2) / qn;
    dv = idim(v, 2) < 0 ? -1 : idim(v, 2) / kn;
    int64_t yd[3] = {b, sq, idim(v, 2) < 0 ? -1 : qn * dv};
    kiln_infer_tensor(c, 0, dt, 3, yd);
  }
  int64_t sp = pk ? idim(pk, 2) : 0, st = sp < 0 || skv < 0 ? -1 : sp + skv;
  int64_t kd[4] = {b, hkv, st, d}, vd[4] = {b, hkv, st, dv}, qd[4] = {b, hq, sq, st};
  if (c->n_out > 1) kiln_infer_tensor(c, 1, dt, 4, kd);
  if (c->n_out > 2) kiln_infer_tensor(c, 2, dt, 4, vd);
  if (c->n_out > 3) kiln_infer_tensor(c, 3, dt, 4, qd);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_attention[] = {
    {.domain = "", .name = "Attention", .since = 23, .inputs = {3, 6}, .outputs = {1, 4},
     .infer = sdpa_infer, .run = sdpa_run, .cost = sdpa_cost},
    {.domain = "", .name = "Attention", .since = 24, .inputs = {3, 7}, .outputs = {1, 4},
     .infer = sdpa_infer, .run = sdpa_run, .cost = sdpa_cost},
    {0},
};
