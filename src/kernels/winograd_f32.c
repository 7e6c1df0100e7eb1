/* Winograd F(2x2, 3x3) float32 convolution. See winograd_f32.h. */
#include "kernels/winograd_f32.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#define T512 KILN_TARGET_AVX512
#endif

int kiln_wino_f32_supported(const kiln_conv2d_f32_params *p) {
  return p->group == 1 && p->c > 1 && p->kh == 3 && p->kw == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 &&
         p->dw == 1;
}

int kiln_wino_f32_pick(const kiln_conv2d_f32_params *p, int cached) {
  if (!kiln_wino_f32_supported(p) || p->c < 16 || p->m < 16) return 0;
  /* Measured on ResNet layers at one thread (AVX-512): with cached weights Winograd wins from
   * 14x14 planes up (1.2x at 14x14x256, 1.5x-1.6x at 28x28 and 56x56) but loses at 7x7x512,
   * where few tiles meet 16 weight planes streamed from memory. Transformed per call, the
   * transform costs about what Winograd saves on a 28x28 plane: only large planes gain. */
  return p->oh * p->ow >= (cached ? 144 : 1024);
}

int64_t kiln_wino_f32_weights_size(int64_t m, int64_t c) { return 16 * m * c; }

void kiln_wino_f32_weights(const float *w, int64_t m, int64_t c, float *u) {
  int64_t ps = m * c;
  for (int64_t i = 0; i < ps; i++) {
    const float *g = w + i * 9;
    float t[4][3];
    for (int k = 0; k < 3; k++) {
      t[0][k] = g[k];
      t[1][k] = 0.5f * (g[k] + g[3 + k] + g[6 + k]);
      t[2][k] = 0.5f * (g[k] - g[3 + k] + g[6 + k]);
      t[3][k] = g[6 + k];
    }
    for (int r = 0; r < 4; r++) {
      u[(4 * r + 0) * ps + i] = t[r][0];
      u[(4 * r + 1) * ps + i] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
      u[(4 * r + 2) * ps + i] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
      u[(4 * r + 3) * ps + i] = t[r][2];
    }
  }
}

/* ---- tile transforms ------------------------------------------------------------------- */

/* V planes (stride ps) for tiles [0, tw) of one tile row: tile tx reads padded columns
 * [2tx, 2tx + 4) of rows r[0..3]. */
static void wino_in_c(const float *const r[4], int64_t tw, float *out, int64_t ps) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float d[4][4], t[4][4];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) d[i][j] = r[i][2 * tx + j];
    for (int j = 0; j < 4; j++) {
      t[0][j] = d[0][j] - d[2][j];
      t[1][j] = d[1][j] + d[2][j];
      t[2][j] = d[2][j] - d[1][j];
      t[3][j] = d[1][j] - d[3][j];
    }
    for (int i = 0; i < 4; i++) {
      out[(4 * i + 0) * ps + tx] = t[i][0] - t[i][2];
      out[(4 * i + 1) * ps + tx] = t[i][1] + t[i][2];
      out[(4 * i + 2) * ps + tx] = t[i][2] - t[i][1];
      out[(4 * i + 3) * ps + tx] = t[i][1] - t[i][3];
    }
  }
}

/* Output rows r0, r1 (2 * tw values each) of one tile row from O planes (stride ps). */
static void wino_out_c(const float *o, int64_t ps, int64_t tw, float *r0, float *r1) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float m[16], s[2][4];
    for (int k = 0; k < 16; k++) m[k] = o[k * ps + tx];
    for (int j = 0; j < 4; j++) {
      s[0][j] = m[j] + m[4 + j] + m[8 + j];
      s[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
    }
    r0[2 * tx] = s[0][0] + s[0][1] + s[0][2];
    r0[2 * tx + 1] = s[0][1] - s[0][2] - s[0][3];
    r1[2 * tx] = s[1][0] + s[1][1] + s[1][2];
    r1[2 * tx + 1] = s[1][1] - s[1][2] - s[1][3];
  }
}

