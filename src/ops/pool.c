/* Pooling: MaxPool, AveragePool, LpPool, their Global forms, MaxUnpool, MaxRoiPool, RoiAlign.
 *
 * The windowed pools share one scheme: a "tap map" gives, for each kernel tap and output
 * position, the offset of the input element read (or -1 in the padding), built once per call
 * from the geometry and reused for every (batch, channel) plane. Each plane is converted to
 * double once, so one kernel serves float, double, float16 and the 8-bit types exactly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/pool_f32.h"
#include "kernels/gemm_internal.h"
#include "ops/cost.h"
#include "ops/op.h"
#include "base/threadpool.h"

typedef struct pool_geom {
  int nsp;                          /* spatial dims */
  int64_t x[KILN_MAX_RANK], y[KILN_MAX_RANK], k[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK], dil[KILN_MAX_RANK];
  int64_t pb[KILN_MAX_RANK], pe[KILN_MAX_RANK];
  int64_t xsize, ysize, ksize;
} pool_geom;

enum { POOL_MAX, POOL_AVG, POOL_LP };

static bool ints_attr(const kiln_node *nd, const char *name, size_t want, int64_t def, int64_t min,
                      int64_t *out, bool required, char *msg, size_t cap) {
  size_t n = 0;
  const int64_t *v = kiln_attr_ints(nd, name, &n);
  if (!v) {
    for (size_t i = 0; i < want; i++) out[i] = def;
    if (required) snprintf(msg, cap, "attribute %s is required", name);
    return !required;
  }
  if (n != want) {
    snprintf(msg, cap, "attribute %s has %zu values, expected %zu", name, n, want);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (v[i] < min) {
      snprintf(msg, cap, "attribute %s[%zu] = %lld is below %lld", name, i, (long long)v[i],
               (long long)min);
      return false;
    }
    out[i] = v[i];
  }
  return true;
}

int64_t kiln_pool_out_dim(int64_t n, int64_t k, int64_t s, int64_t pb, int64_t pe, bool ceil_mode) {
  const int64_t big = (int64_t)1 << 40; /* no sum below can overflow */
  if (n < 0 || n > big || k < 1 || k > big || s < 1 || s > big || pb < 0 || pb > big || pe < 0 || pe > big)
    return -1;
  int64_t span = n + pb + pe - k;
  /* ceil_mode keeps one window that starts inside but overhangs the end (ONNX Runtime and PyTorch
   * give a 1x1 MaxPool of a 1x1 input with kernel 2, stride 2 that way) */
  if (span < 0 && (!ceil_mode || span <= -s)) return -1;
  int64_t y = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (y - 1) * s >= n + pb) y--; /* the last window must start inside */
  return y;
}

/* Output sizes and pads from the node's attributes; g->nsp and g->x (-1 unknown) must be set.
 * `unpool`: MaxUnpool's inverse geometry (no auto_pad/ceil_mode). */
static bool pool_geometry(const kiln_node *nd, pool_geom *g, bool unpool, char *msg, size_t cap) {
  int64_t pads[2 * KILN_MAX_RANK];
  size_t nsp = (size_t)g->nsp;
  if (!ints_attr(nd, "kernel_shape", nsp, 1, 1, g->k, true, msg, cap) ||
      !ints_attr(nd, "strides", nsp, 1, 1, g->stride, false, msg, cap) ||
      !ints_attr(nd, "dilations", nsp, 1, 1, g->dil, false, msg, cap) ||
      !ints_attr(nd, "pads", 2 * nsp, 0, 0, pads, false, msg, cap))
    return false;
  const char *ap = kiln_attr_str(nd, "auto_pad", "NOTSET");
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  bool valid = !strcmp(ap, "VALID");
  if (!same && !valid && strcmp(ap, "NOTSET") && *ap) {
    snprintf(msg, cap, "unknown auto_pad '%s'", ap);
    return false;
  }
  bool ceil_mode = kiln_attr_int(nd, "ceil_mode", 0) != 0;
  for (int i = 0; i < g->nsp; i++) {
    g->pb[i] = pads[i];
    g->pe[i] = pads[i + g->nsp];
    int64_t ek = (g->k[i] - 1) * g->dil[i] + 1, s = g->stride[i];
    if (g->x[i] < 0) {
      g->y[i] = -1;
    } else if (unpool) {
      g->y[i] = (g->x[i] - 1) * s + g->k[i] - g->pb[i] - g->pe[i];
    } else if (same) {
      g->y[i] = (g->x[i] + s - 1) / s;
      int64_t total = (g->y[i] - 1) * s + ek - g->x[i];
      if (total < 0) total = 0;
      g->pb[i] = !strcmp(ap, "SAME_LOWER") ? total - total / 2 : total / 2;
      g->pe[i] = total - g->pb[i];
    } else {
      if (valid) g->pb[i] = g->pe[i] = 0;
      g->y[i] = kiln_pool_out_dim(g->x[i], ek, s, g->pb[i], g->pe[i], ceil_mode);
      if (g->y[i] < 0) {
        snprintf(msg, cap, "kernel extent %lld with pads %lld, %lld does not fit the input of %lld in dim %d",
                 (long long)ek, (long long)g->pb[i], (long long)g->pe[i], (long long)g->x[i], i);
        return false;
      }
    }
    if (g->y[i] < -1 || (g->y[i] < 0 && g->x[i] >= 0)) {
      snprintf(msg, cap, "output dim %d would be negative", i);
      return false;
    }
  }
  g->xsize = kiln_numel(g->nsp, g->x);
  g->ysize = kiln_numel(g->nsp, g->y);
  g->ksize = kiln_numel(g->nsp, g->k);
  return true;
}

