/* The integer convolutions' driver (ops/qgemm.c: kiln_qconv_run) against a plain int64 reference
 * of sum (x - xz)(w - wz) over the taps inside the input, reduced modulo 2^32: results must be
 * equal bit for bit. Random 2-D geometries (groups, kernel sizes 1-3, strides 1-3, dilations
 * 1-2, begin and end pads 0-2, planes down to one pixel), u8 / s8 inputs and weights, scalar and
 * per-channel weight zero points, batches of 1-2: both k orders, the plain one (channel, tap) and
 * the channel quads (kiln_qconv_quads: channels per group a multiple of 4, more than one tap),
 * whose packing reads a padded, interleaved copy of the input and sums its columns from a plane
 * of channel sums. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tensor.h"
#include "ops/qgemm.h"
#include "testutil.h"

typedef struct geom {
  int64_t n, group, cg, mg, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw, pe_h, pe_w, oh, ow;
} geom;

static int64_t byte_val(const kiln_tensor *t, int64_t i) {
  const uint8_t *b = t->data;
  return t->dtype == KILN_INT8 ? (int8_t)b[i] : b[i];
}

/* The reference: int64 sums of the taps inside the input, wrapped to int32 as the ops do. */
static int32_t ref_at(const geom *g, const kiln_tensor *x, int64_t xz, const kiln_tensor *w, const int64_t *wz,
                      int64_t ni, int64_t o, int64_t oh, int64_t ow) {
  int64_t gr = o / g->mg, c = g->group * g->cg, sum = 0;
  for (int64_t ci = 0; ci < g->cg; ci++)
    for (int64_t kh = 0; kh < g->kh; kh++)
      for (int64_t kw = 0; kw < g->kw; kw++) {
        int64_t ih = oh * g->sh + kh * g->dh - g->ph, iw = ow * g->sw + kw * g->dw - g->pw;
        if (ih < 0 || ih >= g->ih || iw < 0 || iw >= g->iw) continue;
        int64_t xv = byte_val(x, ((ni * c + gr * g->cg + ci) * g->ih + ih) * g->iw + iw);
        int64_t wv = byte_val(w, ((o * g->cg + ci) * g->kh + kh) * g->kw + kw);
        sum += (xv - xz) * (wv - wz[o]);
      }
  return (int32_t)(uint32_t)(uint64_t)sum;
}

static kiln_tensor *random_bytes(kiln_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t dims[4] = {d0, d1, d2, d3};
  kiln_tensor *t = kiln_tensor_new(dt, 4, dims, NULL);
  uint8_t *b = t->data;
  for (int64_t i = 0; i < t->numel; i++) b[i] = (uint8_t)kt_rand();
  return t;
}

static void random_geom(geom *g) {
  static const int64_t cgs[] = {4, 8, 12, 16, 3, 5, 1};
  g->n = kt_rand_in(1, 2);
  g->group = kt_rand_in(1, 2);
  g->cg = cgs[kt_rand_in(0, 6)];
  g->mg = kt_rand_in(1, 9);
  g->kh = kt_rand_in(1, 3), g->kw = kt_rand_in(1, 3);
  g->sh = kt_rand_in(1, 3), g->sw = kt_rand_in(1, 3);
  g->dh = kt_rand_in(1, 2), g->dw = kt_rand_in(1, 2);
  g->ph = kt_rand_in(0, 2), g->pw = kt_rand_in(0, 2), g->pe_h = kt_rand_in(0, 2), g->pe_w = kt_rand_in(0, 2);
  int64_t eh = (g->kh - 1) * g->dh + 1, ew = (g->kw - 1) * g->dw + 1;
  g->ih = kt_rand_in(eh - g->ph - g->pe_h > 1 ? eh - g->ph - g->pe_h : 1, 12);
  g->iw = kt_rand_in(ew - g->pw - g->pe_w > 1 ? ew - g->pw - g->pe_w : 1, 12);
  g->oh = (g->ih + g->ph + g->pe_h - eh) / g->sh + 1;
  g->ow = (g->iw + g->pw + g->pe_w - ew) / g->sw + 1;
}

