/* Convolutions: Conv, ConvTranspose, ConvInteger and QLinearConv (1-D to N-D, groups,
 * dilations, strides, explicit and automatic padding).
 *
 * All of them reduce to one scheme. A "tap map" lists, for every kernel tap and every position
 * of a grid, the offset of the image element that the tap touches (or -1 in the padding). For
 * Conv the grid is the output and the image the input: a gather through the map builds the
 * im2col matrix, and a GEMM with the weights gives the output. For ConvTranspose the roles swap:
 * a GEMM of the transposed weights with the input gives one column per input position, and a
 * scatter-add through the map (col2im) accumulates it into the output. The map depends only on
 * the geometry, so it is built once per call and reused for every channel and batch item.
 *
 * The integer ops run the same scheme on the integer GEMM of ops/qgemm.c (kernels/igemm), which
 * gathers im2col straight into its packed byte layout, padding reading as the zero point, as the
 * spec requires. Float32 2-D convolutions take kernels/conv2d_f32 first
 * (src/ops/conv2d_f32.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv2d_f32.h"
#include "kernels/gemm.h"
#include "ops/cost.h"
#include "ops/fused.h"
#include "ops/op.h"
#include "ops/qgemm.h"

typedef struct conv_geom {
  int nsp;                          /* number of spatial dims */
  int64_t n, c, m, group;           /* batch, input channels, output channels, groups */
  int64_t x[KILN_MAX_RANK];         /* input spatial sizes (-1 unknown, in shape functions) */
  int64_t y[KILN_MAX_RANK];         /* output spatial sizes */
  int64_t k[KILN_MAX_RANK];         /* kernel spatial sizes */
  int64_t stride[KILN_MAX_RANK], dil[KILN_MAX_RANK];
  int64_t pb[KILN_MAX_RANK], pe[KILN_MAX_RANK]; /* padding at the beginning / end */
  int64_t xsize, ysize, ksize;      /* products of x, y, k */
} conv_geom;

/* ---- geometry ---------------------------------------------------------------------------- */

/* An optional per-spatial-dim attribute; `def` where absent. */
static bool spatial_attr(const kiln_node *nd, const char *name, int nsp, int64_t def, int64_t min,
                         int64_t *out, char *msg, size_t cap) {
  size_t n = 0;
  const int64_t *v = kiln_attr_ints(nd, name, &n);
  for (int i = 0; i < nsp; i++) out[i] = def;
  if (!v) return true;
  if (n != (size_t)nsp) {
    snprintf(msg, cap, "attribute %s has %zu values, expected %d", name, n, nsp);
    return false;
  }
  for (int i = 0; i < nsp; i++) {
    if (v[i] < min) {
      snprintf(msg, cap, "attribute %s[%d] = %lld is below %lld", name, i, (long long)v[i],
               (long long)min);
      return false;
    }
    out[i] = v[i];
  }
  return true;
}

/* Reads strides, dilations, explicit pads and group. g->nsp must be set. */
static bool conv_attrs(const kiln_node *nd, conv_geom *g, char *msg, size_t cap) {
  if (!spatial_attr(nd, "strides", g->nsp, 1, 1, g->stride, msg, cap) ||
      !spatial_attr(nd, "dilations", g->nsp, 1, 1, g->dil, msg, cap))
    return false;
  size_t n = 0;
  const int64_t *p = kiln_attr_ints(nd, "pads", &n);
  for (int i = 0; i < g->nsp; i++) g->pb[i] = g->pe[i] = 0;
  if (p) {
    if (n != 2 * (size_t)g->nsp) {
      snprintf(msg, cap, "attribute pads has %zu values, expected %d", n, 2 * g->nsp);
      return false;
    }
    for (int i = 0; i < g->nsp; i++) {
      g->pb[i] = p[i];
      g->pe[i] = p[i + g->nsp];
      if (g->pb[i] < 0 || g->pe[i] < 0) {
        snprintf(msg, cap, "negative pads are not valid");
        return false;
      }
    }
  }
  g->group = kiln_attr_int(nd, "group", 1);
  if (g->group < 1) {
    snprintf(msg, cap, "group %lld is not positive", (long long)g->group);
    return false;
  }
  return true;
}

/* Kernel sizes from the kernel_shape attribute or the weight's spatial dims (wd, -1 unknown). */
static bool conv_kernel(const kiln_node *nd, conv_geom *g, const int64_t *wd, char *msg,
                        size_t cap) {
  size_t n = 0;
  const int64_t *ks = kiln_attr_ints(nd, "kernel_shape", &n);
  if (ks && n != (size_t)g->nsp) {
    snprintf(msg, cap, "kernel_shape has %zu values, expected %d", n, g->nsp);
    return false;
  }
  for (int i = 0; i < g->nsp; i++) {
    g->k[i] = ks ? ks[i] : wd[i];
    if (ks && wd[i] >= 0 && ks[i] != wd[i]) {
      snprintf(msg, cap, "kernel_shape[%d] = %lld does not match the weight's %lld", i,
               (long long)ks[i], (long long)wd[i]);
      return false;
    }
  }
  return true;
}

