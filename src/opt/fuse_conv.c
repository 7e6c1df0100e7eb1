/* Convolution fusions.
 *  fuse_conv_bn:  Conv -> BatchNormalization with constant weights and statistics: the
 *                 normalisation is folded into new weights and bias; the BN node goes.
 *  fuse_conv_act: Conv [-> Add(residual)] -> activation  =>  ai.kiln::FusedConv. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/edit.h"
#include "kernels/conv2d_f32.h"
#include "ops/fused.h"
#include "opt/fuse.h"

static bool conv_const_weights(const kiln_graph *g, const kiln_node *n) {
  const kiln_tensor *w = kiln_const_input(g, n, 1);
  if (!w || w->dtype != KILN_FLOAT || w->rank < 3) return false;
  return n->n_in < 3 || n->in[2] < 0 || kiln_const_input(g, n, 2);
}

static bool bn_foldable(const kiln_graph *g, const kiln_node *n) {
  for (size_t k = 1; k < n->n_out; k++)
    if (n->out[k] >= 0) return false; /* running statistics wanted: not an inference BN */
  if (n->n_in != 5 || kiln_attr_int(n, "training_mode", 0) || (n->opset < 9 && kiln_attr_int(n, "spatial", 1) != 1))
    return false;
  for (size_t i = 1; i < 5; i++) {
    const kiln_tensor *t = kiln_const_input(g, n, i);
    if (!t || t->dtype != KILN_FLOAT || t->rank != 1) return false;
  }
  return true;
}

/* A new constant value in g holding t (owned by g afterwards). */
static int new_const(kiln_graph *g, const char *base, const char *suffix, kiln_tensor *t) {
  char name[512];
  for (int k = 0;; k++) {
    snprintf(name, sizeof name, "%s_%s%s%d", base, suffix, k ? "_" : "", k);
    if (k == 0) snprintf(name, sizeof name, "%s_%s", base, suffix);
    if (kiln_graph_find(g, name) < 0) break;
  }
  int id = kiln_graph_value(g, name);
  if (id < 0) return -1;
  g->values[id].init = t;
  g->values[id].type.kind = KILN_T_TENSOR;
  g->values[id].type.dtype = t->dtype;
  g->values[id].type.rank = t->rank;
  for (int d = 0; d < t->rank; d++) g->values[id].type.dims[d] = t->dims[d];
  return id;
}

static const kiln_pattern conv_bn = {"conv_bn", 2, {{"Conv", -1, conv_const_weights}, {"BatchNormalization", 0, bn_foldable}}};

static kiln_code fold_bn(kiln_pass_ctx *ctx, kiln_graph *g, const kiln_match *m, bool *dead) {
  kiln_node *conv = &g->nodes[m->nodes[0]], *bn = &g->nodes[m->nodes[1]];
  const kiln_tensor *w = kiln_const_input(g, conv, 1), *b = kiln_const_input(g, conv, 2);
  const kiln_tensor *scale = kiln_const_input(g, bn, 1), *shift = kiln_const_input(g, bn, 2),
                    *mean = kiln_const_input(g, bn, 3), *var = kiln_const_input(g, bn, 4);
  int64_t co = w->dims[0], per = w->numel / (co ? co : 1);
  if (scale->numel != co || shift->numel != co || mean->numel != co || var->numel != co ||
      (b && b->numel != co))
    return KILN_OK; /* shapes that do not line up: leave the chain alone */
  float eps = kiln_attr_float(bn, "epsilon", 1e-5f);
  int64_t bdim = co;
  kiln_tensor *nw = kiln_tensor_new(KILN_FLOAT, w->rank, w->dims, ctx->err);
  kiln_tensor *nb = nw ? kiln_tensor_new(KILN_FLOAT, 1, &bdim, ctx->err) : NULL;
  if (!nb) {
    kiln_tensor_free(nw);
    return KILN_ERR_NOMEM;
  }
  const float *pw = w->data, *ps = scale->data, *pt = shift->data, *pm = mean->data, *pv = var->data;
  float *qw = nw->data, *qb = nb->data;
  for (int64_t o = 0; o < co; o++) {
    double s = ps[o] / sqrt((double)pv[o] + eps);
    for (int64_t k = 0; k < per; k++) qw[o * per + k] = (float)(pw[o * per + k] * s);
    double b0 = b ? ((const float *)b->data)[o] : 0.0;
    qb[o] = (float)((b0 - pm[o]) * s + pt[o]);
  }
  const char *base = g->values[bn->out[0]].name;
  int wid = new_const(g, base, "w", nw);
  if (wid < 0) {
    kiln_tensor_free(nw);
    kiln_tensor_free(nb);
    return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  }
  int bid = new_const(g, base, "b", nb);
  if (bid < 0) {
    kiln_tensor_free(nb);
    return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
  }
  conv = &g->nodes[m->nodes[0]];
  bn = &g->nodes[m->nodes[1]];
  if (conv->n_in < 3) {
    int *in = realloc(conv->in, 3 * sizeof *in);
    if (!in) return kiln_fail(ctx->err, KILN_ERR_NOMEM, "out of memory");
    conv->in = in;
    conv->n_in = 3;
  }
  conv->in[1] = wid;
  conv->in[2] = bid;
  conv->out[0] = bn->out[0]; /* the conv now produces what the BN produced */
  bn->n_out = 0;             /* so removing the BN node does not touch that value */
  dead[m->nodes[1]] = true;
  return KILN_OK;
}

