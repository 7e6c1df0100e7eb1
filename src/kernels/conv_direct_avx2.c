/* The direct convolution of few input channels (conv_direct_f32.c) at AVX2+FMA: its row task
 * over the same context (conv_direct.h), region layout and weight layout ([mb][taps][8]).
 * A tile is 4 output channels (half a weight block) times 1-3 vectors of 8 output columns:
 * up to 12 accumulators, every tap up to 3 loads and 4 broadcast weights (16 registers in
 * all). Every output element sums its taps in the order of the AVX-512 kernel (input channel,
 * ky, kx), so the two agree to the rounding of their FMAs. Entered only from
 * kiln_conv2d_direct_f32 when kiln_cpu_isa() chose AVX2; built with the AVX2 flags
 * (isa_flags.cmake). */
#include <math.h>
#include <string.h>

#include "kernels/conv_direct.h"

#ifdef KILN_HAVE_X86_KERNELS

enum { HB = 4, MAX_NV = 3 }; /* channels per tile; vectors of 8 columns per tile */

static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

static inline __m256i lanes(int64_t n) { /* lanes [0, n) on, n in 0..8 */
  return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - n));
}


/* Channels [co, co + nc) (nc <= 4; their weights at wb[k * 8 + c]) of output columns
 * [ox, ox + 8 * NV) (the last vector's lanes cut to `last`) of the row at y0 (channels ys
 * apart), from input xr (image, row oy * sh, column ox); the residual row at r0 (channels
 * d->ohw apart) or NULL. */
static inline __attribute__((always_inline)) void tile(const kiln_dir_ctx *d, const float *xr,
                                                       const float *wb, const int NV, int64_t last,
                                                       float *y0, int64_t ys, int64_t co,
                                                       int64_t nc, const float *r0) {
  /* named accumulators: an array of them is kept in memory across the tap loop by gcc 12 */
#define Z(s) __m256 a##s##0 = _mm256_setzero_ps(), a##s##1 = a##s##0, a##s##2 = a##s##0, a##s##3 = a##s##0;
  Z(0) Z(1) Z(2)
#undef Z
  const int64_t taps = d->taps;
  const int64_t *off = d->off;
  for (int64_t k = 0; k < taps; k++) {
    const float *src = xr + off[k], *wk = wb + k * KILN_DIR_CB;
    const __m256 v0 = _mm256_loadu_ps(src);
    const __m256 v1 = NV > 1 ? _mm256_loadu_ps(src + 8) : v0;
    const __m256 v2 = NV > 2 ? _mm256_loadu_ps(src + 16) : v0;
#define F(c)                                                \
  {                                                         \
    const __m256 wv = _mm256_broadcast_ss(wk + c);          \
    a0##c = _mm256_fmadd_ps(v0, wv, a0##c);                 \
    if (NV > 1) a1##c = _mm256_fmadd_ps(v1, wv, a1##c);     \
    if (NV > 2) a2##c = _mm256_fmadd_ps(v2, wv, a2##c);     \
  }
    F(0) F(1) F(2) F(3)
#undef F
  }
  const __m256 acc[MAX_NV][HB] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}};
  const float *bias = d->bias + co;
  const bool clamp = d->clamp;
  const __m256 lo = _mm256_set1_ps(d->lo), hi = _mm256_set1_ps(d->hi);
  const int64_t ohw = d->ohw;
  const __m256i lm = lanes(last);
  for (int c = 0; c < HB; c++) {
    if (c >= nc) break;
    __m256 vb = _mm256_broadcast_ss(bias + c);
    for (int s = 0; s < NV; s++) {
      const bool whole = s < NV - 1 || last == 8;
      __m256 v = _mm256_add_ps(acc[s][c], vb);
      if (r0) {
        const float *rp = r0 + c * ohw + 8 * s;
        v = _mm256_add_ps(v, whole ? _mm256_loadu_ps(rp) : _mm256_maskload_ps(rp, lm));
      }
      if (clamp) v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      float *yp = y0 + c * ys + 8 * s;
      if (whole)
        _mm256_storeu_ps(yp, v);
      else
        _mm256_maskstore_ps(yp, lm, v);
    }
  }
}

/* Output row i (n * oh + oy), weight block b, from a region filled from output row oy0 of the
 * same image: the block's two halves of 4 channels, each over the row in vectors of 8
 * columns taken 3 at a time (4 left: 2 + 2). Channel co's row goes to yb + co * ys + yr * ow:
 * the output (yb the image, ys its plane, yr = oy), or a buffer of some rows (the pooling). */