/* One case; returns whether it took the channel quads. */
static int one_case(int idx) {
  geom g;
  random_geom(&g);
  kiln_dtype xt = kt_rand_in(0, 1) ? KILN_INT8 : KILN_UINT8, wt = kt_rand_in(0, 1) ? KILN_INT8 : KILN_UINT8;
  int64_t c = g.group * g.cg, m = g.group * g.mg, ksize = g.kh * g.kw;
  kiln_tensor *x = random_bytes(xt, g.n, c, g.ih, g.iw), *w = random_bytes(wt, m, g.cg, g.kh, g.kw);
  int64_t lo = xt == KILN_INT8 ? -128 : 0, xz = kt_rand_in(lo, lo + 255), wlo = wt == KILN_INT8 ? -128 : 0;
  int per = (int)kt_rand_in(0, 1);
  int64_t *wz = malloc(sizeof(int64_t) * (size_t)m), wz0 = kt_rand_in(wlo, wlo + 255);
  for (int64_t o = 0; o < m; o++) wz[o] = per ? kt_rand_in(wlo, wlo + 255) : wz0;
  if (kt_rand_in(0, 3) == 0) wz0 = 0, memset(wz, 0, sizeof(int64_t) * (size_t)m); /* no column sums needed */
  int64_t d2[12] = {g.ih, g.iw, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw};
  kiln_qconv q = {g.n, c, m, g.group, g.cg, g.mg, g.cg * ksize, ksize, g.ih * g.iw, g.oh * g.ow, NULL, d2};
  int32_t *y = malloc(sizeof(int32_t) * (size_t)(g.n * m * q.ysize));
  kiln_error err = {0};
  const kiln_tensor *in[2] = {x, w};
  kiln_node node = {.name = "qconv", .op_type = "ConvInteger", .domain = "", .n_in = 2, .n_out = 1};
  kiln_kctx ctx = {.node = &node, .n_in = 2, .n_out = 0, .in = in, .err = &err};
  kiln_code rc = kiln_qconv_run(&ctx, 1, &q, x, xz, w, per ? wz : NULL, wz0, y);
  CHECK_MSG(rc == KILN_OK, "case %d: %s", idx, err.message);
  int64_t bad = 0;
  for (int64_t ni = 0; rc == KILN_OK && ni < g.n; ni++)
    for (int64_t o = 0; o < m; o++)
      for (int64_t oh = 0; oh < g.oh; oh++)
        for (int64_t ow = 0; ow < g.ow; ow++)
          bad += y[((ni * m + o) * g.oh + oh) * g.ow + ow] != ref_at(&g, x, xz, w, wz, ni, o, oh, ow);
  CHECK_MSG(bad == 0,
            "case %d: %lld of %lld outputs differ (n %lld group %lld cg %lld mg %lld in %lldx%lld k %lldx%lld "
            "s %lldx%lld d %lldx%lld pads %lld %lld %lld %lld, x %s w %s, wz %s)",
            idx, (long long)bad, (long long)(g.n * m * q.ysize), (long long)g.n, (long long)g.group,
            (long long)g.cg, (long long)g.mg, (long long)g.ih, (long long)g.iw, (long long)g.kh, (long long)g.kw,
            (long long)g.sh, (long long)g.sw, (long long)g.dh, (long long)g.dw, (long long)g.ph, (long long)g.pw,
            (long long)g.pe_h, (long long)g.pe_w, kiln_dtype_name(xt), kiln_dtype_name(wt), per ? "per channel" : "scalar");
  free(y);
  free(wz);
  kiln_tensor_free(x);
  kiln_tensor_free(w);
  return kiln_qconv_quads(g.cg, ksize, 2) != 0;
}

int main(void) {
  kt_rng = 0x51c0417a3e5u;
  int quads = 0, cases = 600;
  for (int i = 0; i < cases; i++) quads += one_case(i);
  printf("test_qconv: %d cases, %d in channel quads\n", cases, quads);
  CHECK(quads >= cases / 4 && quads <= cases * 3 / 4); /* both k orders exercised */
  return kt_finish("test_qconv");
}
