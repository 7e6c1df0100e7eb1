/* The integer GEMM driver of the quantized ops (see qgemm.h). */
#include "ops/qgemm.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/igemm.h"

void kiln_q8_pack_free(void *p) { free(p); }

int64_t kiln_qconv_quads(int64_t cg, int64_t ksize, int spatial_dims) {
  return spatial_dims == 2 && ksize > 1 && cg > 0 && cg % 4 == 0 ? ksize : 0;
}

/* The rows of w [rows][cg * ks] (k: channel, tap) with k in quad order (quad, tap, channel in the
 * quad), into a new buffer; NULL without memory. */
static uint8_t *quad_order(const uint8_t *w, int64_t rows, int64_t cols, int64_t ks) {
  uint8_t *o = kiln_malloc((size_t)(rows * cols));
  if (!o) return NULL;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t c = 0; c < cols / ks; c++)
      for (int64_t t = 0; t < ks; t++) o[i * cols + ((c / 4 * ks + t) * 4 + c % 4)] = w[i * cols + c * ks + t];
  return o;
}

/* A new pack of w's bytes (flipped into the signed form) with its sums; NULL without memory. */
static kiln_q8_pack *make_pack(const kiln_tensor *w, int as_b, int64_t rows, int64_t cols, int64_t quad_ks) {
  int64_t k = as_b ? rows : cols, k4 = (k + 3) / 4;
  int64_t ld = as_b ? (cols + KILN_IGEMM_NB - 1) / KILN_IGEMM_NB * KILN_IGEMM_NB : k4 * 4;
  int64_t nsum = as_b ? ld : rows, bytes = as_b ? k4 * 4 * ld : rows * ld;
  kiln_q8_pack *p = kiln_malloc_weights(sizeof *p + sizeof(int32_t) * (size_t)nsum + (size_t)bytes);
  if (!p) return NULL;
  *p = (kiln_q8_pack){w->data, as_b, rows, cols, k4, ld, w->dtype == KILN_UINT8 ? 0x80 : 0, quad_ks, NULL, NULL};
  p->sums = (int32_t *)(void *)(p + 1);
  p->data = (uint8_t *)(p->sums + nsum);
  if (as_b) {
    kiln_igemm_pack_b(rows, cols, w->data, cols, p->flip, p->data, ld);
    kiln_igemm_colsum(k4, ld, p->data, 1, p->sums);
  } else {
    uint8_t *ordered = quad_ks ? quad_order(w->data, rows, cols, quad_ks) : NULL;
    if (quad_ks && !ordered) {
      free(p);
      return NULL;
    }
    kiln_igemm_pack_a(rows, cols, ordered ? ordered : w->data, cols, p->flip, 1, p->data, p->sums);
    free(ordered);
  }
  return p;
}

static bool pack_fits(const kiln_q8_pack *p, const kiln_tensor *w, int as_b, int64_t rows, int64_t cols,
                      int64_t quad_ks) {
  return p && p->source == w->data && p->as_b == as_b && p->rows == rows && p->cols == cols &&
         p->flip == (w->dtype == KILN_UINT8 ? 0x80 : 0) && p->quad_ksize == quad_ks;
}

const kiln_q8_pack *kiln_q8_pack_of(kiln_kctx *c, size_t wi, const kiln_tensor *w, int as_b, int64_t rows,
                                    int64_t cols, int64_t quad_ks, kiln_q8_pack **owned) {
  if (owned) *owned = NULL;
  if (c->state && w->data && kiln_in_const(c, wi, w)) {
    const kiln_q8_pack *p = kiln_cache_get(c);
    if (!p) {
      kiln_q8_pack *mine = make_pack(w, as_b, rows, cols, quad_ks);
      p = mine ? kiln_cache_publish(c, mine, kiln_q8_pack_free) : NULL;
    }
    if (pack_fits(p, w, as_b, rows, cols, quad_ks)) return p;
  }
  if (!owned || !w->data) return NULL;
  return *owned = make_pack(w, as_b, rows, cols, quad_ks);
}