kiln_code kiln_pass_fuse_conv_bn(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  kiln_fuse_scan s;
  kiln_code rc = kiln_fuse_scan_begin(ctx, g, &s);
  size_t n0 = g->n_nodes;
  for (size_t i = 0; !rc && i < n0; i++) {
    kiln_match m;
    if (!kiln_pattern_match(g, &conv_bn, i, s.uses, s.dead, &m)) continue;
    rc = fold_bn(ctx, g, &m, s.dead);
    if (!rc && s.dead[m.nodes[1]]) {
      s.dead[m.nodes[0]] = true; /* claimed for this pass; cleared below */
      (*count)++;
    }
  }
  /* Conv nodes were only marked to stop a second match; keep them. */
  for (size_t i = 0; !rc && i < n0; i++)
    if (s.dead[i] && kiln_op_is(&g->nodes[i], "Conv")) s.dead[i] = false;
  return kiln_fuse_scan_end(&s, g, rc);
}

/* ---- Conv [+ Add] + activation ---- */

static bool act_ok(const kiln_graph *g, const kiln_node *n) {
  if (kiln_op_is(n, "Clip")) {
    double lo, hi;
    if (n->opset < 11) return true;
    return (n->n_in < 2 || n->in[1] < 0 || kiln_const_scalar(g, n, 1, &lo)) &&
           (n->n_in < 3 || n->in[2] < 0 || kiln_const_scalar(g, n, 2, &hi));
  }
  return true;
}

static bool float_conv(const kiln_graph *g, const kiln_node *n) {
  if (!conv_const_weights(g, n)) return false;
  const kiln_type *t = kiln_value_type(g, n->in[0]);
  return t->kind == KILN_T_TENSOR && t->dtype == KILN_FLOAT;
}

/* The Add's other input must be a tensor of the conv output's shape. */
static bool residual_add(const kiln_graph *g, const kiln_node *n) {
  if (n->n_in != 2) return false;
  const kiln_type *a = kiln_value_type(g, n->in[0]), *b = kiln_value_type(g, n->in[1]);
  if (a->kind != KILN_T_TENSOR || b->kind != KILN_T_TENSOR || a->rank < 0 || a->rank != b->rank ||
      a->dtype != KILN_FLOAT || b->dtype != KILN_FLOAT)
    return false;
  /* Known dims must agree; unknown (symbolic) dims must be unknown on both sides. The kernel
   * checks the shapes again at run time and, on a mismatch, the node runs its chain. */
  for (int d = 0; d < a->rank; d++)
    if ((a->dims[d] >= 0 || b->dims[d] >= 0) && a->dims[d] != b->dims[d]) return false;
  return true;
}

