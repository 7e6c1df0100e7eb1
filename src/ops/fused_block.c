/* ai.kiln::FusedConvBlock(X, We, [Be], Wd, [Bd], Wp, [Bp], [R]): an inverted residual block
 * (MobileNetV2), the chain it replaced being
 *   Conv 1x1 (We, Be) -> Relu|Clip -> Conv depthwise (Wd, Bd) -> Relu|Clip -> Conv 1x1 (Wp, Bp) [-> Add R]
 * or, the expansion being a network's first layer (MobileNetV2's stem and first block),
 *   Conv KxK of few input channels (We, Be) -> Relu|Clip -> Conv depthwise -> Relu|Clip -> Conv 1x1
 * Attributes: the depthwise Conv's (kernel_shape, strides, pads, dilations, group), its
 * activation (activation, act_alpha, act_beta) and the expansion's (expand_activation,
 * expand_act_alpha, expand_act_beta; for a KxK expansion its expand_strides, expand_pads and
 * expand_dilations). It runs kernels/conv2d_f32's kiln_conv_block_f32: on
 * small planes the expanded and depthwise tensors stay channels-last in scratch instead of
 * going through NCHW (two register-transpose passes each), with We^T and Wp^T packed once, in
 * the node's cache; larger planes go in bands of rows, each thread its own, with We and Wp as
 * they are.
 * Where the kernel does not apply, the node fails and runs its chain (src/opt/fuse_conv.c fuses
 * only where it applies: AVX-512 without AMX, input planes of known size). */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv2d_f32.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "ops/fused.h"
#include "ops/op.h"
#include "ops/registry.h"

enum { IN_X, IN_WE, IN_BE, IN_WD, IN_BD, IN_WP, IN_BP, IN_R };

/* We^T and Wp^T packed for the transposed GEMMs, kept in the node's cache. */
typedef struct block_packs {
  const void *we_src, *wp_src; /* the initializers' data they were packed from */
  kiln_gemm_packed_b *we_t, *wp_t;
} block_packs;

static void block_packs_free(void *v) {
  block_packs *b = v;
  kiln_gemm_packed_b_free(b->we_t);
  kiln_gemm_packed_b_free(b->wp_t);
  free(b);
}

/* The node's packs at ISA level isa when We and Wp are constants: made on first use and
 * published in the cache; NULL otherwise (weights fed, no memory). */
static const block_packs *node_packs(kiln_kctx *c, const kiln_tensor *we, const kiln_tensor *wp, int isa) {
  if (!c->state || !kiln_in_const(c, IN_WE, we) || !kiln_in_const(c, IN_WP, wp)) return NULL;
  block_packs *b = kiln_cache_get(c);
  if (!b) {
    block_packs *mine = kiln_calloc(1, sizeof *mine);
    if (!mine) return NULL;
    size_t ci = (size_t)we->dims[1], ce = (size_t)we->dims[0], m = (size_t)wp->dims[0];
    *mine = (block_packs){we->data, wp->data, NULL, NULL};
    if (kiln_gemm_pack_b(isa, 1, ci, ce, we->data, ci, &mine->we_t, NULL) ||
        kiln_gemm_pack_b(isa, 1, ce, m, wp->data, ce, &mine->wp_t, NULL)) {
      block_packs_free(mine);
      return NULL;
    }
    b = kiln_cache_publish(c, mine, block_packs_free);
  }
  return b && b->we_src == we->data && b->wp_src == wp->data && kiln_gemm_packed_b_isa(b->we_t) == isa ? b : NULL;
}

static bool float_t(const kiln_tensor *t, int rank) {
  return t && t->kind == KILN_KIND_TENSOR && t->dtype == KILN_FLOAT && (rank < 0 || t->rank == rank);
}

/* A bias input: omitted, or n floats. */
static bool bias_ok(const kiln_tensor *b, int64_t n) {
  return !b || b->kind == KILN_KIND_NONE || (float_t(b, -1) && b->numel == n);
}

static const float *bias_of(const kiln_tensor *b) {
  return b && b->kind == KILN_KIND_TENSOR ? (const float *)b->data : NULL;
}

/* A convolution's output size along one axis: input n, kernel k, stride st, dilation di, pads
 * pb and pe; -1 where n is unknown or the geometry is bad or leaves no output (the window
 * size of kiln_pool_out_dim over the dilated kernel's extent). */
