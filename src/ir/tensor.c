#include "ir/tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ir/small_types.h"

const char *kiln_dtype_name(kiln_dtype t) {
  static const char *names[] = {"undefined", "float",   "uint8",  "int8",      "uint16",
                                "int16",     "int32",   "int64",  "string",    "bool",
                                "float16",   "double",  "uint32", "uint64",    "complex64",
                                "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz",
                                "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1"};
  if ((unsigned)t < sizeof names / sizeof names[0]) return names[t];
  return "unknown";
}

size_t kiln_dtype_size(kiln_dtype t) {
  switch (t) {
    case KILN_FLOAT: case KILN_INT32: case KILN_UINT32: return 4;
    case KILN_UINT8: case KILN_INT8: case KILN_BOOL: return 1;
    case KILN_FLOAT8E4M3FN: case KILN_FLOAT8E4M3FNUZ: case KILN_FLOAT8E5M2:
    case KILN_FLOAT8E5M2FNUZ: case KILN_UINT4: case KILN_INT4: case KILN_FLOAT4E2M1:
      return 1; /* one element per byte in memory, also the packed 4-bit types */
    case KILN_UINT16: case KILN_INT16: case KILN_FLOAT16: case KILN_BFLOAT16: return 2;
    case KILN_INT64: case KILN_DOUBLE: case KILN_UINT64: case KILN_COMPLEX64: return 8;
    case KILN_COMPLEX128: return 16;
    case KILN_STRING: return sizeof(char *);
    default: return 0;
  }
}

bool kiln_dtype_is_float(kiln_dtype t) {
  return t == KILN_FLOAT || t == KILN_DOUBLE || t == KILN_FLOAT16 || t == KILN_BFLOAT16;
}

bool kiln_dtype_is_int(kiln_dtype t) {
  switch (t) {
    case KILN_UINT8: case KILN_INT8: case KILN_UINT16: case KILN_INT16: case KILN_INT32:
    case KILN_INT64: case KILN_UINT32: case KILN_UINT64: return true;
    default: return false;
  }
}

bool kiln_dtype_is_signed(kiln_dtype t) {
  return t == KILN_INT8 || t == KILN_INT16 || t == KILN_INT32 || t == KILN_INT64 ||
         kiln_dtype_is_float(t);
}

int64_t kiln_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0 || !kiln_mul_ok(n, dims[i], &n)) return -1;
  return n;
}

/* ---- the large-block cache ---- */

/* Blocks of at least POOL_MIN bytes freed by kiln_tensor_free wait here (up to POOL_SLOTS of
 * them, POOL_MAX_BYTES in all) for a tensor of at most their size and at least half of it. */
enum { POOL_SLOTS = 4 };
#define POOL_MIN ((size_t)1 << 20)
#define POOL_MAX_BYTES ((size_t)256 << 20)
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  size_t cap;
} g_pool[POOL_SLOTS];
static size_t g_pool_n, g_pool_bytes;

static void *pool_get(size_t bytes, size_t *cap) {
  pthread_mutex_lock(&g_pool_mu);
  size_t best = g_pool_n;
  for (size_t i = 0; i < g_pool_n; i++)
    if (g_pool[i].cap >= bytes && g_pool[i].cap / 2 <= bytes &&
        (best == g_pool_n || g_pool[i].cap < g_pool[best].cap))
      best = i;
  void *p = NULL;
  if (best < g_pool_n) {
    p = g_pool[best].p;
    *cap = g_pool[best].cap;
    g_pool_bytes -= *cap;
    g_pool[best] = g_pool[--g_pool_n];
  }
  pthread_mutex_unlock(&g_pool_mu);
  if (p) return p;
  *cap = (bytes + 4095) / 4096 * 4096;
  return kiln_malloc_big(*cap); /* the allocation policy of large long-lived buffers */
}

static void pool_put(void *p, size_t cap) {
  pthread_mutex_lock(&g_pool_mu);
  if (g_pool_n < POOL_SLOTS && g_pool_bytes + cap <= POOL_MAX_BYTES) {
    g_pool[g_pool_n].p = p;
    g_pool[g_pool_n].cap = cap;
    g_pool_n++;
    g_pool_bytes += cap;
    p = NULL;
  }
  pthread_mutex_unlock(&g_pool_mu);
  free(p);
}

