/* DeformConv (opset 19): 2-D deformable convolution (Dai et al.; torchvision's deform_conv2d).
 *
 * X (N, C, H, W), W (M, C / group, kH, kW), offset (N, offset_group * kH * kW * 2, oH, oW),
 * optional B (M) and mask (N, offset_group * kH * kW, oH, oW). Kernel tap (i, j) of output
 * (oh, ow) samples channel c at h = oh * sh - pad_top + i * dh + dy, w = ow * sw - pad_left +
 * j * dw + dx, where (dy, dx) is the offset pair of tap i * kW + j in c's offset group
 * (channels split evenly into offset_group groups); the sample is bilinear, corners outside
 * the image reading as 0, and is scaled by the mask (1 without one). The reference kernel
 * builds the sampled columns per image and multiplies them with the weights group by group,
 * accumulating in float. Only 2-D and float tensors: other ranks and types are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

typedef struct dgeom {
  int64_t n, c, h, w, m, kh, kw, oh, ow, group, ogroup;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
} dgeom;

static bool ints_attr(const kiln_node *nd, const char *name, size_t want, int64_t def, int64_t *out) {
  size_t n = 0;
  const int64_t *v = kiln_attr_ints(nd, name, &n);
  for (size_t i = 0; i < want; i++) out[i] = v && n == want ? v[i] : def;
  return !v || n == want;
}

/* The geometry from the attributes and the shapes of X and W (dims may be -1 in shape
 * functions); a message in why when they are inconsistent. */
static bool geometry(const kiln_node *nd, const int64_t *x, const int64_t *wt, dgeom *g, const char **why) {
  int64_t ks[2], st[2], dl[2], pd[4];
  if (!ints_attr(nd, "kernel_shape", 2, -1, ks) || !ints_attr(nd, "strides", 2, 1, st) ||
      !ints_attr(nd, "dilations", 2, 1, dl) || !ints_attr(nd, "pads", 4, 0, pd)) {
    *why = "kernel_shape, strides, dilations or pads has the wrong length for 2-D";
    return false;
  }
  *g = (dgeom){.n = x[0], .c = x[1], .h = x[2], .w = x[3], .m = wt[0], .kh = ks[0] > 0 ? ks[0] : wt[2],
               .kw = ks[1] > 0 ? ks[1] : wt[3], .sh = st[0], .sw = st[1], .dh = dl[0], .dw = dl[1],
               .pt = pd[0], .pl = pd[1], .pb = pd[2], .pr = pd[3],
               .group = kiln_attr_int(nd, "group", 1), .ogroup = kiln_attr_int(nd, "offset_group", 1)};
  if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->group < 1 || g->ogroup < 1 ||
      pd[0] < 0 || pd[1] < 0 || pd[2] < 0 || pd[3] < 0) {
    *why = "strides, dilations, group and offset_group must be >= 1, pads >= 0";
    return false;
  }
  g->oh = kiln_pool_out_dim(g->h, g->dh * (g->kh - 1) + 1, g->sh, g->pt, g->pb, false);
  g->ow = kiln_pool_out_dim(g->w, g->dw * (g->kw - 1) + 1, g->sw, g->pl, g->pr, false);
  return true;
}

/* Bilinear sample of plane (H, W) at (y, x); 0 outside, corners outside read as 0. */
static float bilinear(const float *p, int64_t H, int64_t W, float y, float x) {
  if (!(y > -1 && y < (float)H && x > -1 && x < (float)W)) return 0; /* NaN too */
  const int64_t y0 = (int64_t)floorf(y), x0 = (int64_t)floorf(x);
  const float ly = y - (float)y0, lx = x - (float)x0, hy = 1 - ly, hx = 1 - lx;
  const bool yin0 = y0 >= 0, yin1 = y0 + 1 < H, xin0 = x0 >= 0, xin1 = x0 + 1 < W;
  float v = 0;
  if (yin0 && xin0) v += hy * hx * p[y0 * W + x0];
  if (yin0 && xin1) v += hy * lx * p[y0 * W + x0 + 1];
  if (yin1 && xin0) v += ly * hx * p[(y0 + 1) * W + x0];
  if (yin1 && xin1) v += ly * lx * p[(y0 + 1) * W + x0 + 1];
  return v;
}

/* col (C * kH * kW, oH * oW) for image b: the masked samples of every channel and tap. */
static void sample_columns(const dgeom *g, const float *x, const float *off, const float *mask, float *col) {
  const int64_t K = g->kh * g->kw, P = g->oh * g->ow, cpg = g->c / g->ogroup;
  for (int64_t c = 0; c < g->c; c++) {
    const int64_t og = c / cpg;
    const float *plane = x + c * g->h * g->w;
    for (int64_t k = 0; k < K; k++) {
      const int64_t i = k / g->kw, j = k % g->kw;
      const float *dy = off + ((og * K + k) * 2) * P, *dx = dy + P;
      const float *mk = mask ? mask + (og * K + k) * P : NULL;
      float *out = col + (c * K + k) * P;
      for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++) {
          const int64_t p = oh * g->ow + ow;
          const float y = (float)(oh * g->sh - g->pt + i * g->dh) + dy[p];
          const float xx = (float)(ow * g->sw - g->pl + j * g->dw) + dx[p];
          out[p] = bilinear(plane, g->h, g->w, y, xx) * (mk ? mk[p] : 1.0f);
        }
    }
  }
}