/* ---- convolutions ---- */

/* The input rows (axis 0) or columns (axis 1) a 2-D convolution's taps reach, counted from the
 * first begin-padding one: the extent of its padded input (d2 as in kiln_qconv). */
static int64_t padded_extent(const int64_t *d2, int axis) {
  return (d2[2 + axis] - 1) * d2[6 + axis] + (d2[4 + axis] - 1) * d2[8 + axis] + 1;
}

typedef struct conv_job {
  const kiln_qconv *q;
  const uint8_t *x, *w;  /* x [n, c, xsize] bytes; w the packed A */
  uint8_t xflip, xfill;  /* flip of x's bytes; the value of a padding tap (the zero point) */
  int32_t *y;
  const int32_t *r, *u;  /* [m] */
  /* channel quads (kiln_qconv_quads): per task, x flipped and padded as [cg / 4][hp][wp][4], and
   * (when u) the sum of its bytes over all channels [hp][wp] */
  uint8_t *x4;
  int32_t *s4;
  int64_t hp, wp;
} conv_job;

static void conv_task(void *ctx, int64_t task, kiln_igemm_args *g) {
  const conv_job *j = ctx;
  const kiln_qconv *q = j->q;
  int64_t ni = task / q->group, gr = task % q->group, k4 = (q->kk + 3) / 4;
  g->m = q->mg;
  g->k4 = k4;
  g->a = j->w + gr * q->mg * k4 * 4;
  g->c = j->y + (ni * q->m + gr * q->mg) * q->ysize;
  g->ldc = q->ysize;
  g->b_unsigned = 1;
  g->r = j->r + gr * q->mg;
  g->u = j->u ? j->u + gr * q->mg : NULL;
}

/* One im2col row of a 2-D convolution, tap (kh, kw) of plane xc, columns [j0, j1), into the
 * contiguous out: each output row's segment in three runs (left padding, the input, right
 * padding). */
static void gather_2d(const int64_t *g, const uint8_t *xc, int64_t kh, int64_t kw, int64_t j0, int64_t j1,
                      uint8_t flip, uint8_t fill, uint8_t *out) {
  const int64_t IH = g[0], IW = g[1], OW = g[3], sh = g[6], sw = g[7], ph = g[10], pw = g[11];
  const int64_t offh = kh * g[8] - ph, offw = kw * g[9] - pw;
  /* the output columns whose input column is inside: 0 <= ow * sw + offw < IW */
  int64_t lo = offw >= 0 ? 0 : (-offw + sw - 1) / sw, hi = IW - offw <= 0 ? 0 : (IW - offw + sw - 1) / sw;
  if (hi > OW) hi = OW;
  if (lo > hi) lo = hi;
  for (int64_t j = j0; j < j1;) {
    int64_t oh = j / OW, ow0 = j % OW, ow1 = OW < ow0 + (j1 - j) ? OW : ow0 + (j1 - j);
    int64_t ih = oh * sh + offh;
    uint8_t *o = out + (j - j0) - ow0; /* o[ow] is output column ow of this row */
    if (ih < 0 || ih >= IH) {
      memset(o + ow0, fill, (size_t)(ow1 - ow0));
    } else { /* the padding runs are short: plain loops, not memset calls */
      const uint8_t *src = xc + ih * IW + offw;
      int64_t a = ow0 > lo ? ow0 : lo, b = ow1 < hi ? ow1 : hi;
      if (a > ow1) a = ow1;
      for (int64_t t = ow0; t < a; t++) o[t] = fill;
      if (b > a) {
        if (sw == 1 && !flip)
          memcpy(o + a, src + a, (size_t)(b - a));
        else if (sw == 1)
          for (int64_t t = a; t < b; t++) o[t] = src[t] ^ flip;
        else
          for (int64_t t = a; t < b; t++) o[t] = src[t * sw] ^ flip;
      } else {
        b = a;
      }
      for (int64_t t = b; t < ow1; t++) o[t] = fill;
    }
    j += ow1 - ow0;
  }
}