size_t kiln_tensor_pool_blocks(void) {
  pthread_mutex_lock(&g_pool_mu);
  size_t n = g_pool_n;
  pthread_mutex_unlock(&g_pool_mu);
  return n;
}

static kiln_tensor *tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, bool zero,
                               kiln_error *err) {
  char buf[256];
  if (rank < 0 || rank > KILN_MAX_RANK) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor rank %d exceeds kiln's limit of %d", rank,
              KILN_MAX_RANK);
    return NULL;
  }
  size_t esz = kiln_dtype_size(dtype);
  if (esz == 0) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor element type %s is not supported",
              kiln_dtype_name(dtype));
    return NULL;
  }
  int64_t n = kiln_numel(rank, dims), bytes;
  if (n < 0 || !kiln_mul_ok(n, (int64_t)esz, &bytes) || bytes > ((int64_t)1 << 46)) {
    kiln_fail(err, KILN_ERR_NOMEM, "tensor shape %s: element count overflows or is too large",
              kiln_dims_str(rank, dims, buf, sizeof buf));
    return NULL;
  }
  kiln_tensor *t = calloc(1, sizeof *t);
  if (!t) goto oom;
  t->kind = KILN_KIND_TENSOR;
  t->dtype = dtype;
  t->rank = rank;
  if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
  t->numel = n;
  t->nbytes = (size_t)bytes;
  if ((size_t)bytes >= POOL_MIN && dtype != KILN_STRING) {
    t->data = pool_get((size_t)bytes, &t->pool_cap);
    if (t->data && zero) memset(t->data, 0, (size_t)bytes);
  } else {
    t->data = zero || dtype == KILN_STRING ? kiln_calloc((size_t)bytes, 1) : kiln_malloc((size_t)bytes ? (size_t)bytes : 1);
  }
  if (!t->data) {
    free(t);
    goto oom;
  }
  if (dtype == KILN_STRING) {
    char **s = t->data;
    for (int64_t i = 0; i < n; i++)
      if (!(s[i] = kiln_strdup(""))) {
        kiln_tensor_free(t);
        goto oom;
      }
  }
  return t;
oom:
  kiln_fail(err, KILN_ERR_NOMEM, "out of memory allocating tensor %s",
            kiln_dims_str(rank, dims, buf, sizeof buf));
  return NULL;
}

kiln_tensor *kiln_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kiln_error *err) {
  return tensor_new(dtype, rank, dims, true, err);
}

kiln_tensor *kiln_tensor_new_uninit(kiln_dtype dtype, int rank, const int64_t *dims,
                                    kiln_error *err) {
  return tensor_new(dtype, rank, dims, false, err);
}

int64_t kiln_tensor_footprint(kiln_dtype dtype, int rank, const int64_t *dims) {
  size_t esz = kiln_dtype_size(dtype); /* strings: their pointers */
  int64_t n = rank >= 0 && rank <= KILN_MAX_RANK ? kiln_numel(rank, dims) : -1, bytes;
  return esz && n >= 0 && kiln_mul_ok(n, (int64_t)esz, &bytes) ? bytes : -1;
}

int64_t kiln_tensor_bytes(kiln_dtype dtype, int rank, const int64_t *dims) {
  return dtype == KILN_STRING ? -1 : kiln_tensor_footprint(dtype, rank, dims);
}

kiln_tensor *kiln_tensor_wrap(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                              kiln_error *err) {
  int64_t bytes = kiln_tensor_bytes(dtype, rank, dims);
  if (bytes < 0) {
    kiln_fail(err, KILN_ERR_INVALID_ARG, "cannot wrap a %s tensor of this shape", kiln_dtype_name(dtype));
    return NULL;
  }
  kiln_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  t->kind = KILN_KIND_TENSOR;
  t->dtype = dtype;
  t->rank = rank;
  if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
  t->numel = kiln_numel(rank, dims);
  t->nbytes = (size_t)bytes;
  t->data = data;
  t->borrowed = true;
  return t;
}