/* Splits a total padding between begin and end: SAME_LOWER puts the odd one at the start. */
static void split_pad(int64_t total, bool lower, int64_t *pb, int64_t *pe) {
  *pb = lower ? total - total / 2 : total / 2;
  *pe = total - *pb;
}

/* Conv output sizes (and pads for auto_pad) from g->x, g->k. Unknown sizes give -1. */
static bool conv_out_dims(const kiln_node *nd, conv_geom *g, char *msg, size_t cap) {
  const char *ap = kiln_attr_str(nd, "auto_pad", "NOTSET");
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  bool valid = !strcmp(ap, "VALID");
  if (!same && !valid && strcmp(ap, "NOTSET") && *ap) {
    snprintf(msg, cap, "unknown auto_pad '%s'", ap);
    return false;
  }
  for (int i = 0; i < g->nsp; i++) {
    if (g->x[i] < 0 || g->k[i] < 0) {
      g->y[i] = -1;
      continue;
    }
    int64_t ek = (g->k[i] - 1) * g->dil[i] + 1, s = g->stride[i];
    if (same) {
      g->y[i] = (g->x[i] + s - 1) / s;
      int64_t total = (g->y[i] - 1) * s + ek - g->x[i];
      split_pad(total > 0 ? total : 0, !strcmp(ap, "SAME_LOWER"), &g->pb[i], &g->pe[i]);
      continue;
    }
    if (valid) g->pb[i] = g->pe[i] = 0;
    int64_t span = g->x[i] + g->pb[i] + g->pe[i];
    if (span < ek) {
      snprintf(msg, cap, "kernel extent %lld exceeds the padded input size %lld in dim %d",
               (long long)ek, (long long)span, i);
      return false;
    }
    g->y[i] = (span - ek) / s + 1;
  }
  return true;
}

/* ConvTranspose output sizes and pads (spec: output_shape wins; else from pads or auto_pad). */
static bool convt_out_dims(const kiln_node *nd, conv_geom *g, char *msg, size_t cap) {
  const char *ap = kiln_attr_str(nd, "auto_pad", "NOTSET");
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  bool lower = !strcmp(ap, "SAME_LOWER");
  if (!same && strcmp(ap, "VALID") && strcmp(ap, "NOTSET") && *ap) {
    snprintf(msg, cap, "unknown auto_pad '%s'", ap);
    return false;
  }
  int64_t op[KILN_MAX_RANK];
  if (!spatial_attr(nd, "output_padding", g->nsp, 0, 0, op, msg, cap)) return false;
  size_t nos = 0;
  const int64_t *os = kiln_attr_ints(nd, "output_shape", &nos);
  if (os && nos != (size_t)g->nsp && nos != (size_t)g->nsp + 2) {
    snprintf(msg, cap, "output_shape has %zu values, expected %d", nos, g->nsp);
    return false;
  }
  for (int i = 0; i < g->nsp; i++) {
    if (g->x[i] < 0 || g->k[i] < 0) {
      g->y[i] = -1;
      continue;
    }
    int64_t full = (g->x[i] - 1) * g->stride[i] + op[i] + (g->k[i] - 1) * g->dil[i] + 1;
    if (os || same) {
      /* The output size is given (or x*stride for SAME): pad away the excess; a larger output
       * than the full result is zero at the end. */
      g->y[i] = os ? os[nos - (size_t)g->nsp + (size_t)i] : g->x[i] * g->stride[i];
      int64_t total = full - g->y[i];
      split_pad(total > 0 ? total : 0, lower, &g->pb[i], &g->pe[i]);
    } else {
      if (!strcmp(ap, "VALID")) g->pb[i] = g->pe[i] = 0;
      g->y[i] = full - g->pb[i] - g->pe[i];
    }
    if (g->y[i] < 0) {
      snprintf(msg, cap, "pads make output dim %d negative", i);
      return false;
    }
  }
  return true;
}

/* Fills g from runtime tensors: x [N,C,spatial], w [M,C/group,k] (Conv) or [C,M/group,k]
 * (ConvTranspose). */
