/* Memory-bound float32 kernels: softmax rows, LayerNorm rows, GELU and FusedElementwise's
 * block ops. One instance per ISA (vec_f32_scalar.c, vec_f32_avx2.c, vec_f32_avx512.c, the
 * same loops compiled with each ISA's flags, see vec_f32_tmpl.h); these entry points are plain
 * C and call the instance chosen once from kiln_cpu_isa(), so KILN_ISA reaches them and nothing
 * wider than the CPU runs. The instances give the same results (no contraction, same order). */
#ifndef KILN_KERNELS_VEC_F32_H
#define KILN_KERNELS_VEC_F32_H

#include <stddef.h>
#include <stdint.h>

/* Softmax of `rows` contiguous rows of len floats (y may be x): the max, exp(x - max) with its
 * sum (8 float lanes per block of 256, blocks summed in double), one scale by 1 / sum. A row
 * whose max is not finite, or that holds a NaN, gives NaN everywhere. */
void kiln_softmax_rows_f32(const float *x, float *y, int64_t rows, int64_t len);
/* mean and 1 / sqrt(var + eps) of x[0..n). */
void kiln_ln_stats_f32(const float *x, int64_t n, float eps, float *mean, float *inv);
/* y = (x - mean) * inv [* gamma] [+ beta] (gamma, beta: n values or NULL); y may be x. */
void kiln_ln_norm_f32(float *y, const float *x, int64_t n, float mean, float inv, const float *gamma,
                      const float *beta);
/* s = a + b and kiln_ln_stats_f32(s) in one pass (the same mean and inv). */
void kiln_ln_add_stats_f32(float *s, const float *a, const float *b, int64_t n, float eps, float *mean,
                           float *inv);
/* y = gelu(x [+ bias]) for n values (bias: n values or NULL); erf form, or tanh form when
 * tanh_form. Branch-free erf / tanh (src/kernels/norm_math.h). */
void kiln_gelu_map_f32(float *y, const float *x, const float *bias, int64_t n, int tanh_form);
/* x = gelu(x) (erf form, a rational erf, max abs error 6.5e-8) in place, for after a GEMM. */
void kiln_gelu_erf_f32(float *x, size_t n);
/* o = op(a[, b]) for n values, op a kiln_ew_op (src/ops/fused_ew.h), p0, p1 its parameters. */
void kiln_ew_block_f32(int op, float *restrict o, const float *restrict a, const float *restrict b, int n, float p0,
                       float p1);

/* One instance's functions (internal: vec_f32.c dispatches through these). */
typedef struct kiln_vec_f32_kernels {
  void (*softmax_rows)(const float *, float *, int64_t, int64_t);
  void (*ln_stats)(const float *, int64_t, float, float *, float *);
  void (*ln_norm)(float *, const float *, int64_t, float, float, const float *, const float *);
  void (*ln_add_stats)(float *, const float *, const float *, int64_t, float, float *, float *);
  void (*gelu_map)(float *, const float *, const float *, int64_t, int);
  void (*gelu_erf)(float *, size_t);
  void (*ew_block)(int, float *restrict, const float *restrict, const float *restrict, int, float, float);
} kiln_vec_f32_kernels;

extern const kiln_vec_f32_kernels kiln_vec_f32_scalar, kiln_vec_f32_avx2, kiln_vec_f32_avx512;

#endif
