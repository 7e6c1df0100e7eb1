/* The 8- and 4-bit element types (contract in small_types.h). */
#include "ir/small_types.h"

#include <math.h>

#include "ir/tensor.h"

/* A small float format: mantissa and exponent bits, bias, the largest finite magnitude code,
 * and how it spells NaN and infinity. */
typedef struct small_fmt {
  int mbits, ebits, bias;
  unsigned maxmag; /* largest finite code without the sign */
  bool uz;         /* fnuz: no -0, no Inf, NaN is 0x80 */
  bool inf;        /* has +-Inf (e5m2) */
  bool nan;        /* has NaN at all (not float4e2m1) */
} small_fmt;

static const small_fmt *fmt_of(kiln_dtype t) {
  static const small_fmt e4m3fn = {3, 4, 7, 0x7e, false, false, true};
  static const small_fmt e4m3fnuz = {3, 4, 8, 0x7f, true, false, true};
  static const small_fmt e5m2 = {2, 5, 15, 0x7b, false, true, true};
  static const small_fmt e5m2fnuz = {2, 5, 16, 0x7f, true, false, true};
  static const small_fmt e2m1 = {1, 2, 1, 0x7, false, false, false};
  switch (t) {
    case KILN_FLOAT8E4M3FN: return &e4m3fn;
    case KILN_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case KILN_FLOAT8E5M2: return &e5m2;
    case KILN_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    case KILN_FLOAT4E2M1: return &e2m1;
    default: return NULL;
  }
}

bool kiln_dtype_is_float8(kiln_dtype t) {
  return t == KILN_FLOAT8E4M3FN || t == KILN_FLOAT8E4M3FNUZ || t == KILN_FLOAT8E5M2 ||
         t == KILN_FLOAT8E5M2FNUZ;
}

bool kiln_dtype_is_small_float(kiln_dtype t) { return fmt_of(t) != NULL; }

bool kiln_dtype_is_packed4(kiln_dtype t) {
  return t == KILN_INT4 || t == KILN_UINT4 || t == KILN_FLOAT4E2M1;
}

float kiln_small_to_f32(kiln_dtype t, uint8_t code) {
  const small_fmt *f = fmt_of(t);
  if (!f) return 0;
  const unsigned sbit = 1u << (f->mbits + f->ebits);
  const unsigned mag = code & (sbit - 1);
  const bool neg = (code & sbit) != 0;
  if (f->uz && code == 0x80) return NAN;
  const unsigned top = ((1u << f->ebits) - 1) << f->mbits; /* all exponent bits set */
  if (f->inf && (mag & top) == top) return (mag & ~top) ? NAN : (neg ? -INFINITY : INFINITY);
  if (!f->uz && f->nan && !f->inf && mag == (sbit - 1)) return NAN; /* e4m3fn: s.1111.111 */
  const unsigned e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
  double v = e ? ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits)
               : ldexp((double)m, 1 - f->bias - f->mbits);
  return (float)(neg ? -v : v);
}

/* |x| (finite, nonzero) as a magnitude code with an unbounded exponent, rounded to nearest
 * even; a result above f->maxmag means overflow. */
static unsigned long round_mag(const small_fmt *f, double a) {
  int e;
  frexp(a, &e);
  int E = e - 1; /* a in [2^E, 2^(E+1)) */
  if (E < 1 - f->bias) /* subnormal: a count of the smallest step; a carry is the least normal */
    return (unsigned long)nearbyint(ldexp(a, f->bias - 1 + f->mbits));
  if (E > 64) return ~0ul; /* far beyond any small format */
  double q = nearbyint(ldexp(a, f->mbits - E)); /* in [2^mbits, 2^(mbits+1)] */
  if (q >= ldexp(1, f->mbits + 1)) {
    q = ldexp(1, f->mbits);
    E++;
  }
  return ((unsigned long)(E + f->bias) << f->mbits) | ((unsigned long)q - (1ul << f->mbits));
}

uint8_t kiln_small_from_f64(kiln_dtype t, double x, bool saturate) {
  const small_fmt *f = fmt_of(t);
  if (!f) return 0;
  const unsigned sbit = 1u << (f->mbits + f->ebits);
  const unsigned sign = signbit(x) ? sbit : 0;
  if (isnan(x)) return (uint8_t)(!f->nan ? f->maxmag : f->uz ? 0x80 : (sign | 0x7f));
  const double a = fabs(x);
  unsigned long mag = isinf(a) ? ~0ul : a == 0 ? 0 : round_mag(f, a);
  if (mag > f->maxmag) {
    if (saturate || !f->nan) return (uint8_t)(sign | f->maxmag);
    if (f->uz) return 0x80;
    return (uint8_t)(sign | (f->inf ? 0x7c : 0x7f));
  }
  if (mag == 0 && f->uz) return 0;
  return (uint8_t)(sign | mag);
}

int8_t kiln_int4_from_f64(kiln_dtype t, double x) {
  const double lo = t == KILN_INT4 ? -8 : 0, hi = t == KILN_INT4 ? 7 : 15;
  if (x != x) return 0;
  x = x < lo ? lo : x > hi ? hi : x;
  return (int8_t)nearbyint(x);
}

int8_t kiln_int4_from_i64(kiln_dtype t, int64_t v) {
  const int64_t lo = t == KILN_INT4 ? -8 : 0, hi = t == KILN_INT4 ? 7 : 15;
  return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

int64_t kiln_proto_raw_bytes(kiln_dtype t, int64_t n) {
  /* n / 2 + (n & 1), not (n + 1) / 2: n may be INT64_MAX (a hostile shape of one-byte elements) */
  return kiln_dtype_is_packed4(t) ? n / 2 + (n & 1) : n * (int64_t)kiln_dtype_size(t);
}

void kiln_pack4(const uint8_t *src, int64_t n, uint8_t *dst) {
  for (int64_t k = 0; k < n / 2; k++)
    dst[k] = (uint8_t)((src[2 * k] & 0xf) | (src[2 * k + 1] & 0xf) << 4);
  if (n & 1) dst[n / 2] = src[n - 1] & 0xf;
}

void kiln_unpack4(kiln_dtype t, const uint8_t *src, int64_t n, uint8_t *dst) {
  for (int64_t i = 0; i < n; i++) {
    unsigned v = (src[i / 2] >> (4 * (i & 1))) & 0xf;
    if (t == KILN_INT4 && (v & 8)) v |= 0xf0; /* sign-extend into the int8 byte */
    dst[i] = (uint8_t)v;
  }
}