static kiln_code conv_geometry(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *w,
                               bool transpose, conv_geom *g) {
  char msg[256];
  if (!x || !w || x->kind != KILN_KIND_TENSOR || w->kind != KILN_KIND_TENSOR)
    return kiln_kfail(c, "X and W must be tensors");
  if (x->rank < 3) return kiln_kfail(c, "X must have rank >= 3 (N, C, spatial), got %d", x->rank);
  if (w->rank != x->rank)
    return kiln_kfail(c, "W has rank %d, X has rank %d", w->rank, x->rank);
  memset(g, 0, sizeof *g);
  g->nsp = x->rank - 2;
  g->n = x->dims[0];
  g->c = x->dims[1];
  if (!conv_attrs(c->node, g, msg, sizeof msg) || !conv_kernel(c->node, g, w->dims + 2, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  if (g->c % g->group) return kiln_kfail(c, "C = %lld is not divisible by group %lld",
                                         (long long)g->c, (long long)g->group);
  if (transpose) {
    if (w->dims[0] != g->c)
      return kiln_kfail(c, "W dim 0 is %lld, expected C = %lld", (long long)w->dims[0],
                        (long long)g->c);
    g->m = w->dims[1] * g->group;
  } else {
    if (w->dims[1] * g->group != g->c)
      return kiln_kfail(c, "W dim 1 is %lld, expected C/group = %lld", (long long)w->dims[1],
                        (long long)(g->c / g->group));
    g->m = w->dims[0];
    if (g->m % g->group) return kiln_kfail(c, "M = %lld is not divisible by group %lld",
                                           (long long)g->m, (long long)g->group);
  }
  for (int i = 0; i < g->nsp; i++) g->x[i] = x->dims[i + 2];
  if (!(transpose ? convt_out_dims : conv_out_dims)(c->node, g, msg, sizeof msg))
    return kiln_kfail(c, "%s", msg);
  g->xsize = kiln_numel(g->nsp, g->x);
  g->ysize = kiln_numel(g->nsp, g->y);
  g->ksize = kiln_numel(g->nsp, g->k);
  return KILN_OK;
}

/* map[kp * ngrid + j] = offset in `img` touched by tap kp from grid position j, or -1, where
 * img_pos = grid_pos * stride + tap * dilation - pad_begin in every spatial dim. */
static int64_t *build_map(const conv_geom *g, const int64_t *img, const int64_t *grid,
                          int64_t ngrid) {
  int64_t n;
  if (!kiln_mul_ok(g->ksize, ngrid, &n) || !kiln_mul_ok(n, 8, &n)) return NULL;
  int64_t *map = kiln_malloc((size_t)n);
  if (!map) return NULL;
  int64_t kidx[KILN_MAX_RANK] = {0};
  for (int64_t kp = 0; kp < g->ksize; kp++) {
    int64_t *row = map + kp * ngrid, gi[KILN_MAX_RANK] = {0};
    for (int64_t j = 0; j < ngrid; j++) {
      int64_t off = 0;
      for (int d = 0; d < g->nsp && off >= 0; d++) {
        int64_t p = gi[d] * g->stride[d] + kidx[d] * g->dil[d] - g->pb[d];
        off = p < 0 || p >= img[d] ? -1 : off * img[d] + p;
      }
      row[j] = off;
      for (int d = g->nsp - 1; d >= 0 && ++gi[d] == grid[d]; d--) gi[d] = 0;
    }
    for (int d = g->nsp - 1; d >= 0 && ++kidx[d] == g->k[d]; d--) kidx[d] = 0;
  }
  return map;
}

/* ---- typed kernels ------------------------------------------------------------------------ */

/* Output columns per GEMM block: a block of B (k rows) stays in cache while every row of A
 * streams over it. */
enum { GEMM_NB = 256 };

#define CONV_KERNELS(T, SUF)                                                                    \
  static void gather_##SUF(const void *xv, const int64_t *map, int64_t n, void *colv) {       \
    const T *x = xv;                                                                          \
    T *col = colv;                                                                            \
    for (int64_t j = 0; j < n; j++) col[j] = map[j] >= 0 ? x[map[j]] : (T)0;                   \
  }                                                                                           \
  static void scatter_##SUF(const void *colv, const int64_t *map, int64_t n, void *yv) {      \
    const T *col = colv;                                                                      \
    T *y = yv;                                                                                \
    for (int64_t j = 0; j < n; j++)                                                           \
      if (map[j] >= 0) y[map[j]] += col[j];                                                   \
  }                                                                                           \
  /* c[m,n] += a[m,k] * b[k,n], i-k-j order so the inner loop streams rows of b and c. */    \
  static void gemm_##SUF(int64_t m, int64_t n, int64_t k, const void *av, const void *bv,     \
                         void *cv) {                                                          \
    const T *a = av, *b = bv;                                                                 \
    T *c = cv;                                                                                \
    for (int64_t j0 = 0; j0 < n; j0 += GEMM_NB) {                                             \
      int64_t nb = n - j0 < GEMM_NB ? n - j0 : GEMM_NB;                                       \
      for (int64_t i = 0; i < m; i++) {                                                       \
        T *restrict ci = c + i * n + j0;                                                      \
        for (int64_t p = 0; p < k; p++) {                                                     \
          const T av_ = a[i * k + p];                                                         \
          const T *restrict bp = b + p * n + j0;                                              \
          for (int64_t j = 0; j < nb; j++) ci[j] += av_ * bp[j];                              \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  static const conv_impl impl_##SUF = {sizeof(T), gather_##SUF, scatter_##SUF, gemm_##SUF, 0};

typedef struct conv_impl {
  size_t esz; /* of x, w and the im2col buffer */
  void (*gather)(const void *x, const int64_t *map, int64_t n, void *col);
  void (*scatter)(const void *col, const int64_t *map, int64_t n, void *y);
  void (*gemm)(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c);
  size_t yesz; /* of y when it differs from esz (0: esz) */
} conv_impl;

CONV_KERNELS(float, f32)
CONV_KERNELS(double, f64)

#define AT(p, i, esz) ((const char *)(p) + (size_t)(i) * (esz))
#define ATW(p, i, esz) ((char *)(p) + (size_t)(i) * (esz))

/* y[N, M, ysize] += conv(x[N, C, xsize], w[M, C/group, ksize]); y starts zeroed. */
static kiln_code conv_forward(kiln_kctx *c, const conv_impl *im, const conv_geom *g,
                              const void *x, const void *w, void *y) {
  int64_t cg = g->c / g->group, mg = g->m / g->group, kk = cg * g->ksize;
  /* A 1x1 kernel with unit strides and no padding reads the input as is. */
  bool direct = g->ksize == 1;
  for (int i = 0; i < g->nsp; i++)
    direct = direct && g->stride[i] == 1 && g->pb[i] == 0 && g->pe[i] == 0;
  int64_t *map = NULL;
  void *col = NULL;
  int64_t colsz;
  if (!direct) {
    map = build_map(g, g->x, g->y, g->ysize);
    col = kiln_mul_ok(kk, g->ysize, &colsz) && kiln_mul_ok(colsz, (int64_t)im->esz, &colsz)
              ? kiln_malloc((size_t)colsz) : NULL;
    if (!map || !col) {
      free(map);
      free(col);
      return kiln_kfail(c, "out of memory for the im2col buffer");
    }
  }
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t gr = 0; gr < g->group; gr++) {
      const void *xg = AT(x, (n * g->c + gr * cg) * g->xsize, im->esz);
      const void *b = xg;
      if (!direct) {
        for (int64_t ci = 0; ci < cg; ci++)
          im->gather(AT(xg, ci * g->xsize, im->esz), map, g->ksize * g->ysize,
                     ATW(col, ci * g->ksize * g->ysize, im->esz));
        b = col;
      }
      void *yb = ATW(y, (n * g->m + gr * mg) * g->ysize, im->yesz ? im->yesz : im->esz);
      kiln_gemm_ctx gctx = {kiln_kpool(c), 0};
      /* float: the packed, threaded GEMM (y starts zeroed and each block is written once) */
      if (im == &impl_f32 && mg && g->ysize && kk &&
          kiln_gemm_f32(&gctx, 0, 0, (size_t)mg, (size_t)g->ysize, (size_t)kk, 1.0f,
                        (const float *)AT(w, gr * mg * kk, im->esz), (size_t)kk, b, (size_t)g->ysize, 0.0f,
                        (float *)yb,
                        (size_t)g->ysize, NULL, NULL) == KILN_OK)
        continue;
      im->gemm(mg, g->ysize, kk, AT(w, gr * mg * kk, im->esz), b, yb);
    }
  free(map);
  free(col);
  return KILN_OK;
}

/* y[N, M, ysize] += convtranspose(x[N, C, xsize], w[C, M/group, ksize]); y starts zeroed. */
static kiln_code convt_forward(kiln_kctx *c, const conv_impl *im, const conv_geom *g,
                               const void *x, const void *w, void *y) {
  int64_t cg = g->c / g->group, mg = g->m / g->group, rows = mg * g->ksize, sz;
  int64_t *map = build_map(g, g->y, g->x, g->xsize);
  void *col = kiln_mul_ok(rows, g->xsize, &sz) && kiln_mul_ok(sz, (int64_t)im->esz, &sz)
                  ? kiln_malloc((size_t)sz) : NULL;
  /* Weights transposed per group to [M/group * ksize, C/group] so the GEMM runs i-k-j. */
  void *wt = kiln_mul_ok(g->c, rows, &sz) && kiln_mul_ok(sz, (int64_t)im->esz, &sz)
                 ? kiln_malloc((size_t)sz) : NULL;
  if (!map || !col || !wt) {
    free(map);
    free(col);
    free(wt);
    return kiln_kfail(c, "out of memory for the col2im buffer");
  }
  for (int64_t gr = 0; gr < g->group; gr++)
    for (int64_t ci = 0; ci < cg; ci++)
      for (int64_t r = 0; r < rows; r++)
        memcpy(ATW(wt, gr * rows * cg + r * cg + ci, im->esz),
               AT(w, (gr * cg + ci) * rows + r, im->esz), im->esz);
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t gr = 0; gr < g->group; gr++) {
      memset(col, 0, (size_t)(rows * g->xsize) * im->esz);
      im->gemm(rows, g->xsize, cg, AT(wt, gr * rows * cg, im->esz),
               AT(x, (n * g->c + gr * cg) * g->xsize, im->esz), col);
      for (int64_t mo = 0; mo < mg; mo++) {
        void *yc = ATW(y, (n * g->m + gr * mg + mo) * g->ysize, im->esz);
        for (int64_t kp = 0; kp < g->ksize; kp++)
          im->scatter(AT(col, (mo * g->ksize + kp) * g->xsize, im->esz), map + kp * g->xsize,
                      g->xsize, yc);
      }
    }
  free(map);
  free(col);
  free(wt);
  return KILN_OK;
}

/* ---- float Conv / ConvTranspose --------------------------------------------------------- */

/* t's elements in the working type (float or double): t's own data when it already has that
 * type, else a converted copy in *owned that the caller frees. */
static const void *as_work(const kiln_tensor *t, kiln_dtype work, void **owned) {
  *owned = NULL;
  if (t->dtype == work) return t->data;
  size_t esz = work == KILN_DOUBLE ? sizeof(double) : sizeof(float);
  void *buf = kiln_malloc((size_t)t->numel * esz);
  if (!buf) return NULL;
  for (int64_t i = 0; i < t->numel; i++) {
    if (work == KILN_DOUBLE)
      ((double *)buf)[i] = kiln_get_f64(t, i);
    else
      ((float *)buf)[i] = (float)kiln_get_f64(t, i);
  }
  *owned = buf;
  return buf;
}

/* The parameters of a float32 2-D convolution of x by w (b: bias or NULL) for
 * kernels/conv2d_f32; KILN_ERR_UNSUPPORTED, with the node not failed, when that path does not
 * apply (other types or ranks). */
kiln_code kiln_conv2d_f32_params_of(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                    const kiln_tensor *b, kiln_conv2d_f32_params *p) {
  if (!x || !w || x->kind != KILN_KIND_TENSOR || w->kind != KILN_KIND_TENSOR ||
      x->dtype != KILN_FLOAT || w->dtype != KILN_FLOAT || x->rank != 4 || w->rank != 4)
    return KILN_ERR_UNSUPPORTED;
  if (b && (b->kind != KILN_KIND_TENSOR || b->dtype != KILN_FLOAT))
    return KILN_ERR_UNSUPPORTED;
  conv_geom g;
  kiln_code rc = conv_geometry(c, x, w, false, &g);
  if (rc) return rc;
  if (b && b->numel != g.m) return KILN_ERR_UNSUPPORTED;
  *p = (kiln_conv2d_f32_params){g.n, g.c, g.x[0], g.x[1], g.m, g.group, g.k[0], g.k[1],
                                g.stride[0], g.stride[1], g.dil[0], g.dil[1], g.pb[0], g.pb[1],
                                g.y[0], g.y[1], 0, 0};
  return KILN_OK;
}

static kiln_code conv_float_run(kiln_kctx *c, bool transpose) {
  if (!transpose) {
    kiln_code frc = kiln_conv2d_f32_run(c, NULL, NULL);
    if (frc != KILN_ERR_UNSUPPORTED) return frc;
  }
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1), *b = kiln_in(c, 2);
  conv_geom g;
  kiln_code rc = conv_geometry(c, x, w, transpose, &g);
  if (rc) return rc;
  if (!kiln_dtype_is_float(x->dtype) || w->dtype != x->dtype)
    return kiln_kunsup(c, "X and W must have the same float type, got %s and %s",
                       kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype));
  if (b && (b->kind != KILN_KIND_TENSOR || b->dtype != x->dtype || b->numel != g.m))
    return kiln_kfail(c, "B must be a %s tensor of %lld elements", kiln_dtype_name(x->dtype),
                      (long long)g.m);
  int64_t dims[KILN_MAX_RANK] = {g.n, g.m};
  memcpy(dims + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, dims);
  if (!y) return KILN_ERR_NOMEM;
  kiln_dtype work = x->dtype == KILN_DOUBLE ? KILN_DOUBLE : KILN_FLOAT;
  const conv_impl *im = work == KILN_DOUBLE ? &impl_f64 : &impl_f32;
  void *xo, *wo, *yo = NULL;
  const void *xw = as_work(x, work, &xo), *ww = as_work(w, work, &wo);
  void *yw = y->dtype == work ? y->data : (yo = kiln_calloc((size_t)y->numel, im->esz));
  if (!xw || !ww || !yw) {
    rc = kiln_kfail(c, "out of memory");
  } else {
    rc = (transpose ? convt_forward : conv_forward)(c, im, &g, xw, ww, yw);
  }
  if (!rc) {
    for (int64_t n = 0; b && n < g.n; n++)
      for (int64_t m = 0; m < g.m; m++) {
        int64_t base = (n * g.m + m) * g.ysize;
        if (work == KILN_DOUBLE) {
          double bv = ((const double *)b->data)[m], *yp = (double *)yw + base;
          for (int64_t j = 0; j < g.ysize; j++) yp[j] += bv;
        } else {
          float bv = (float)kiln_get_f64(b, m), *yp = (float *)yw + base;
          for (int64_t j = 0; j < g.ysize; j++) yp[j] += bv;
        }
      }
    for (int64_t i = 0; yo && i < y->numel; i++) kiln_set_f64(y, i, ((const float *)yo)[i]);
  }
  free(xo);
  free(wo);
  free(yo);
  return rc;
}