/* map[kp * ysize + j]: offset in the input plane read by tap kp for output j, or -1. */
static int64_t *build_map(const pool_geom *g) {
  int64_t n;
  if (!kiln_mul_ok(g->ksize, g->ysize, &n) || !kiln_mul_ok(n, 8, &n)) return NULL;
  int64_t *map = kiln_malloc((size_t)n), kidx[KILN_MAX_RANK] = {0};
  if (!map) return NULL;
  for (int64_t kp = 0; kp < g->ksize; kp++) {
    int64_t *row = map + kp * g->ysize, oi[KILN_MAX_RANK] = {0};
    for (int64_t j = 0; j < g->ysize; j++) {
      int64_t off = 0;
      for (int d = 0; d < g->nsp && off >= 0; d++) {
        int64_t p = oi[d] * g->stride[d] + kidx[d] * g->dil[d] - g->pb[d];
        off = p < 0 || p >= g->x[d] ? -1 : off * g->x[d] + p;
      }
      row[j] = off;
      for (int d = g->nsp - 1; d >= 0 && ++oi[d] == g->y[d]; d--) oi[d] = 0;
    }
    for (int d = g->nsp - 1; d >= 0 && ++kidx[d] == g->k[d]; d--) kidx[d] = 0;
  }
  return map;
}

/* AveragePool divisors: taps inside [lo, hi) per dim, with lo/hi the input or padded extent. */
static void avg_divisors(const pool_geom *g, bool include_pad, double *div) {
  int64_t oi[KILN_MAX_RANK] = {0};
  for (int64_t j = 0; j < g->ysize; j++) {
    double cnt = 1;
    for (int d = 0; d < g->nsp; d++) {
      int64_t lo = include_pad ? -g->pb[d] : 0, hi = g->x[d] + (include_pad ? g->pe[d] : 0), n = 0;
      for (int64_t t = 0; t < g->k[d]; t++) {
        int64_t p = oi[d] * g->stride[d] + t * g->dil[d] - g->pb[d];
        n += p >= lo && p < hi;
      }
      cnt *= (double)n;
    }
    div[j] = cnt;
    for (int d = g->nsp - 1; d >= 0 && ++oi[d] == g->y[d]; d--) oi[d] = 0;
  }
}

static void load_plane(const kiln_tensor *x, int64_t off, int64_t n, double *v) {
  if (x->dtype == KILN_FLOAT)
    for (int64_t i = 0; i < n; i++) v[i] = ((const float *)x->data)[off + i];
  else
    for (int64_t i = 0; i < n; i++) v[i] = kiln_get_f64(x, off + i);
}

static void store_plane(kiln_tensor *y, int64_t off, int64_t n, const double *v) {
  if (y->dtype == KILN_FLOAT)
    for (int64_t i = 0; i < n; i++) ((float *)y->data)[off + i] = (float)v[i];
  else
    for (int64_t i = 0; i < n; i++) kiln_set_f64(y, off + i, v[i]);
}

static bool poolable(kiln_dtype t, bool ints) {
  return kiln_dtype_is_float(t) || (ints && (t == KILN_INT8 || t == KILN_UINT8));
}

/* The p of LpPool / GlobalLpPool: a float attribute in opset 1, an int later. */
static double lp_p(const kiln_node *nd) {
  const kiln_attr *a = kiln_node_attr(nd, "p");
  if (!a) return 2;
  return a->kind == KILN_ATTR_FLOAT ? (double)a->f : (double)a->i;
}

/* The session's pool is used from PAR_MIN values of work; a task is whole planes, at least
 * PAR_TASK values of work. */
enum { PAR_MIN = 1 << 15, PAR_TASK = 1 << 14, GAVG_PAR_MIN = 1 << 17 };

typedef struct pool_job {
  const kiln_tensor *x;
  kiln_tensor *y, *ind;
  const pool_geom *g;
  int kind;
  double p;
  int64_t storage;
  int64_t *map, *arg; /* arg, xv, acc: per thread */
  double *xv, *acc, *div;
} pool_job;