static int64_t conv_out(int64_t n, int64_t k, int64_t st, int64_t di, int64_t pb, int64_t pe) {
  return k < 1 || di < 1 || k > ((int64_t)1 << 30) || di > ((int64_t)1 << 30)
             ? -1
             : kiln_pool_out_dim(n, (k - 1) * di + 1, st, pb, pe, false);
}

/* Whether the expansion is larger than 1x1 (We [CE, C, KH, KW]): then *pe is its convolution
 * over an input of dims xd, from the expand_strides, expand_pads and expand_dilations
 * attributes (pe->oh, pe->ow -1 where an input dim is unknown or the attributes are bad). */
static bool expand_geom(const kiln_node *n, const int64_t xd[4], const int64_t wd[4], kiln_conv2d_f32_params *pe) {
  if (wd[2] == 1 && wd[3] == 1) return false;
  size_t ns = 0, np = 0, nd = 0;
  const int64_t *s = kiln_attr_ints(n, "expand_strides", &ns), *p = kiln_attr_ints(n, "expand_pads", &np);
  const int64_t *d = kiln_attr_ints(n, "expand_dilations", &nd);
  bool ok = (!s || ns == 2) && (!p || np == 4) && (!d || nd == 2);
  int64_t st[2] = {s && ns == 2 ? s[0] : 1, s && ns == 2 ? s[1] : 1};
  int64_t di[2] = {d && nd == 2 ? d[0] : 1, d && nd == 2 ? d[1] : 1}, o[2] = {-1, -1};
  for (int i = 0; i < 2 && ok; i++)
    o[i] = conv_out(xd[2 + i], wd[2 + i], st[i], di[i], p && np == 4 ? p[i] : 0, p && np == 4 ? p[i + 2] : 0);
  *pe = (kiln_conv2d_f32_params){xd[0], xd[1], xd[2], xd[3], wd[0], 1, wd[2], wd[3], st[0], st[1], di[0], di[1],
                                 p && np == 4 ? p[0] : 0, p && np == 4 ? p[1] : 0, o[0], o[1], 0, 0};
  return true;
}

/* The depthwise convolution's parameters over the expanded tensor (*pd), the expansion's when
 * it is larger than 1x1 (*pe, and *stem set; else *stem 0), the input and output channels, for
 * input x (X, or its shape); KILN_ERR_UNSUPPORTED, saying why, when the inputs are not a float32
 * block of 1x1 or KxK, depthwise and 1x1 weights; another code, with the node failed, for bad
 * attributes. */
static kiln_code block_params(kiln_kctx *c, const kiln_tensor *x, kiln_conv2d_f32_params *pd,
                              kiln_conv2d_f32_params *pe, int *stem, int64_t *ci, int64_t *m) {
  const kiln_tensor *we = kiln_in(c, IN_WE), *wd = kiln_in(c, IN_WD), *wp = kiln_in(c, IN_WP);
  if (!float_t(x, 4) || !float_t(we, 4) || !float_t(wd, 4) || !float_t(wp, 4))
    return kiln_kunsup(c, "X, We, Wd and Wp must be float32 4-D tensors");
  int64_t ce = we->dims[0];
  if (we->dims[1] != x->dims[1])
    return kiln_kunsup(c, "We must be [CE, %lld, KH, KW] for X's %lld channels", (long long)x->dims[1],
                       (long long)x->dims[1]);
  *stem = expand_geom(c->node, x->dims, we->dims, pe);
  if (*stem && (pe->oh < 1 || pe->ow < 1))
    return kiln_kfail(c, "bad expand_strides, expand_pads or expand_dilations for We's %lldx%lld kernel",
                      (long long)we->dims[2], (long long)we->dims[3]);
  if (wd->dims[0] != ce || wd->dims[1] != 1)
    return kiln_kunsup(c, "Wd must be [%lld, 1, KH, KW]: depthwise over We's %lld channels", (long long)ce, (long long)ce);
  if (wp->dims[1] != ce || wp->dims[2] != 1 || wp->dims[3] != 1)
    return kiln_kunsup(c, "Wp must be [M, %lld, 1, 1]", (long long)ce);
  if (!bias_ok(kiln_in(c, IN_BE), ce) || !bias_ok(kiln_in(c, IN_BD), ce) || !bias_ok(kiln_in(c, IN_BP), wp->dims[0]))
    return kiln_kunsup(c, "Be, Bd and Bp must be float32 with %lld, %lld and %lld values", (long long)ce,
                       (long long)ce, (long long)wp->dims[0]);
  kiln_tensor e = *x; /* the expanded tensor's shape: what the depthwise Conv reads */
  e.dims[1] = ce;
  if (*stem) {
    e.dims[2] = pe->oh;
    e.dims[3] = pe->ow;
  }
  *ci = x->dims[1];
  *m = wp->dims[0];
  const kiln_tensor *bd = kiln_in(c, IN_BD);
  kiln_code rc = kiln_conv2d_f32_params_of(c, &e, wd, bd && bd->kind == KILN_KIND_TENSOR ? bd : NULL, pd);
  return rc == KILN_ERR_UNSUPPORTED ? kiln_kunsup(c, "the depthwise convolution must be 2-D float32") : rc;
}

