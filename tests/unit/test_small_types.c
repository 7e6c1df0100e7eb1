/* The 8- and 4-bit element types: every float8 and float4e2m1 code decodes to the value its
 * layout defines and encodes back to itself; conversions from float round to the nearest code
 * (ties to the even code) as a brute-force search over all codes says; saturate, NaN, Inf, -0
 * per kind; int4/uint4 clip and round; TensorProto packs the 4-bit types two per byte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/small_types.h"
#include "ir/tensor.h"
#include "kiln/kiln.h"
#include "testutil.h"

static const kiln_dtype SMALL[] = {KILN_FLOAT8E4M3FN, KILN_FLOAT8E4M3FNUZ, KILN_FLOAT8E5M2,
                                   KILN_FLOAT8E5M2FNUZ, KILN_FLOAT4E2M1};

static int ncodes(kiln_dtype t) { return t == KILN_FLOAT4E2M1 ? 16 : 256; }

static float maxval(kiln_dtype t) {
  switch (t) {
    case KILN_FLOAT8E4M3FN: return 448;
    case KILN_FLOAT8E4M3FNUZ: return 240;
    case KILN_FLOAT8E5M2: case KILN_FLOAT8E5M2FNUZ: return 57344;
    default: return 6;
  }
}

static bool is_uz(kiln_dtype t) { return t == KILN_FLOAT8E4M3FNUZ || t == KILN_FLOAT8E5M2FNUZ; }

/* The nearest finite code by brute force, ties to the even code; x's sign, except that the
 * fnuz kinds' one zero serves both signs. */
static int nearest(kiln_dtype t, double x) {
  int best = -1;
  double bd = INFINITY;
  for (int c = 0; c < ncodes(t); c++) {
    float v = kiln_small_to_f32(t, (uint8_t)c);
    if (!isfinite(v) || (!signbit(v) != !signbit(x) && !(v == 0 && is_uz(t)))) continue;
    double d = fabs((double)v - x);
    if (d < bd || (d == bd && (c & 1) == 0 && (best & 1))) {
      bd = d;
      best = c;
    }
  }
  return best;
}

static void test_decode(void) {
  /* known values from each layout */
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x7e) == 448);
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x01) == ldexpf(1, -9));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x08) == ldexpf(1, -6));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x38) == 1);
  CHECK(isnan(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x7f)) && isnan(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0xff)));
  CHECK(signbit(kiln_small_to_f32(KILN_FLOAT8E4M3FN, 0x80)));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FNUZ, 0x7f) == 240);
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FNUZ, 0x01) == ldexpf(1, -10));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E4M3FNUZ, 0x40) == 1);
  CHECK(isnan(kiln_small_to_f32(KILN_FLOAT8E4M3FNUZ, 0x80)));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2, 0x7b) == 57344);
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2, 0x7c) == INFINITY && kiln_small_to_f32(KILN_FLOAT8E5M2, 0xfc) == -INFINITY);
  CHECK(isnan(kiln_small_to_f32(KILN_FLOAT8E5M2, 0x7d)) && isnan(kiln_small_to_f32(KILN_FLOAT8E5M2, 0xff)));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2, 0x01) == ldexpf(1, -16));
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2, 0x3c) == 1);
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2FNUZ, 0x7f) == 57344);
  CHECK(kiln_small_to_f32(KILN_FLOAT8E5M2FNUZ, 0x01) == ldexpf(1, -17));
  CHECK(isnan(kiln_small_to_f32(KILN_FLOAT8E5M2FNUZ, 0x80)));
  static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; c++) CHECK(kiln_small_to_f32(KILN_FLOAT4E2M1, (uint8_t)c) == (c & 8 ? -e2m1[c & 7] : e2m1[c & 7]));
}