static void pool_task(void *ctx, size_t begin, size_t end, int thread) {
  const pool_job *jb = ctx;
  const pool_geom g = *jb->g;
  int kind = jb->kind;
  double p = jb->p;
  const int64_t *map = jb->map;
  const double *div = jb->div;
  int64_t *arg = jb->arg + (size_t)thread * (size_t)(g.ysize + 8);
  double *xv = jb->xv + (size_t)thread * (size_t)(g.xsize + 8), *acc = jb->acc + (size_t)thread * (size_t)(g.ysize + 8);
  for (int64_t pl = (int64_t)begin; pl < (int64_t)end; pl++) {
    load_plane(jb->x, pl * g.xsize, g.xsize, xv);
    for (int64_t j = 0; j < g.ysize; j++) {
      acc[j] = kind == POOL_MAX ? -INFINITY : 0;
      arg[j] = -1;
    }
    /* Taps in row-major window order; MaxPool keeps the first maximum, as the references do. */
    for (int64_t kp = 0; kp < g.ksize; kp++) {
      const int64_t *row = map + kp * g.ysize;
      for (int64_t j = 0; j < g.ysize; j++) {
        int64_t o = row[j];
        if (o < 0) continue;
        if (kind == POOL_MAX) {
          if (xv[o] > acc[j] || arg[j] < 0) {
            acc[j] = xv[o];
            arg[j] = o;
          }
        } else if (kind == POOL_AVG) {
          acc[j] += xv[o];
        } else {
          acc[j] += p == 2 ? xv[o] * xv[o] : pow(fabs(xv[o]), p);
        }
      }
    }
    for (int64_t j = 0; j < g.ysize; j++) {
      if (kind == POOL_AVG) acc[j] = div[j] > 0 ? acc[j] / div[j] : NAN;
      if (kind == POOL_LP) acc[j] = p == 2 ? sqrt(acc[j]) : pow(acc[j], 1 / p);
    }
    store_plane(jb->y, pl * g.ysize, g.ysize, acc);
    for (int64_t j = 0; jb->ind && j < g.ysize; j++) {
      int64_t o = arg[j] < 0 ? 0 : arg[j], idx = o;
      if (jb->storage == 1) { /* column-major position within the plane */
        idx = 0;
        int64_t mul = 1;
        int64_t coord[KILN_MAX_RANK];
        for (int d = g.nsp - 1; d >= 0; d--) {
          coord[d] = o % g.x[d];
          o /= g.x[d];
        }
        for (int d = 0; d < g.nsp; d++) {
          idx += coord[d] * mul;
          mul *= g.x[d];
        }
      }
      ((int64_t *)jb->ind->data)[pl * g.ysize + j] = pl * g.xsize + idx;
    }
  }
}

/* Float NCHW planes with two spatial dims, MaxPool (without indices) or AveragePool: the
 * windows read straight from the float input. The same taps in the same order as pool_task
 * (AveragePool sums in double, MaxPool keeps the first valid tap unless a later one is
 * greater), so the values are those of the general path. */
/* Taps t in [*lo, *hi) of a window starting at p0 with dilation d that land in [0, n). */
static void tap_range(int64_t p0, int64_t d, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = p0 < 0 ? (-p0 + d - 1) / d : 0;
  *hi = n - p0 <= 0 ? 0 : (n - p0 + d - 1) / d;
  if (*hi > k) *hi = k;
  if (*lo > *hi) *lo = *hi;
}


/* Output row oh of one plane, scalar, except the columns [c0, c1) done by a vector kernel
 * when a0 < a1 (c0 == c1 when none). */
static void pool2d_row_scalar(const pool_job *jb, const float *xp, float *yp, int64_t oh, int64_t h0,
                              int64_t a0, int64_t a1, int64_t c0, int64_t c1) {
  const pool_geom *g = jb->g;
  int64_t W = g->x[1], OW = g->y[1], kw = g->k[1], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];
  for (int64_t ow = 0; ow < OW; ow++) {
    if (ow == c0 && a0 < a1) ow = c1; /* done by the vector kernel */
    if (ow >= OW) break;
    int64_t w0 = ow * sw - g->pb[1], b0, b1;
    tap_range(w0, dw, kw, W, &b0, &b1);
    if (jb->kind == POOL_MAX) { /* the first valid tap (a0, b0), then any greater one */
      float m = a0 < a1 && b0 < b1 ? xp[(h0 + a0 * dh) * W + w0 + b0 * dw] : -INFINITY;
      for (int64_t a = a0; a < a1; a++) {
        const float *row = xp + (h0 + a * dh) * W;
        for (int64_t b = b0; b < b1; b++) m = row[w0 + b * dw] > m ? row[w0 + b * dw] : m;
      }
      yp[oh * OW + ow] = m;
    } else {
      double acc = 0, dv = jb->div[oh * OW + ow];
      for (int64_t a = a0; a < a1; a++) {
        const float *row = xp + (h0 + a * dh) * W;
        for (int64_t b = b0; b < b1; b++) acc += row[w0 + b * dw];
      }
      yp[oh * OW + ow] = (float)(dv > 0 ? acc / dv : NAN);
    }
  }
}