static kiln_code check_inputs(kiln_kctx *c, const dgeom *g, const kiln_tensor *off, const kiln_tensor *b,
                              const kiln_tensor *mask) {
  const int64_t K = g->kh * g->kw;
  if (g->c % g->group || g->m % g->group || g->c % g->ogroup)
    return kiln_kfail(c, "channels %lld / outputs %lld do not divide into group %lld / offset_group %lld",
                      (long long)g->c, (long long)g->m, (long long)g->group, (long long)g->ogroup);
  if (g->oh < 0 || g->ow < 0) return kiln_kfail(c, "the kernel does not fit the padded input");
  const int64_t want_off[4] = {g->n, g->ogroup * K * 2, g->oh, g->ow}, want_mask[4] = {g->n, g->ogroup * K, g->oh, g->ow};
  if (off->rank != 4 || memcmp(off->dims, want_off, sizeof want_off))
    return kiln_kfail(c, "offset must have shape (%lld, %lld, %lld, %lld), not %s", (long long)want_off[0],
                      (long long)want_off[1], (long long)want_off[2], (long long)want_off[3],
                      kiln_shape_str(off, (char[128]){0}, 128));
  if (mask && (mask->rank != 4 || memcmp(mask->dims, want_mask, sizeof want_mask)))
    return kiln_kfail(c, "mask must have shape (%lld, %lld, %lld, %lld), not %s", (long long)want_mask[0],
                      (long long)want_mask[1], (long long)want_mask[2], (long long)want_mask[3],
                      kiln_shape_str(mask, (char[128]){0}, 128));
  if (b && (b->rank != 1 || b->dims[0] != g->m)) return kiln_kfail(c, "B must have %lld values", (long long)g->m);
  return KILN_OK;
}

static const kiln_tensor *opt_in(const kiln_kctx *c, size_t i) {
  const kiln_tensor *t = kiln_in(c, i);
  return t && t->kind == KILN_KIND_TENSOR ? t : NULL;
}

static kiln_code deform_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 3);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1), *off = kiln_in(c, 2), *b = opt_in(c, 3), *mask = opt_in(c, 4);
  if (x->rank != 4 || w->rank != 4) return kiln_kunsup(c, "only 2-D DeformConv (X and W of rank 4) is supported");
  const kiln_tensor *all[5] = {x, w, off, b, mask};
  for (int i = 0; i < 5; i++)
    if (all[i] && all[i]->dtype != KILN_FLOAT) return kiln_kunsup(c, "input %d is %s: only float is supported", i, kiln_dtype_name(all[i]->dtype));
  dgeom g;
  const char *why = NULL;
  if (!geometry(c->node, x->dims, w->dims, &g, &why)) return kiln_kfail(c, "%s", why);
  if ((rc = check_inputs(c, &g, off, b, mask))) return rc;
  if (w->dims[1] != g.c / g.group || w->dims[2] != g.kh || w->dims[3] != g.kw)
    return kiln_kfail(c, "W must have shape (%lld, %lld, %lld, %lld)", (long long)g.m, (long long)(g.c / g.group),
                      (long long)g.kh, (long long)g.kw);
  const int64_t ydims[4] = {g.n, g.m, g.oh, g.ow};
  kiln_tensor *y = kiln_out(c, 0, KILN_FLOAT, 4, ydims);
  if (!y) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  const int64_t K = g.kh * g.kw, P = g.oh * g.ow, cpg = g.c / g.group, mpg = g.m / g.group;
  float *col = malloc((size_t)(g.c * K * P + 1) * sizeof *col);
  if (!col) return kiln_kfail(c, "out of memory");
  const float *xs = x->data, *ws = w->data, *os = off->data, *ms = mask ? mask->data : NULL, *bs = b ? b->data : NULL;
  float *ys = y->data;
  for (int64_t n = 0; n < g.n; n++) {
    sample_columns(&g, xs + n * g.c * g.h * g.w, os + n * g.ogroup * K * 2 * P, ms ? ms + n * g.ogroup * K * P : NULL, col);
    for (int64_t m = 0; m < g.m; m++) {
      const int64_t gi = m / mpg;
      const float *wrow = ws + m * cpg * K, *crow = col + gi * cpg * K * P;
      float *out = ys + (n * g.m + m) * P;
      for (int64_t p = 0; p < P; p++) out[p] = bs ? bs[m] : 0.0f;
      for (int64_t r = 0; r < cpg * K; r++)
        for (int64_t p = 0; p < P; p++) out[p] += wrow[r] * crow[r * P + p];
    }
  }
  free(col);
  return KILN_OK;
}

static kiln_code deform_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0), *w = kiln_itype(c, 1);
  kiln_dtype dt = kiln_idtype(c, 0);
  if (!x || !w || x->rank != 4 || w->rank != 4) {
    kiln_infer_tensor(c, 0, dt, x ? x->rank : -1, NULL);
    return KILN_OK;
  }
  dgeom g;
  const char *why = NULL;
  if (!geometry(c->node, x->dims, w->dims, &g, &why)) return kiln_ifail(c, "%s", why);
  const int64_t dims[4] = {x->dims[0], w->dims[0], g.oh, g.ow};
  kiln_infer_tensor(c, 0, dt, 4, dims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_deform_conv[] = {
    {.domain = "", .name = "DeformConv", .since = 19, .inputs = {3, 5}, .outputs = {1, 1},
     .infer = deform_infer, .run = deform_run},
    {0},
};
