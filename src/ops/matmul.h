/* The reference GEMM of the matrix-product ops (matmul.c), shared with Einsum (einsum.c). */
#ifndef KILN_OPS_MATMUL_H
#define KILN_OPS_MATMUL_H

#include <stdint.h>

#include "ir/tensor.h"

/* c[m,n] += a[m,k] * b[k,n], row-major, cache-blocked; no SIMD (the reference). */
void kiln_ref_gemm_f64(int64_t m, int64_t n, int64_t k, const double *a, const double *b, double *c);
/* The type the matrix products compute in for dtype t: FLOAT, DOUBLE or UINT64 (integers,
 * wrapping), UNDEFINED when t is not numeric. */
kiln_dtype kiln_matmul_work_type(kiln_dtype t);

#endif
