/* Resampling operators: Resize (opsets 10, 11, 13, 18, 19), Upsample (7, 9) and GridSample
 * (16; 20: N-D, modes renamed linear/cubic).
 *
 * Resize is separable: for every axis and output coordinate we precompute the input taps
 * (index, weight) once, then each output element sums the product of its axes' taps. The
 * coordinate rules follow the ONNX reference implementation (onnx/backend/test/case/node/
 * resize.py), which the conformance data was generated from: e.g. align_corners divides by
 * `scale * input_length - 1`, not by the rounded output length. GridSample follows PyTorch's
 * grid_sampler_2d (its 2-D test data came from it), taken to 1 to 3 spatial axes as ONNX's
 * reference does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define MAXR KILN_MAX_RANK

/* floor(v) as an index, or false when v is not a usable coordinate (NaN, huge). */
static bool floor_index(double v, int64_t *out) {
  if (!(v > -4e15 && v < 4e15)) return false;
  *out = (int64_t)floor(v);
  return true;
}

static int64_t clamp_i(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- Resize / Upsample: parameters ---- */

enum { M_NEAREST, M_LINEAR, M_CUBIC };
enum { CT_HALF_PIXEL, CT_HALF_PIXEL_SYM, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS, CT_ASYMMETRIC,
       CT_TF_HALF_PIXEL_NN, CT_TF_CROP_AND_RESIZE };
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL };

typedef struct rs_params {
  int mode, ctm, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
  bool antialias; /* opset 18: linear and cubic filters widen by 1/scale when downsampling */
} rs_params;

