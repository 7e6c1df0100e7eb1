/* Float32 2-D convolution through kernels/conv2d_f32 for Conv, FusedConv and FusedConvMaxPool:
 * the forms of a constant W the kernel takes (Winograd-transformed, packed W^T, W split for AMX),
 * made once and kept in the node's cache, and the entry points with the fused epilogue
 * (src/ops/fused.h). conv.c's general path handles every other case and reports bad inputs. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv2d_f32.h"
#include "kernels/gemm.h"
#include "kernels/gemm_amx.h"
#include "kernels/winograd_f32.h"
#include "ops/fused.h"
#include "ops/op.h"

/* Winograd-transformed constant weights, kept in the node's cache. */
typedef struct wino_weights {
  const void *source; /* the initializer's data they were made from */
  float u[];          /* kiln_wino_f32_weights_size_tile(e, m, c) floats */
} wino_weights;

/* The transformed weights of this node when W is an initializer (or folded constant): made on
 * first use and published in the node's cache (kiln_cache_publish); NULL otherwise (W
 * computed or fed, no memory, the cache holding another kind). */
static const float *node_wino_weights(kiln_kctx *c, const kiln_tensor *w, const kiln_conv2d_f32_params *p,
                                      int isa) {
  if (!c->state || !kiln_in_const(c, 1, w)) return NULL;
  wino_weights *ww = kiln_cache_get(c);
  if (!ww) {
    int e = kiln_wino_f32_tile(p); /* the weights say which; a later shape may run them too */
    wino_weights *mine =
        kiln_malloc_weights(sizeof *mine + sizeof(float) * (size_t)kiln_wino_f32_weights_size_tile(e, p->m, p->c));
    if (!mine) return NULL;
    mine->source = w->data;
    kiln_wino_f32_weights_tile(e, kiln_wino_f32_trans(p, isa), w->data, p->m, p->c, mine->u);
    ww = kiln_cache_publish(c, mine, free);
  }
  return ww && ww->source == w->data ? ww->u : NULL;
}

/* Packed forms of W kept in the node's cache like the Winograd weights: W^T for the
 * transposed GEMM of small output planes (kiln_conv2d_f32_uses_transposed) or W split for the
 * AMX GEMM (kiln_conv2d_f32_uses_amx). The first field is a tag naming the kind, which no
 * weight pointer can equal: node_wino_weights, which compares the state's first pointer with
 * W, then takes the state as someone else's, and each kind takes only its own. */
typedef struct weight_pack {
  const void *tag;    /* &g_pack_wt or &g_pack_amx */
  const void *source; /* the initializer's data it was packed from */
  void *pack;
  void (*pack_free)(void *);
} weight_pack;

static const char g_pack_wt = 0, g_pack_amx = 0;

static void weight_pack_free(void *v) {
  weight_pack *wp = v;
  wp->pack_free(wp->pack);
  free(wp);
}

typedef void *(*pack_fn)(const kiln_tensor *w, const kiln_conv2d_f32_params *p, int isa);

/* The node's pack of kind `tag` when W is an initializer: made by make() on first use and
 * published with a compare-and-swap (a losing thread frees its own); NULL otherwise (W
 * computed or fed, no memory, the cache holding another kind). */
static void *node_weight_pack(kiln_kctx *c, const kiln_tensor *w, const kiln_conv2d_f32_params *p,
                              int isa, const void *tag, pack_fn make, void (*pack_free)(void *)) {
  if (!c->state || !kiln_in_const(c, 1, w)) return NULL;
  weight_pack *wp = kiln_cache_get(c);
  if (!wp) {
    weight_pack *mine = kiln_malloc(sizeof *mine);
    if (!mine) return NULL;
    *mine = (weight_pack){tag, w->data, make(w, p, isa), pack_free};
    if (!mine->pack) {
      free(mine);
      return NULL;
    }
    wp = kiln_cache_publish(c, mine, weight_pack_free);
  }
  return wp && wp->tag == tag && wp->source == w->data ? wp->pack : NULL;
}