/* Every code goes back to itself (NaNs to the kind's NaN), and finite codes are ordered. */
static void test_round_trip(void) {
  for (size_t k = 0; k < sizeof SMALL / sizeof SMALL[0]; k++) {
    kiln_dtype t = SMALL[k];
    float prev = -INFINITY;
    for (int c = 0; c < ncodes(t); c++) {
      float v = kiln_small_to_f32(t, (uint8_t)c);
      for (int sat = 0; sat < 2; sat++) {
        uint8_t back = kiln_small_from_f64(t, v, sat);
        if (isinf(v) && sat) /* saturate: an infinity gives the largest finite value */
          CHECK(back == ((c & 0x80) | 0x7b));
        else if (isnan(v))
          CHECK_MSG(isnan(kiln_small_to_f32(t, back)), "%s code 0x%02x", kiln_dtype_name(t), c);
        else
          CHECK_MSG(back == c, "%s code 0x%02x (%g) came back as 0x%02x", kiln_dtype_name(t), c, (double)v, back);
      }
      if (c < ncodes(t) / 2 && isfinite(v)) { /* positive codes rise with the code */
        CHECK_MSG(v > prev || (c == 0 && v == 0), "%s code 0x%02x", kiln_dtype_name(t), c);
        prev = v;
      }
    }
  }
}

/* Midpoints between neighbours, points just off them, and random values against brute force. */
static void test_rounding(void) {
  kt_rng = 17;
  for (size_t k = 0; k < sizeof SMALL / sizeof SMALL[0]; k++) {
    kiln_dtype t = SMALL[k];
    int half = ncodes(t) / 2;
    for (int c = 0; c + 1 < half; c++) {
      double a = kiln_small_to_f32(t, (uint8_t)c), b = kiln_small_to_f32(t, (uint8_t)(c + 1));
      if (!isfinite(b)) break;
      double mid = (a + b) / 2, probes[3] = {mid, nextafter(mid, 0), nextafter(mid, INFINITY)};
      for (int p = 0; p < 3; p++) {
        for (int s = 0; s < 2; s++) {
          double x = s ? -probes[p] : probes[p];
          int want = nearest(t, x);
          uint8_t got = kiln_small_from_f64(t, x, true);
          CHECK_MSG(got == want, "%s from %.17g: 0x%02x, want 0x%02x", kiln_dtype_name(t), x, got, want);
        }
      }
    }
    for (int i = 0; i < 20000; i++) {
      double x = (double)kt_frand() * maxval(t) * 1.2;
      int want = fabs(x) > maxval(t) ? -1 : nearest(t, x);
      if (want < 0) continue;
      CHECK_MSG(kiln_small_from_f64(t, x, true) == want, "%s from %.17g", kiln_dtype_name(t), x);
    }
  }
}

/* Out of range, infinities, NaN and zeros per kind. */
static void test_edges(void) {
  /* saturate: +-Inf and overflow give +-max */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, INFINITY, true) == 0x7e);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, -INFINITY, true) == 0xfe);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, 1e6, true) == 0x7e);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FNUZ, -INFINITY, true) == 0xff);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2, INFINITY, true) == 0x7b);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2FNUZ, 1e9, true) == 0x7f);
  CHECK(kiln_small_from_f64(KILN_FLOAT4E2M1, -100, true) == 0xf);
  /* not saturate */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, INFINITY, false) == 0x7f);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, -1e6, false) == 0xff);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, 470, false) == 0x7f); /* rounds past 448 */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, 464, false) == 0x7e); /* the tie goes to 448 */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FNUZ, INFINITY, false) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FNUZ, 300, false) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2, -INFINITY, false) == 0xfc);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2, 1e6, false) == 0x7c);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2FNUZ, -1e6, false) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT4E2M1, 7, false) == 0x7); /* no NaN to give: saturates */
  /* NaN */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, NAN, true) == 0x7f);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, -NAN, true) == 0xff);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2, NAN, false) == 0x7f);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FNUZ, -NAN, true) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2FNUZ, NAN, false) == 0x80);
  /* zeros: -0 kept where the kind has it; fnuz kinds have none (tiny negatives too) */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, -0.0, true) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2, -0.0, true) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FNUZ, -0.0, true) == 0);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E5M2FNUZ, -1e-30, true) == 0);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, -1e-30, true) == 0x80);
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, ldexp(1, -10), true) == 0); /* half the least: even */
  CHECK(kiln_small_from_f64(KILN_FLOAT8E4M3FN, ldexp(1.5, -10), true) == 1);
}