static kiln_code conv_run(kiln_kctx *c) { return conv_float_run(c, false); }
static kiln_code convt_run(kiln_kctx *c) { return conv_float_run(c, true); }

/* ---- integer convolutions ----------------------------------------------------------------- */

/* A zero point: absent (0), a scalar, or (when per_ch > 0) one value per channel. */
static kiln_code zero_point(kiln_kctx *c, const kiln_tensor *zp, kiln_dtype want, int64_t per_ch,
                            const char *what, const int64_t **vals, int64_t *scalar) {
  *vals = NULL;
  *scalar = 0;
  if (!zp || zp->kind == KILN_KIND_NONE) return KILN_OK;
  if (zp->kind != KILN_KIND_TENSOR || zp->dtype != want)
    return kiln_kfail(c, "%s must be a %s tensor", what, kiln_dtype_name(want));
  if (zp->numel == 1) {
    *scalar = kiln_get_i64(zp, 0);
    return KILN_OK;
  }
  if (per_ch <= 0 || zp->rank != 1 || zp->numel != per_ch)
    return kiln_kfail(c, "%s must be a scalar%s", what, per_ch > 0 ? " or one value per channel" : "");
  int64_t *v = kiln_malloc(sizeof(int64_t) * (size_t)per_ch);
  if (!v) return kiln_kfail(c, "out of memory");
  for (int64_t i = 0; i < per_ch; i++) v[i] = kiln_get_i64(zp, i);
  *vals = v;
  return KILN_OK;
}