/* Im2col row kr of the task's plane group, columns [j0, j1): a pointer into x where the row is
 * there as is, else gathered into buf. */
static const uint8_t *conv_row(const conv_job *j, const uint8_t *xg, int64_t kr, int64_t j0, int64_t j1,
                               uint8_t *buf) {
  const kiln_qconv *q = j->q;
  const int64_t ci = kr / q->ksize, kp = kr % q->ksize, w = j1 - j0;
  const uint8_t *xc = xg + ci * q->xsize, flip = j->xflip, fill = j->xfill;
  if (q->d2) {
    gather_2d(q->d2, xc, kp / q->d2[5], kp % q->d2[5], j0, j1, flip, fill, buf);
  } else if (!q->map) {
    if (!flip) return xc + j0;
    for (int64_t t = 0; t < w; t++) buf[t] = xc[j0 + t] ^ flip;
  } else {
    const int64_t *mp = q->map + kp * q->ysize + j0;
    for (int64_t t = 0; t < w; t++) buf[t] = mp[t] >= 0 ? (uint8_t)(xc[mp[t]] ^ flip) : fill;
  }
  return buf;
}

/* im2col of columns [j0, j1) of the task's plane group straight into the packed layout: four
 * rows at a time, gathered contiguous and then interleaved. */
static void conv_pack(void *ctx, int64_t task, int64_t j0, int64_t j1, uint8_t *bp, int64_t ldb, int32_t *cs) {
  const conv_job *j = ctx;
  const kiln_qconv *q = j->q;
  int64_t ni = task / q->group, gr = task % q->group, k4 = (q->kk + 3) / 4, w = j1 - j0;
  const uint8_t *xg = j->x + (ni * q->c + gr * q->cg) * q->xsize;
  uint8_t buf[4][KILN_IGEMM_CHUNK_MAX];
  static const uint8_t zeros[KILN_IGEMM_CHUNK_MAX];
  if (cs) memset(cs, 0, sizeof(int32_t) * (size_t)ldb);
  for (int64_t p = 0; p < k4; p++) {
    const uint8_t *rows[4];
    for (int r = 0; r < 4; r++)
      rows[r] = 4 * p + r < q->kk ? conv_row(j, xg, 4 * p + r, j0, j1, buf[r]) : zeros;
    kiln_igemm_interleave4(rows, w, ldb, bp + p * ldb * 4, cs);
  }
}

/* ---- 2-D convolutions in channel quads (kiln_qconv_quads) ---- */

/* Quad task idx (task, quad): the four planes of x flipped, their padding rows and columns the
 * fill, interleaved into x4 [hp][wp][4]. */
static void quad_layout(void *ctx, size_t begin, size_t end, int t) {
  (void)t;
  const conv_job *j = ctx;
  const kiln_qconv *q = j->q;
  const int64_t *g = q->d2, IH = g[0], IW = g[1], ph = g[10], pw = g[11], cg4 = q->cg / 4;
  const uint32_t flip = j->xflip * 0x01010101u, fill = j->xfill * 0x01010101u;
  for (size_t idx = begin; idx < end; idx++) {
    int64_t task = (int64_t)idx / cg4, c4 = (int64_t)idx % cg4, ni = task / q->group, gr = task % q->group;
    const uint8_t *p0 = j->x + (ni * q->c + gr * q->cg + c4 * 4) * q->xsize, *p1 = p0 + q->xsize,
                  *p2 = p1 + q->xsize, *p3 = p2 + q->xsize;
    uint32_t *o = (uint32_t *)(void *)(j->x4 + (int64_t)idx * j->hp * j->wp * 4);
    for (int64_t r = 0; r < j->hp; r++) {
      int64_t ih = r - ph;
      for (int64_t col = 0; col < j->wp; col++) {
        int64_t iw = col - pw, at = ih * IW + iw;
        bool in = ih >= 0 && ih < IH && iw >= 0 && iw < IW;
        o[r * j->wp + col] =
            in ? ((uint32_t)p0[at] | (uint32_t)p1[at] << 8 | (uint32_t)p2[at] << 16 | (uint32_t)p3[at] << 24) ^ flip
               : fill;
      }
    }
  }
}