static int pick(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

/* Attributes by op and version; Upsample and Resize-10 are asymmetric with floor rounding. */
static const char *rs_read_params(const kiln_node *n, int opset, rs_params *p) {
  bool upsample = !strcmp(n->op_type, "Upsample");
  static const char *const modes[] = {"nearest", "linear", "cubic"};
  const char *m = kiln_attr_str(n, "mode", "nearest");
  p->mode = upsample && !strcmp(m, "bilinear") ? M_LINEAR : pick(m, modes, 3);
  if (p->mode < 0 || (p->mode == M_CUBIC && (upsample || opset < 11))) return "unknown mode";
  p->ctm = CT_ASYMMETRIC;
  p->nearest = NM_FLOOR;
  p->cubic_a = -0.75;
  p->extrapolation = 0;
  p->exclude_outside = false;
  p->antialias = false;
  if (upsample || opset < 11) return NULL;
  static const char *const ctms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                     "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                     "tf_crop_and_resize"};
  static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  p->ctm = pick(kiln_attr_str(n, "coordinate_transformation_mode", "half_pixel"), ctms, 7);
  p->nearest = pick(kiln_attr_str(n, "nearest_mode", "round_prefer_floor"), nms, 4);
  if (p->ctm < 0 || (p->ctm == CT_HALF_PIXEL_SYM && opset < 19))
    return "unknown coordinate_transformation_mode";
  if (p->ctm == CT_TF_HALF_PIXEL_NN && opset >= 13 && p->mode != M_NEAREST)
    return "tf_half_pixel_for_nn needs mode nearest";
  if (p->nearest < 0) return "unknown nearest_mode";
  p->cubic_a = kiln_attr_float(n, "cubic_coeff_a", -0.75f);
  p->exclude_outside = kiln_attr_int(n, "exclude_outside", 0) != 0;
  p->extrapolation = kiln_attr_float(n, "extrapolation_value", 0.0f);
  p->antialias = opset >= 18 && p->mode != M_NEAREST && kiln_attr_int(n, "antialias", 0) != 0;
  return NULL;
}

/* Input positions of scales / sizes / roi by op and version (-1: none). */
static void rs_inputs(const kiln_node *n, int opset, int *scales, int *sizes, int *roi) {
  bool upsample = !strcmp(n->op_type, "Upsample");
  *scales = upsample ? (opset >= 9 ? 1 : -1) : opset < 11 ? 1 : 2;
  *sizes = !upsample && opset >= 11 ? 3 : -1;
  *roi = !upsample && opset >= 11 ? 1 : -1;
}

/* The output shape and per-axis scale factors. `sc` / `sz` / `roi_t` are the scales, sizes and roi
 * tensors (NULL: omitted; empty tensors count as omitted). `dims` may hold -1 at load time; the
 * output then gets -1 there. roi (2 * rank values) is filled with [0..1] defaults. */
static const char *rs_shape(const kiln_node *n, int opset, int r, const int64_t *dims,
                            const kiln_tensor *sc, const kiln_tensor *sz, const kiln_tensor *roi_t,
                            int64_t *out, double *scale, double *roi) {
  int64_t axes[MAXR];
  size_t na = (size_t)r;
  const int64_t *ax_attr = opset >= 18 ? kiln_attr_ints(n, "axes", &na) : NULL;
  if (!ax_attr) na = (size_t)r;
  if (na > (size_t)r) return "too many axes";
  bool seen[MAXR] = {false};
  for (size_t i = 0; i < na; i++) {
    int64_t a = ax_attr ? ax_attr[i] : (int64_t)i;
    if (a < 0) a += r;
    if (a < 0 || a >= r || seen[a]) return "axes are out of range or repeated";
    seen[a] = true;
    axes[i] = a;
  }
  for (int d = 0; d < r; d++) out[d] = dims[d], scale[d] = 1, roi[d] = 0, roi[r + d] = 1;
  if (sc && sc->numel == 0) sc = NULL;
  if (sz && sz->numel == 0) sz = NULL;
  if (sc && sz) return "only one of scales and sizes may be given";
  if (!sc && !sz) return "one of scales and sizes is required";
  if (roi_t && roi_t->numel) {
    if ((size_t)roi_t->numel != 2 * na || !kiln_dtype_is_float(roi_t->dtype))
      return "roi must hold a start and an end per axis";
    for (size_t i = 0; i < na; i++) {
      roi[axes[i]] = kiln_get_f64(roi_t, (int64_t)i);
      roi[r + axes[i]] = kiln_get_f64(roi_t, (int64_t)(na + i));
    }
  }
  if (sc) {
    if ((size_t)sc->numel != na || !kiln_dtype_is_float(sc->dtype))
      return "scales must hold one float per axis";
    for (size_t i = 0; i < na; i++) {
      double s = kiln_get_f64(sc, (int64_t)i), v;
      int64_t a = axes[i];
      if (!(s > 0) || isinf(s)) return "scales must be positive";
      scale[a] = s;
      v = floor((double)dims[a] * s);
      if (dims[a] >= 0 && v > 1e15) return "scaled output is too large";
      out[a] = dims[a] < 0 ? -1 : (int64_t)v;
    }
    return NULL;
  }
  if ((size_t)sz->numel != na || !kiln_dtype_is_int(sz->dtype))
    return "sizes must hold one integer per axis";
  const char *policy = opset >= 18 ? kiln_attr_str(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
  bool stretch = !strcmp(policy, "stretch"), larger = !strcmp(policy, "not_smaller");
  if (!stretch && !larger && strcmp(policy, "not_larger")) return "unknown keep_aspect_ratio_policy";
  double common = larger ? 0 : INFINITY;
  for (size_t i = 0; i < na; i++) {
    int64_t a = axes[i], s = kiln_get_i64(sz, (int64_t)i);
    if (s < 0) return "sizes must be non-negative";
    out[a] = s;
    if (dims[a] < 0) continue;
    scale[a] = dims[a] ? (double)s / (double)dims[a] : 1;
    common = larger ? fmax(common, scale[a]) : fmin(common, scale[a]);
  }
  if (!stretch) /* one scale for every listed axis, sizes rounded from it */
    for (size_t i = 0; i < na; i++) {
      int64_t a = axes[i];
      scale[a] = common;
      out[a] = dims[a] < 0 ? -1 : (int64_t)floor(common * (double)dims[a] + 0.5);
    }
  return NULL;
}

static kiln_code infer_resize(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  rs_params p;
  const char *e = rs_read_params(c->node, c->opset, &p);
  if (e) return kiln_ifail(c, "%s", e);
  if (!x || x->rank < 0 || x->rank > MAXR) {
    kiln_infer_tensor(c, 0, x ? x->dtype : KILN_UNDEFINED, -1, NULL);
    return KILN_OK;
  }
  int si, zi, ri;
  rs_inputs(c->node, c->opset, &si, &zi, &ri);
  bool upsample7 = si < 0;
  const kiln_tensor *sc = si >= 0 && (size_t)si < c->n_in ? c->cin[si] : NULL;
  const kiln_tensor *sz = zi >= 0 && (size_t)zi < c->n_in ? c->cin[zi] : NULL;
  bool sc_given = si >= 0 && (size_t)si < c->n_in && c->node->in[si] >= 0;
  bool sz_given = zi >= 0 && (size_t)zi < c->n_in && c->node->in[zi] >= 0;
  /* Known only when every given scales/sizes input is a constant (an empty constant counts). */
  if (upsample7 || (sc_given && !sc) || (sz_given && !sz) ||
      (sc && sc->kind != KILN_KIND_TENSOR) || (sz && sz->kind != KILN_KIND_TENSOR)) {
    kiln_infer_tensor(c, 0, x->dtype, x->rank, NULL);
    if (upsample7) {
      size_t n;
      const float *f = kiln_attr_floats(c->node, "scales", &n);
      int64_t out[MAXR];
      if (!f || n != (size_t)x->rank) return kiln_ifail(c, "scales must hold one value per axis");
      for (int d = 0; d < x->rank; d++) {
        if (!(f[d] > 0) || f[d] > 1e6f) return kiln_ifail(c, "scales must be positive");
        out[d] = x->dims[d] < 0 ? -1 : (int64_t)floor((double)x->dims[d] * f[d]);
      }
      kiln_infer_tensor(c, 0, x->dtype, x->rank, out);
    }
    return KILN_OK;
  }
  int64_t out[MAXR];
  double scale[MAXR], roi[2 * MAXR];
  e = rs_shape(c->node, c->opset, x->rank, x->dims, sc, sz, NULL, out, scale, roi);
  if (e) return kiln_ifail(c, "%s", e);
  kiln_infer_tensor(c, 0, x->dtype, x->rank, out);
  return KILN_OK;
}

/* ---- Resize / Upsample: the kernel ---- */

/* Taps of one output coordinate on one axis: up to 4 (index, weight) pairs, or `outside` when
 * tf_crop_and_resize maps it off the input (the element becomes extrapolation_value). */
/* Taps of one output coordinate: 4 at most (cubic) but with antialias, which widens the
 * filter to 4 / scale taps (cubic) or 2 / scale (linear); RS_MAX_TAPS bounds that. */
enum { RS_MAX_TAPS = 32 };
typedef struct rs_tap {
  int n;
  bool outside;
  int64_t idx[RS_MAX_TAPS];
  double w[RS_MAX_TAPS];
} rs_tap;

/* Taps an antialiased downscale by s (< 1) needs; 0 when more than RS_MAX_TAPS. */
static int rs_antialias_taps(int mode, double s) {
  double reach = mode == M_LINEAR ? 1 : 2, start = floor(-reach / s) + 1;
  double n = 2 - 2 * start;
  return n <= RS_MAX_TAPS ? (int)n : 0;
}

/* ONNX's reference antialias filter: the linear (triangle) or cubic kernel stretched by 1/s,
 * over the n taps first = x0 - (n/2 - 1) ... around xo = x0 + ratio (ratio in (0, 1]), and
 * normalised to sum 1. */
static void rs_antialias_coeffs(const rs_params *p, double ratio, double s, int n, double *c) {
  const double a = p->cubic_a;
  double sum = 0;
  for (int k = 0; k < n; k++) {
    double v = fabs(s * ((double)(k - (n / 2 - 1)) - ratio)), w;
    if (p->mode == M_LINEAR) w = v < 1 ? 1 - v : 0;
    else if (v <= 1) w = ((a + 2) * v - (a + 3)) * v * v + 1;
    else if (v < 2) w = ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
    else w = 0;
    c[k] = w;
    sum += w;
  }
  for (int k = 0; k < n && sum != 0; k++) c[k] /= sum;
}

static void cubic_coeffs(double t, double a, double *c) {
  double u = 1 - t;
  c[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
  c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[2] = ((a + 2) * u - (a + 3)) * u * u + 1;
  c[3] = ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a;
}

static void rs_axis_taps(const rs_params *p, int64_t x, int64_t len, int64_t olen, double s,
                         double r0, double r1, rs_tap *t) {
  double xr = (double)x, L = (double)len, ow = s * L, xo;
  t->outside = false;
  switch (p->ctm) {
    case CT_ALIGN_CORNERS: xo = ow == 1 ? 0 : xr * (L - 1) / (ow - 1); break;
    case CT_ASYMMETRIC: xo = xr / s; break;
    case CT_TF_HALF_PIXEL_NN: xo = (xr + 0.5) / s; break;
    case CT_PYTORCH_HALF_PIXEL: xo = olen > 1 ? (xr + 0.5) / s - 0.5 : 0; break;
    case CT_HALF_PIXEL_SYM: {
      double adj = (double)olen / ow, off = L / 2 * (1 - adj);
      xo = off + (xr + 0.5) / s - 0.5;
      break;
    }
    case CT_TF_CROP_AND_RESIZE:
      xo = ow == 1 ? (r1 - r0) * (L - 1) / 2 : xr * (r1 - r0) * (L - 1) / (ow - 1);
      xo += r0 * (L - 1);
      if (!(xo >= 0 && xo <= L - 1)) {
        t->outside = true;
        t->n = 0;
        return;
      }
      break;
    default: xo = (xr + 0.5) / s - 0.5;
  }
  int64_t x0;
  if (!floor_index(xo, &x0)) x0 = xo > 0 ? len : -1; /* NaN and absurd values clamp to an edge */
  double f = xo - (double)x0;
  if (!(f >= 0 && f < 1)) f = 0;
  if (p->mode == M_NEAREST) {
    int64_t k = x0;
    if (f > 0) {
      bool up = p->nearest == NM_CEIL || (p->nearest == NM_ROUND_PREFER_FLOOR && f > 0.5) ||
                (p->nearest == NM_ROUND_PREFER_CEIL && f >= 0.5);
      k += up;
    }
    t->n = 1;
    t->idx[0] = clamp_i(k, 0, len - 1);
    t->w[0] = 1;
    return;
  }
  double c[RS_MAX_TAPS];
  int n = p->mode == M_LINEAR ? 2 : 4;
  int64_t first = p->mode == M_LINEAR ? x0 : x0 - 1;
  if (p->antialias && s < 1) {
    n = rs_antialias_taps(p->mode, s); /* checked by rs_run */
    if (f == 0) f = 1, x0 -= 1;         /* the tap left of a whole coordinate, as the reference */
    first = x0 - (n / 2 - 1);
    rs_antialias_coeffs(p, f, s, n, c);
  } else if (p->mode == M_LINEAR) {
    c[0] = 1 - f, c[1] = f;
  } else {
    cubic_coeffs(f, p->cubic_a, c);
  }
  if (p->exclude_outside) { /* drop taps off the input and renormalise the rest */
    double sum = 0;
    for (int k = 0; k < n; k++) {
      if (first + k < 0 || first + k >= len) c[k] = 0;
      sum += c[k];
    }
    for (int k = 0; k < n && sum != 0; k++) c[k] /= sum;
  }
  t->n = 0;
  for (int k = 0; k < n; k++) {
    if (c[k] == 0 && !(k == n - 1 && t->n == 0)) continue; /* zero taps only cost time */
    t->idx[t->n] = clamp_i(first + k, 0, len - 1);
    t->w[t->n++] = c[k];
  }
}

/* float32 interpolated along the last two axes only (every other axis kept as is: one tap of
 * weight 1 at its own index): the general loop below without its per-element bookkeeping, the
 * same double sums in the same order (nearest: the same copies), so the same bits. Returns
 * false when it does not apply. */
static bool rs_planes_f32(const kiln_tensor *x, kiln_tensor *o, const int64_t *out, rs_tap *const *ax, bool nearest) {
  int r = x->rank;
  if (x->dtype != KILN_FLOAT || r < 2) return false;
  int64_t planes = 1;
  for (int d = 0; d < r - 2; d++) {
    if (out[d] != x->dims[d]) return false;
    for (int64_t i = 0; i < out[d]; i++)
      if (ax[d][i].outside || ax[d][i].n != 1 || ax[d][i].idx[0] != i || ax[d][i].w[0] != 1) return false;
    planes *= out[d];
  }
  const rs_tap *th = ax[r - 2], *tw = ax[r - 1];
  const int64_t H = x->dims[r - 2], W = x->dims[r - 1], OH = out[r - 2], OW = out[r - 1];
  for (int64_t i = 0; i < OH; i++)
    if (th[i].outside) return false;
  for (int64_t i = 0; i < OW; i++)
    if (tw[i].outside) return false;
  const float *xf = x->data;
  float *of = o->data;
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *xp = xf + pl * H * W;
    float *op = of + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const rs_tap *a = &th[oh], *b = &tw[ow];
        if (nearest) { /* one tap per axis: the element itself */
          op[oh * OW + ow] = xp[a->idx[0] * W + b->idx[0]];
          continue;
        }
        double acc = 0;
        for (int u = 0; u < a->n; u++)
          for (int v = 0; v < b->n; v++) acc += a->w[u] * b->w[v] * (double)xp[a->idx[u] * W + b->idx[v]];
        op[oh * OW + ow] = (float)acc;
      }
  }
  return true;
}

static kiln_code rs_run(kiln_kctx *c, const kiln_tensor *x, const rs_params *p, const int64_t *out,
                        const double *scale, const double *roi) {
  int r = x->rank;
  if (p->mode != M_NEAREST && !kiln_dtype_is_float(x->dtype) && !kiln_dtype_is_int(x->dtype))
    return kiln_kfail(c, "cannot interpolate %s values", kiln_dtype_name(x->dtype));
  for (int d = 0; d < r; d++) {
    if (x->dims[d] == 0 && out[d] > 0) return kiln_kfail(c, "cannot resize an empty axis");
    if (p->antialias && scale[d] < 1 && !rs_antialias_taps(p->mode, scale[d]))
      return kiln_kunsup(c, "antialias for a downscale by %g (below 1/%d) is not supported",
                         scale[d], RS_MAX_TAPS / (p->mode == M_LINEAR ? 2 : 4));
  }
  kiln_tensor *o = kiln_out(c, 0, x->dtype, r, out);
  if (!o) return c->err->code;
  if (o->numel == 0) return KILN_OK;
  int64_t total = 0, stride[MAXR];
  for (int d = 0; d < r; d++) total += out[d];
  rs_tap *taps = malloc((size_t)total * sizeof *taps), *ax[MAXR];
  if (!taps) return kiln_kfail(c, "out of memory");
  for (int64_t d = 0, off = 0; d < r; off += out[d], d++) {
    ax[d] = taps + off;
    for (int64_t i = 0; i < out[d]; i++)
      rs_axis_taps(p, i, x->dims[d], out[d], scale[d], roi[d], roi[r + d], &ax[d][i]);
  }
  if (rs_planes_f32(x, o, out, ax, p->mode == M_NEAREST)) {
    free(taps);
    return KILN_OK;
  }
  int64_t s = 1;
  for (int d = r - 1; d >= 0; d--) stride[d] = s, s *= x->dims[d];
  int64_t idx[MAXR] = {0};
  const float *xf = x->dtype == KILN_FLOAT ? x->data : NULL;
  for (int64_t oi = 0; oi < o->numel; oi++) {
    bool outside = false;
    for (int d = 0; d < r; d++) outside |= ax[d][idx[d]].outside;
    double acc = p->extrapolation;
    if (!outside) {
      if (p->mode == M_NEAREST) { /* one tap per axis: copy the element exactly */
        int64_t src = 0;
        for (int d = 0; d < r; d++) src += ax[d][idx[d]].idx[0] * stride[d];
        kiln_copy_elem(o, oi, x, src);
        goto next;
      }
      int t[MAXR] = {0};
      acc = 0;
      for (;;) { /* every combination of the axes' taps */
        double w = 1;
        int64_t src = 0;
        for (int d = 0; d < r; d++) {
          const rs_tap *tp = &ax[d][idx[d]];
          w *= tp->w[t[d]];
          src += tp->idx[t[d]] * stride[d];
        }
        acc += w * (xf ? (double)xf[src] : kiln_get_f64(x, src));
        int d = r - 1;
        while (d >= 0 && ++t[d] == ax[d][idx[d]].n) t[d--] = 0;
        if (d < 0) break;
      }
    }
    kiln_set_f64(o, oi, acc);
  next:
    for (int d = r - 1; d >= 0; d--) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  free(taps);
  return KILN_OK;
}

static kiln_code run_resize(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0];
  rs_params p;
  const char *e = rs_read_params(c->node, c->opset, &p);
  if (e) return kiln_kfail(c, "%s", e);
  int64_t out[MAXR];
  double scale[MAXR], roi[2 * MAXR];
  int si, zi, ri;
  rs_inputs(c->node, c->opset, &si, &zi, &ri);
  if (si < 0) { /* Upsample-7: scales attribute */
    size_t n;
    const float *f = kiln_attr_floats(c->node, "scales", &n);
    if (!f || n != (size_t)x->rank) return kiln_kfail(c, "scales must hold one value per axis");
    for (int d = 0; d < x->rank; d++) {
      if (!(f[d] > 0) || f[d] > 1e6f) return kiln_kfail(c, "scales must be positive");
      scale[d] = f[d];
      out[d] = (int64_t)floor((double)x->dims[d] * f[d]);
      roi[d] = 0, roi[x->rank + d] = 1;
    }
  } else {
    e = rs_shape(c->node, c->opset, x->rank, x->dims, kiln_in(c, (size_t)si),
                 zi >= 0 ? kiln_in(c, (size_t)zi) : NULL, ri >= 0 ? kiln_in(c, (size_t)ri) : NULL,
                 out, scale, roi);
    if (e) return kiln_kfail(c, "%s", e);
  }
  return rs_run(c, x, &p, out, scale, roi);
}

/* ---- GridSample (PyTorch's grid_sampler semantics, N-D) ---- */

enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

static double gs_reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = fabs(v - lo);
  double extra = fmod(v, span);
  int64_t flips;
  if (!floor_index(v / span, &flips)) return lo;
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

/* Apply the padding mode to a pixel coordinate (border clamps, reflection mirrors). */
static double gs_pad(double v, int64_t size, int pad, bool ac) {
  if (pad == GS_BORDER || pad == GS_REFLECTION) {
    if (pad == GS_REFLECTION)
      v = ac ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
    v = v < 0 ? 0 : v > (double)(size - 1) ? (double)(size - 1) : v;
  }
  return v;
}

static double gs_unnorm(double g, int64_t size, bool ac) {
  return ac ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
}

enum { GS_MAX_SPATIAL = 3, GS_MAX_TAPS = 64 /* 4^3: cubic in 3-D */ };

/* The input rank GridSample takes: 4-D before opset 20, 3- to 5-D (1 to 3 spatial axes) from
 * opset 20. */
static bool gs_rank_ok(int opset, int rank) {
  return opset >= 20 ? rank >= 3 && rank <= GS_MAX_SPATIAL + 2 : rank == 4;
}

static kiln_code infer_gridsample(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0), *g = kiln_itype(c, 1);
  if (x && x->rank >= 0 && !gs_rank_ok(c->opset, x->rank))
    return kiln_ifail(c, c->opset >= 20 ? "X must be 3-D to 5-D" : "X must be 4-D");
  int rank = x && x->rank >= 0 ? x->rank : g && g->rank >= 0 ? g->rank : -1;
  if (g && g->rank >= 0 && g->rank != rank) return kiln_ifail(c, "grid must have X's rank");
  if (rank < 0) return KILN_OK;
  int64_t out[GS_MAX_SPATIAL + 2];
  for (int d = 0; d < rank; d++) out[d] = -1;
  if (x && x->rank == rank) out[0] = x->dims[0], out[1] = x->dims[1];
  if (g && g->rank == rank) {
    if (out[0] < 0) out[0] = g->dims[0];
    for (int d = 2; d < rank; d++) out[d] = g->dims[d - 1];
  }
  kiln_infer_tensor(c, 0, x ? x->dtype : KILN_UNDEFINED, rank, out);
  return KILN_OK;
}