void kiln_tensor_free(kiln_tensor *t) {
  if (!t) return;
  if (t->kind == KILN_KIND_SEQUENCE) {
    for (size_t i = 0; i < t->n_items; i++) kiln_tensor_free(t->items[i]);
    free(t->items);
  }
  if (!t->borrowed && t->data) {
    if (t->dtype == KILN_STRING) {
      char **s = t->data;
      for (int64_t i = 0; i < t->numel; i++) free(s[i]);
    }
    if (t->pool_cap)
      pool_put(t->data, t->pool_cap);
    else
      free(t->data);
  }
  if (t->release) t->release(t->release_user, t->data);
  free(t);
}

/* ---- sequences and optionals: the containers of values ---- */

static kiln_code make_container(kiln_kind kind, kiln_dtype elem, kiln_tensor **out, kiln_error *err) {
  if (!out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "missing out argument");
  *out = calloc(1, sizeof **out);
  if (!*out) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  (*out)->kind = kind;
  (*out)->dtype = elem;
  return KILN_OK;
}

kiln_code kiln_sequence_create(kiln_dtype elem_dtype, kiln_tensor **out, kiln_error *err) {
  return make_container(KILN_KIND_SEQUENCE, elem_dtype, out, err);
}

kiln_code kiln_none_create(kiln_dtype elem_dtype, kiln_tensor **out, kiln_error *err) {
  return make_container(KILN_KIND_NONE, elem_dtype, out, err);
}

kiln_code kiln_sequence_append(kiln_tensor *seq, kiln_tensor *item, kiln_error *err) {
  if (!seq || !item || seq->kind != KILN_KIND_SEQUENCE)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_sequence_append: not a sequence");
  if (seq->n_items == seq->cap_items) {
    size_t cap = seq->cap_items ? seq->cap_items * 2 : 8;
    kiln_tensor **it = realloc(seq->items, cap * sizeof *it);
    if (!it) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    seq->items = it;
    seq->cap_items = cap;
  }
  if (seq->n_items == 0 && !seq->dtype) seq->dtype = item->dtype;
  seq->items[seq->n_items++] = item;
  return KILN_OK;
}

kiln_code kiln_tensor_set_string(kiln_tensor *t, int64_t i, const char *s, kiln_error *err) {
  if (!t || t->dtype != KILN_STRING || i < 0 || i >= t->numel || !s)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_tensor_set_string: bad argument");
  char *c = kiln_strdup(s);
  if (!c) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  char **d = t->data;
  free(d[i]);
  d[i] = c;
  return KILN_OK;
}

kiln_tensor *kiln_tensor_clone(const kiln_tensor *t, kiln_error *err) {
  if (t->kind == KILN_KIND_SEQUENCE || t->kind == KILN_KIND_NONE) {
    kiln_tensor *c = calloc(1, sizeof *c);
    if (!c) {
      kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      return NULL;
    }
    c->kind = t->kind;
    c->dtype = t->dtype;
    for (size_t i = 0; i < t->n_items; i++) {
      kiln_tensor *it = kiln_tensor_clone(t->items[i], err);
      if (!it || kiln_sequence_append(c, it, err) != KILN_OK) {
        kiln_tensor_free(it);
        kiln_tensor_free(c);
        return NULL;
      }
    }
    return c;
  }
  kiln_tensor *c = t->dtype == KILN_STRING ? kiln_tensor_new(t->dtype, t->rank, t->dims, err)
                                         : kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, err);
  if (!c) return NULL;
  if (t->dtype == KILN_STRING) {
    for (int64_t i = 0; i < t->numel; i++) kiln_copy_elem(c, i, t, i);
  } else if (t->nbytes) {
    memcpy(c->data, t->data, t->nbytes);
  }
  return c;
}