static void pool2d_float_task(void *ctx, size_t begin, size_t end, int thread) {
  const pool_job *jb = ctx;
  const pool_geom *g = jb->g;
  int64_t H = g->x[0], W = g->x[1], OH = g->y[0], OW = g->y[1];
  int64_t kh = g->k[0], kw = g->k[1], sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];
  (void)thread;
  /* MaxPool, AVX-512, x stride 1 or 2: columns [c0, c1) have every column tap inside the row */
  int64_t c0 = 0, c1 = 0;
  const kiln_pool_simd *simd = kiln_pool_simd_get(); /* chosen once from kiln_cpu_isa() */
  if (jb->kind == POOL_MAX && simd->maxpool_row && (sw == 1 || sw == 2)) {
    c0 = g->pb[1] > 0 ? (g->pb[1] + sw - 1) / sw : 0;               /* ow * sw >= pl */
    int64_t last = W - 1 - (kw - 1) * dw + g->pb[1];                /* ow * sw <= last */
    c1 = last < 0 ? 0 : last / sw + 1;
    if (c1 > OW) c1 = OW;
    if (c0 > c1) c0 = c1;
  }
  /* kernel 3x3 at stride 2: pairs of output rows share their middle input row */
  bool pairs = c0 < c1 && kh == 3 && kw == 3 && sh == 2 && sw == 2 && dh == 1 && dw == 1;
  /* the same, no padding, every window inside: whole planes (those without NaN or -0.0) */
  bool planes = pairs && simd->maxpool_plane_k3s2 && g->pb[0] == 0 && g->pb[1] == 0 && 2 * OH < H && 2 * OW < W;
  for (int64_t pl = (int64_t)begin; pl < (int64_t)end; pl++) {
    const float *xp = (const float *)jb->x->data + pl * H * W;
    float *yp = (float *)jb->y->data + pl * OH * OW;
    if (planes && simd->maxpool_plane_k3s2(xp, yp, H, W, OH, OW)) continue;
    for (int64_t oh = 0; oh < OH; oh++) {
      int64_t h0 = oh * sh - g->pb[0], a0, a1;
      tap_range(h0, dh, kh, H, &a0, &a1);
      if (pairs && oh + 1 < OH && h0 >= 0 && h0 + 4 < H) {
        simd->maxpool_2rows_k3s2(xp, yp + oh * OW, yp + (oh + 1) * OW, W, h0, c0, c1, g->pb[1]);
        pool2d_row_scalar(jb, xp, yp, oh, h0, a0, a1, c0, c1);
        oh++, h0 += 2;
        pool2d_row_scalar(jb, xp, yp, oh, h0, a0, a1, c0, c1);
        continue;
      }
      if (c0 < c1 && a0 < a1)
        simd->maxpool_row(xp, yp + oh * OW, W, h0, a0, a1, dh, c0, c1, sw, g->pb[1], kw, dw);
      pool2d_row_scalar(jb, xp, yp, oh, h0, a0, a1, c0, c1);
    }
  }
}

static kiln_code pool_run(kiln_kctx *c, int kind) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!x || x->kind != KILN_KIND_TENSOR || x->rank < 3)
    return kiln_kfail(c, "X must be a tensor of rank >= 3 (N, C, spatial)");
  if (!poolable(x->dtype, kind == POOL_MAX))
    return kiln_kunsup(c, "unsupported element type %s", kiln_dtype_name(x->dtype));
  pool_geom g;
  char msg[256];
  g.nsp = x->rank - 2;
  memcpy(g.x, x->dims + 2, sizeof(int64_t) * (size_t)g.nsp);
  if (!pool_geometry(c->node, &g, false, msg, sizeof msg)) return kiln_kfail(c, "%s", msg);
  double p = kind == POOL_LP ? lp_p(c->node) : 0;
  if (kind == POOL_LP && !(p > 0)) return kiln_kfail(c, "p must be positive");
  int64_t storage = kiln_attr_int(c->node, "storage_order", 0);
  if (storage != 0 && storage != 1) return kiln_kfail(c, "storage_order must be 0 or 1");
  int64_t dims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  memcpy(dims + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  /* the float path below (pool2d_float_task) writes every element */
  bool fast_out = x->dtype == KILN_FLOAT && x->rank == 4 && kind != POOL_LP &&
                  !(kind == POOL_MAX && kiln_out_used(c, 1));
  kiln_tensor *y = fast_out ? kiln_out_uninit(c, 0, x->dtype, x->rank, dims)
                            : kiln_out(c, 0, x->dtype, x->rank, dims),
              *ind = NULL;
  if (!y) return KILN_ERR_NOMEM;
  if (kind == POOL_MAX && kiln_out_used(c, 1) && !(ind = kiln_out(c, 1, KILN_INT64, x->rank, dims)))
    return KILN_ERR_NOMEM;
  int64_t planes = x->dims[0] * x->dims[1];
  /* (n, c) planes are independent: threads take whole planes, each with its own buffers, so
   * the output does not depend on the thread count */
  kiln_threadpool *pool = planes > 1 && planes * (g.xsize + g.ysize * g.ksize) >= PAR_MIN ? kiln_kpool(c) : NULL;
  size_t nthr = (size_t)kiln_threadpool_size(pool);
  pool_job j = {x, y, ind, &g, kind, p, storage, fast_out ? NULL : build_map(&g), NULL, NULL, NULL, NULL};
  /* per thread: ysize + 8 and xsize + 8 values, so that threads never share a cache line */
  j.arg = kiln_malloc(sizeof(int64_t) * (size_t)(g.ysize + 8) * nthr);
  j.xv = kiln_malloc(sizeof(double) * (size_t)(g.xsize + 8) * nthr);
  j.acc = kiln_malloc(sizeof(double) * (size_t)(g.ysize + 8) * nthr);
  j.div = kiln_malloc(sizeof(double) * (size_t)g.ysize);
  kiln_code rc = KILN_OK;
  if ((!fast_out && !j.map) || !j.arg || !j.xv || !j.acc || !j.div) {
    rc = kiln_kfail(c, "out of memory");
  } else {
    if (kind == POOL_AVG) avg_divisors(&g, kiln_attr_int(c->node, "count_include_pad", 0) != 0, j.div);
    int64_t per = g.xsize + g.ysize * g.ksize;
    bool fast = fast_out; /* float, two spatial dims, not Lp, no indices */
    /* the float path takes contiguous halves (static): each thread reads the planes that the
     * same thread of an equally split producer wrote, and threads do not write the same
     * cache lines at plane boundaries */
    if (fast)
      kiln_parallel_for(pool, (size_t)planes, pool2d_float_task, &j, 0);
    else
      kiln_parallel_for(pool, (size_t)planes, pool_task, &j,
                        per >= PAR_TASK ? 1 : (size_t)(PAR_TASK / (per ? per : 1)));
  }
  free(j.map);
  free(j.arg);
  free(j.xv);
  free(j.acc);
  free(j.div);
  return rc;
}