/* Task's s4 [hp][wp]: x4's bytes summed over all quads and their four channels. */
static void quad_sums(void *ctx, size_t begin, size_t end, int t) {
  (void)t;
  const conv_job *j = ctx;
  const int64_t cg4 = j->q->cg / 4, plane = j->hp * j->wp;
  for (size_t task = begin; task < end; task++) {
    int32_t *s = j->s4 + (int64_t)task * plane;
    memset(s, 0, sizeof(int32_t) * (size_t)plane);
    for (int64_t c4 = 0; c4 < cg4; c4++) {
      const uint8_t *x = j->x4 + ((int64_t)task * cg4 + c4) * plane * 4;
      for (int64_t i = 0; i < plane; i++) s[i] += (int32_t)x[4 * i] + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3];
    }
  }
}

/* im2col of columns [j0, j1) in quad order: group p is quad p / ksize at tap p % ksize, each run
 * of output columns one copy out of x4; the column sums from s4, ksize reads each. */
static void quad_pack(void *ctx, int64_t task, int64_t j0, int64_t j1, uint8_t *bp, int64_t ldb, int32_t *cs) {
  const conv_job *j = ctx;
  const kiln_qconv *q = j->q;
  const int64_t *g = q->d2, OW = g[3], KH = g[4], KW = g[5], sh = g[6], sw = g[7], dh = g[8], dw = g[9];
  const int64_t ks = q->ksize, k4 = ks * (q->cg / 4), wp = j->wp, w = j1 - j0;
  const uint8_t *x4 = j->x4 + task * k4 / ks * j->hp * wp * 4;
  for (int64_t p = 0; p < k4; p++) {
    const int64_t c4 = p / ks, kh = p % ks / KW, kw = p % ks % KW;
    const uint8_t *plane = x4 + (c4 * j->hp * wp + kh * dh * wp + kw * dw) * 4;
    uint8_t *dst = bp + p * ldb * 4;
    for (int64_t jj = j0; jj < j1;) {
      int64_t oh = jj / OW, ow = jj % OW, len = OW - ow < j1 - jj ? OW - ow : j1 - jj;
      const uint8_t *src = plane + (oh * sh * wp + ow * sw) * 4;
      uint8_t *o = dst + (jj - j0) * 4;
      if (sw == 1)
        memcpy(o, src, (size_t)(4 * len));
      else
        for (int64_t t = 0; t < len; t++) memcpy(o + 4 * t, src + 4 * t * sw, 4);
      jj += len;
    }
    memset(dst + 4 * w, 0, (size_t)(4 * (ldb - w)));
  }
  if (!cs) return;
  memset(cs, 0, sizeof(int32_t) * (size_t)ldb);
  const int32_t *s = j->s4 + task * j->hp * wp;
  for (int64_t jj = j0; jj < j1; jj++) {
    const int32_t *at = s + jj / OW * sh * wp + jj % OW * sw;
    int32_t sum = 0;
    for (int64_t kh = 0; kh < KH; kh++)
      for (int64_t kw = 0; kw < KW; kw++) sum += at[kh * dh * wp + kw * dw];
    cs[jj - j0] = sum;
  }
}