static bool is_q8(kiln_dtype t) { return t == KILN_UINT8 || t == KILN_INT8; }

/* The geometry and zero points of an integer convolution (ConvInteger: x, w at inputs 0 and 1,
 * their zero points at 2 and 3; QLinearConv: 0 and 3, zero points 2 and 5), checked. */
static kiln_code conv_int_setup(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *xzp, const kiln_tensor *w,
                                const kiln_tensor *wzp, conv_geom *g, int64_t *xz, const int64_t **wz, int64_t *wz0) {
  *wz = NULL;
  kiln_code rc = conv_geometry(c, x, w, false, g);
  if (rc) return rc;
  if (!is_q8(x->dtype) || !is_q8(w->dtype))
    return kiln_kfail(c, "x and w must be uint8 or int8, got %s and %s",
                      kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype));
  const int64_t *xzv;
  if ((rc = zero_point(c, xzp, x->dtype, 0, "x_zero_point", &xzv, xz))) return rc;
  return zero_point(c, wzp, w->dtype, g->m, "w_zero_point", wz, wz0);
}

/* acc[N, M, ysize] = sum (x - x_zp)(w - w_zp) through the integer GEMM (ops/qgemm.c); wi: W's
 * input index (its packed form is kept in the node's cache). */
static kiln_code conv_int_acc(kiln_kctx *c, size_t wi, const kiln_tensor *x, const kiln_tensor *w,
                              const conv_geom *g, int64_t xz, const int64_t *wz, int64_t wz0, int32_t *acc) {
  kiln_qconv q = {g->n, g->c, g->m, g->group, g->c / g->group, g->m / g->group, 0, g->ksize, g->xsize,
                  g->ysize, NULL, NULL};
  q.kk = q.cg * g->ksize;
  bool direct = g->ksize == 1;
  for (int i = 0; i < g->nsp; i++) direct = direct && g->stride[i] == 1 && g->pb[i] == 0 && g->pe[i] == 0;
  int64_t *map = NULL, d2[12] = {0};
  if (!direct && g->nsp == 2) { /* the taps from the geometry, no map */
    int64_t v[12] = {g->x[0], g->x[1], g->y[0], g->y[1], g->k[0], g->k[1], g->stride[0], g->stride[1],
                     g->dil[0], g->dil[1], g->pb[0], g->pb[1]};
    memcpy(d2, v, sizeof d2);
    q.d2 = d2;
  } else if (!direct && g->ysize && !(map = build_map(g, g->x, g->y, g->ysize))) {
    return kiln_kfail(c, "out of memory for the im2col map");
  }
  q.map = map;
  kiln_code rc = kiln_qconv_run(c, wi, &q, x, xz, w, wz, wz0, acc);
  free(map);
  return rc;
}