/* The taps of one output point: flat offsets into an input plane (-1: outside, reads 0) and
 * their weights. Grid coordinates come x first: coordinate k addresses spatial axis r-1-k. */
typedef struct gs_taps {
  int n;
  int64_t off[GS_MAX_TAPS];
  double w[GS_MAX_TAPS];
} gs_taps;

static void gs_point(const double *gc, int r, const int64_t *sp, int mode, int pad, bool ac,
                     gs_taps *t) {
  double f[GS_MAX_SPATIAL], cw[GS_MAX_SPATIAL][4];
  int64_t f0[GS_MAX_SPATIAL];
  const int span = mode == 0 ? 2 : mode == 1 ? 1 : 4;
  t->n = 0;
  for (int d = 0; d < r; d++) {
    f[d] = gs_unnorm(gc[r - 1 - d], sp[d], ac);
    if (mode != 2) f[d] = gs_pad(f[d], sp[d], pad, ac);
    if (mode == 1) f[d] = nearbyint(f[d]); /* nearest: round half to even */
    if (!floor_index(f[d], &f0[d])) return;  /* NaN or huge: the output is 0 */
    double frac = f[d] - (double)f0[d];
    if (mode == 0) cw[d][0] = 1 - frac, cw[d][1] = frac;
    else if (mode == 1) cw[d][0] = 1;
    else cubic_coeffs(frac, -0.75, cw[d]);
  }
  int total = 1;
  for (int d = 0; d < r; d++) total *= span;
  for (int k = 0; k < total; k++) {
    int64_t off = 0;
    double w = 1;
    for (int d = 0, rest = k; d < r; d++, rest /= span) {
      int j = rest % span;
      int64_t ix = mode == 2 ? f0[d] - 1 + j : f0[d] + j;
      if (mode == 2) { /* cubic: the padding applies to each tap */
        double pv = gs_pad((double)ix, sp[d], pad, ac);
        if (!floor_index(pv, &ix)) off = -1;
      }
      if (ix < 0 || ix >= sp[d]) off = -1;
      if (off >= 0) off = off * sp[d] + ix;
      w *= cw[d][j];
    }
    t->off[t->n] = off;
    t->w[t->n++] = w;
  }
}

