/* Winograd F(2x2, 3x3) and F(4x4, 3x3) float32 convolution. See winograd_f32.h. */
#include "kernels/winograd_f32.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/conv_internal.h"
#include "kernels/cpu.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "kernels/scratch.h"
#include "kernels/winograd_tf.h"

#ifdef KILN_HAVE_X86_KERNELS
#include <immintrin.h>
#endif

int kiln_wino_f32_supported(const kiln_conv2d_f32_params *p) {
  return p->group == 1 && p->c > 1 && p->kh == 3 && p->kw == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 &&
         p->dw == 1;
}

/* Transformed weights start with a header of WINO_HDR floats whose first holds a tag with the
 * output tile size and WINO_TRANS for planes [c, m] (GEMMs transposed), so kiln_wino_f32_conv
 * takes whichever variant the weights were made for. */
enum { WINO_HDR = 16, WINO_TAG = 0x57490000, WINO_TRANS = 0x100 };

int kiln_wino_f32_tile(const kiln_conv2d_f32_params *p) {
  /* Measured on ResNet layers at one thread (AVX-512, cached weights): F(4x4) is 1.2x-1.3x
   * faster than F(2x2) on 28x28 and 56x56 planes, but no faster on 14x14 ones, where its 16
   * tiles fill a quarter of the GEMM micro-kernel's 64 columns and its 36 weight planes
   * (2.25x those of F(2x2)) stream from memory. */
  return p->oh * p->ow >= 576 ? 4 : 2;
}

int kiln_wino_f32_trans(const kiln_conv2d_f32_params *p, int isa) {
  /* The GEMMs run as O^T = V^T U^T, tiles as rows and output channels as the 64-wide
   * columns, where AVX-512 reads V transposed in place (f32_gemm_6x64_at__avx512) and a plane
   * has more tiles than one vector holds. The usual orientation fills its columns badly with
   * blocks of 21-56 tiles (2 vectors for 21-32). The 16 GEMMs of 64 -> 256 channels on 13x13
   * took 0.061 against 0.089 ms for a 2-thread block of 21 tiles, 0.139 against 0.171 for all
   * 49 (1 thread, hot). Whole convolutions (conv_bench, medians): 64 -> 256 on 13x13 0.184
   * against 0.213 ms at 1 thread, 0.120 against 0.224 at 2; 48 -> 192 on 13x13 0.107 against
   * 0.135 and 0.069 against 0.150; 32 -> 128 on 27x27 0.138 against 0.173 and 0.073 against
   * 0.099; 16 -> 64 on 55x55 (F(4x4)) 0.188 against 0.217 and 0.094 against 0.111; ResNet's
   * 256 -> 256 on 14x14 and 128 -> 128 on 28x28 within the noise. SqueezeNet 1.1 took 0.962 |
   * 0.927 of its time at 1 | 2 threads (kiln bench, alternating; AMD EPYC Zen 5, avx512).
   * Only up to 64 input channels: with K = 128 and more the weights' stream is the larger
   * cost, and planes [c, m] stream worse than [m, c] where a thread takes half the output
   * channels (half of each row) or the weights come from L3. In ResNet-50 at 2 threads the
   * transposed GEMMs on every plane took 1.045 of the usual time, those up to 64 channels
   * (its 56x56 layers) 0.971; ResNet-18 0.940 against 0.925; at 1 thread 1.008 against 0.989
   * and 1.024 against 0.983 (kiln bench, 6 alternations; AMD EPYC Zen 5, avx512). Only where
   * the GEMM reads A transposed in place (AVX-512's ukernel_at): AVX2's packs V^T (0.93-1.15
   * of the usual time, the same GEMMs at KILN_ISA=avx2; AMD EPYC Zen 5). Not on 7x7 planes
   * (16 tiles: one vector either way; 1.10 of the time; AMD EPYC Zen 5, avx512). */
  int e = kiln_wino_f32_tile(p); /* the level's kernels, whether or not this CPU runs them */
  return kiln_gemm_ops_for(isa)->ukernel_at && p->c <= 64 &&
         ((p->oh + e - 1) / e) * ((p->ow + e - 1) / e) > 16;
}

int kiln_wino_f32_pick(const kiln_conv2d_f32_params *p, int cached) {
  if (!kiln_wino_f32_supported(p) || p->c < 16 || p->m < 16) return 0;
  /* Measured on ResNet layers at one thread (AVX-512): with cached weights Winograd wins from
   * 14x14 planes up (1.2x at 14x14x256, 1.5x-1.6x at 28x28 and 56x56). Transformed per call,
   * the transform costs about what Winograd saves on a 28x28 plane: only large planes gain.
   * On 7x7 planes F(2x2) wins too, its 16 weight planes streamed from memory and all: ResNet's
   * 512 -> 512 layers took 1.17 against 1.44 ms at 1 thread, 0.81 against 0.90 at 2 (kiln
   * profile, thread time), ResNet-18 0.944 | 0.958 of its time at 1 | 2 threads, ResNet-50
   * 0.987 | 0.995 (kiln bench, alternating; AMD EPYC Zen 5, avx512), and at KILN_ISA=avx2
   * 0.872 | 0.919 and - | 0.968. Where AMX runs the convolutions, 7x7 planes keep it
   * (unmeasured against Winograd there). */
  int64_t least = !cached ? 1024 : kiln_amx_available() ? 144 : 49;
  return p->oh * p->ow >= least;
}

int64_t kiln_wino_f32_weights_size_tile(int e, int64_t m, int64_t c) {
  return WINO_HDR + (int64_t)(e + 2) * (e + 2) * m * c;
}

int64_t kiln_wino_f32_weights_size(int64_t m, int64_t c) { return kiln_wino_f32_weights_size_tile(2, m, c); }

/* G of F(2x2, 3x3) (points 0, 1, -1, inf) and of F(4x4, 3x3) (0, 1, -1, 2, -2, inf). */
static const double wino_g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double wino_g4[6][3] = {{1.0 / 4, 0, 0},
                                     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                     {0, 0, 1}};

#ifdef KILN_HAVE_X86_KERNELS
/* The a x a planes of filters [i0, i0 + 8) to out[plane][8], in the same double operations in
 * the same order as wino_filter (so the same results). */