#ifdef KILN_HAVE_X86_KERNELS
/* As wino_in_c, 16 tiles at a time; reads r[i][0 .. 2 * round_up(tw, 16) + 2). */
T512 static void wino_in_avx512(const float *const r[4], int64_t tw, float *out, int64_t ps) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t tx = 0; tx < tw; tx += 16) {
    __mmask16 mk = tw - tx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (tw - tx)) - 1);
    __m512 d[4][4], t[4][4];
    for (int i = 0; i < 4; i++) {
      const float *s = r[i] + 2 * tx;
      __m512 a = _mm512_loadu_ps(s), b = _mm512_loadu_ps(s + 16);
      __m512 c = _mm512_loadu_ps(s + 2), e = _mm512_loadu_ps(s + 18);
      d[i][0] = _mm512_permutex2var_ps(a, ev, b);
      d[i][1] = _mm512_permutex2var_ps(a, od, b);
      d[i][2] = _mm512_permutex2var_ps(c, ev, e);
      d[i][3] = _mm512_permutex2var_ps(c, od, e);
    }
    for (int j = 0; j < 4; j++) {
      t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
      t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
      t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
      t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
    }
    for (int i = 0; i < 4; i++) {
      _mm512_mask_storeu_ps(out + (4 * i + 0) * ps + tx, mk, _mm512_sub_ps(t[i][0], t[i][2]));
      _mm512_mask_storeu_ps(out + (4 * i + 1) * ps + tx, mk, _mm512_add_ps(t[i][1], t[i][2]));
      _mm512_mask_storeu_ps(out + (4 * i + 2) * ps + tx, mk, _mm512_sub_ps(t[i][2], t[i][1]));
      _mm512_mask_storeu_ps(out + (4 * i + 3) * ps + tx, mk, _mm512_sub_ps(t[i][1], t[i][3]));
    }
  }
}

/* As wino_out_c, 16 tiles at a time; writes r0/r1[0 .. 2 * round_up(tw, 16)). */
T512 static void wino_out_avx512(const float *o, int64_t ps, int64_t tw, float *r0, float *r1) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t tx = 0; tx < tw; tx += 16) {
    __mmask16 mk = tw - tx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (tw - tx)) - 1);
    __m512 m[16], s[2][4];
    for (int k = 0; k < 16; k++) m[k] = _mm512_maskz_loadu_ps(mk, o + k * ps + tx);
    for (int j = 0; j < 4; j++) {
      s[0][j] = _mm512_add_ps(_mm512_add_ps(m[j], m[4 + j]), m[8 + j]);
      s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
    }
    for (int a = 0; a < 2; a++) {
      __m512 y0 = _mm512_add_ps(_mm512_add_ps(s[a][0], s[a][1]), s[a][2]);
      __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(s[a][1], s[a][2]), s[a][3]);
      float *d = (a ? r1 : r0) + 2 * tx;
      _mm512_storeu_ps(d, _mm512_permutex2var_ps(y0, lo, y1));
      _mm512_storeu_ps(d + 16, _mm512_permutex2var_ps(y0, hi, y1));
    }
  }
}
#endif

/* ---- blocks ---------------------------------------------------------------------------- */

typedef struct wino_blk {
  const kiln_conv2d_f32_params *p;
  const kiln_conv2d_f32_epilogue *ep;
  const float *x, *u; /* x: image nn */
  float *y;
  int64_t nn, tw, ty0, ty1, nt;
  float *v, *o;    /* [16][c][nt], [16][m][nt] */
  float *scr;      /* per thread: 4 rows of rw floats */
  int64_t rw;
  kiln_code rc[16];
  int isa;
} wino_blk;

static void wino_in_task(void *ctx, size_t begin, size_t end, int ti) {
  const wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  float *buf = b->scr + (int64_t)ti * 4 * b->rw;
  const float *r[4] = {buf, buf + b->rw, buf + 2 * b->rw, buf + 3 * b->rw};
  int64_t l = p->pl < b->rw ? p->pl : b->rw, n = p->w < b->rw - l ? p->w : b->rw - l;
  for (size_t c = begin; c < end; c++) {
    const float *xp = b->x + (int64_t)c * p->h * p->w;
    for (int64_t ty = b->ty0; ty < b->ty1; ty++) {
      for (int i = 0; i < 4; i++) {
        float *d = buf + i * b->rw;
        int64_t iy = 2 * ty - p->pt + i;
        if (iy < 0 || iy >= p->h) {
          memset(d, 0, sizeof(float) * (size_t)b->rw);
          continue;
        }
        if (l) memset(d, 0, sizeof(float) * (size_t)l);
        memcpy(d + l, xp + iy * p->w, sizeof(float) * (size_t)n);
        if (l + n < b->rw) memset(d + l + n, 0, sizeof(float) * (size_t)(b->rw - l - n));
      }
      float *out = b->v + (int64_t)c * b->nt + (ty - b->ty0) * b->tw;
      int64_t ps = p->c * b->nt;
#ifdef KILN_HAVE_X86_KERNELS
      if (b->isa >= KILN_ISA_AVX512) {
        wino_in_avx512(r, b->tw, out, ps);
        continue;
      }
#endif
      wino_in_c(r, b->tw, out, ps);
    }
  }
}