bool kiln_same_shape(const kiln_tensor *a, const kiln_tensor *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

const char *kiln_dims_str(int rank, const int64_t *dims, char *buf, size_t n) {
  size_t off = 0;
  off += (size_t)snprintf(buf + off, n - off, "[");
  for (int i = 0; i < rank && off < n; i++)
    off += (size_t)snprintf(buf + off, n - off, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (off < n) snprintf(buf + off, n - off, "]");
  return buf;
}

const char *kiln_shape_str(const kiln_tensor *t, char *buf, size_t n) {
  if (t->kind == KILN_KIND_SEQUENCE) {
    snprintf(buf, n, "sequence<%s>(%zu)", kiln_dtype_name(t->dtype), t->n_items);
    return buf;
  }
  if (t->kind == KILN_KIND_NONE) {
    snprintf(buf, n, "none");
    return buf;
  }
  char d[200];
  snprintf(buf, n, "%s%s", kiln_dtype_name(t->dtype), kiln_dims_str(t->rank, t->dims, d, sizeof d));
  return buf;
}

/* IEEE half and bfloat16 conversions, round to nearest even. */
float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kiln_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff);
  uint32_t man = x & 0x7fffff;
  if (exp == 255) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return (uint16_t)half;
}

float kiln_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kiln_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return (uint16_t)(x >> 16);
}

double kiln_get_f64(const kiln_tensor *t, int64_t i) {
  const void *d = t->data;
  switch (t->dtype) {
    case KILN_FLOAT: return ((const float *)d)[i];
    case KILN_DOUBLE: return ((const double *)d)[i];
    case KILN_FLOAT16: return kiln_f16_to_f32(((const uint16_t *)d)[i]);
    case KILN_BFLOAT16: return kiln_bf16_to_f32(((const uint16_t *)d)[i]);
    case KILN_INT8: return ((const int8_t *)d)[i];
    case KILN_UINT8: return ((const uint8_t *)d)[i];
    case KILN_INT16: return ((const int16_t *)d)[i];
    case KILN_UINT16: return ((const uint16_t *)d)[i];
    case KILN_INT32: return ((const int32_t *)d)[i];
    case KILN_UINT32: return ((const uint32_t *)d)[i];
    case KILN_INT64: return (double)((const int64_t *)d)[i];
    case KILN_UINT64: return (double)((const uint64_t *)d)[i];
    case KILN_BOOL: return ((const uint8_t *)d)[i] ? 1.0 : 0.0;
    case KILN_STRING: return strtod(((char *const *)d)[i], NULL);
    case KILN_INT4: return ((const int8_t *)d)[i];
    case KILN_UINT4: return ((const uint8_t *)d)[i];
    case KILN_FLOAT8E4M3FN: case KILN_FLOAT8E4M3FNUZ: case KILN_FLOAT8E5M2:
    case KILN_FLOAT8E5M2FNUZ: case KILN_FLOAT4E2M1:
      return kiln_small_to_f32(t->dtype, ((const uint8_t *)d)[i]);
    default: return 0;
  }
}

/* Float-to-integer conversion that stays defined for NaN and out-of-range values. */
static int64_t sat_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

static uint64_t sat_u64(double v) {
  if (v != v || v <= 0) return v < 0 ? (uint64_t)sat_i64(v) : 0;
  if (v >= 1.8446744073709552e19) return UINT64_MAX;
  return (uint64_t)v;
}

void kiln_set_f64(kiln_tensor *t, int64_t i, double v) {
  void *d = t->data;
  switch (t->dtype) {
    case KILN_FLOAT: ((float *)d)[i] = (float)v; break;
    case KILN_DOUBLE: ((double *)d)[i] = v; break;
    case KILN_FLOAT16: ((uint16_t *)d)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_BFLOAT16: ((uint16_t *)d)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KILN_UINT64: ((uint64_t *)d)[i] = sat_u64(v); break;
    case KILN_INT4: case KILN_UINT4: ((int8_t *)d)[i] = kiln_int4_from_f64(t->dtype, v); break;
    case KILN_FLOAT8E4M3FN: case KILN_FLOAT8E4M3FNUZ: case KILN_FLOAT8E5M2:
    case KILN_FLOAT8E5M2FNUZ: case KILN_FLOAT4E2M1:
      ((uint8_t *)d)[i] = kiln_small_from_f64(t->dtype, v, true); /* Cast's default */
      break;
    case KILN_STRING: {
      char buf[64];
      snprintf(buf, sizeof buf, "%.9g", v);
      char **s = d;
      free(s[i]);
      s[i] = kiln_strdup(buf);
      break;
    }
    default:
      if (t->dtype == KILN_UINT8 || t->dtype == KILN_UINT16 || t->dtype == KILN_UINT32)
        kiln_set_u64(t, i, (uint64_t)sat_i64(v));
      else if (kiln_dtype_is_int(t->dtype))
        kiln_set_i64(t, i, sat_i64(v));
      /* complex and undefined: no real value to store (kiln_set_i64 would hand it back here) */
  }
}