T512 static void wino_filter8_avx512(int a, const double (*gm)[3], const float *w, int64_t i0, float out[36][8]) {
  const __m256i idx = _mm256_setr_epi32(0, 9, 18, 27, 36, 45, 54, 63);
  __m512d g[9], t[6][3];
  for (int k = 0; k < 9; k++) g[k] = _mm512_cvtps_pd(_mm256_i32gather_ps(w + i0 * 9 + k, idx, 4));
#define WINO_ROW(m, x, y, z)                                                                  \
  _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd((m)[0]), x),                        \
                              _mm512_mul_pd(_mm512_set1_pd((m)[1]), y)),                       \
                _mm512_mul_pd(_mm512_set1_pd((m)[2]), z))
  for (int r = 0; r < a; r++)
    for (int k = 0; k < 3; k++) t[r][k] = WINO_ROW(gm[r], g[k], g[3 + k], g[6 + k]);
  for (int r = 0; r < a; r++)
    for (int s = 0; s < a; s++) _mm256_storeu_ps(out[a * r + s], _mm512_cvtpd_ps(WINO_ROW(gm[s], t[r][0], t[r][1], t[r][2])));
#undef WINO_ROW
}
#endif

/* The a x a planes G g G^T of one 3x3 filter g to out[plane]. */
static void wino_filter(int a, const double (*gm)[3], const float *g, float out[36]) {
  double t[6][3];
  for (int r = 0; r < a; r++)
    for (int k = 0; k < 3; k++) t[r][k] = gm[r][0] * g[k] + gm[r][1] * g[3 + k] + gm[r][2] * g[6 + k];
  for (int r = 0; r < a; r++)
    for (int s = 0; s < a; s++) out[a * r + s] = (float)(gm[s][0] * t[r][0] + gm[s][1] * t[r][1] + gm[s][2] * t[r][2]);
}

void kiln_wino_f32_weights_tile(int e, int trans, const float *w, int64_t m, int64_t c, float *u) {
  int a = e + 2, np = a * a;
  const double(*gm)[3] = e == 4 ? wino_g4 : wino_g2;
  int32_t tag = WINO_TAG | e | (trans ? WINO_TRANS : 0);
  memset(u, 0, sizeof(float) * WINO_HDR);
  memcpy(u, &tag, sizeof tag);
  u += WINO_HDR;
  int64_t ps = m * c, i = 0;
  /* filter i = (mi, ci) goes to element i of each plane [m, c], or to ci * m + mi of [c, m] */
#define WINO_AT(i) (trans ? (i) % c * m + (i) / c : (i))
#ifdef KILN_HAVE_X86_KERNELS
  if (kiln_cpu_isa() >= KILN_ISA_AVX512)
    for (; i + 8 <= ps; i += 8) {
      float out[36][8];
      wino_filter8_avx512(a, gm, w, i, out);
      for (int k = 0; k < np; k++)
        for (int j = 0; j < 8; j++) u[k * ps + WINO_AT(i + j)] = out[k][j];
    }
#endif
  for (; i < ps; i++) {
    float one[36];
    wino_filter(a, gm, w + i * 9, one);
    for (int k = 0; k < np; k++) u[k * ps + WINO_AT(i)] = one[k];
  }
#undef WINO_AT
}

void kiln_wino_f32_weights(const float *w, int64_t m, int64_t c, float *u) {
  kiln_wino_f32_weights_tile(2, 0, w, m, c, u);
}

/* ---- tile transforms ------------------------------------------------------------------- */

#define WF_ADD(a, b) ((a) + (b))
#define WF_SUB(a, b) ((a) - (b))
#define WF_MUL(a, b) ((a) * (b))
#ifdef KILN_HAVE_X86_KERNELS
#define WV_ADD(a, b) _mm512_add_ps(a, b)
#define WV_SUB(a, b) _mm512_sub_ps(a, b)
#define WV_MUL(a, b) _mm512_mul_ps(a, b)
#endif

/* V planes (stride ps) for tiles [0, tw) of one tile row: tile tx reads padded columns
 * [2tx, 2tx + 4) of rows r[0..3]. */
static void wino_in_c(const float *const r[4], int64_t tw, float *out, int64_t ps) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float d[4][4], t[4][4];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) d[i][j] = r[i][2 * tx + j];
    for (int j = 0; j < 4; j++)
      WINO_BT4(t[0][j], t[1][j], t[2][j], t[3][j], d[0][j], d[1][j], d[2][j], d[3][j], WF_ADD, WF_SUB);
    for (int i = 0; i < 4; i++)
      WINO_BT4(out[(4 * i + 0) * ps + tx], out[(4 * i + 1) * ps + tx], out[(4 * i + 2) * ps + tx],
               out[(4 * i + 3) * ps + tx], t[i][0], t[i][1], t[i][2], t[i][3], WF_ADD, WF_SUB);
  }
}

/* Output rows r0, r1 (2 * tw values each) of one tile row from O planes (stride ps; tile tx
 * at tx * ts). */
static void wino_out_c(const float *o, int64_t ps, int64_t ts, int64_t tw, float *r0, float *r1) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float m[16], s[2][4];
    for (int k = 0; k < 16; k++) m[k] = o[k * ps + tx * ts];
    for (int j = 0; j < 4; j++) WINO_AT4(s[0][j], s[1][j], m[j], m[4 + j], m[8 + j], m[12 + j], WF_ADD, WF_SUB);
    WINO_AT4(r0[2 * tx], r0[2 * tx + 1], s[0][0], s[0][1], s[0][2], s[0][3], WF_ADD, WF_SUB);
    WINO_AT4(r1[2 * tx], r1[2 * tx + 1], s[1][0], s[1][1], s[1][2], s[1][3], WF_ADD, WF_SUB);
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
    for (int j = 0; j < 4; j++)
      WINO_BT4(t[0][j], t[1][j], t[2][j], t[3][j], d[0][j], d[1][j], d[2][j], d[3][j], WV_ADD, WV_SUB);
    for (int i = 0; i < 4; i++) {
      __m512 v[4];
      WINO_BT4(v[0], v[1], v[2], v[3], t[i][0], t[i][1], t[i][2], t[i][3], WV_ADD, WV_SUB);
      for (int j = 0; j < 4; j++) _mm512_mask_storeu_ps(out + (4 * i + j) * ps + tx, mk, v[j]);
    }
  }
}