#define ACTS "Relu|LeakyRelu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh"
static const kiln_pattern conv_patterns[] = {
    {"conv_add_act", 3, {{"Conv", -1, float_conv}, {"Add", -1, residual_add}, {ACTS, 0, act_ok}}},
    {"conv_act", 2, {{"Conv", -1, float_conv}, {ACTS, 0, act_ok}}},
    {"conv_add", 2, {{"Conv", -1, float_conv}, {"Add", -1, residual_add}}},
};

/* Activation attributes for the fused node from the standard activation node. */
kiln_code kiln_fuse_set_activation(kiln_node *f, const kiln_graph *g, const kiln_node *act) {
  return kiln_fuse_set_activation_prefixed(f, g, act, "");
}

kiln_code kiln_fuse_set_activation_prefixed(kiln_node *f, const kiln_graph *g, const kiln_node *act,
                                            const char *prefix) {
  char an[64], aa[64], ab[64];
  snprintf(an, sizeof an, "%sactivation", prefix);
  snprintf(aa, sizeof aa, "%sact_alpha", prefix);
  snprintf(ab, sizeof ab, "%sact_beta", prefix);
  kiln_code rc = kiln_node_set_string(f, an, act ? act->op_type : "");
  if (rc || !act) return rc;
  if (kiln_op_is(act, "LeakyRelu")) return kiln_node_set_float(f, aa, kiln_attr_float(act, "alpha", 0.01f));
  if (kiln_op_is(act, "HardSigmoid")) {
    rc = kiln_node_set_float(f, aa, kiln_attr_float(act, "alpha", 0.2f));
    return rc ? rc : kiln_node_set_float(f, ab, kiln_attr_float(act, "beta", 0.5f));
  }
  if (kiln_op_is(act, "Clip")) {
    double lo = -INFINITY, hi = INFINITY;
    if (act->opset < 11) {
      lo = kiln_attr_float(act, "min", -INFINITY);
      hi = kiln_attr_float(act, "max", INFINITY);
    } else {
      kiln_const_scalar(g, act, 1, &lo);
      kiln_const_scalar(g, act, 2, &hi);
    }
    rc = kiln_node_set_float(f, aa, (float)lo);
    return rc ? rc : kiln_node_set_float(f, ab, (float)hi);
  }
  return KILN_OK;
}

/* FusedConv(X, W, [B], [residual]) with the activation (attributes: the Conv's and the
 * activation's). */
static kiln_code build_conv_act(const kiln_graph *g, const kiln_match *m, size_t p, const char **op_type,
                                int *in, size_t *n_in, kiln_node *attrs) {
  (void)p;
  const kiln_node *conv = &g->nodes[m->nodes[0]], *last = &g->nodes[m->nodes[m->n - 1]];
  in[0] = conv->in[0], in[1] = conv->in[1], in[2] = conv->n_in > 2 ? conv->in[2] : -1, in[3] = -1;
  if (m->n >= 2 && kiln_op_is(&g->nodes[m->nodes[1]], "Add")) {
    const kiln_node *add = &g->nodes[m->nodes[1]];
    in[3] = add->in[0] == conv->out[0] ? add->in[1] : add->in[0];
  }
  *op_type = "FusedConv";
  *n_in = 4;
  kiln_code rc = kiln_node_copy_attrs(attrs, conv);
  return rc ? rc : kiln_fuse_set_activation(attrs, g, kiln_op_is(last, "Add") ? NULL : last);
}

kiln_code kiln_pass_fuse_conv_act(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  return kiln_fuse_patterns(ctx, g, conv_patterns, sizeof conv_patterns / sizeof conv_patterns[0],
                            build_conv_act, count);
}

/* ---- Conv [+ activation] + MaxPool: the stems of ResNets and SqueezeNet ----
 * Fused where kernels/conv2d_f32 computes both in one pass (kiln_conv2d_f32_maxpool_ok): a
 * convolution of few input channels (the direct kernel, AVX2 or AVX-512) and pooling with x stride 2
 * over 2 or 3 columns. Shapes the kernel turns down at run time run the chain instead. */