static kiln_code block_run(kiln_kctx *c) {
  kiln_conv2d_f32_params pd, pe;
  int64_t ci, m;
  int stem;
  kiln_code rc = block_params(c, kiln_in(c, IN_X), &pd, &pe, &stem, &ci, &m);
  if (rc) return rc;
  kiln_act ae, ad;
  if (!kiln_fused_act_named(c->node, "expand_activation", "expand_act_alpha", "expand_act_beta", &ae) ||
      !kiln_fused_act(c->node, &ad))
    return kiln_kfail(c, "unknown activation");
  int isa = kiln_isa_resolve(KILN_ISA_AUTO);
  if (!kiln_conv_block_f32_ok(&pd, ci, m, &ae, &ad, stem ? &pe : NULL, isa))
    return kiln_kunsup(c, "no block kernel for these shapes here");
  const kiln_tensor *r = kiln_in(c, IN_R);
  int64_t dims[4] = {pd.n, m, pd.oh, pd.ow};
  if (r && r->kind == KILN_KIND_NONE) r = NULL;
  if (r && (!float_t(r, 4) || memcmp(r->dims, dims, sizeof dims)))
    return kiln_kunsup(c, "the residual must have the block's output shape");
  /* the packs serve the small planes' transposed GEMMs; a KxK expansion runs in bands only */
  const block_packs *pk = stem ? NULL : node_packs(c, kiln_in(c, IN_WE), kiln_in(c, IN_WP), isa);
  if (!stem && !pk) return kiln_kunsup(c, "the block needs constant 1x1 weights");
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_FLOAT, 4, dims); /* the kernel writes every element */
  if (!y) return KILN_ERR_NOMEM;
  kiln_conv_block_f32_args a = {.x = kiln_in(c, IN_X)->data, .we = kiln_in(c, IN_WE)->data,
                                .wp = kiln_in(c, IN_WP)->data, .we_t = pk ? pk->we_t : NULL,
                                .e_ep = {bias_of(kiln_in(c, IN_BE)), NULL, ae}, .wd = kiln_in(c, IN_WD)->data,
                                .d_ep = {bias_of(kiln_in(c, IN_BD)), NULL, ad}, .wp_t = pk ? pk->wp_t : NULL,
                                .p_ep = {bias_of(kiln_in(c, IN_BP)), r ? (const float *)r->data : NULL,
                                         {KILN_ACT_NONE, 0, 0}},
                                .y = y->data, .e_conv = stem ? &pe : NULL};
  rc = kiln_conv_block_f32(kiln_kpool(c), isa, &pd, ci, m, &a);
  if (rc == KILN_ERR_NOMEM) return kiln_kfail(c, "out of memory for the block");
  if (rc == KILN_ERR_UNSUPPORTED) return kiln_kunsup(c, "no block kernel for these weights here");
  return rc ? kiln_kfail(c, "block failed (code %d)", (int)rc) : KILN_OK;
}

