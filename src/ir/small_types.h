/* The 8- and 4-bit element types: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float4e2m1,
 * int4 and uint4.
 *
 * In memory each element is one byte (see kiln.h). Conversions from wider types round to
 * nearest even in one step from the exact value, as the ONNX Cast specification says, and
 * treat values beyond the largest finite one by `saturate`:
 *   saturate:      +-Inf and |x| > max give +-max (all float8 kinds and float4e2m1);
 *   not saturate:  e4m3fn gives NaN (sign kept), e5m2 gives +-Inf, the fnuz kinds give
 *                  their one NaN 0x80; float4e2m1 has no NaN or Inf and always saturates.
 * NaN gives NaN (e4m3fn/e5m2: 0x7f with x's sign, fnuz: 0x80); float4e2m1 has no NaN and
 * takes +6 (0x7) for it. The fnuz kinds have no -0: a negative value that rounds to 0 gives
 * +0. int4/uint4 from a number round half to even and clip to [-8, 7] / [0, 15], as the
 * ONNX reference does. */
#ifndef KILN_IR_SMALL_TYPES_H
#define KILN_IR_SMALL_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/kiln.h"

/* The last element type kiln knows. */
#define KILN_DTYPE_LAST KILN_FLOAT4E2M1

bool kiln_dtype_is_float8(kiln_dtype t);
/* float8 kinds and float4e2m1: the types decoded through kiln_small_to_f32. */
bool kiln_dtype_is_small_float(kiln_dtype t);
/* INT4, UINT4, FLOAT4E2M1: packed two per byte in TensorProto. */
bool kiln_dtype_is_packed4(kiln_dtype t);

/* The value of `code` in small float type t (float8 kinds, float4e2m1). */
float kiln_small_to_f32(kiln_dtype t, uint8_t code);
/* The code nearest to x in small float type t, per the rules above. */
uint8_t kiln_small_from_f64(kiln_dtype t, double x, bool saturate);
/* x rounded half to even and clipped to INT4 or UINT4's range. */
int8_t kiln_int4_from_f64(kiln_dtype t, double x);
int8_t kiln_int4_from_i64(kiln_dtype t, int64_t v);

/* Bytes that n elements of type t take in TensorProto's raw_data. */
int64_t kiln_proto_raw_bytes(kiln_dtype t, int64_t n);
/* Pack n one-per-byte 4-bit elements two per byte (element 2k in the low nibble of byte k);
 * dst holds (n + 1) / 2 bytes. */
void kiln_pack4(const uint8_t *src, int64_t n, uint8_t *dst);
/* The inverse: n elements from (n + 1) / 2 bytes; INT4 is sign-extended. */
void kiln_unpack4(kiln_dtype t, const uint8_t *src, int64_t n, uint8_t *dst);

#endif