static void wino_gemm_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  kiln_gemm_ctx g = {NULL, b->isa};
  for (size_t k = begin; k < end; k++)
    b->rc[k] = kiln_gemm_f32(&g, 0, 0, (size_t)p->m, (size_t)b->nt, (size_t)p->c, 1.0f,
                             b->u + (int64_t)k * p->m * p->c, (size_t)p->c,
                             b->v + (int64_t)k * p->c * b->nt, (size_t)b->nt, 0.0f,
                             b->o + (int64_t)k * p->m * b->nt, (size_t)b->nt, NULL, NULL);
}

static void wino_out_task(void *ctx, size_t begin, size_t end, int ti) {
  const wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  const kiln_conv2d_f32_epilogue *ep = b->ep;
  float *r0 = b->scr + (int64_t)ti * 4 * b->rw, *r1 = r0 + b->rw;
  int64_t ohw = p->oh * p->ow, oy0 = 2 * b->ty0, oy1 = 2 * b->ty1 < p->oh ? 2 * b->ty1 : p->oh;
  for (size_t mo = begin; mo < end; mo++) {
    float bv = ep->bias ? ep->bias[mo] : 0.0f;
    int64_t off = (b->nn * p->m + (int64_t)mo) * ohw;
    float *yp = b->y + off;
    const float *rp = ep->residual ? ep->residual + off : NULL;
    for (int64_t ty = b->ty0; ty < b->ty1; ty++) {
      const float *o = b->o + (int64_t)mo * b->nt + (ty - b->ty0) * b->tw;
      int64_t ps = p->m * b->nt;
#ifdef KILN_HAVE_X86_KERNELS
      if (b->isa >= KILN_ISA_AVX512)
        wino_out_avx512(o, ps, b->tw, r0, r1);
      else
#endif
        wino_out_c(o, ps, b->tw, r0, r1);
      for (int a = 0; a < 2 && 2 * ty + a < p->oh; a++) {
        const float *restrict s = a ? r1 : r0;
        float *restrict yr = yp + (2 * ty + a) * p->ow;
        if (rp) {
          const float *restrict rr = rp + (2 * ty + a) * p->ow;
          for (int64_t i = 0; i < p->ow; i++) yr[i] = s[i] + bv + rr[i];
        } else {
          for (int64_t i = 0; i < p->ow; i++) yr[i] = s[i] + bv;
        }
      }
    }
    if (ep->act.kind != KILN_ACT_NONE)
      kiln_f32_act(b->isa, yp + oy0 * p->ow, (size_t)((oy1 - oy0) * p->ow), &ep->act);
  }
}

/* Floats of V + O per block (both stay in L2 between the transforms and the GEMMs). */
enum { WINO_BLOCK_FLOATS = 192 * 1024 };
/* Pools up to this size may take whole blocks per thread. */
enum { WINO_MAX_THREADS = 64 };

/* One block, every loop on the calling thread (scratch: b->scr for thread 0). */
static kiln_code wino_block_serial(wino_blk *b) {
  wino_in_task(b, 0, (size_t)b->p->c, 0);
  wino_gemm_task(b, 0, 16, 0);
  for (int k = 0; k < 16; k++)
    if (b->rc[k]) return b->rc[k];
  wino_out_task(b, 0, (size_t)b->p->m, 0);
  return KILN_OK;
}

typedef struct wino_outer {
  const wino_blk *tmpl; /* shared fields */
  int64_t bt, th, nb;   /* tile rows per block (at most), tile rows, blocks per image */
  int even;             /* blocks split the tile rows evenly (else bt rows each, the last less) */
  size_t per_thread;    /* floats of V + O + scratch per thread */
  float *mem;
  kiln_code rc[WINO_MAX_THREADS];
} wino_outer;

static void wino_outer_task(void *ctx, size_t begin, size_t end, int ti) {
  wino_outer *w = ctx;
  wino_blk b = *w->tmpl;
  const kiln_conv2d_f32_params *p = b.p;
  float *mem = w->mem + (size_t)ti * w->per_thread;
  for (size_t t = begin; t < end && !w->rc[ti]; t++) {
    b.nn = (int64_t)t / w->nb;
    b.x = w->tmpl->x + b.nn * p->c * p->h * p->w;
    int64_t i = (int64_t)t % w->nb;
    if (w->even) { /* block i has tile rows [th*i/nb, th*(i+1)/nb) */
      b.ty0 = w->th * i / w->nb;
      b.ty1 = w->th * (i + 1) / w->nb;
    } else {
      b.ty0 = i * w->bt;
      b.ty1 = b.ty0 + w->bt < w->th ? b.ty0 + w->bt : w->th;
    }
    b.nt = (b.ty1 - b.ty0) * b.tw;
    b.v = mem;
    b.o = mem + 16 * p->c * b.nt;
    b.scr = b.o + 16 * p->m * b.nt;
    w->rc[ti] = wino_block_serial(&b);
  }
}