/* Where the AVX-512 output transforms store one tile row: straight into y with the bias, the
 * residual and ReLU (if any) applied in registers. */
typedef struct wino_dst {
  float *y[4];             /* output rows of the tile row; NULL below the image */
  const float *res[4];     /* the residual's rows, or NULL */
  float bias;
  int relu;
  int64_t ow;              /* columns to write */
} wino_dst;

/* y[0, min(n, 16)) = act(v + bias + res) for ReLU or none (res NULL: no residual). */
T512 static inline void wino_store(float *y, const float *res, float bias, int relu, int64_t n, __m512 v) {
  __mmask16 mk = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
  v = _mm512_add_ps(v, _mm512_set1_ps(bias));
  if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, res));
  if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
  _mm512_mask_storeu_ps(y, mk, v);
}

/* y row a, columns [col, col + 16) clipped to ow, = act(v + bias + residual). */
T512 static inline void wino_put(const wino_dst *d, int a, int64_t col, __m512 v) {
  if (!d->y[a] || col >= d->ow) return;
  wino_store(d->y[a] + col, d->res[a] ? d->res[a] + col : NULL, d->bias, d->relu, d->ow - col, v);
}

/* As wino_out_c, 16 tiles at a time, stored through d. */
T512 static void wino_out_avx512(const float *o, int64_t ps, int64_t tw, const wino_dst *d) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t tx = 0; tx < tw; tx += 16) {
    __mmask16 mk = tw - tx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (tw - tx)) - 1);
    __m512 m[16], s[2][4];
    for (int k = 0; k < 16; k++) m[k] = _mm512_maskz_loadu_ps(mk, o + k * ps + tx);
    for (int j = 0; j < 4; j++) WINO_AT4(s[0][j], s[1][j], m[j], m[4 + j], m[8 + j], m[12 + j], WV_ADD, WV_SUB);
    for (int a = 0; a < 2; a++) {
      __m512 y0, y1;
      WINO_AT4(y0, y1, s[a][0], s[a][1], s[a][2], s[a][3], WV_ADD, WV_SUB);
      wino_put(d, a, 2 * tx, _mm512_permutex2var_ps(y0, lo, y1));
      wino_put(d, a, 2 * tx + 16, _mm512_permutex2var_ps(y0, hi, y1));
    }
  }
}
#endif

/* ---- F(4x4, 3x3) tile transforms --------------------------------------------------------- */

/* V planes (stride ps) for tiles [0, tw) of one tile row: tile tx reads padded columns
 * [4tx, 4tx + 6) of rows r[0..5]. */
static void wino4_in_c(const float *const r[6], int64_t tw, float *out, int64_t ps) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float t[6][6];
    for (int j = 0; j < 6; j++) {
      float d[6], o[6];
      for (int i = 0; i < 6; i++) d[i] = r[i][4 * tx + j];
      WINO_BT6(float, d, o, WF_ADD, WF_SUB, WF_MUL, 4.0f, 5.0f, 2.0f);
      for (int i = 0; i < 6; i++) t[i][j] = o[i];
    }
    for (int i = 0; i < 6; i++) {
      float o[6];
      WINO_BT6(float, t[i], o, WF_ADD, WF_SUB, WF_MUL, 4.0f, 5.0f, 2.0f);
      for (int j = 0; j < 6; j++) out[(6 * i + j) * ps + tx] = o[j];
    }
  }
}

/* Output rows r[0..3] (4 * tw values each) of one tile row from O planes (stride ps; tile tx
 * at tx * ts). */
static void wino4_out_c(const float *o, int64_t ps, int64_t ts, int64_t tw, float *const r[4]) {
  for (int64_t tx = 0; tx < tw; tx++) {
    float s[4][6];
    for (int j = 0; j < 6; j++) {
      float m[6], y[4];
      for (int i = 0; i < 6; i++) m[i] = o[(6 * i + j) * ps + tx * ts];
      WINO_AT6(float, m, y, WF_ADD, WF_SUB, WF_MUL, 2.0f, 4.0f, 8.0f);
      for (int a = 0; a < 4; a++) s[a][j] = y[a];
    }
    for (int a = 0; a < 4; a++) {
      float y[4];
      WINO_AT6(float, s[a], y, WF_ADD, WF_SUB, WF_MUL, 2.0f, 4.0f, 8.0f);
      for (int b = 0; b < 4; b++) r[a][4 * tx + b] = y[b];
    }
  }
}

#ifdef KILN_HAVE_X86_KERNELS
/* s[4k + j] for k = 0..15 (reads s[0 .. 64)); ix holds j, j + 4, ..., j + 28 in lanes 0..7. */
/* Lanes 0..7 from s[0 .. 32) and lanes 8..15 from s2[0 .. 32) (s2 = s + 32: 16 tiles of one row;
 * else 8 tiles each of two rows). */
T512 static inline __m512 wino_ld4(const float *s, const float *s2, __m512i ix) {
  __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(s), ix, _mm512_loadu_ps(s + 16));
  __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(s2), ix, _mm512_loadu_ps(s2 + 16));
  return _mm512_shuffle_f32x4(lo, hi, 0x44);
}

/* As wino4_in_c, 16 tiles at a time; reads r[i][0 .. 4 * round_up(tw, 16) + 8). With r2 (the
 * rows of the next tile row, tw <= 8): both tile rows at once, 8 lanes each, their V columns
 * one after the other (the vectors would be half empty on narrow planes otherwise). */