/* The packs a run with these shapes takes, made at session creation. */
static kiln_code block_prepare(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, IN_X);
  if (!x || x->rank != 4 || x->dims[1] < 0 || x->dims[2] < 0 || x->dims[3] < 0) return KILN_ERR_UNSUPPORTED;
  kiln_tensor x1 = *x; /* the batch may be unknown: the packs do not depend on it */
  x1.dims[0] = 1;
  kiln_conv2d_f32_params pd, pe;
  int64_t ci, m;
  int stem;
  if (block_params(c, &x1, &pd, &pe, &stem, &ci, &m) || stem) return KILN_ERR_UNSUPPORTED; /* no packs */
  return node_packs(c, kiln_in(c, IN_WE), kiln_in(c, IN_WP), kiln_isa_resolve(KILN_ISA_AUTO)) ? KILN_OK
                                                                                             : KILN_ERR_UNSUPPORTED;
}

/* Output: [N, M, OH, OW], M from Wp, OH and OW from the expansion (a KxK one), the depthwise
 * kernel and attributes. */
static kiln_code block_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, IN_X), *we = kiln_itype(c, IN_WE), *wd = kiln_itype(c, IN_WD);
  const kiln_type *wp = kiln_itype(c, IN_WP);
  int64_t dims[4] = {-1, -1, -1, -1};
  if (!x || !we || !wd || !wp || x->rank != 4 || we->rank != 4 || wd->rank != 4 || wp->rank != 4)
    return kiln_ifail(c, "X, We, Wd and Wp must be 4-D");
  int64_t ed[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]}; /* the depthwise input plane */
  kiln_conv2d_f32_params pe;
  if (expand_geom(c->node, x->dims, we->dims, &pe)) {
    ed[2] = pe.oh;
    ed[3] = pe.ow;
  }
  size_t ns = 0, np = 0, nd = 0;
  const int64_t *s = kiln_attr_ints(c->node, "strides", &ns), *p = kiln_attr_ints(c->node, "pads", &np);
  const int64_t *d = kiln_attr_ints(c->node, "dilations", &nd);
  if ((s && ns != 2) || (p && np != 4) || (d && nd != 2)) return kiln_ifail(c, "strides, pads and dilations must be 2-D");
  dims[0] = x->dims[0];
  dims[1] = wp->dims[0];
  for (int i = 0; i < 2; i++)
    dims[2 + i] = conv_out(ed[2 + i], wd->dims[2 + i], s ? s[i] : 1, d ? d[i] : 1, p ? p[i] : 0, p ? p[i + 2] : 0);
  kiln_infer_tensor(c, 0, KILN_FLOAT, 4, dims);
  return KILN_OK;
}

/* Flops of the three convolutions: 2 * (EHW * C * etaps * CE + OHW * CE * taps + OHW * CE * M)
 * per image (EHW the expanded plane, etaps the expansion's taps: 1 for 1x1). */
static void block_cost(const kiln_kctx *c, double *flops, double *bytes) {
  (void)bytes;
  const kiln_tensor *x = kiln_in(c, IN_X), *we = kiln_in(c, IN_WE), *wd = kiln_in(c, IN_WD), *wp = kiln_in(c, IN_WP);
  const kiln_tensor *y = c->out[0];
  if (!x || !we || !wd || !wp || !y || x->rank != 4 || we->rank != 4 || wd->rank != 4 || wp->rank != 4 ||
      y->rank != 4)
    return;
  kiln_conv2d_f32_params pe;
  double ehw = expand_geom(c->node, x->dims, we->dims, &pe) ? (double)(pe.oh * pe.ow) : (double)(x->dims[2] * x->dims[3]);
  double n = (double)x->dims[0], ohw = (double)(y->dims[2] * y->dims[3]), etaps = (double)(we->dims[2] * we->dims[3]);
  double ce = (double)wd->dims[0], taps = (double)(wd->dims[2] * wd->dims[3]);
  *flops = 2.0 * n * (ehw * (double)x->dims[1] * etaps * ce + ohw * ce * taps + ohw * ce * (double)wp->dims[0]);
}

const kiln_op_schema kiln_ops_fused_block[] = {
    {.domain = KILN_FUSED_DOMAIN, .name = "FusedConvBlock", .since = 1, .inputs = {1, 8}, .outputs = {1, 1},
     .infer = block_infer, .run = block_run, .prepare = block_prepare, .cost = block_cost, .flow = KILN_FLOW_BATCH},
    {0},
};