/* x4 (and s4 when the weights have a zero point) for every task; -1 without memory. */
static int quad_prepare(kiln_kctx *c, conv_job *j) {
  const kiln_qconv *q = j->q;
  const int64_t *g = q->d2, tasks = q->n * q->group, cg4 = q->cg / 4;
  j->hp = padded_extent(g, 0);
  j->wp = padded_extent(g, 1);
  const int64_t plane = j->hp * j->wp;
  j->x4 = kiln_malloc((size_t)(tasks * cg4 * plane * 4));
  j->s4 = j->u ? kiln_malloc(sizeof(int32_t) * (size_t)(tasks * plane)) : NULL;
  if (!j->x4 || (j->u && !j->s4)) return -1;
  kiln_threadpool *pool = kiln_kpool(c);
  kiln_parallel_for(pool, (size_t)(tasks * cg4), quad_layout, j, 1);
  if (j->s4) kiln_parallel_for(pool, (size_t)tasks, quad_sums, j, 1);
  return 0;
}

/* ---- depthwise 2-D convolutions: one input and one output channel per group ---- */

typedef struct dw_job {
  const kiln_qconv *q;
  const uint8_t *x, *w; /* x [n, c, xsize]; w the packed A (row i: channel i's taps) */
  int32_t k4;
  uint8_t xflip;
  int32_t zx;           /* x's zero point on the flipped bytes */
  const int32_t *zw;    /* [m]: w's zero point on the packed bytes */
  int32_t *y;
} dw_job;

/* Output plane task (batch item, channel): each output row the sum of its taps, each tap added
 * along the run of output columns whose input is inside (padding adds 0). Sums modulo 2^32. */
static void dw_plane(const dw_job *j, int64_t task) {
  const kiln_qconv *q = j->q;
  const int64_t *g = q->d2, ch = task % q->m;
  const int64_t IH = g[0], IW = g[1], OH = g[2], OW = g[3], KH = g[4], KW = g[5], sh = g[6], sw = g[7];
  const uint8_t *xp = j->x + task * q->xsize, *wp = j->w + ch * j->k4 * 4;
  uint32_t *yp = (uint32_t *)(j->y + task * q->ysize);
  const uint8_t flip = j->xflip;
  const int32_t zx = j->zx;
  memset(yp, 0, sizeof(uint32_t) * (size_t)q->ysize);
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) {
      const int32_t wv = (int32_t)(int8_t)wp[kh * KW + kw] - j->zw[ch];
      const int64_t offh = kh * g[8] - g[10], offw = kw * g[9] - g[11];
      int64_t lo = offw >= 0 ? 0 : (-offw + sw - 1) / sw, hi = IW - offw <= 0 ? 0 : (IW - offw + sw - 1) / sw;
      if (hi > OW) hi = OW;
      if (!wv || lo >= hi) continue;
      for (int64_t oh = 0; oh < OH; oh++) {
        const int64_t ih = oh * sh + offh;
        if (ih < 0 || ih >= IH) continue;
        const uint8_t *src = xp + ih * IW + offw;
        uint32_t *yr = yp + oh * OW;
        if (sw == 1)
          for (int64_t ow = lo; ow < hi; ow++) yr[ow] += (uint32_t)(((int32_t)(uint8_t)(src[ow] ^ flip) - zx) * wv);
        else
          for (int64_t ow = lo; ow < hi; ow++)
            yr[ow] += (uint32_t)(((int32_t)(uint8_t)(src[ow * sw] ^ flip) - zx) * wv);
      }
    }
}

/* The most taps for which dw_plane_f32 is exact: every |x - zx| and |w - zw| is at most 255, so a
 * sum of this many products stays below 2^24, where float32 holds every integer. */
enum { DW_F32_MAX_TAPS = (1 << 24) / (255 * 255) };

/* dw_plane in float32, exact for at most DW_F32_MAX_TAPS taps (so the int32 sums, which cannot
 * wrap there): the plane's x - zx laid out once with its padding as 0 in pad [hp][wp], then every
 * tap a multiply-add along whole rows, no bounds, which the compiler vectorises at any ISA. */