static bool stem_conv(const kiln_graph *g, const kiln_node *n) {
  if (!float_conv(g, n) || kiln_attr_int(n, "group", 1) != 1) return false;
  const kiln_tensor *w = kiln_const_input(g, n, 1);
  const char *ap = kiln_attr_str(n, "auto_pad", "NOTSET");
  return w->rank == 4 && w->dims[1] >= 2 && w->dims[1] <= 4 && w->dims[2] * w->dims[3] > 1 &&
         (!strcmp(ap, "NOTSET") || !*ap);
}

/* Reads attribute `name` of n as exactly `count` ints into v (absent: keep v); false if not. */
static bool ints_or_default(const kiln_node *n, const char *name, size_t count, int64_t *v) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) return true;
  if (a->kind != KILN_ATTR_INTS || a->n != count) return false;
  memcpy(v, a->ints, sizeof(int64_t) * count);
  return true;
}

static bool fusable_maxpool(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  if (n->n_out > 1 && n->out[1] >= 0) return false; /* Indices wanted */
  int64_t k[2] = {0, 0}, s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
  const char *ap = kiln_attr_str(n, "auto_pad", "NOTSET");
  if (!ints_or_default(n, "kernel_shape", 2, k) || !ints_or_default(n, "strides", 2, s) ||
      !ints_or_default(n, "dilations", 2, d) || !ints_or_default(n, "pads", 4, p))
    return false;
  return (!strcmp(ap, "NOTSET") || !*ap) && d[0] == 1 && d[1] == 1 && s[1] == 2 && (k[1] == 2 || k[1] == 3) &&
         k[0] >= 1 && s[0] >= 1 && p[1] <= 1 && p[0] >= 0 && p[0] < k[0] && p[2] >= 0 && p[3] >= 0;
}

static const kiln_pattern conv_pool_patterns[] = {
    {"conv_act_maxpool", 3, {{"Conv", -1, stem_conv}, {ACTS, 0, act_ok}, {"MaxPool", 0, fusable_maxpool}}},
    {"conv_maxpool", 2, {{"Conv", -1, stem_conv}, {"MaxPool", 0, fusable_maxpool}}},
};

/* The pooling's attributes on the fused node, prefixed pool_. */
static kiln_code set_pool_attrs(kiln_node *f, const kiln_node *mp) {
  int64_t k[2] = {0, 0}, s[2] = {1, 1}, p[4] = {0, 0, 0, 0};
  ints_or_default(mp, "kernel_shape", 2, k);
  ints_or_default(mp, "strides", 2, s);
  ints_or_default(mp, "pads", 4, p);
  kiln_code rc = kiln_node_set_ints(f, "pool_kernel_shape", k, 2);
  if (!rc) rc = kiln_node_set_ints(f, "pool_strides", s, 2);
  if (!rc) rc = kiln_node_set_ints(f, "pool_pads", p, 4);
  if (!rc) rc = kiln_node_set_int(f, "pool_ceil_mode", kiln_attr_int(mp, "ceil_mode", 0) != 0);
  return rc;
}

/* FusedConvMaxPool(X, W, [B]): the Conv's attributes, the activation's, the pooling's. */
static kiln_code build_conv_pool(const kiln_graph *g, const kiln_match *m, size_t p, const char **op_type,
                                 int *in, size_t *n_in, kiln_node *attrs) {
  (void)p;
  const kiln_node *conv = &g->nodes[m->nodes[0]], *mp = &g->nodes[m->nodes[m->n - 1]];
  in[0] = conv->in[0], in[1] = conv->in[1], in[2] = conv->n_in > 2 ? conv->in[2] : -1;
  *op_type = "FusedConvMaxPool";
  *n_in = 3;
  kiln_code rc = kiln_node_copy_attrs(attrs, conv);
  if (!rc) rc = kiln_fuse_set_activation(attrs, g, m->n == 3 ? &g->nodes[m->nodes[1]] : NULL);
  return rc ? rc : set_pool_attrs(attrs, mp);
}