T512 static void wino4_in_avx512(const float *const r[6], const float *const *r2, int64_t tw, float *out,
                                 int64_t ps) {
  __m512i ix[4];
  for (int j = 0; j < 4; j++)
    ix[j] = _mm512_setr_epi32(j, j + 4, j + 8, j + 12, j + 16, j + 20, j + 24, j + 28, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 k4 = _mm512_set1_ps(4.0f), k5 = _mm512_set1_ps(5.0f), k2 = _mm512_set1_ps(2.0f);
  for (int64_t tx = 0; tx < tw; tx += 16) {
    __mmask16 mk = tw - tx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (tw - tx)) - 1);
    __m512 t[6][6];
    for (int j = 0; j < 6; j++) {
      __m512 d[6], o[6];
      for (int i = 0; i < 6; i++) {
        const float *s0 = r[i] + 4 * tx + (j & 4);
        d[i] = wino_ld4(s0, r2 ? r2[i] + (j & 4) : s0 + 32, ix[j & 3]);
      }
      WINO_BT6(__m512, d, o, WV_ADD, WV_SUB, WV_MUL, k4, k5, k2);
      for (int i = 0; i < 6; i++) t[i][j] = o[i];
    }
    for (int i = 0; i < 6; i++) {
      __m512 o[6];
      WINO_BT6(__m512, t[i], o, WV_ADD, WV_SUB, WV_MUL, k4, k5, k2);
      for (int j = 0; j < 6; j++) {
        _mm512_mask_storeu_ps(out + (6 * i + j) * ps + tx, mk, o[j]);
        if (r2) _mm512_mask_storeu_ps(out + (6 * i + j) * ps + tw, mk, _mm512_shuffle_f32x4(o[j], o[j], 0xEE));
      }
    }
  }
}

/* 4 x 16 -> 16 x 4: y[b][k] to column 4k + b of 64 columns, the first 32 to row a of d0 from
 * col0, the others to row a of d1 from col1. */
T512 static inline void wino_put4x16(const wino_dst *d0, const wino_dst *d1, int a, int64_t col0, int64_t col1,
                                     const __m512 y[4]) {
  __m512 t0 = _mm512_unpacklo_ps(y[0], y[1]), t1 = _mm512_unpackhi_ps(y[0], y[1]);
  __m512 t2 = _mm512_unpacklo_ps(y[2], y[3]), t3 = _mm512_unpackhi_ps(y[2], y[3]);
  __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
  __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
  __m512 v0 = _mm512_shuffle_f32x4(u0, u1, 0x44), v1 = _mm512_shuffle_f32x4(u2, u3, 0x44);
  __m512 v2 = _mm512_shuffle_f32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_f32x4(u2, u3, 0xEE);
  wino_put(d0, a, col0, _mm512_shuffle_f32x4(v0, v1, 0x88));
  wino_put(d0, a, col0 + 16, _mm512_shuffle_f32x4(v0, v1, 0xDD));
  wino_put(d1, a, col1, _mm512_shuffle_f32x4(v2, v3, 0x88));
  wino_put(d1, a, col1 + 16, _mm512_shuffle_f32x4(v2, v3, 0xDD));
}

/* As wino4_out_c, 16 tiles at a time, stored through d. With d2 (the next tile row, tw <= 8):
 * both tile rows at once, 8 lanes each. */
T512 static void wino4_out_avx512(const float *o, int64_t ps, int64_t tw, const wino_dst *d, const wino_dst *d2) {
  const __m512 k2 = _mm512_set1_ps(2.0f), k4 = _mm512_set1_ps(4.0f), k8 = _mm512_set1_ps(8.0f);
  for (int64_t tx = 0; tx < tw; tx += 16) {
    __mmask16 mk = tw - tx >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (tw - tx)) - 1);
    __m512 s[4][6];
    for (int j = 0; j < 6; j++) {
      __m512 m[6], y[4];
      for (int i = 0; i < 6; i++) {
        m[i] = _mm512_maskz_loadu_ps(mk, o + (6 * i + j) * ps + tx);
        if (d2) m[i] = _mm512_shuffle_f32x4(m[i], _mm512_maskz_loadu_ps(mk, o + (6 * i + j) * ps + tw), 0x44);
      }
      WINO_AT6(__m512, m, y, WV_ADD, WV_SUB, WV_MUL, k2, k4, k8);
      for (int a = 0; a < 4; a++) s[a][j] = y[a];
    }
    for (int a = 0; a < 4; a++) {
      __m512 y[4];
      if (!d->y[a] && !(d2 && d2->y[a])) continue;
      WINO_AT6(__m512, s[a], y, WV_ADD, WV_SUB, WV_MUL, k2, k4, k8);
      if (d2)
        wino_put4x16(d, d2, a, 0, 0, y);
      else
        wino_put4x16(d, d, a, 4 * tx, 4 * tx + 32, y);
    }
  }
}
#endif

/* ---- blocks ---------------------------------------------------------------------------- */

/* Floats of V + O per block (both stay in L2 between the transforms and the GEMMs). */
enum { WINO_BLOCK_FLOATS = 192 * 1024 };
typedef struct wino_blk {
  const kiln_conv2d_f32_params *p;
  const kiln_conv2d_f32_epilogue *ep;
  const float *x, *u; /* x: image nn; u: np weight planes [m, c] or [c, m] (past the header) */
  float *y;
  int e, a, np;       /* output tile e x e, input tile a x a (a = e + 2), np = a * a planes */
  int trans;          /* O and U transposed: O [np][nt][m], u [np][c][m] (WINO_TRANS) */
  int64_t nn, tw, ty0, ty1, nt;
  float *v, *o;       /* [np][c][nt], [np][m][nt] (or [np][nt][m]) */
  float *scr;         /* per thread: scr_per floats (rows of rw floats) */
  int64_t rw, scr_per;
  atomic_int *err;    /* the first error of the convolution's GEMMs, any thread (KILN_OK: none) */
  int isa;
} wino_blk;

/* V planes (stride ps) of one tile row from the a padded input rows r. */
#ifdef KILN_HAVE_X86_KERNELS
/* The AVX-512 F(4x4) transforms take two tile rows at once where a row has at most 8 tiles. */
static int wino_pairs(const wino_blk *b) { return b->isa >= KILN_ISA_AVX512 && b->e == 4 && b->tw <= 8; }
#endif