/* Packs a constant W once at session creation (ConvInteger: input 1, QLinearConv: 3). */
static kiln_code conv_int_prepare(kiln_kctx *c, size_t wi) {
  const kiln_tensor *w = kiln_in(c, wi);
  if (!w || w->kind != KILN_KIND_TENSOR || !is_q8(w->dtype) || w->rank < 3 || w->dims[0] <= 0 ||
      !kiln_in_const(c, wi, w))
    return KILN_ERR_UNSUPPORTED;
  int64_t cg = w->dims[1], ks = cg > 0 ? w->numel / w->dims[0] / cg : 0; /* the layout the run asks for */
  return kiln_q8_pack_of(c, wi, w, 0, w->dims[0], w->numel / w->dims[0], kiln_qconv_quads(cg, ks, w->rank - 2), NULL)
             ? KILN_OK
             : KILN_ERR_UNSUPPORTED;
}
static kiln_code convinteger_prepare(kiln_kctx *c) { return conv_int_prepare(c, 1); }
static kiln_code qlinearconv_prepare(kiln_kctx *c) { return conv_int_prepare(c, 3); }

static kiln_code convinteger_run(kiln_kctx *c) {
  conv_geom g;
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 1);
  int64_t xz = 0, wz0 = 0;
  const int64_t *wz;
  kiln_code rc = conv_int_setup(c, x, kiln_in(c, 2), w, kiln_in(c, 3), &g, &xz, &wz, &wz0);
  if (rc) return rc;
  int64_t dims[KILN_MAX_RANK] = {g.n, g.m};
  memcpy(dims + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  kiln_tensor *y = kiln_out_uninit(c, 0, KILN_INT32, x->rank, dims); /* every element is stored */
  rc = y ? conv_int_acc(c, 1, x, w, &g, xz, wz, wz0, y->data) : KILN_ERR_NOMEM;
  free((void *)wz);
  return rc;
}