kiln_code kiln_pass_fuse_conv_pool(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  if (!ctx->cfg->conv_pool_one_pass) return KILN_OK; /* the compiled model's CPU has no such kernel */
  return kiln_fuse_patterns(ctx, g, conv_pool_patterns, sizeof conv_pool_patterns / sizeof conv_pool_patterns[0],
                            build_conv_pool, count);
}

/* ---- Conv 1x1 -> Relu|Clip -> depthwise Conv -> Relu|Clip -> Conv 1x1 [-> Add] ----
 * MobileNetV2's inverted residual blocks, into FusedConvBlock (src/ops/fused_block.c) where
 * kernels/conv2d_f32 runs the block in one call (the caller says so: AVX-512 without AMX) on
 * an input plane known when the model is compiled: small planes (14x14, 7x7) whole, larger
 * ones in bands of rows, which need two columns or more in and out. */

enum { BLOCK_MAX_TAPS = 49 };

static bool plain_pads(const kiln_node *n) {
  const char *ap = kiln_attr_str(n, "auto_pad", "NOTSET");
  return !strcmp(ap, "NOTSET") || !*ap;
}

/* A float 1x1 Conv of one group, stride 1, no padding. */
static bool pointwise_conv(const kiln_graph *g, const kiln_node *n) {
  if (!float_conv(g, n) || kiln_attr_int(n, "group", 1) != 1 || !plain_pads(n)) return false;
  const kiln_tensor *w = kiln_const_input(g, n, 1);
  int64_t s[2] = {1, 1}, p[4] = {0, 0, 0, 0};
  return w->rank == 4 && w->dims[2] == 1 && w->dims[3] == 1 && ints_or_default(n, "strides", 2, s) &&
         ints_or_default(n, "pads", 4, p) && s[0] == 1 && s[1] == 1 && !p[0] && !p[1] && !p[2] && !p[3];
}

/* A plane of known size: small (whole), or at least 2 wide (bands). */
static bool block_plane(const kiln_type *t) {
  return t->rank == 4 && t->dims[1] > 0 && t->dims[2] > 0 && t->dims[3] > 0 &&
         (t->dims[2] * t->dims[3] <= KILN_CONV_BLOCK_WHOLE_PLANE || t->dims[3] >= 2);
}

/* The block's first Conv: 1x1 on an input plane of known size. */
static bool expand_conv(const kiln_graph *g, const kiln_node *n) {
  return pointwise_conv(g, n) && block_plane(kiln_value_type(g, n->in[0]));
}

/* Or a network's first layer, whose output the depthwise Conv reads (MobileNetV2's stem, then
 * its first block without expansion): a convolution that kernels/conv2d_f32 computes directly
 * (stem_conv: 2-4 input channels, a kernel over 1x1; x stride 1 or 2, 4 output channels or
 * more, rows of 16 or more) into a plane of known size run in bands (over 256 pixels). */
static bool stem_expand_conv(const kiln_graph *g, const kiln_node *n) {
  if (!stem_conv(g, n)) return false;
  const kiln_tensor *w = kiln_const_input(g, n, 1);
  const kiln_type *out = kiln_value_type(g, n->out[0]);
  int64_t s[2] = {1, 1};
  return plain_pads(n) && w->dims[2] * w->dims[3] > 1 && w->dims[0] >= 4 && ints_or_default(n, "strides", 2, s) &&
         s[1] >= 1 && s[1] <= 2 && out->rank == 4 && out->dims[2] > 0 && out->dims[3] >= 16 &&
         out->dims[2] * out->dims[3] > KILN_CONV_BLOCK_WHOLE_PLANE;
}

/* A float depthwise Conv (one input channel per group, multiplier 1) of at most 49 taps, on a
 * plane of known size in and out. */
static bool depthwise_conv(const kiln_graph *g, const kiln_node *n) {
  if (!float_conv(g, n) || !plain_pads(n)) return false;
  const kiln_tensor *w = kiln_const_input(g, n, 1);
  const kiln_type *in = kiln_value_type(g, n->in[0]), *out = kiln_value_type(g, n->out[0]);
  bool whole = in->rank == 4 && in->dims[2] > 0 && in->dims[3] > 0 &&
               in->dims[2] * in->dims[3] <= KILN_CONV_BLOCK_WHOLE_PLANE;
  return w->rank == 4 && w->dims[1] == 1 && kiln_attr_int(n, "group", 1) == w->dims[0] &&
         w->dims[2] * w->dims[3] <= BLOCK_MAX_TAPS &&
         (whole || (out->rank == 4 && out->dims[3] >= 2 && w->dims[0] >= 2));
}