static kiln_code maxpool_run(kiln_kctx *c) { return pool_run(c, POOL_MAX); }
static kiln_code avgpool_run(kiln_kctx *c) { return pool_run(c, POOL_AVG); }
static kiln_code lppool_run(kiln_kctx *c) { return pool_run(c, POOL_LP); }

typedef struct gpool_job {
  const kiln_tensor *x;
  kiln_tensor *y;
  int kind;
  double p;
  int64_t n; /* values per plane */
} gpool_job;


/* Planes [begin, end): each reduced in order by one task. */
static void gpool_task(void *ctx, size_t begin, size_t end, int thread) {
  const gpool_job *j = ctx;
  const kiln_tensor *x = j->x;
  int64_t n = j->n;
  (void)thread;
  int64_t pl = (int64_t)begin;
  if (x->dtype == KILN_FLOAT && j->kind == POOL_AVG) { /* float: 8 double lanes, SIMD where it can */
    enum { CHUNK = 64 };
    for (double s[CHUNK]; pl < (int64_t)end; pl += CHUNK) {
      int64_t m = (int64_t)end - pl < CHUNK ? (int64_t)end - pl : CHUNK;
      kiln_sum_rows_f32((const float *)x->data + pl * n, m, n, s);
      for (int64_t k = 0; k < m; k++) ((float *)j->y->data)[pl + k] = (float)(n ? s[k] / (double)n : NAN);
    }
    return;
  }
  for (; pl < (int64_t)end; pl++) {
    double acc = j->kind == POOL_MAX ? -INFINITY : 0;
    for (int64_t i = 0; i < n; i++) {
      double v = x->dtype == KILN_FLOAT ? ((const float *)x->data)[pl * n + i] : kiln_get_f64(x, pl * n + i);
      if (j->kind == POOL_MAX)
        acc = v > acc || i == 0 ? v : acc;
      else if (j->kind == POOL_AVG)
        acc += v;
      else
        acc += pow(fabs(v), j->p);
    }
    if (j->kind == POOL_AVG) acc = n ? acc / (double)n : NAN;
    if (j->kind == POOL_LP) acc = pow(acc, 1 / j->p);
    if (x->dtype == KILN_FLOAT)
      ((float *)j->y->data)[pl] = (float)acc;
    else
      kiln_set_f64(j->y, pl, acc);
  }
}

static kiln_code global_run(kiln_kctx *c, int kind) {
  const kiln_tensor *x = kiln_in(c, 0);
  if (!x || x->kind != KILN_KIND_TENSOR || x->rank < 3)
    return kiln_kfail(c, "X must be a tensor of rank >= 3 (N, C, spatial)");
  if (!poolable(x->dtype, false))
    return kiln_kunsup(c, "unsupported element type %s", kiln_dtype_name(x->dtype));
  double p = kind == POOL_LP ? lp_p(c->node) : 0;
  if (kind == POOL_LP && !(p > 0)) return kiln_kfail(c, "p must be positive");
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, dims);
  if (!y) return KILN_ERR_NOMEM;
  int64_t planes = x->dims[0] * x->dims[1], n = planes ? x->numel / planes : 0;
  gpool_job j = {x, y, kind, p, n};
  /* the float average reads ~25 GB/s on one thread: below 128 Ki values (MobileNetV2's
   * 1280 x 7 x 7 takes 10 us) a second thread saves less than waking and joining it costs */
  int64_t par_min = x->dtype == KILN_FLOAT && kind == POOL_AVG ? GAVG_PAR_MIN : PAR_MIN;
  kiln_threadpool *pool = planes > 1 && x->numel >= par_min ? kiln_kpool(c) : NULL;
  kiln_parallel_for(pool, (size_t)planes, gpool_task, &j, n >= PAR_TASK ? 1 : (size_t)(PAR_TASK / (n ? n : 1)));
  return KILN_OK;
}

static kiln_code gmaxpool_run(kiln_kctx *c) { return global_run(c, POOL_MAX); }
static kiln_code gavgpool_run(kiln_kctx *c) { return global_run(c, POOL_AVG); }
static kiln_code glppool_run(kiln_kctx *c) { return global_run(c, POOL_LP); }