int64_t kiln_get_i64(const kiln_tensor *t, int64_t i) {
  const void *d = t->data;
  switch (t->dtype) {
    case KILN_INT8: return ((const int8_t *)d)[i];
    case KILN_UINT8: return ((const uint8_t *)d)[i];
    case KILN_INT16: return ((const int16_t *)d)[i];
    case KILN_UINT16: return ((const uint16_t *)d)[i];
    case KILN_INT32: return ((const int32_t *)d)[i];
    case KILN_UINT32: return ((const uint32_t *)d)[i];
    case KILN_INT64: return ((const int64_t *)d)[i];
    case KILN_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case KILN_BOOL: return ((const uint8_t *)d)[i] != 0;
    case KILN_STRING: return strtoll(((char *const *)d)[i], NULL, 10);
    case KILN_INT4: return ((const int8_t *)d)[i];
    case KILN_UINT4: return ((const uint8_t *)d)[i];
    default: return sat_i64(kiln_get_f64(t, i));
  }
}

void kiln_set_i64(kiln_tensor *t, int64_t i, int64_t v) {
  void *d = t->data;
  switch (t->dtype) {
    case KILN_INT8: ((int8_t *)d)[i] = (int8_t)v; break;
    case KILN_UINT8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KILN_INT16: ((int16_t *)d)[i] = (int16_t)v; break;
    case KILN_UINT16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KILN_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
    case KILN_UINT32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KILN_INT64: ((int64_t *)d)[i] = v; break;
    case KILN_UINT64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    case KILN_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KILN_INT4: case KILN_UINT4: ((int8_t *)d)[i] = kiln_int4_from_i64(t->dtype, v); break;
    case KILN_STRING: {
      char buf[32];
      snprintf(buf, sizeof buf, "%lld", (long long)v);
      char **s = d;
      free(s[i]);
      s[i] = kiln_strdup(buf);
      break;
    }
    default: kiln_set_f64(t, i, (double)v);
  }
}

uint64_t kiln_get_u64(const kiln_tensor *t, int64_t i) {
  if (t->dtype == KILN_UINT64) return ((const uint64_t *)t->data)[i];
  if (kiln_dtype_is_float(t->dtype)) return sat_u64(kiln_get_f64(t, i));
  return (uint64_t)kiln_get_i64(t, i);
}

void kiln_set_u64(kiln_tensor *t, int64_t i, uint64_t v) {
  if ((t->dtype == KILN_INT4 || t->dtype == KILN_UINT4) && v > 15) v = 15; /* clips, as int4 does */
  if (t->dtype == KILN_UINT64) {
    ((uint64_t *)t->data)[i] = v;
  } else if (kiln_dtype_is_float(t->dtype)) {
    kiln_set_f64(t, i, (double)v);
  } else {
    kiln_set_i64(t, i, (int64_t)v);
  }
}

void kiln_copy_elem(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si) {
  if (dst->dtype == KILN_STRING) {
    char **d = dst->data;
    char *const *s = src->data;
    free(d[di]);
    d[di] = kiln_strdup(s[si] ? s[si] : "");
    return;
  }
  size_t esz = kiln_dtype_size(dst->dtype);
  memcpy((char *)dst->data + (size_t)di * esz, (const char *)src->data + (size_t)si * esz, esz);
}

void kiln_copy_elems(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t n) {
  /* nothing to copy onto itself: an output the memory plan put over its input (view ops) */
  if (n <= 0 || (dst->data == src->data && di == si)) return;
  if (dst->dtype == KILN_STRING) {
    for (int64_t k = 0; k < n; k++) kiln_copy_elem(dst, di + k, src, si + k);
    return;
  }
  size_t esz = kiln_dtype_size(dst->dtype);
  memcpy((char *)dst->data + (size_t)di * esz, (const char *)src->data + (size_t)si * esz,
         (size_t)n * esz);
}