/* A float scale input: a scalar, or (per_ch > 0) one per channel. */
static kiln_code scale_in(kiln_kctx *c, const kiln_tensor *s, int64_t per_ch, const char *what) {
  if (!s || s->kind != KILN_KIND_TENSOR || s->dtype != KILN_FLOAT)
    return kiln_kfail(c, "%s must be a float tensor", what);
  if (s->numel != 1 && (per_ch <= 0 || s->rank != 1 || s->numel != per_ch))
    return kiln_kfail(c, "%s must be a scalar%s", what, per_ch > 0 ? " or one per channel" : "");
  return KILN_OK;
}

static kiln_code qlinearconv_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *w = kiln_in(c, 3), *yzp = kiln_in(c, 7),
                    *b = kiln_in(c, 8);
  conv_geom g;
  int32_t *acc = NULL;
  int64_t xz = 0, wz0 = 0;
  const int64_t *wz;
  kiln_code rc = conv_int_setup(c, x, kiln_in(c, 2), w, kiln_in(c, 5), &g, &xz, &wz, &wz0);
  if (rc) return rc;
  int64_t nacc;
  acc = kiln_mul_ok(g.n * g.m, g.ysize, &nacc) ? kiln_malloc(sizeof(int32_t) * (size_t)(nacc ? nacc : 1)) : NULL;
  if (!acc) {
    free((void *)wz);
    return kiln_kfail(c, "out of memory");
  }
  if ((rc = conv_int_acc(c, 3, x, w, &g, xz, wz, wz0, acc))) goto done;
  if ((rc = scale_in(c, kiln_in(c, 1), 0, "x_scale")) ||
      (rc = scale_in(c, kiln_in(c, 4), g.m, "w_scale")) ||
      (rc = scale_in(c, kiln_in(c, 6), 0, "y_scale")))
    goto done;
  kiln_dtype yt = yzp && yzp->kind == KILN_KIND_TENSOR ? yzp->dtype : x->dtype;
  if (!is_q8(yt) || (yzp && yzp->numel != 1)) {
    rc = kiln_kfail(c, "y_zero_point must be a uint8 or int8 scalar");
    goto done;
  }
  if (b && (b->kind != KILN_KIND_TENSOR || b->dtype != KILN_INT32 || b->numel != g.m)) {
    rc = kiln_kfail(c, "B must be an int32 tensor of %lld elements", (long long)g.m);
    goto done;
  }
  const float xs = ((const float *)c->in[1]->data)[0], ys = ((const float *)c->in[6]->data)[0];
  if (!(fabsf(ys) > 0.0f) || !isfinite(ys)) { /* no defined result: refuse, never divide by 0 */
    rc = kiln_kfail(c, "y_scale must be finite and non-zero, got %g", (double)ys);
    goto done;
  }
  int64_t dims[KILN_MAX_RANK] = {g.n, g.m};
  memcpy(dims + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  kiln_tensor *y = kiln_out(c, 0, yt, x->rank, dims);
  if (!y) {
    rc = KILN_ERR_NOMEM;
    goto done;
  }
  const kiln_tensor *wst = c->in[4];
  double zp = yzp ? (double)kiln_get_i64(yzp, 0) : 0;
  double lo = yt == KILN_UINT8 ? 0 : -128, hi = yt == KILN_UINT8 ? 255 : 127;
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t m = 0; m < g.m; m++) {
      /* The requantization scale in float, as the reference implementations compute it. */
      float scale = xs * ((const float *)wst->data)[wst->numel == 1 ? 0 : m] / ys;
      int32_t bias = b ? ((const int32_t *)b->data)[m] : 0;
      int64_t base = (n * g.m + m) * g.ysize;
      for (int64_t j = 0; j < g.ysize; j++) {
        double v = rint((double)((float)(acc[base + j] + bias) * scale)) + zp;
        if (isnan(v)) v = zp; /* 0 times an infinite (overflowed or non-finite) scale */
        kiln_set_i64(y, base + j, (int64_t)(v < lo ? lo : v > hi ? hi : v));
      }
    }