static void dw_plane_f32(const dw_job *j, int64_t task, float *pad, float *acc) {
  const kiln_qconv *q = j->q;
  const int64_t *g = q->d2, ch = task % q->m;
  const int64_t IH = g[0], IW = g[1], OH = g[2], OW = g[3], KH = g[4], KW = g[5], sh = g[6], sw = g[7];
  const int64_t dh = g[8], dw = g[9], hp = padded_extent(g, 0), wp = padded_extent(g, 1);
  const uint8_t *xp = j->x + task * q->xsize, *wq = j->w + ch * j->k4 * 4;
  for (int64_t r = 0; r < hp; r++) {
    const int64_t ih = r - g[10];
    for (int64_t col = 0; col < wp; col++) {
      const int64_t iw = col - g[11];
      pad[r * wp + col] =
          ih >= 0 && ih < IH && iw >= 0 && iw < IW ? (float)((int32_t)(uint8_t)(xp[ih * IW + iw] ^ j->xflip) - j->zx) : 0;
    }
  }
  for (int64_t i = 0; i < OH * OW; i++) acc[i] = 0;
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) {
      const float wv = (float)((int32_t)(int8_t)wq[kh * KW + kw] - j->zw[ch]);
      const float *base = pad + kh * dh * wp + kw * dw;
      for (int64_t oh = 0; oh < OH; oh++) {
        const float *src = base + oh * sh * wp;
        float *ar = acc + oh * OW;
        if (sw == 1)
          for (int64_t ow = 0; ow < OW; ow++) ar[ow] += wv * src[ow];
        else
          for (int64_t ow = 0; ow < OW; ow++) ar[ow] += wv * src[ow * sw];
      }
    }
  int32_t *yp = j->y + task * q->ysize;
  for (int64_t i = 0; i < OH * OW; i++) yp[i] = (int32_t)acc[i];
}

static void dw_run(void *ctx, size_t begin, size_t end, int t) {
  (void)t;
  const dw_job *j = ctx;
  const int64_t *g = j->q->d2;
  const int64_t hp = padded_extent(g, 0), wp = padded_extent(g, 1);
  float *buf = g[4] * g[5] <= DW_F32_MAX_TAPS ? kiln_malloc(sizeof(float) * (size_t)(hp * wp + j->q->ysize)) : NULL;
  for (size_t i = begin; i < end; i++) {
    if (buf)
      dw_plane_f32(j, (int64_t)i, buf, buf + hp * wp);
    else
      dw_plane(j, (int64_t)i);
  }
  free(buf);
}

kiln_code kiln_qconv_run(kiln_kctx *c, size_t wi, const kiln_qconv *q, const kiln_tensor *x, int64_t xz,
                         const kiln_tensor *w, const int64_t *wzs, int64_t wz0, int32_t *y) {
  if (!q->n || !q->m || !q->ysize) return KILN_OK;
  if (!q->kk) {
    memset(y, 0, sizeof(int32_t) * (size_t)(q->n * q->m * q->ysize));
    return KILN_OK;
  }
  kiln_q8_pack *owned;
  const int64_t quads = kiln_qconv_quads(q->cg, q->ksize, q->d2 ? 2 : 0);
  const kiln_q8_pack *wp = kiln_q8_pack_of(c, wi, w, 0, q->m, q->kk, quads, &owned);
  int32_t *terms = kiln_malloc(sizeof(int32_t) * (size_t)q->m * 4);
  if (!wp || !terms) {
    kiln_q8_pack_free(owned);
    free(terms);
    return kiln_kfail(c, "out of memory for the packed weights");
  }
  int32_t *r = terms, *u = terms + q->m, *v = u + q->m, *zw = v + q->m;
  int wshift = wp->flip ? -128 : 0;
  for (int64_t i = 0; i < q->m; i++) zw[i] = (int32_t)(wzs ? wzs[i] : wz0) + wshift;
  int xs = x->dtype == KILN_INT8;
  int32_t zx = (int32_t)xz + (xs ? 128 : 0);
  if (q->cg == 1 && q->mg == 1 && q->d2) { /* depthwise: direct, no im2col */
    dw_job d = {q, x->data, wp->data, (int32_t)wp->k4, xs ? 0x80 : 0, zx, zw, y};
    size_t planes = (size_t)(q->n * q->m);
    if ((double)planes * (double)q->ysize * (double)q->kk < 1 << 16)
      dw_run(&d, 0, planes, 0);
    else
      kiln_parallel_for(kiln_kpool(c), planes, dw_run, &d, 0);
    kiln_q8_pack_free(owned);
    free(terms);
    return KILN_OK;
  }
  int any = kiln_igemm_zero_terms(q->m, q->kk, zw, 0, wp->sums, 0, zx, r, u, v);
  conv_job j = {q, x->data, wp->data, xs ? 0x80 : 0, (uint8_t)zx, y, r, any ? u : NULL, NULL, NULL, 0, 0};
  int rc = quads ? quad_prepare(c, &j) : 0;
  if (!rc)
    rc = kiln_igemm_many(kiln_kpool(c), kiln_igemm_isa(), q->n * q->group, q->ysize, wp->k4, q->mg, conv_task,
                         quads ? quad_pack : conv_pack, &j);
  kiln_q8_pack_free(owned);
  free(terms);
  free(j.x4);
  free(j.s4);
  return rc ? kiln_kfail(c, "out of memory for the im2col buffers") : KILN_OK;
}

