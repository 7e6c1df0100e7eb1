/* kiln's value: a dense tensor, a sequence of values, or an empty optional. */
#ifndef KILN_IR_TENSOR_H
#define KILN_IR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

struct kiln_tensor {
  kiln_kind kind;
  kiln_dtype dtype;              /* element type; for sequences, the items' type */
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t numel;
  void *data;                    /* numel elements; STRING: char *[numel], each malloc'd */
  size_t nbytes;
  bool borrowed;                 /* data is not ours (mmap'd or a view); never freed here */
  size_t pool_cap;               /* > 0: data is a block of this size from the large-block
                                    cache, returned there when the tensor is freed */
  size_t n_items, cap_items;     /* SEQUENCE */
  kiln_tensor **items;
  kiln_release_fn release;       /* kiln_tensor_create_from_data: called on data when freed */
  void *release_user;
};

/* Allocate a tensor, zero-filled; returns NULL with err set on overflow or allocation failure.
 * Data of 1 MiB or more comes from a small process-wide cache of freed blocks, so that a
 * large output allocated on every run does not fault in fresh pages every time. */
kiln_tensor *kiln_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kiln_error *err);
/* Blocks waiting in that cache now (for tests and diagnostics). */
size_t kiln_tensor_pool_blocks(void);
/* The same, the data left uninitialised (not for strings) for a writer of every element. */
kiln_tensor *kiln_tensor_new_uninit(kiln_dtype dtype, int rank, const int64_t *dims,
                                    kiln_error *err);
/* A tensor over caller-owned memory of at least the shape's byte size (marked borrowed, never
 * freed here). Not for strings. */
kiln_tensor *kiln_tensor_wrap(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                              kiln_error *err);
/* Byte size of a dense tensor of this type and shape, or -1 on overflow / strings. */
int64_t kiln_tensor_bytes(kiln_dtype dtype, int rank, const int64_t *dims);
/* The least memory a tensor of this type and shape holds, what memory limits count: its bytes,
 * or for strings their pointers (the characters come on top); -1 on overflow. */
int64_t kiln_tensor_footprint(kiln_dtype dtype, int rank, const int64_t *dims);
/* Deep copy of any value. */
kiln_tensor *kiln_tensor_clone(const kiln_tensor *t, kiln_error *err);
/* Element count of dims, -1 on overflow or a negative dim. */
int64_t kiln_numel(int rank, const int64_t *dims);
bool kiln_same_shape(const kiln_tensor *a, const kiln_tensor *b);
/* "float[2,3]" into buf. */
const char *kiln_shape_str(const kiln_tensor *t, char *buf, size_t n);
const char *kiln_dims_str(int rank, const int64_t *dims, char *buf, size_t n);

/* Element access through double / int64 for generic reference kernels. */
double kiln_get_f64(const kiln_tensor *t, int64_t i);
void kiln_set_f64(kiln_tensor *t, int64_t i, double v);
int64_t kiln_get_i64(const kiln_tensor *t, int64_t i);
void kiln_set_i64(kiln_tensor *t, int64_t i, int64_t v);
uint64_t kiln_get_u64(const kiln_tensor *t, int64_t i);
void kiln_set_u64(kiln_tensor *t, int64_t i, uint64_t v);
/* The same with the float and double cases inline, for reference kernels' inner loops. */
static inline double kiln_load_f64(const kiln_tensor *t, int64_t i) {
  if (t->dtype == KILN_FLOAT) return ((const float *)t->data)[i];
  if (t->dtype == KILN_DOUBLE) return ((const double *)t->data)[i];
  return kiln_get_f64(t, i);
}
static inline void kiln_store_f64(kiln_tensor *t, int64_t i, double v) {
  if (t->dtype == KILN_FLOAT)
    ((float *)t->data)[i] = (float)v;
  else if (t->dtype == KILN_DOUBLE)
    ((double *)t->data)[i] = v;
  else
    kiln_set_f64(t, i, v);
}
/* Copy one element between tensors of the same dtype (strings duplicated). */
void kiln_copy_elem(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si);
/* Copy n consecutive elements (n <= 0: none) between tensors of the same dtype (strings
 * duplicated); nothing when the range is the source's own (same data, same index). */
void kiln_copy_elems(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t n);

bool kiln_dtype_is_float(kiln_dtype t); /* float, double, float16, bfloat16 */
bool kiln_dtype_is_int(kiln_dtype t);   /* signed or unsigned integers */
bool kiln_dtype_is_signed(kiln_dtype t);

float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f);
float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);

#endif