static void wino_in_row(const wino_blk *b, const float *const *r, float *out, int64_t ps) {
#ifdef KILN_HAVE_X86_KERNELS
  if (b->isa >= KILN_ISA_AVX512) {
    if (b->e == 4)
      wino4_in_avx512(r, NULL, b->tw, out, ps);
    else
      wino_in_avx512(r, b->tw, out, ps);
    return;
  }
#endif
#ifdef KILN_HAVE_X86_KERNELS
  if (b->isa == KILN_ISA_AVX2) {
    if (b->e == 4)
      kiln_wino4_in_avx2(r, b->tw, out, ps);
    else
      kiln_wino_in_avx2(r, b->tw, out, ps);
    return;
  }
#endif
  if (b->e == 4)
    wino4_in_c(r, b->tw, out, ps);
  else
    wino_in_c(r, b->tw, out, ps);
}

/* The e output rows r of one tile row from O planes (stride ps; tile tx at tx * ts). */
static void wino_out_row(const wino_blk *b, const float *o, int64_t ps, int64_t ts, float *const *r) {
#ifdef KILN_HAVE_X86_KERNELS
  if (b->isa == KILN_ISA_AVX2 && ts == 1) {
    if (b->e == 4)
      kiln_wino4_out_avx2(o, ps, b->tw, r);
    else
      kiln_wino_out_avx2(o, ps, b->tw, r[0], r[1]);
    return;
  }
#endif
  if (b->e == 4)
    wino4_out_c(o, ps, ts, b->tw, r);
  else
    wino_out_c(o, ps, ts, b->tw, r[0], r[1]);
}

#ifdef KILN_HAVE_X86_KERNELS
T512 static void wino_copy_rows_avx512(float *d, int64_t ld, const float *s, int64_t ls, int64_t rows, int64_t n) {
  __mmask16 mk = (__mmask16)((1u << (n & 15)) - 1);
  for (int64_t r = 0; r < rows; r++, d += ld, s += ls) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_loadu_ps(s + i));
    if (i < n) _mm512_mask_storeu_ps(d + i, mk, _mm512_maskz_loadu_ps(mk, s + i));
  }
}
#endif

/* rows rows of n floats from s (stride ls) to d (stride ld): short rows, inline rather than
 * through memcpy calls. */
static void wino_copy_rows(int isa, float *d, int64_t ld, const float *s, int64_t ls, int64_t rows, int64_t n) {
#ifdef KILN_HAVE_X86_KERNELS
  if (isa >= KILN_ISA_AVX512) {
    wino_copy_rows_avx512(d, ld, s, ls, rows, n);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; r++) memcpy(d + r * ld, s + r * ls, sizeof(float) * (size_t)n);
}

/* Input transform of channels [begin, end): each channel's padded input rows of the block are
 * copied once into the thread's scratch (zeroed once, so padding stays zero), and the tiles
 * are transformed from there. */
static void wino_in_task(void *ctx, size_t begin, size_t end, int ti) {
  const wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  int64_t rw = b->rw, nr = b->e * (b->ty1 - b->ty0) + 2, iy0 = b->e * b->ty0 - p->pt;
  float *buf = b->scr + (int64_t)ti * b->scr_per;
  memset(buf, 0, sizeof(float) * (size_t)(nr * rw));
  int64_t lo = iy0 > 0 ? iy0 : 0, hi = iy0 + nr < p->h ? iy0 + nr : p->h;
  int64_t l = p->pl < rw ? p->pl : rw, n = p->w < rw - l ? p->w : rw - l;
  for (size_t c = begin; c < end; c++) {
    const float *xp = b->x + (int64_t)c * p->h * p->w;
    wino_copy_rows(b->isa, buf + (lo - iy0) * rw + l, rw, xp + lo * p->w, p->w, hi - lo, n);
    for (int64_t ty = b->ty0; ty < b->ty1; ty++) {
      const float *r[6];
      for (int i = 0; i < 6; i++) r[i] = buf + (b->e * (ty - b->ty0) + (i < b->a ? i : 0)) * rw;
      float *out = b->v + (int64_t)c * b->nt + (ty - b->ty0) * b->tw;
#ifdef KILN_HAVE_X86_KERNELS
      if (wino_pairs(b) && ty + 1 < b->ty1) { /* two tile rows in one pass */
        const float *r2[6];
        for (int i = 0; i < 6; i++) r2[i] = r[i] + 4 * rw;
        wino4_in_avx512(r, r2, b->tw, out, p->c * b->nt);
        ty++;
        continue;
      }
#endif
      wino_in_row(b, r, out, p->c * b->nt);
    }
  }
}

static void wino_out_task(void *ctx, size_t begin, size_t end, int ti);

/* Output channels per task of wino_slice_task. */
enum { WINO_SLICE = 16 };

/* Slices of m output channels: WINO_SLICE each, the last one longer rather than one channel
 * alone (a GEMM of one row takes the matrix-vector path, which sums in another order). */
static size_t wino_slices(int64_t m) {
  return m > WINO_SLICE && m % WINO_SLICE == 1 ? (size_t)(m / WINO_SLICE) : (size_t)((m + WINO_SLICE - 1) / WINO_SLICE);
}

/* Slices [begin, end) of wino_slices(m): their output channels' rows of the np GEMMs, then
 * their output transforms, on one thread (all slices: the whole block). On several threads
 * each reads back the O rows it has just written, from its own cache, and a block needs one
 * barrier after the input transform. Each element of O is the same sum as in a whole-M GEMM
 * (the K blocks depend on K alone; no slice is a single row), so the result does not depend
 * on the split. An error goes to *b->err. */
static void wino_slice_task(void *ctx, size_t begin, size_t end, int ti) {
  wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  kiln_gemm_ctx g = {NULL, b->isa};
  size_t m0 = begin * WINO_SLICE, m1 = end == wino_slices(p->m) ? (size_t)p->m : end * WINO_SLICE;
  kiln_code rc = KILN_OK;
  for (int64_t k = 0; k < b->np && !rc; k++) {
    const float *v = b->v + k * p->c * b->nt;
    if (b->trans) /* O^T = V^T U^T: tiles as rows (V read transposed in place), channels as columns */
      rc = kiln_gemm_f32(&g, 1, 0, (size_t)b->nt, m1 - m0, (size_t)p->c, 1.0f, v, (size_t)b->nt,
                         b->u + k * p->m * p->c + (int64_t)m0, (size_t)p->m, 0.0f,
                         b->o + k * p->m * b->nt + (int64_t)m0, (size_t)p->m, NULL, NULL);
    else
      rc = kiln_gemm_f32(&g, 0, 0, m1 - m0, (size_t)b->nt, (size_t)p->c, 1.0f,
                         b->u + (k * p->m + (int64_t)m0) * p->c, (size_t)p->c, v, (size_t)b->nt, 0.0f,
                         b->o + (k * p->m + (int64_t)m0) * b->nt, (size_t)b->nt, NULL, NULL);
  }
  if (rc) {
    int none = KILN_OK;
    atomic_compare_exchange_strong(b->err, &none, (int)rc);
  } else {
    wino_out_task(ctx, m0, m1, ti);
  }
}