static void row_block(const kiln_dir_ctx *d, const float *reg, int64_t oy0, int64_t i, int64_t b,
                      float *yb, int64_t ys, int64_t yr) {
  const kiln_conv2d_f32_params *p = d->p;
  const kiln_conv2d_f32_epilogue *ep = d->ep;
  const int64_t nv = (p->ow + 7) / 8, last = p->ow - (nv - 1) * 8;
  const int64_t nn = i / p->oh, oy = i % p->oh;
  const float *xi = reg + (oy - oy0) * p->sh * p->sw * d->t;
  for (int64_t co = b * KILN_DIR_CB; co < p->m && co < (b + 1) * KILN_DIR_CB; co += HB) {
    const int64_t nc = p->m - co < HB ? p->m - co : HB;
    const int64_t yo = co * ys + yr * p->ow, ro = (nn * p->m + co) * d->ohw + oy * p->ow;
    const float *wb = d->wb + b * d->taps * KILN_DIR_CB + (co - b * KILN_DIR_CB);
    for (int64_t v0 = 0; v0 < nv;) {
      const int64_t left = nv - v0, ns = left == 4 ? 2 : left < MAX_NV ? left : MAX_NV;
      const int64_t lt = v0 + ns == nv ? last : 8;
      const float *xr = xi + 8 * v0, *r0 = ep->residual ? ep->residual + ro + 8 * v0 : NULL;
      float *y0 = yb + yo + 8 * v0;
      if (ns == 3)
        tile(d, xr, wb, 3, lt, y0, ys, co, nc, r0);
      else if (ns == 2)
        tile(d, xr, wb, 2, lt, y0, ys, co, nc, r0);
      else
        tile(d, xr, wb, 1, lt, y0, ys, co, nc, r0);
      v0 += ns;
    }
    if (!act_inline(&ep->act))
      for (int64_t c = 0; c < nc; c++) kiln_f32_act(KILN_ISA_AVX2, yb + yo + c * ys, (size_t)p->ow, &ep->act);
  }
}

/* ---- convolution then max pooling: pool_band at 8 lanes ---------------------------------- */

/* out[px] = max of t[2 px + j], j < kw (2 or 3), for px < n; t has 2 round_up(n, 8) + 10
 * readable floats. The even and odd lanes come from in-lane shuffles (lanes in the order
 * 0 1 4 5 2 3 6 7), put in order once per vector. */
static void pool_cols_s2(const float *t, int64_t kw, int64_t n, float *out) {
  for (int64_t px = 0; px < n; px += 8) {
    const float *s = t + 2 * px;
    __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
    __m256 v = _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xdd));
    if (kw == 3)
      v = _mm256_max_ps(v, _mm256_shuffle_ps(_mm256_loadu_ps(s + 2), _mm256_loadu_ps(s + 10), 0x88));
    v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
    if (n - px >= 8)
      _mm256_storeu_ps(out + px, v);
    else
      _mm256_maskstore_ps(out + px, lanes(n - px), v);
  }
}

/* Pooled rows [q0, q1) of every channel of image nn from the convolution rows in cb (row r of
 * channel co at cb + (co * rows_cap + r - r0) * ow); tmp: a thread's row of
 * 2 * round_up(q->ow, 16) + 64 floats. */
static void pool_band(const kiln_dir_pool_ctx *pc, int64_t nn, int64_t q0, int64_t q1,
                      const float *cb, int64_t r0, float *tmp) {
  const kiln_conv2d_f32_params *p = pc->d.p;
  const kiln_pool2d_params *q = pc->q;
  const int64_t ow = p->ow, width = 2 * ((q->ow + 15) / 16 * 16) + 64;
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < width; i += 8) _mm256_storeu_ps(tmp + i, ninf);
  for (int64_t co = 0; co < p->m; co++) {
    const float *plane = cb + co * pc->rows_cap * ow;
    float *yc = pc->y + ((nn * p->m + co) * q->oh) * q->ow;
    for (int64_t py = q0; py < q1; py++) {
      int64_t a = py * q->sh - q->pt, b = a + q->kh;
      if (a < 0) a = 0;
      if (b > p->oh) b = p->oh;
      float *t = tmp + q->pl; /* t[cx] = max over the window's rows of column cx */
      int64_t cx = 0;
      for (; cx + 8 <= ow; cx += 8) {
        __m256 v = ninf;
        for (int64_t r = a; r < b; r++) v = _mm256_max_ps(v, _mm256_loadu_ps(plane + (r - r0) * ow + cx));
        _mm256_storeu_ps(t + cx, v);
      }
      for (; cx < ow; cx++) {
        float v = -INFINITY;
        for (int64_t r = a; r < b; r++) {
          float e = plane[(r - r0) * ow + cx];
          v = v > e ? v : e; /* as vmaxps(v, e) in the vector loop */
        }
        t[cx] = v;
      }
      pool_cols_s2(tmp, q->kw, q->ow, yc + py * q->ow);
    }
  }
}

#define DIR_TASK_ATTR
#define DIR_LEAF_ATTR static
#define phase_row kiln_phase_row_avx2
#define DIR_ROW_TASK kiln_conv_direct_rows_avx2
#define DIR_POOL_TASK kiln_conv_direct_pool_avx2
#include "kernels/conv_direct_tasks.h"

#else
typedef int kiln_conv_direct_avx2_unused; /* not x86: nothing here */
#endif