static void test_int4(void) {
  CHECK(kiln_int4_from_f64(KILN_INT4, 2.5) == 2);
  CHECK(kiln_int4_from_f64(KILN_INT4, 3.5) == 4);
  CHECK(kiln_int4_from_f64(KILN_INT4, -9.7) == -8);
  CHECK(kiln_int4_from_f64(KILN_INT4, 100) == 7);
  CHECK(kiln_int4_from_f64(KILN_UINT4, -3) == 0);
  CHECK(kiln_int4_from_f64(KILN_UINT4, 15.4) == 15);
  CHECK(kiln_int4_from_f64(KILN_UINT4, NAN) == 0);
  CHECK(kiln_int4_from_i64(KILN_INT4, -100) == -8);
  CHECK(kiln_int4_from_i64(KILN_UINT4, 16) == 15);
  uint8_t src[7] = {0xf8 /* -8 */, 0xff /* -1 */, 0, 7, 3, 0xfa /* -6 */, 1}, packed[4], back[7];
  kiln_pack4(src, 7, packed);
  CHECK(packed[0] == 0xf8 && packed[1] == 0x70 && packed[2] == 0xa3 && packed[3] == 0x01);
  kiln_unpack4(KILN_INT4, packed, 7, back);
  CHECK(memcmp(src, back, 7) == 0);
  kiln_unpack4(KILN_UINT4, packed, 7, back);
  CHECK(back[0] == 8 && back[1] == 15 && back[5] == 10);
  CHECK(kiln_proto_raw_bytes(KILN_INT4, 7) == 4 && kiln_proto_raw_bytes(KILN_FLOAT8E5M2, 7) == 7);
}

/* Through the public API: element sizes and names, set/get, and a .pb file that packs. */
static void test_tensor_proto(void) {
  CHECK(kiln_dtype_size(KILN_INT4) == 1 && kiln_dtype_size(KILN_FLOAT8E4M3FN) == 1);
  CHECK(strcmp(kiln_dtype_name(KILN_FLOAT8E5M2FNUZ), "float8e5m2fnuz") == 0);
  CHECK(strcmp(kiln_dtype_name(KILN_FLOAT4E2M1), "float4e2m1") == 0);
  const kiln_dtype types[] = {KILN_INT4, KILN_UINT4, KILN_FLOAT4E2M1, KILN_FLOAT8E4M3FN, KILN_FLOAT8E5M2};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    kiln_error err = {0};
    kiln_tensor *t = NULL, *r = NULL;
    int64_t dims[1] = {5};
    CHECK(kiln_tensor_create(types[k], 1, dims, &t, &err) == KILN_OK);
    if (!t) continue;
    const double vals[5] = {-3, 1.5, 0, 6, 2};
    for (int i = 0; i < 5; i++) kiln_set_f64(t, i, vals[i]);
    char path[] = "/tmp/kiln_small_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK_MSG(kiln_value_save_pb(path, t, "x", 0, &err) == KILN_OK, "%s", err.message);
    CHECK_MSG(kiln_value_load_pb(path, KILN_PB_TENSOR, &r, &err) == KILN_OK, "%s", err.message);
    if (r) {
      CHECK(kiln_tensor_dtype(r) == types[k] && kiln_tensor_numel(r) == 5);
      CHECK(memcmp(kiln_tensor_cdata(r), kiln_tensor_cdata(t), 5) == 0);
    }
    FILE *f = fopen(path, "rb");
    long size = 0;
    if (f) {
      fseek(f, 0, SEEK_END);
      size = ftell(f);
      fclose(f);
    }
    /* dims, type, name and raw_data: 3 bytes of payload when packed, 5 when not */
    CHECK_MSG(size == (kiln_dtype_is_packed4(types[k]) ? 12 : 14), "%s: %ld bytes", kiln_dtype_name(types[k]), size);
    if (types[k] == KILN_INT4) CHECK(kiln_get_i64(t, 0) == -3 && kiln_get_i64(t, 1) == 2 && kiln_get_i64(t, 3) == 6);
    if (types[k] == KILN_UINT4) CHECK(kiln_get_i64(t, 0) == 0 && kiln_get_i64(t, 3) == 6);
    if (types[k] == KILN_FLOAT4E2M1) CHECK(kiln_get_f64(t, 0) == -3 && kiln_get_f64(t, 1) == 1.5);
    unlink(path);
    kiln_tensor_free(t);
    kiln_tensor_free(r);
  }
}

int main(void) {
  test_decode();
  test_round_trip();
  test_rounding();
  test_edges();
  test_int4();
  test_tensor_proto();
  return kt_finish("test_small_types");
}