#ifdef KILN_HAVE_X86_KERNELS
/* As wino_out_task's AVX-512 path for the transposed O (b->trans: plane k's tile t, channel mo
 * at o[k * ps + t * m + mo]), output channels [m0, m1): 16 channels a vector, 16 / e tiles
 * (16 output columns) at a time, turned into rows of the channels by 16 x 16 transposes. The
 * transforms are the same operations in the same order. */
T512 static void wino_out_tr_avx512(const wino_blk *b, int64_t m0, int64_t m1) {
  const kiln_conv2d_f32_params *p = b->p;
  const kiln_conv2d_f32_epilogue *ep = b->ep;
  const int e = b->e, relu = ep->act.kind == KILN_ACT_RELU;
  const int64_t m = p->m, ps = m * b->nt, ohw = p->oh * p->ow, per = 16 / e;
  const __m512 k2 = _mm512_set1_ps(2.0f), k4 = _mm512_set1_ps(4.0f), k8 = _mm512_set1_ps(8.0f);
  for (int64_t mo0 = m0; mo0 < m1; mo0 += 16) {
    int64_t nc = m1 - mo0 < 16 ? m1 - mo0 : 16;
    __mmask16 cm = nc >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1);
    float *yc = b->y + (b->nn * m + mo0) * ohw;
    const float *rc = ep->residual ? ep->residual + (b->nn * m + mo0) * ohw : NULL;
    for (int64_t ty = b->ty0; ty < b->ty1; ty++) {
      int64_t oy = e * ty, rows = p->oh - oy < e ? p->oh - oy : e;
      for (int64_t tx0 = 0; tx0 < b->tw; tx0 += per) {
        int64_t n = b->tw - tx0 < per ? b->tw - tx0 : per;
        __m512 col[4][16]; /* col[a][j]: output row a, column e * tx0 + j, 16 channels */
        for (int a = 0; a < e; a++) /* columns past the tile row: clipped at ow when stored */
          for (int64_t j = e * n; j < 16; j++) col[a][j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i++) {
          const float *o = b->o + ((ty - b->ty0) * b->tw + tx0 + i) * m + mo0;
          if (e == 2) {
            __m512 v[16], s[2][4];
            for (int k = 0; k < 16; k++) v[k] = _mm512_maskz_loadu_ps(cm, o + k * ps);
            for (int j = 0; j < 4; j++) WINO_AT4(s[0][j], s[1][j], v[j], v[4 + j], v[8 + j], v[12 + j], WV_ADD, WV_SUB);
            for (int a = 0; a < 2; a++)
              WINO_AT4(col[a][2 * i], col[a][2 * i + 1], s[a][0], s[a][1], s[a][2], s[a][3], WV_ADD, WV_SUB);
            continue;
          }
          __m512 s[4][6];
          for (int j = 0; j < 6; j++) {
            __m512 v[6], y[4];
            for (int r = 0; r < 6; r++) v[r] = _mm512_maskz_loadu_ps(cm, o + (6 * r + j) * ps);
            WINO_AT6(__m512, v, y, WV_ADD, WV_SUB, WV_MUL, k2, k4, k8);
            for (int a = 0; a < 4; a++) s[a][j] = y[a];
          }
          for (int a = 0; a < 4; a++) {
            __m512 y[4];
            WINO_AT6(__m512, s[a], y, WV_ADD, WV_SUB, WV_MUL, k2, k4, k8);
            for (int c = 0; c < 4; c++) col[a][4 * i + c] = y[c];
          }
        }
        for (int64_t a = 0; a < rows; a++) {
          transpose16_avx512(col[a]); /* col[a][j]: channel mo0 + j's 16 columns */
          int64_t off = (oy + a) * p->ow + e * tx0;
          for (int64_t j = 0; j < nc; j++)
            wino_store(yc + j * ohw + off, rc ? rc + j * ohw + off : NULL, ep->bias ? ep->bias[mo0 + j] : 0.0f,
                       relu, p->ow - e * tx0, col[a][j]);
        }
      }
    }
    if (ep->act.kind != KILN_ACT_NONE && !relu) {
      int64_t oy0 = e * b->ty0, oy1 = e * b->ty1 < p->oh ? e * b->ty1 : p->oh;
      for (int64_t j = 0; j < nc; j++)
        kiln_f32_act(b->isa, yc + j * ohw + oy0 * p->ow, (size_t)((oy1 - oy0) * p->ow), &ep->act);
    }
  }
}
#endif