/* ---- MaxUnpool ---------------------------------------------------------------------------- */

static kiln_code maxunpool_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *ix = kiln_in(c, 1), *os = kiln_in(c, 2);
  if (!x || x->kind != KILN_KIND_TENSOR || x->rank < 3)
    return kiln_kfail(c, "X must be a tensor of rank >= 3 (N, C, spatial)");
  if (!ix || ix->kind != KILN_KIND_TENSOR || ix->dtype != KILN_INT64 || !kiln_same_shape(x, ix))
    return kiln_kfail(c, "I must be an int64 tensor of X's shape");
  /* Indices address the default unpooled shape; an explicit output_shape only pads it, so
   * each index is re-addressed by its coordinates in the larger output. */
  int64_t def[KILN_MAX_RANK] = {x->dims[0], x->dims[1]}, dims[KILN_MAX_RANK];
  pool_geom g;
  char msg[256];
  g.nsp = x->rank - 2;
  memcpy(g.x, x->dims + 2, sizeof(int64_t) * (size_t)g.nsp);
  if (!pool_geometry(c->node, &g, true, msg, sizeof msg)) return kiln_kfail(c, "%s", msg);
  memcpy(def + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  memcpy(dims, def, sizeof dims);
  if (os) {
    size_t n = 0;
    kiln_code rc = kiln_read_ints(c, os, dims, KILN_MAX_RANK, &n);
    if (rc) return rc;
    if (n != (size_t)x->rank) return kiln_kfail(c, "output_shape must have %d values", x->rank);
    for (int d = 0; d < x->rank; d++)
      if (dims[d] < def[d])
        return kiln_kfail(c, "output_shape dim %d (%lld) is smaller than the unpooled size %lld",
                          d, (long long)dims[d], (long long)def[d]);
  }
  kiln_tensor *y = kiln_out(c, 0, x->dtype, x->rank, dims);
  if (!y) return KILN_ERR_NOMEM;
  int64_t defn = kiln_numel(x->rank, def);
  const int64_t *iv = ix->data;
  for (int64_t i = 0; i < x->numel; i++) {
    if (iv[i] < 0 || iv[i] >= defn)
      return kiln_kfail(c, "index %lld is outside the unpooled tensor of %lld elements",
                        (long long)iv[i], (long long)defn);
    int64_t rest = iv[i], off = 0, mul = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
      off += (rest % def[d]) * mul;
      rest /= def[d];
      mul *= dims[d];
    }
    kiln_copy_elem(y, off, x, i);
  }
  return KILN_OK;
}

/* ---- MaxRoiPool / RoiAlign ---------------------------------------------------------------- */

static kiln_code roi_check(kiln_kctx *c, const kiln_tensor *x, const kiln_tensor *rois,
                           int64_t cols) {
  if (!x || x->kind != KILN_KIND_TENSOR || x->rank != 4 || !kiln_dtype_is_float(x->dtype))
    return kiln_kfail(c, "X must be a float tensor of rank 4 (N, C, H, W)");
  if (!rois || rois->kind != KILN_KIND_TENSOR || rois->rank != 2 || rois->dims[1] != cols ||
      !kiln_dtype_is_float(rois->dtype))
    return kiln_kfail(c, "rois must be a float tensor of shape [num_rois, %lld]", (long long)cols);
  return KILN_OK;
}

static kiln_code maxroipool_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *rois = kiln_in(c, 1);
  kiln_code rc = roi_check(c, x, rois, 5);
  if (rc) return rc;
  size_t np = 0;
  const int64_t *ps = kiln_attr_ints(c->node, "pooled_shape", &np);
  if (!ps || np != 2 || ps[0] < 1 || ps[1] < 1)
    return kiln_kfail(c, "pooled_shape must be two positive values");
  double scale = kiln_attr_float(c->node, "spatial_scale", 1.0f);
  int64_t nr = rois->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  int64_t dims[4] = {nr, C, ps[0], ps[1]};
  kiln_tensor *y = kiln_out(c, 0, x->dtype, 4, dims);
  if (!y) return KILN_ERR_NOMEM;
  for (int64_t r = 0; r < nr; r++) {
    double rv[5];
    for (int i = 0; i < 5; i++) rv[i] = kiln_get_f64(rois, r * 5 + i);
    int64_t b = (int64_t)rv[0];
    if (b < 0 || b >= x->dims[0]) return kiln_kfail(c, "roi %lld has batch index %lld out of range",
                                                    (long long)r, (long long)b);
    /* Caffe's rounding of the roi corners, as the ONNX reference implementations do. */
    int64_t ws = (int64_t)round(rv[1] * scale), hs = (int64_t)round(rv[2] * scale);
    int64_t we = (int64_t)round(rv[3] * scale), he = (int64_t)round(rv[4] * scale);
    double bh = (double)(he - hs + 1 > 1 ? he - hs + 1 : 1) / (double)ps[0];
    double bw = (double)(we - ws + 1 > 1 ? we - ws + 1 : 1) / (double)ps[1];
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t ph = 0; ph < ps[0]; ph++)
        for (int64_t pw = 0; pw < ps[1]; pw++) {
          int64_t h0 = (int64_t)floor((double)ph * bh) + hs, h1 = (int64_t)ceil((double)(ph + 1) * bh) + hs;
          int64_t w0 = (int64_t)floor((double)pw * bw) + ws, w1 = (int64_t)ceil((double)(pw + 1) * bw) + ws;
          h0 = h0 < 0 ? 0 : h0 > H ? H : h0;
          h1 = h1 < 0 ? 0 : h1 > H ? H : h1;
          w0 = w0 < 0 ? 0 : w0 > W ? W : w0;
          w1 = w1 < 0 ? 0 : w1 > W ? W : w1;
          double m = h1 <= h0 || w1 <= w0 ? 0 : -INFINITY;
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              double v = kiln_get_f64(x, ((b * C + ch) * H + h) * W + w);
              if (v > m) m = v;
            }
          kiln_set_f64(y, ((r * C + ch) * ps[0] + ph) * ps[1] + pw, m);
        }
  }
  return KILN_OK;
}