static const kiln_pattern block_patterns[] = {
    {"conv_block_add", 6, {{"Conv", -1, expand_conv}, {"Relu|Clip", 0, act_ok}, {"Conv", 0, depthwise_conv},
                           {"Relu|Clip", 0, act_ok}, {"Conv", 0, pointwise_conv}, {"Add", -1, residual_add}}},
    {"conv_block", 5, {{"Conv", -1, expand_conv}, {"Relu|Clip", 0, act_ok}, {"Conv", 0, depthwise_conv},
                       {"Relu|Clip", 0, act_ok}, {"Conv", 0, pointwise_conv}}},
    {"stem_block", 5, {{"Conv", -1, stem_expand_conv}, {"Relu|Clip", 0, act_ok}, {"Conv", 0, depthwise_conv},
                       {"Relu|Clip", 0, act_ok}, {"Conv", 0, pointwise_conv}}},
};

/* A KxK expansion's geometry as expand_strides, expand_pads and expand_dilations. */
static kiln_code set_expand_attrs(kiln_node *f, const kiln_node *ce) {
  int64_t s[2] = {1, 1}, p[4] = {0, 0, 0, 0}, d[2] = {1, 1};
  ints_or_default(ce, "strides", 2, s);
  ints_or_default(ce, "pads", 4, p);
  ints_or_default(ce, "dilations", 2, d);
  kiln_code rc = kiln_node_set_ints(f, "expand_strides", s, 2);
  if (!rc) rc = kiln_node_set_ints(f, "expand_pads", p, 4);
  return rc ? rc : kiln_node_set_ints(f, "expand_dilations", d, 2);
}

/* FusedConvBlock(X, We, Be, Wd, Bd, Wp, Bp, R): the depthwise Conv's attributes, its activation
 * and the expansion's (expand_). */
static kiln_code build_block(const kiln_graph *g, const kiln_match *m, size_t p, const char **op_type, int *in,
                             size_t *n_in, kiln_node *attrs) {
  const kiln_node *ce = &g->nodes[m->nodes[0]], *dw = &g->nodes[m->nodes[2]], *cp = &g->nodes[m->nodes[4]];
  const kiln_node *convs[3] = {ce, dw, cp};
  for (int i = 0; i < 3; i++) {
    in[2 * i] = convs[i]->in[1];
    in[2 * i + 1] = convs[i]->n_in > 2 ? convs[i]->in[2] : -1;
  }
  /* X first: inputs X, We, Be, Wd, Bd, Wp, Bp */
  for (int i = 6; i > 0; i--) in[i] = in[i - 1];
  in[0] = ce->in[0];
  in[7] = -1;
  if (m->n == 6) {
    const kiln_node *add = &g->nodes[m->nodes[5]];
    in[7] = add->in[0] == cp->out[0] ? add->in[1] : add->in[0];
  }
  *op_type = "FusedConvBlock";
  *n_in = 8;
  kiln_code rc = kiln_node_copy_attrs(attrs, dw);
  if (!rc) rc = kiln_fuse_set_activation_prefixed(attrs, g, &g->nodes[m->nodes[1]], "expand_");
  if (!rc && p == 2) rc = set_expand_attrs(attrs, ce);
  return rc ? rc : kiln_fuse_set_activation(attrs, g, &g->nodes[m->nodes[3]]);
}

kiln_code kiln_pass_fuse_conv_block(kiln_pass_ctx *ctx, kiln_graph *g, size_t *count) {
  if (!ctx->cfg->conv_block) return KILN_OK; /* the compiled model's CPU has no such kernel */
  return kiln_fuse_patterns(ctx, g, block_patterns, sizeof block_patterns / sizeof block_patterns[0], build_block,
                            count);
}