static void wino_out_task(void *ctx, size_t begin, size_t end, int ti) {
  const wino_blk *b = ctx;
  const kiln_conv2d_f32_params *p = b->p;
  const kiln_conv2d_f32_epilogue *ep = b->ep;
  float *r[4];
  for (int i = 0; i < 4; i++) r[i] = b->scr + (int64_t)ti * b->scr_per + i * b->rw;
  int64_t ohw = p->oh * p->ow, e = b->e;
  int64_t oy0 = e * b->ty0, oy1 = e * b->ty1 < p->oh ? e * b->ty1 : p->oh;
#ifdef KILN_HAVE_X86_KERNELS
  if (b->trans && b->isa >= KILN_ISA_AVX512) {
    wino_out_tr_avx512(b, (int64_t)begin, (int64_t)end);
    return;
  }
#endif
  for (size_t mo = begin; mo < end; mo++) {
    float bv = ep->bias ? ep->bias[mo] : 0.0f;
    int64_t off = (b->nn * p->m + (int64_t)mo) * ohw;
    float *yp = b->y + off;
    const float *rp = ep->residual ? ep->residual + off : NULL;
#ifdef KILN_HAVE_X86_KERNELS
    if (!b->trans && b->isa >= KILN_ISA_AVX512) { /* straight into y, the epilogue in registers */
      wino_dst d;
      memset(&d, 0, sizeof d);
      d.bias = bv;
      d.relu = ep->act.kind == KILN_ACT_RELU;
      d.ow = p->ow;
      wino_dst d2 = d;
      int pair = 0;
      for (int64_t ty = b->ty0; ty < b->ty1; ty += 1 + pair) {
        pair = wino_pairs(b) && ty + 1 < b->ty1; /* two tile rows in one pass */
        for (int64_t a = 0; a < 4; a++) {
          int in = a < e && e * ty + a < p->oh, in2 = pair && a < e && e * (ty + 1) + a < p->oh;
          d.y[a] = in ? yp + (e * ty + a) * p->ow : NULL;
          d.res[a] = in && rp ? rp + (e * ty + a) * p->ow : NULL;
          d2.y[a] = in2 ? yp + (e * (ty + 1) + a) * p->ow : NULL;
          d2.res[a] = in2 && rp ? rp + (e * (ty + 1) + a) * p->ow : NULL;
        }
        const float *o = b->o + (int64_t)mo * b->nt + (ty - b->ty0) * b->tw;
        if (e == 4)
          wino4_out_avx512(o, p->m * b->nt, b->tw, &d, pair ? &d2 : NULL);
        else
          wino_out_avx512(o, p->m * b->nt, b->tw, &d);
      }
      if (ep->act.kind != KILN_ACT_NONE && !d.relu)
        kiln_f32_act(b->isa, yp + oy0 * p->ow, (size_t)((oy1 - oy0) * p->ow), &ep->act);
      continue;
    }
#endif
    for (int64_t ty = b->ty0; ty < b->ty1; ty++) {
      int64_t t0 = (ty - b->ty0) * b->tw; /* the tile row's first tile in the block */
      if (b->trans)
        wino_out_row(b, b->o + t0 * p->m + (int64_t)mo, p->m * b->nt, p->m, r);
      else
        wino_out_row(b, b->o + (int64_t)mo * b->nt + t0, p->m * b->nt, 1, r);
      for (int64_t a = 0; a < e && e * ty + a < p->oh; a++) {
        const float *restrict s = r[a];
        float *restrict yr = yp + (e * ty + a) * p->ow;
        if (rp) {
          const float *restrict rr = rp + (e * ty + a) * p->ow;
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

/* One block, every loop on the calling thread (scratch: b->scr for thread 0). */
static kiln_code wino_block_serial(wino_blk *b) {
  wino_in_task(b, 0, (size_t)b->p->c, 0);
  wino_slice_task(b, 0, wino_slices(b->p->m), 0);
  return (kiln_code)atomic_load(b->err);
}

typedef struct wino_outer {
  const wino_blk *tmpl; /* shared fields */
  int64_t bt, th, nb;   /* tile rows per block (at most), tile rows, blocks per image */
  int even;             /* blocks split the tile rows evenly (else bt rows each, the last less) */
  size_t per_thread;    /* floats of V + O + scratch per thread */
  float *mem;
} wino_outer;

static void wino_outer_task(void *ctx, size_t begin, size_t end, int ti) {
  wino_outer *w = ctx;
  wino_blk b = *w->tmpl;
  const kiln_conv2d_f32_params *p = b.p;
  float *mem = w->mem + (size_t)ti * w->per_thread;
  /* b.err is shared: a thread stops at its next block once any block failed */
  for (size_t t = begin; t < end && atomic_load_explicit(b.err, memory_order_relaxed) == KILN_OK; t++) {
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
    b.o = mem + b.np * p->c * b.nt;
    b.scr = b.o + b.np * p->m * b.nt;
    wino_block_serial(&b);
  }
}

/* Two threads on one block: each transforms every input channel into its own V, then runs
 * its half of the output-channel slices against it (task t of 2: V at v0 + t * vf, scratch
 * at scr0 + t * scr_per). */
typedef struct wino_priv {
  const wino_blk *tmpl;
  float *v0, *scr0;
  size_t vf;
} wino_priv;

static void wino_priv_task(void *ctx, size_t begin, size_t end, int ti) {
  (void)ti;
  const wino_priv *w = ctx;
  size_t ns = wino_slices(w->tmpl->p->m);
  for (size_t t = begin; t < end; t++) {
    wino_blk b = *w->tmpl;
    b.v = w->v0 + t * w->vf;
    b.scr = w->scr0 + (int64_t)t * b.scr_per;
    wino_in_task(&b, 0, (size_t)b.p->c, 0);
    wino_slice_task(&b, ns * t / 2, ns * (t + 1) / 2, 0);
  }
}

/* Whether a plane that makes one block is cut into a block of tile rows per thread (each
 * thread transforms, multiplies and writes back its own rows, reading every weight plane)
 * rather than split by output channels (each thread reads half the weights, but every input
 * row, and writes every output row). Cut by rows, a thread's input is mostly what its own
 * core wrote as the node before's output, and its output stays there for the node after. In
 * a network at 2 threads, that saved more than reading the weights twice cost, while the
 * weights were at most 6x input + output: SqueezeNet 1.1's 3x3 layers on 27x27 and 13x13
 * (weights 1.3-4.9x) took 0.117-0.192 ms against 0.149-0.227 (kiln profile, 6 of 7 nodes
 * faster), the whole model 0.967 of its time, ResNet-18 0.983 and ResNet-50 0.988 (their
 * 128 -> 128 on 28x28, 2.9x). ResNet-50's 256 -> 256 on 14x14 (10.5x) was slower cut by rows
 * (0.64 against 0.55 ms). AMD EPYC Zen 5, avx512, kiln bench, 10 alternations, in a busy
 * period of the host (SqueezeNet 3.3-3.9 ms at 2 threads); in its middle periods (2.6-2.8 ms)
 * SqueezeNet took 0.99 of its time cut by rows (40 alternations), in its quiet ones (1.9 ms)
 * 1.03: the cut pays where moving lines between the cores is dear. Blocks keep 16 columns or
 * more (GEMMs, not matrix-vector products: a column's result does not depend on the cut).
 * More threads would each read every weight plane too: they keep the channel split until
 * measured. */
static int wino_split_rows(const kiln_conv2d_f32_params *p, int np, int64_t th, int64_t tw, int nthr) {
  if (nthr != 2 || th < nthr || th / nthr * tw < 16) return 0;
  double wts = (double)np * (double)p->m * (double)p->c;
  double act = (double)p->c * (double)(p->h * p->w) + (double)p->m * (double)(p->oh * p->ow);
  return wts <= 6.0 * act;
}

kiln_code kiln_wino_f32_conv(kiln_threadpool *pool, int isa, const kiln_conv2d_f32_params *p,
                             const float *x, const float *u, const kiln_conv2d_f32_epilogue *ep,
                             float *y) {
  int32_t tag;
  memcpy(&tag, u, sizeof tag);
  int e = (tag & 0xff) == 4 ? 4 : 2, a = e + 2, np = a * a, trans = (tag & WINO_TRANS) != 0;
  if (tag != (WINO_TAG | e | (trans ? WINO_TRANS : 0))) return KILN_ERR_INVALID_ARG;
  int64_t tw = (p->ow + e - 1) / e, th = (p->oh + e - 1) / e;
  int64_t bt = WINO_BLOCK_FLOATS / (np * (p->c + p->m) * tw);
  int64_t min_bt = (48 + tw - 1) / tw; /* GEMMs of at least 48 columns */
  if (bt < min_bt) bt = min_bt;
  if (bt < 1) bt = 1;
  if (bt > th) bt = th;
  int64_t nt = bt * tw, rw = e * ((tw + 15) / 16 * 16) + 16, nb = (th + bt - 1) / bt;
  int nthr = kiln_threadpool_size(pool);
  /* Enough blocks: each thread takes whole blocks (one barrier in all); else the blocks run
   * in turn with the transforms and GEMMs on the pool. */
  int outer = nthr > 1 && p->n * nb >= 3 * (int64_t)nthr;
  /* Per image at least one block per thread: round the block count up to a multiple of the
   * threads and split the tile rows evenly over them (blocks no larger, each thread the same
   * share), so each thread takes whole blocks with one barrier in all instead of three per
   * block. Blocks keep at least 16 columns (GEMMs, not matrix-vector products, so a column's
   * result does not depend on the split). */
  int even = 0;
  if (nb < nthr && wino_split_rows(p, np, th, tw, nthr)) {
    nb = nthr;
    bt = (th + nb - 1) / nb;
  }
  if (nthr > 1 && nb >= nthr && (th - (nb - 1) * bt) * tw >= 2) {
    int64_t nb2 = (nb + nthr - 1) / nthr * nthr;
    if (nb2 <= th && th / nb2 * tw >= 16) {
      nb = nb2;
      outer = even = 1;
    }
  }
  /* Blocks in turn on two threads: V private to each thread (priv below). The shared V of
   * the pool-wide transforms has each thread's GEMMs read the half of V the other wrote, and
   * the next transform write lines the other read: 128 -> 128 channels on 28x28 took 110 us
   * of transform and 252 us of slices at 2 threads against 71 and 413 at 1 (conv_bench, AMD
   * EPYC Zen 5, avx512). Each thread transforming all channels costs one more transform in
   * CPU time; at more threads that grows with them, so they keep the shared V. So do blocks
   * of at most 16 tiles (7x7 planes): their GEMMs are one vector wide and stream the weights,
   * and a second transform of every channel costs more than reading half of V from the other
   * core. ResNet-50's 512 -> 512 layers on 7x7 took 0.74 against 0.85 ms at 2 threads (kiln
   * profile, 4 alternations), the model 0.982 of its time, ResNet-18 0.985-0.993 (kiln bench;
   * AMD EPYC Zen 5, avx512); on 14x14 planes (49 tiles) the shared V was 4-7% slower. */
  int priv = !outer && nthr == 2 && wino_slices(p->m) >= 2 && nt > 16;
  size_t vf = (size_t)(np * p->c * nt), of = (size_t)(np * p->m * nt);
  int64_t scr_per = (e * bt + 2) * rw; /* the input rows of a block; >= 4 output rows */
  size_t per_thread = (priv ? 2 : 1) * vf + of + (size_t)(outer ? 1 : nthr) * (size_t)scr_per;
  size_t floats = per_thread * (size_t)(outer ? nthr : 1);
  float *mem = kiln_scratch_get(KILN_SCRATCH_CONV, sizeof(float) * floats);
  if (!mem) return KILN_ERR_NOMEM;
  wino_blk b;
  memset(&b, 0, sizeof b);
  b.p = p;
  b.ep = ep;
  b.x = x;
  b.u = u + WINO_HDR;
  b.y = y;
  b.e = e;
  b.a = a;
  b.np = np;
  b.trans = trans;
  b.tw = tw;
  b.v = mem;
  b.o = mem + (priv ? 2 : 1) * vf;
  b.scr = b.o + of;
  b.rw = rw;
  b.scr_per = scr_per;
  b.isa = isa;
  atomic_int err; /* the first error of any block, on any thread */
  atomic_init(&err, KILN_OK);
  b.err = &err;
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
    /* Even blocks: each thread takes a contiguous run of them (the same number of tile rows
     * for each thread where the rows do not split evenly into blocks: 3+4 | 3+4, not 3+3 |
     * 4+4 as handing them out one at a time would give). */
    kiln_parallel_for(pool, (size_t)(p->n * nb), wino_outer_task, &w, even ? 0 : 1);
    return (kiln_code)atomic_load(&err);
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
      if (priv) {
        wino_priv w = {&b, mem, b.scr, vf};
        kiln_parallel_for(pool, 2, wino_priv_task, &w, 1);
      } else {
        kiln_parallel_for(pool, (size_t)p->c, wino_in_task, &b, 0);
        kiln_parallel_for(pool, wino_slices(p->m), wino_slice_task, &b, 0);
      }
      rc = (kiln_code)atomic_load(&err);
    }
  }
  return rc;
}