done:
  free(acc);
  free((void *)wz);
  return rc;
}

/* ---- shape functions ------------------------------------------------------------------------ */

/* Output: [N, M, spatial]. xi/wi: indices of X and W; dtype UNDEFINED means X's type. */
static kiln_code conv_infer_common(kiln_ictx *c, size_t xi, size_t wi, kiln_dtype dtype,
                                   bool transpose) {
  const kiln_type *x = xi < c->n_in ? c->in[xi] : NULL, *w = wi < c->n_in ? c->in[wi] : NULL;
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (!dtype) dtype = x->dtype;
  int rank = x->rank >= 0 ? x->rank : (w && w->kind == KILN_T_TENSOR ? w->rank : -1);
  if (rank < 0) {
    kiln_infer_tensor(c, 0, dtype, -1, NULL);
    return KILN_OK;
  }
  if (rank < 3) return kiln_ifail(c, "X must have rank >= 3 (N, C, spatial), got %d", rank);
  bool wk = w && w->kind == KILN_T_TENSOR && w->rank == rank;
  conv_geom g;
  memset(&g, 0, sizeof g);
  g.nsp = rank - 2;
  int64_t wd[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  for (int i = 0; i < g.nsp; i++) {
    wd[i] = wk ? w->dims[i + 2] : -1;
    g.x[i] = x->rank >= 0 ? x->dims[i + 2] : -1;
  }
  char msg[256];
  if (!conv_attrs(c->node, &g, msg, sizeof msg) || !conv_kernel(c->node, &g, wd, msg, sizeof msg))
    return kiln_ifail(c, "%s", msg);
  if (!(transpose ? convt_out_dims : conv_out_dims)(c->node, &g, msg, sizeof msg)) {
    for (int i = 0; i < g.nsp; i++) g.y[i] = -1; /* decided at run time */
  }
  dims[0] = x->rank >= 0 ? x->dims[0] : -1;
  dims[1] = -1;
  if (wk && transpose && w->dims[1] >= 0) dims[1] = w->dims[1] * g.group;
  if (wk && !transpose) dims[1] = w->dims[0];
  for (int i = 0; i < g.nsp; i++) dims[i + 2] = g.y[i] > 0 ? g.y[i] : -1;
  kiln_infer_tensor(c, 0, dtype, rank, dims);
  return KILN_OK;
}

static kiln_code conv_infer(kiln_ictx *c) { return conv_infer_common(c, 0, 1, KILN_UNDEFINED, false); }
static kiln_code convt_infer(kiln_ictx *c) { return conv_infer_common(c, 0, 1, KILN_UNDEFINED, true); }
static kiln_code convinteger_infer(kiln_ictx *c) {
  return conv_infer_common(c, 0, 1, KILN_INT32, false);
}
static kiln_code qlinearconv_infer(kiln_ictx *c) {
  const kiln_type *zp = c->n_in > 7 ? c->in[7] : NULL;
  kiln_dtype dt = zp && zp->kind == KILN_T_TENSOR ? zp->dtype : KILN_UNDEFINED;
  return conv_infer_common(c, 0, 3, dt, false);
}

const kiln_op_schema kiln_ops_conv[] = {
    {.domain = "", .name = "Conv", .since = 1, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = conv_infer, .run = conv_run,
     .flow = KILN_FLOW_BATCH, .prepare = kiln_conv2d_f32_prepare, .cost = kiln_cost_conv},
    {.domain = "", .name = "ConvTranspose", .since = 1, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = convt_infer, .run = convt_run, .flow = KILN_FLOW_BATCH},
    {.domain = "", .name = "ConvInteger", .since = 10, .inputs = {2, 4}, .outputs = {1, 1},
     .infer = convinteger_infer, .run = convinteger_run, .prepare = convinteger_prepare,
     .cost = kiln_cost_conv},
    {.domain = "", .name = "QLinearConv", .since = 10, .inputs = {8, 9}, .outputs = {1, 1},
     .infer = qlinearconv_infer, .run = qlinearconv_run, .prepare = qlinearconv_prepare},
    {0},
};