/* One bilinear sample of a HxW plane at (yy, xx): the four corner offsets and weights, or all
 * weights zero when the point lies outside [-1, H] x [-1, W]. */
static void bilinear(int64_t H, int64_t W, double yy, double xx, int64_t off[4], double wt[4]) {
  if (yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W) {
    for (int i = 0; i < 4; i++) off[i] = 0, wt[i] = 0;
    return;
  }
  if (yy <= 0) yy = 0;
  if (xx <= 0) xx = 0;
  int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
  if (yl >= H - 1) yh = yl = H - 1, yy = (double)yl;
  else yh = yl + 1;
  if (xl >= W - 1) xh = xl = W - 1, xx = (double)xl;
  else xh = xl + 1;
  double ly = yy - (double)yl, lx = xx - (double)xl, hy = 1 - ly, hx = 1 - lx;
  off[0] = yl * W + xl, off[1] = yl * W + xh, off[2] = yh * W + xl, off[3] = yh * W + xh;
  wt[0] = hy * hx, wt[1] = hy * lx, wt[2] = ly * hx, wt[3] = ly * lx;
}

static kiln_code roialign_run(kiln_kctx *c) {
  const kiln_tensor *x = kiln_in(c, 0), *rois = kiln_in(c, 1), *bi = kiln_in(c, 2);
  kiln_code rc = roi_check(c, x, rois, 4);
  if (rc) return rc;
  int64_t nr = rois->dims[0], N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  if (!bi || bi->kind != KILN_KIND_TENSOR || !kiln_dtype_is_int(bi->dtype) || bi->numel != nr)
    return kiln_kfail(c, "batch_indices must be an integer tensor of %lld elements", (long long)nr);
  const char *mode = kiln_attr_str(c->node, "mode", "avg");
  bool is_max = !strcmp(mode, "max");
  if (!is_max && strcmp(mode, "avg")) return kiln_kfail(c, "unknown mode '%s'", mode);
  /* Opset 10 had no coordinate_transformation_mode and behaved as output_half_pixel. */
  const char *ctm = kiln_attr_str(c->node, "coordinate_transformation_mode",
                                  c->opset >= 16 ? "half_pixel" : "output_half_pixel");
  bool half = !strcmp(ctm, "half_pixel");
  if (!half && strcmp(ctm, "output_half_pixel"))
    return kiln_kfail(c, "unknown coordinate_transformation_mode '%s'", ctm);
  int64_t oh = kiln_attr_int(c->node, "output_height", 1), ow = kiln_attr_int(c->node, "output_width", 1);
  int64_t sr = kiln_attr_int(c->node, "sampling_ratio", 0);
  double scale = kiln_attr_float(c->node, "spatial_scale", 1.0f);
  if (oh < 1 || ow < 1 || sr < 0) return kiln_kfail(c, "invalid output size or sampling_ratio");
  int64_t dims[4] = {nr, C, oh, ow};
  kiln_tensor *y = kiln_out(c, 0, x->dtype, 4, dims);
  if (!y) return KILN_ERR_NOMEM;
  double off0 = half ? 0.5 : 0;
  for (int64_t r = 0; r < nr; r++) {
    int64_t b = kiln_get_i64(bi, r);
    if (b < 0 || b >= N) return kiln_kfail(c, "batch index %lld out of range", (long long)b);
    double x0 = kiln_get_f64(rois, r * 4) * scale - off0, y0 = kiln_get_f64(rois, r * 4 + 1) * scale - off0;
    double x1 = kiln_get_f64(rois, r * 4 + 2) * scale - off0, y1 = kiln_get_f64(rois, r * 4 + 3) * scale - off0;
    double rw = x1 - x0, rh = y1 - y0;
    if (!half) { /* output_half_pixel forces rois to at least 1x1 */
      if (rw < 1) rw = 1;
      if (rh < 1) rh = 1;
    }
    double bh = rh / (double)oh, bw = rw / (double)ow;
    if (!(fabs(bh) < 1e9) || !(fabs(bw) < 1e9)) /* NaN, infinite or absurd: no sampling grid */
      return kiln_kfail(c, "roi %lld is not finite or too large", (long long)r);
    int64_t gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)oh);
    int64_t gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)ow);
    /* a grid no model needs (sampling_ratio 25,165,823 came from the fuzzer) would run for days */
    double samples = (double)gh * (double)gw * (double)oh * (double)ow * (double)C;
    if (samples > 1e9)
      return kiln_kfail(c, "roi %lld: a sampling grid of %lld x %lld per bin (sampling_ratio %lld) needs "
                        "%.3g samples, more than the 1e9 per roi kiln takes", (long long)r, (long long)gh,
                        (long long)gw, (long long)sr, samples);
    double count = gh * gw > 1 ? (double)(gh * gw) : 1;
    for (int64_t ch = 0; ch < C; ch++) {
      int64_t base = (b * C + ch) * H * W;
      for (int64_t ph = 0; ph < oh; ph++)
        for (int64_t pw = 0; pw < ow; pw++) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; iy++)
            for (int64_t ix = 0; ix < gw; ix++) {
              double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
              double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
              int64_t off[4];
              double wt[4], v = 0;
              bilinear(H, W, yy, xx, off, wt);
              for (int i = 0; i < 4; i++) {
                double t = wt[i] * kiln_get_f64(x, base + off[i]);
                /* max mode: the largest weighted corner, as onnxruntime defines it */
                v = is_max ? (i == 0 || t > v ? t : v) : v + t;
              }
              acc = is_max ? (first || v > acc ? v : acc) : acc + v;
              first = false;
            }
          kiln_set_f64(y, ((r * C + ch) * oh + ph) * ow + pw, is_max ? acc : acc / count);
        }
    }
  }
  return KILN_OK;
}