static void *make_wt(const kiln_tensor *w, const kiln_conv2d_f32_params *p, int isa) {
  size_t kk = (size_t)(p->c * p->kh * p->kw);
  kiln_gemm_packed_b *pb = NULL;
  return kiln_gemm_pack_b(isa, 1, kk, (size_t)p->m, w->data, kk, &pb, NULL) == KILN_OK ? pb : NULL;
}
static void free_wt(void *pb) { kiln_gemm_packed_b_free(pb); }

static void *make_amx(const kiln_tensor *w, const kiln_conv2d_f32_params *p, int isa) {
  (void)isa;
  size_t kk = (size_t)(p->c * p->kh * p->kw);
  return kiln_amx_pack_w(w->data, (size_t)p->m, kk, kk);
}
static void free_amx(void *wa) { kiln_amx_w_free(wa); }

/* The packed W^T of this node at ISA level isa, or NULL (see node_weight_pack). */
static const kiln_gemm_packed_b *node_packed_wt(kiln_kctx *c, const kiln_tensor *w,
                                                const kiln_conv2d_f32_params *p, int isa) {
  const kiln_gemm_packed_b *pb = node_weight_pack(c, w, p, isa, &g_pack_wt, make_wt, free_wt);
  return pb && kiln_gemm_packed_b_isa(pb) == isa ? pb : NULL;
}

/* W split for the AMX GEMM, or NULL (see node_weight_pack). */
static const kiln_amx_w *node_amx_w(kiln_kctx *c, const kiln_tensor *w, const kiln_conv2d_f32_params *p) {
  return node_weight_pack(c, w, p, 0, &g_pack_amx, make_amx, free_amx);
}

/* The node's cached forms of W that a convolution with parameters p takes (Winograd weights,
 * W split for AMX, W^T), made on first use; each NULL when not taken or not made. */
static void conv2d_weights(kiln_kctx *c, const kiln_tensor *w, const kiln_conv2d_f32_params *p,
                           int isa, const float **wu, const kiln_amx_w **wa,
                           const kiln_gemm_packed_b **wt) {
  *wu = kiln_conv2d_f32_uses_winograd(p, 1) ? node_wino_weights(c, w, p, isa) : NULL;
  *wa = kiln_kamx(c) && kiln_conv2d_f32_uses_amx(p, isa) ? node_amx_w(c, w, p) : NULL;
  *wt = !*wa && kiln_conv2d_f32_uses_transposed(p, isa) ? node_packed_wt(c, w, p, isa) : NULL;
}

/* float32 2-D Conv through kernels/conv2d_f32 with bias, residual and activation fused.
 * Returns KILN_ERR_UNSUPPORTED, with the node not failed and no output stored, when that path
 * does not apply (other types or ranks, a residual of another shape); the caller then takes
 * the general path, which also reports invalid inputs. */
kiln_code kiln_conv2d_f32_run(kiln_kctx *c, const kiln_tensor *residual, const kiln_act *act) {
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1), *b = kiln_in(c, 2);
  kiln_conv2d_f32_params p;
  kiln_code rc = kiln_conv2d_f32_params_of(c, x, w, b, &p);
  if (rc) return rc;
  int64_t dims[4] = {p.n, p.m, p.oh, p.ow};
  if (residual) {
    if (residual->kind != KILN_KIND_TENSOR || residual->dtype != KILN_FLOAT ||
        residual->rank != 4 || memcmp(residual->dims, dims, sizeof dims))
      return KILN_ERR_UNSUPPORTED;
  }
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, 4, dims); /* the kernel writes every element */
  if (!y) return KILN_ERR_NOMEM;
  kiln_conv2d_f32_args a = {.x = x->data, .w = w->data, .y = y->data,
                            .ep = {.bias = b ? (const float *)b->data : NULL,
                                   .residual = residual ? (const float *)residual->data : NULL,
                                   .act = act ? *act : (kiln_act){KILN_ACT_NONE, 0, 0}}};
  int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  conv2d_weights(c, w, &p, isa, &a.wu, &a.wa, &a.wt);
  rc = kiln_conv2d_f32(kiln_kpool(c), isa, &p, &a);
  if (rc == KILN_ERR_NOMEM) return kiln_kfail(c, "out of memory for the convolution");
  if (rc) return kiln_kfail(c, "convolution failed (code %d)", (int)rc);
  return KILN_OK;
}