kiln_code kiln_wino_f32_conv(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                             const float *x, const float *u, const kiln_conv2d_f32_epilogue *ep,
                             float *y) {
  int64_t tw = (p->ow + 1) / 2, th = (p->oh + 1) / 2;
  int64_t bt = WINO_BLOCK_FLOATS / (16 * (p->c + p->m) * tw);
  int64_t min_bt = (48 + tw - 1) / tw; /* GEMMs of at least 48 columns */
  if (bt < min_bt) bt = min_bt;
  if (bt < 1) bt = 1;
  if (bt > th) bt = th;
  int64_t nt = bt * tw, rw = 2 * ((tw + 15) / 16 * 16) + 16, nb = (th + bt - 1) / bt;
  int nthr = kiln_threadpool_size(pool);
  /* Enough blocks: each thread takes whole blocks (one barrier in all); else the blocks run
   * in turn with the transforms and GEMMs on the pool. */
  int outer = nthr > 1 && nthr <= WINO_MAX_THREADS && p->n * nb >= 3 * (int64_t)nthr;
  /* Per image at least one block per thread: round the block count up to a multiple of the
   * threads and split the tile rows evenly over them (blocks no larger, each thread the same
   * share), so each thread takes whole blocks with one barrier in all instead of three per
   * block. Blocks keep at least 16 columns (GEMMs, not matrix-vector products, so a column's
   * result does not depend on the split). */
  int even = 0;
  if (nthr > 1 && nthr <= WINO_MAX_THREADS && nb >= nthr && (th - (nb - 1) * bt) * tw >= 2) {
    int64_t nb2 = (nb + nthr - 1) / nthr * nthr;
    if (nb2 <= th && th / nb2 * tw >= 16) {
      nb = nb2;
      outer = even = 1;
    }
  }
  size_t vf = (size_t)(16 * p->c * nt), of = (size_t)(16 * p->m * nt);
  size_t per_thread = vf + of + (size_t)(outer ? 1 : nthr) * 4 * (size_t)rw;
  float *mem = kiln_malloc(sizeof(float) * per_thread * (size_t)(outer ? nthr : 1));
  if (!mem) return KILN_ERR_NOMEM;
  wino_blk b;
  memset(&b, 0, sizeof b);
  b.p = p;
  b.ep = ep;
  b.x = x;
  b.u = u;
  b.y = y;
  b.tw = tw;
  b.v = mem;
  b.o = mem + vf;
  b.scr = mem + vf + of;
  b.rw = rw;
  b.isa = isa;
  kiln_code rc = KILN_OK;
  if (outer) {
    wino_outer w;
    memset(&w, 0, sizeof w);
    w.tmpl = &b;
    w.bt = bt;
    w.th = th;
    w.nb = nb;
    w.even = even;
    w.per_thread = per_thread;
    w.mem = mem;
    kiln_parallel_for(pool, (size_t)(p->n * nb), wino_outer_task, &w, 1);
    for (int i = 0; i < nthr && !rc; i++) rc = w.rc[i];
    free(mem);
    return rc;
  }
  for (int64_t nn = 0; nn < p->n && !rc; nn++) {
    b.nn = nn;
    b.x = x + nn * p->c * p->h * p->w;
    for (int64_t ty0 = 0; ty0 < th && !rc; ty0 += bt) {
      b.ty0 = ty0;
      b.ty1 = ty0 + bt < th ? ty0 + bt : th;
      b.nt = (b.ty1 - ty0) * tw; /* the last block may be shorter: planes packed to its nt */
      if (nthr == 1) {
        rc = wino_block_serial(&b);
        continue;
      }
      kiln_parallel_for(pool, (size_t)p->c, wino_in_task, &b, 0);
      kiln_parallel_for(pool, 16, wino_gemm_task, &b, 1);
      for (int k = 0; k < 16 && !rc; k++) rc = b.rc[k];
      if (!rc) kiln_parallel_for(pool, (size_t)p->m, wino_out_task, &b, 0);
    }
  }
  free(mem);
  return rc;
}