/* ---- shape functions ------------------------------------------------------------------------ */

static kiln_code pool_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  if (x->rank < 0) {
    kiln_infer_tensor(c, 0, x->dtype, -1, NULL);
    if (c->n_out > 1) kiln_infer_tensor(c, 1, KILN_INT64, -1, NULL);
    return KILN_OK;
  }
  if (x->rank < 3) return kiln_ifail(c, "X must have rank >= 3 (N, C, spatial), got %d", x->rank);
  pool_geom g;
  char msg[256];
  g.nsp = x->rank - 2;
  memcpy(g.x, x->dims + 2, sizeof(int64_t) * (size_t)g.nsp);
  int64_t dims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  if (!pool_geometry(c->node, &g, false, msg, sizeof msg))
    for (int i = 0; i < g.nsp; i++) g.y[i] = -1; /* reported at run time */
  memcpy(dims + 2, g.y, sizeof(int64_t) * (size_t)g.nsp);
  kiln_infer_tensor(c, 0, x->dtype, x->rank, dims);
  if (c->n_out > 1) kiln_infer_tensor(c, 1, KILN_INT64, x->rank, dims);
  return KILN_OK;
}

static kiln_code global_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  kiln_infer_tensor(c, 0, x->dtype, x->rank, dims);
  return KILN_OK;
}

static kiln_code roi_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0], *r = c->in[1];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  int64_t dims[4] = {r && r->kind == KILN_T_TENSOR && r->rank == 2 ? r->dims[0] : -1,
                     x->rank == 4 ? x->dims[1] : -1, -1, -1};
  if (!strcmp(c->node->op_type, "RoiAlign")) {
    dims[2] = kiln_attr_int(c->node, "output_height", 1);
    dims[3] = kiln_attr_int(c->node, "output_width", 1);
  } else {
    size_t n = 0;
    const int64_t *ps = kiln_attr_ints(c->node, "pooled_shape", &n);
    if (ps && n == 2) dims[2] = ps[0], dims[3] = ps[1];
  }
  kiln_infer_tensor(c, 0, x->dtype, 4, dims);
  return KILN_OK;
}

static kiln_code maxunpool_infer(kiln_ictx *c) {
  const kiln_type *x = c->in[0];
  if (!x || x->kind != KILN_T_TENSOR) return KILN_OK;
  kiln_infer_tensor(c, 0, x->dtype, x->rank, NULL);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_pool[] = {
    {.domain = "", .name = "MaxPool", .since = 1, .inputs = {1, 1}, .outputs = {1, 2},
     .infer = pool_infer, .run = maxpool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_pool},
    {.domain = "", .name = "AveragePool", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = pool_infer, .run = avgpool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_pool},
    {.domain = "", .name = "LpPool", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = pool_infer, .run = lppool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_pool},
    {.domain = "", .name = "GlobalMaxPool", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = global_infer, .run = gmaxpool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_global_pool},
    {.domain = "", .name = "GlobalAveragePool", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = global_infer, .run = gavgpool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_global_pool},
    {.domain = "", .name = "GlobalLpPool", .since = 1, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = global_infer, .run = glppool_run, .flow = KILN_FLOW_BATCH, .cost = kiln_cost_global_pool},
    {.domain = "", .name = "MaxUnpool", .since = 9, .inputs = {2, 3}, .outputs = {1, 1},
     .infer = maxunpool_infer, .run = maxunpool_run},
    {.domain = "", .name = "MaxRoiPool", .since = 1, .inputs = {2, 2}, .outputs = {1, 1},
     .infer = roi_infer, .run = maxroipool_run},
    {.domain = "", .name = "RoiAlign", .since = 10, .inputs = {3, 3}, .outputs = {1, 1},
     .infer = roi_infer, .run = roialign_run},
    {0},
};