bool kiln_fused_pool_params(const kiln_node *n, int64_t oh, int64_t ow, kiln_pool2d_params *q) {
  size_t nk, ns, np;
  const int64_t *k = kiln_attr_ints(n, "pool_kernel_shape", &nk), *s = kiln_attr_ints(n, "pool_strides", &ns);
  const int64_t *pd = kiln_attr_ints(n, "pool_pads", &np);
  if (nk != 2 || (s && ns != 2) || (pd && np != 4)) return false;
  bool ceil_mode = kiln_attr_int(n, "pool_ceil_mode", 0) != 0;
  int64_t st[2] = {s ? s[0] : 1, s ? s[1] : 1}, p[4] = {0, 0, 0, 0};
  if (pd) memcpy(p, pd, sizeof p);
  *q = (kiln_pool2d_params){k[0], k[1], st[0], st[1], p[0], p[1],
                            kiln_pool_out_dim(oh, k[0], st[0], p[0], p[2], ceil_mode),
                            kiln_pool_out_dim(ow, k[1], st[1], p[1], p[3], ceil_mode)};
  return true;
}

kiln_code kiln_conv2d_f32_maxpool_run(kiln_kctx *c, const kiln_act *act) {
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1), *b = kiln_in(c, 2);
  kiln_conv2d_f32_params p;
  kiln_code rc = kiln_conv2d_f32_params_of(c, x, w, b, &p);
  if (rc == KILN_ERR_UNSUPPORTED) return kiln_kunsup(c, "convolution then max pooling in one pass: float32 2-D only");
  if (rc) return rc;
  kiln_pool2d_params q;
  if (!kiln_fused_pool_params(c->node, p.oh, p.ow, &q))
    return kiln_kfail(c, "pool_kernel_shape must have 2 values, pool_strides 2, pool_pads 4");
  int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  if (!kiln_conv2d_f32_maxpool_ok(&p, &q, isa))
    return kiln_kunsup(c, "no one-pass kernel for this convolution and pooling here");
  int64_t dims[4] = {p.n, p.m, q.oh, q.ow};
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, 4, dims); /* the kernel writes every element */
  if (!y) return KILN_ERR_NOMEM;
  kiln_conv2d_f32_epilogue ep = {b ? (const float *)b->data : NULL, NULL, *act};
  rc = kiln_conv2d_f32_maxpool(kiln_kpool(c), isa, &p, x->data, w->data, &ep, &q, y->data);
  if (rc == KILN_ERR_NOMEM) return kiln_kfail(c, "out of memory for the convolution");
  return rc ? kiln_kfail(c, "convolution with max pooling failed (code %d)", (int)rc) : KILN_OK;
}

kiln_code kiln_conv2d_f32_prepare(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1), *b = kiln_in(c, 2);
  kiln_conv2d_f32_params p;
  /* the batch may be unknown (the choice of form does not depend on it), the rest may not */
  if (!x || x->rank != 4 || x->dims[1] < 0 || x->dims[2] < 0 || x->dims[3] < 0) return KILN_ERR_UNSUPPORTED;
  kiln_tensor x1 = *x;
  x1.dims[0] = 1;
  if (!kiln_in_const(c, 1, w) || kiln_conv2d_f32_params_of(c, &x1, w, b, &p)) return KILN_ERR_UNSUPPORTED;
  const float *wu;
  const kiln_amx_w *wa;
  const kiln_gemm_packed_b *wt;
  conv2d_weights(c, w, &p, kiln_isa_resolve(KILN_ISA_AUTO), &wu, &wa, &wt);
  return wu || wa || wt ? KILN_OK : KILN_ERR_UNSUPPORTED;
}