/* ---- matrix products ---- */

kiln_code kiln_qmatmul_run(kiln_kctx *c, int64_t m, int64_t n, int64_t k, const uint8_t *a, int a_signed,
                           const int64_t *zas, int64_t za0, const uint8_t *b, int b_signed, const kiln_q8_pack *pb,
                           const int64_t *zbs, int64_t zb0, int32_t *y) {
  if (!m || !n) return KILN_OK;
  int64_t k4 = (k + 3) / 4, ldb = (n + KILN_IGEMM_NB - 1) / KILN_IGEMM_NB * KILN_IGEMM_NB;
  uint8_t bflip = pb ? pb->flip : b_signed ? 0 : 0x80;
  size_t bbytes = pb ? 0 : (size_t)(k4 * 4 * ldb), tbytes = sizeof(int32_t) * (size_t)(5 * m + 2 * ldb);
  uint8_t *buf = kiln_malloc((size_t)(m * k4 * 4) + bbytes + tbytes);
  if (!buf) return kiln_kfail(c, "out of memory for the packed operands");
  int32_t *rs = (int32_t *)(void *)buf, *r = rs + m, *u = r + m, *v = u + m, *za = v + m, *cs = za + m, *zb = cs + ldb;
  uint8_t *ap = (uint8_t *)(zb + ldb), *bp = ap + m * k4 * 4;
  /* a on the unsigned side, b on the signed one */
  kiln_igemm_pack_a(m, k, a, k, a_signed ? 0x80 : 0, 0, ap, rs);
  if (pb) {
    bp = pb->data;
    memcpy(cs, pb->sums, sizeof(int32_t) * (size_t)ldb);
  } else {
    kiln_igemm_pack_b(k, n, b, n, bflip, bp, ldb);
    kiln_igemm_colsum(k4, ldb, bp, 1, cs);
  }
  for (int64_t i = 0; i < m; i++) za[i] = (int32_t)(zas ? zas[i] : za0) + (a_signed ? 128 : 0);
  int32_t bshift = bflip ? -128 : 0;
  for (int64_t j = 0; j < ldb; j++) zb[j] = j < n ? (int32_t)(zbs ? zbs[j] : zb0) + bshift : 0;
  int per_col = zbs != NULL;
  int any = kiln_igemm_zero_terms(m, k, za, 0, rs, per_col, zb[0], r, u, v);
  kiln_igemm_args g = {m, n, k4, ap, bp, ldb, y, n, 0, per_col ? NULL : r, any ? u : NULL, per_col ? v : NULL, cs, zb};
  kiln_igemm(kiln_kpool(c), kiln_igemm_isa(), &g);
  free(buf);
  return KILN_OK;
}