static kiln_code run_gridsample(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 2);
  if (rc) return rc;
  const kiln_tensor *x = c->in[0], *g = c->in[1];
  /* opset 20 renamed the modes (linear, cubic) when GridSample became N-D */
  static const char *const modes16[] = {"bilinear", "nearest", "bicubic"};
  static const char *const modes20[] = {"linear", "nearest", "cubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  const char *ms = kiln_attr_str(c->node, "mode", c->opset >= 20 ? "linear" : "bilinear");
  int mode = pick(ms, c->opset >= 20 ? modes20 : modes16, 3);
  int pad = pick(kiln_attr_str(c->node, "padding_mode", "zeros"), pads, 3);
  bool ac = kiln_attr_int(c->node, "align_corners", 0) != 0;
  if (mode < 0) return kiln_kfail(c, "unknown mode '%s' at opset %d", ms, c->opset);
  if (pad < 0) return kiln_kfail(c, "unknown padding_mode");
  const int r = x->rank - 2;
  if (!gs_rank_ok(c->opset, x->rank) || g->rank != x->rank || g->dims[0] != x->dims[0] ||
      g->dims[g->rank - 1] != r)
    return kiln_kfail(c, "X must be [N,C,D1..Dr] (r = %s) and grid [N,O1..Or,r]",
                      c->opset >= 20 ? "1 to 3" : "2");
  if (!kiln_dtype_is_float(x->dtype) || !kiln_dtype_is_float(g->dtype))
    return kiln_kfail(c, "X and grid must be floating point");
  const int64_t n = x->dims[0], ch = x->dims[1];
  int64_t out[GS_MAX_SPATIAL + 2] = {n, ch}, plane = 1, opts = 1;
  for (int d = 0; d < r; d++) {
    out[d + 2] = g->dims[d + 1];
    plane *= x->dims[d + 2];
    opts *= g->dims[d + 1];
  }
  kiln_tensor *o = kiln_out(c, 0, x->dtype, x->rank, out);
  if (!o) return c->err->code;
  gs_taps t;
  for (int64_t b = 0; b < n; b++)
    for (int64_t i = 0; i < opts; i++) {
      double gc[GS_MAX_SPATIAL];
      for (int k = 0; k < r; k++) gc[k] = kiln_get_f64(g, (b * opts + i) * r + k);
      gs_point(gc, r, x->dims + 2, mode, pad, ac, &t);
      for (int64_t k = 0; k < ch; k++) {
        const int64_t base = (b * ch + k) * plane;
        double v = 0;
        for (int j = 0; j < t.n; j++)
          if (t.off[j] >= 0) v += t.w[j] * kiln_get_f64(x, base + t.off[j]);
        kiln_set_f64(o, (b * ch + k) * opts + i, v);
      }
    }
  return KILN_OK;
}

const kiln_op_schema kiln_ops_resize[] = {
    {.domain = "", .name = "Resize", .since = 10, .inputs = {1, 4}, .outputs = {1, 1},
     .infer = infer_resize, .run = run_resize, .flow = KILN_FLOW_BATCH},
    {.domain = "", .name = "Upsample", .since = 7, .inputs = {1, 2}, .outputs = {1, 1},
     .infer = infer_resize, .run = run_resize, .flow = KILN_FLOW_BATCH},
    {.domain = "", .name = "GridSample", .since = 16, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = infer_gridsample, .run = run_gridsample},
    {0},
};
