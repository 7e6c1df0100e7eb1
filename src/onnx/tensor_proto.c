#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "ir/small_types.h"
#include "onnx/proto.h"

static const char *tname(const Onnx__TensorProto *p) { return p->name && *p->name ? p->name : "<unnamed>"; }

/* Open `location` under base_dir, refusing absolute paths and any path that resolves outside. */
static kiln_code open_external(const char *base_dir, const char *location, const char *who,
                               int *fd_out, kiln_error *err) {
  if (!base_dir) return kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': external data needs a model file path", who);
  if (location[0] == '/' || strstr(location, ".."))
    return kiln_fail(err, KILN_ERR_MODEL,
                     "tensor '%s': external data path '%s' leaves the model's folder", who, location);
  char path[PATH_MAX], real[PATH_MAX], realbase[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", base_dir, location) >= (int)sizeof path)
    return kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': external data path too long", who);
  if (!realpath(path, real) || !realpath(base_dir, realbase))
    return kiln_fail(err, KILN_ERR_IO, "tensor '%s': external data file '%s': %s", who, path, strerror(errno));
  size_t bl = strlen(realbase);
  if (strncmp(real, realbase, bl) != 0 || (real[bl] != '/' && real[bl] != 0))
    return kiln_fail(err, KILN_ERR_MODEL,
                     "tensor '%s': external data path '%s' leaves the model's folder", who, location);
  int fd = open(real, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kiln_fail(err, KILN_ERR_IO, "tensor '%s': cannot open external data '%s': %s", who, path, strerror(errno));
  *fd_out = fd;
  return KILN_OK;
}

/* A packed 4-bit tensor's external bytes, read and unpacked into t (closes fd). */
static kiln_code read_packed(int fd, int64_t offset, int64_t length, kiln_tensor *t, const char *who,
                             kiln_error *err) {
  uint8_t *b = malloc(length ? (size_t)length : 1);
  ssize_t got = b ? pread(fd, b, (size_t)length, (off_t)offset) : -1;
  close(fd);
  if (got != (ssize_t)length) {
    free(b);
    return kiln_fail(err, b ? KILN_ERR_IO : KILN_ERR_NOMEM, "tensor '%s': cannot read external data", who);
  }
  kiln_unpack4(t->dtype, b, t->numel, t->data);
  free(b);
  return KILN_OK;
}

static kiln_code load_external(const Onnx__TensorProto *p, const kiln_ext_ctx *ext, kiln_tensor *t,
                               kiln_error *err) {
  const char *location = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < p->n_external_data; i++) {
    const char *k = p->external_data[i]->key, *v = p->external_data[i]->value;
    if (!k || !v) continue;
    if (strcmp(k, "location") == 0) location = v;
    else if (strcmp(k, "offset") == 0) offset = strtoll(v, NULL, 10);
    else if (strcmp(k, "length") == 0) length = strtoll(v, NULL, 10);
  }
  if (!location) return kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': external data without a location", tname(p));
  if (t->dtype == KILN_STRING) return kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': string tensors cannot be external", tname(p));
  int fd;
  kiln_code rc = open_external(ext ? ext->base_dir : NULL, location, tname(p), &fd, err);
  if (rc) return rc;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return kiln_fail(err, KILN_ERR_IO, "tensor '%s': cannot stat external data", tname(p));
  }
  const bool packed = kiln_dtype_is_packed4(t->dtype); /* two per byte in the file */
  const int64_t want = packed ? kiln_proto_raw_bytes(t->dtype, t->numel) : (int64_t)t->nbytes;
  if (length < 0) length = want;
  if (offset < 0 || length != want || offset > st.st_size || st.st_size - offset < length) {
    close(fd);
    return kiln_fail(err, KILN_ERR_MODEL,
                     "tensor '%s': external data '%s' holds %lld bytes at offset %lld, the shape needs %lld",
                     tname(p), location, (long long)(st.st_size - offset), (long long)offset, (long long)want);
  }
  if (packed) return read_packed(fd, offset, length, t, tname(p), err);
  if (t->nbytes == 0) {
    close(fd);
    return KILN_OK;
  }
  long page = sysconf(_SC_PAGESIZE);
  int64_t aligned = offset - offset % page;
  size_t maplen = (size_t)(length + (offset - aligned));
  void *m = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, fd, aligned);
  close(fd);
  if (m == MAP_FAILED) return kiln_fail(err, KILN_ERR_IO, "tensor '%s': mmap of external data failed", tname(p));
  if (ext->model) {
    void *maps = realloc(ext->model->maps, (ext->model->n_maps + 1) * sizeof *ext->model->maps);
    if (!maps) {
      munmap(m, maplen);
      return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    }
    ext->model->maps = maps;
    ext->model->maps[ext->model->n_maps].addr = m;
    ext->model->maps[ext->model->n_maps++].len = maplen;
    free(t->data);
    t->data = (char *)m + (offset - aligned);
    t->borrowed = true;
  } else {
    memcpy(t->data, (char *)m + (offset - aligned), t->nbytes);
    munmap(m, maplen);
  }
  return KILN_OK;
}

static kiln_code need(const Onnx__TensorProto *p, size_t have, int64_t want, const char *field,
                      kiln_error *err) {
  if ((int64_t)have != want)
    return kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': %s holds %zu values, the shape needs %lld",
                     tname(p), field, have, (long long)want);
  return KILN_OK;
}

static kiln_code fill_typed(const Onnx__TensorProto *p, kiln_tensor *t, kiln_error *err) {
  int64_t n = t->numel;
  kiln_code rc = KILN_OK;
  if (n == 0) return KILN_OK; /* empty tensors carry no data (and the arrays may be NULL) */
  switch (t->dtype) {
    case KILN_FLOAT:
      if ((rc = need(p, p->n_float_data, n, "float_data", err))) return rc;
      memcpy(t->data, p->float_data, (size_t)n * 4);
      break;
    case KILN_COMPLEX64:
      if ((rc = need(p, p->n_float_data, n * 2, "float_data", err))) return rc;
      memcpy(t->data, p->float_data, (size_t)n * 8);
      break;
    case KILN_DOUBLE:
      if ((rc = need(p, p->n_double_data, n, "double_data", err))) return rc;
      memcpy(t->data, p->double_data, (size_t)n * 8);
      break;
    case KILN_COMPLEX128:
      if ((rc = need(p, p->n_double_data, n * 2, "double_data", err))) return rc;
      memcpy(t->data, p->double_data, (size_t)n * 16);
      break;
    case KILN_INT64:
      if ((rc = need(p, p->n_int64_data, n, "int64_data", err))) return rc;
      memcpy(t->data, p->int64_data, (size_t)n * 8);
      break;
    case KILN_UINT64: case KILN_UINT32:
      if ((rc = need(p, p->n_uint64_data, n, "uint64_data", err))) return rc;
      for (int64_t i = 0; i < n; i++) kiln_set_u64(t, i, p->uint64_data[i]);
      break;
    case KILN_STRING: {
      if ((rc = need(p, p->n_string_data, n, "string_data", err))) return rc;
      char **s = t->data;
      for (int64_t i = 0; i < n; i++) {
        char *c = malloc(p->string_data[i].len + 1);
        if (!c) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        if (p->string_data[i].len) memcpy(c, p->string_data[i].data, p->string_data[i].len);
        c[p->string_data[i].len] = 0;
        free(s[i]);
        s[i] = c;
      }
      break;
    }
    case KILN_FLOAT8E4M3FN: case KILN_FLOAT8E4M3FNUZ: case KILN_FLOAT8E5M2:
    case KILN_FLOAT8E5M2FNUZ:
      /* raw 8-bit codes in int32_data */
      if ((rc = need(p, p->n_int32_data, n, "int32_data", err))) return rc;
      for (int64_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = (uint8_t)p->int32_data[i];
      break;
    case KILN_INT4: case KILN_UINT4: case KILN_FLOAT4E2M1: {
      /* two 4-bit elements per int32_data value, the first in the low nibble */
      int64_t packed = kiln_proto_raw_bytes(t->dtype, n);
      if ((rc = need(p, p->n_int32_data, packed, "int32_data", err))) return rc;
      uint8_t *b = malloc((size_t)packed);
      if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      for (int64_t k = 0; k < packed; k++) b[k] = (uint8_t)p->int32_data[k];
      kiln_unpack4(t->dtype, b, n, t->data);
      free(b);
      break;
    }
    case KILN_FLOAT16: case KILN_BFLOAT16:
      /* stored as raw 16-bit patterns in int32_data */
      if ((rc = need(p, p->n_int32_data, n, "int32_data", err))) return rc;
      for (int64_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = (uint16_t)p->int32_data[i];
      break;
    default:
      if ((rc = need(p, p->n_int32_data, n, "int32_data", err))) return rc;
      for (int64_t i = 0; i < n; i++) kiln_set_i64(t, i, p->int32_data[i]);
  }
  return KILN_OK;
}

kiln_tensor *kiln_tensor_from_proto(const Onnx__TensorProto *p, const kiln_ext_ctx *ext,
                                    kiln_error *err) {
  if (p->n_dims > KILN_MAX_RANK) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor '%s': rank %zu exceeds %d", tname(p), p->n_dims, KILN_MAX_RANK);
    return NULL;
  }
  for (size_t i = 0; i < p->n_dims; i++)
    if (p->dims[i] < 0) {
      kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': negative dim %lld", tname(p), (long long)p->dims[i]);
      return NULL;
    }
  kiln_dtype dt = (kiln_dtype)p->data_type;
  if (!p->has_data_type || kiln_dtype_size(dt) == 0) {
    kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': missing or unsupported data type %d", tname(p), p->data_type);
    return NULL;
  }
  if (p->segment) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor '%s': segmented tensors are not supported", tname(p));
    return NULL;
  }
  /* Check the payload against the shape before allocating: a hostile file may declare a huge
   * shape over a few bytes of data. */
  bool external = p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  int64_t numel = kiln_numel((int)p->n_dims, p->dims), bytes = kiln_tensor_bytes(dt, (int)p->n_dims, p->dims);
  if (bytes >= 0 && kiln_dtype_is_packed4(dt)) bytes = kiln_proto_raw_bytes(dt, numel);
  if (!external && numel >= 0 && (bytes >= 0 || dt == KILN_STRING)) {
    bool raw = p->has_raw_data && dt != KILN_STRING;
    int64_t have = raw ? (int64_t)p->raw_data.len
                       : (int64_t)(p->n_float_data + p->n_int32_data + p->n_string_data + p->n_int64_data +
                                   p->n_double_data + p->n_uint64_data);
    int64_t want = raw ? bytes
                       : dt == KILN_COMPLEX64 || dt == KILN_COMPLEX128 ? 2 * numel
                       : kiln_dtype_is_packed4(dt)                     ? kiln_proto_raw_bytes(dt, numel)
                                                                       : numel;
    if (have != want) {
      kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': holds %lld %s, shape %s of %s needs %lld", tname(p),
                (long long)have, raw ? "raw_data bytes" : "values",
                kiln_dims_str((int)p->n_dims, p->dims, (char[256]){0}, 256), kiln_dtype_name(dt), (long long)want);
      return NULL;
    }
  }
  if (external && !ext) { /* a value file, not a model: nothing to resolve it against */
    kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': external data outside a model is not supported", tname(p));
    return NULL;
  }
  kiln_tensor *t = kiln_tensor_new(dt, (int)p->n_dims, p->dims, err);
  if (!t) {
    kiln_error_prefix(err, "tensor '%s'", tname(p));
    return NULL;
  }
  kiln_code rc;
  if (p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    rc = load_external(p, ext, t, err);
  } else if (p->has_raw_data && kiln_dtype_is_packed4(dt)) {
    kiln_unpack4(dt, p->raw_data.data, t->numel, t->data); /* the length was checked above */
    rc = KILN_OK;
  } else if (p->has_raw_data && dt != KILN_STRING) {
    if (p->raw_data.len != t->nbytes)
      rc = kiln_fail(err, KILN_ERR_MODEL, "tensor '%s': raw_data has %zu bytes, shape %s of %s needs %zu",
                     tname(p), p->raw_data.len, kiln_dims_str(t->rank, t->dims, (char[256]){0}, 256),
                     kiln_dtype_name(dt), t->nbytes);
    else {
      if (t->nbytes) memcpy(t->data, p->raw_data.data, t->nbytes); /* little-endian host */
      rc = KILN_OK;
    }
  } else {
    rc = fill_typed(p, t, err);
  }
  if (rc) {
    kiln_tensor_free(t);
    return NULL;
  }
  return t;
}

kiln_tensor *kiln_tensor_take_proto(Onnx__TensorProto *p, const kiln_ext_ctx *ext, kiln_error *err) {
  kiln_dtype dt = (kiln_dtype)p->data_type;
  bool external = p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  int64_t bytes = kiln_tensor_bytes(dt, (int)p->n_dims, p->dims);
  if (!p->has_raw_data || external || !p->has_data_type || dt == KILN_STRING || p->segment ||
      kiln_dtype_is_packed4(dt) ||
      p->n_dims > KILN_MAX_RANK || bytes <= 0 || (uint64_t)bytes != p->raw_data.len || !p->raw_data.data)
    return kiln_tensor_from_proto(p, ext, err); /* the general path checks and reports */
  for (size_t i = 0; i < p->n_dims; i++)
    if (p->dims[i] < 0) return kiln_tensor_from_proto(p, ext, err);
  kiln_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  t->kind = KILN_KIND_TENSOR;
  t->dtype = dt;
  t->rank = (int)p->n_dims;
  if (t->rank) memcpy(t->dims, p->dims, (size_t)t->rank * sizeof *t->dims);
  t->numel = kiln_numel(t->rank, t->dims);
  t->nbytes = (size_t)bytes;
  t->data = p->raw_data.data; /* protobuf-c allocated it with malloc: kiln frees it with free */
  p->raw_data.data = NULL;
  p->raw_data.len = 0;
  p->has_raw_data = 0;
  return t;
}

kiln_tensor *kiln_sparse_from_proto(const Onnx__SparseTensorProto *p, kiln_error *err) {
  if (!p->values || !p->indices) {
    kiln_fail(err, KILN_ERR_MODEL, "sparse tensor without values or indices");
    return NULL;
  }
  kiln_tensor *vals = kiln_tensor_from_proto(p->values, NULL, err);
  kiln_tensor *idx = vals ? kiln_tensor_from_proto(p->indices, NULL, err) : NULL;
  kiln_tensor *t = idx ? kiln_tensor_new(vals->dtype, (int)p->n_dims, p->dims, err) : NULL;
  if (!t) goto out;
  int64_t nnz = vals->numel;
  bool coo2d = idx->rank == 2;
  if ((coo2d && (idx->dims[0] != nnz || idx->dims[1] != (int64_t)p->n_dims)) || (!coo2d && idx->numel != nnz)) {
    kiln_fail(err, KILN_ERR_MODEL, "sparse tensor indices do not match its values");
    kiln_tensor_free(t);
    t = NULL;
    goto out;
  }
  for (int64_t k = 0; k < nnz; k++) {
    int64_t flat = 0;
    if (coo2d)
      for (size_t d = 0; d < p->n_dims; d++) flat = flat * p->dims[d] + kiln_get_i64(idx, k * (int64_t)p->n_dims + (int64_t)d);
    else
      flat = kiln_get_i64(idx, k);
    if (flat < 0 || flat >= t->numel) {
      kiln_fail(err, KILN_ERR_MODEL, "sparse tensor index out of range");
      kiln_tensor_free(t);
      t = NULL;
      goto out;
    }
    kiln_copy_elem(t, flat, vals, k);
  }
out:
  kiln_tensor_free(vals);
  kiln_tensor_free(idx);
  return t;
}

kiln_code kiln_tensor_to_proto(const kiln_tensor *t, const char *name, Onnx__TensorProto *p,
                               kiln_error *err) {
  p->name = (char *)(uintptr_t)(name ? name : "");
  p->n_dims = (size_t)t->rank;
  p->dims = (int64_t *)(uintptr_t)t->dims;
  p->has_data_type = 1;
  p->data_type = t->dtype;
  if (t->dtype == KILN_STRING) {
    p->n_string_data = (size_t)t->numel;
    p->string_data = kiln_calloc((size_t)t->numel, sizeof *p->string_data);
    if (!p->string_data) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    char *const *s = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
      p->string_data[i].data = (uint8_t *)s[i];
      p->string_data[i].len = strlen(s[i]);
    }
  } else if (kiln_dtype_is_packed4(t->dtype)) { /* TensorProto packs two per byte */
    size_t len = (size_t)kiln_proto_raw_bytes(t->dtype, t->numel);
    p->has_raw_data = 1;
    p->raw_data.data = malloc(len ? len : 1);
    if (!p->raw_data.data) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    kiln_pack4(t->data, t->numel, p->raw_data.data);
    p->raw_data.len = len;
  } else {
    p->has_raw_data = 1;
    p->raw_data.data = t->data;
    p->raw_data.len = t->nbytes;
  }
  return KILN_OK;
}

void kiln_tensor_proto_release(Onnx__TensorProto *p) {
  if (p->has_data_type && kiln_dtype_is_packed4((kiln_dtype)p->data_type)) {
    free(p->raw_data.data); /* the packed copy kiln_tensor_to_proto made */
    p->raw_data.data = NULL;
    p->raw_data.len = 0;
  }
  free(p->string_data);
  p->string_data = NULL;
  p->n_string_data = 0;
}

static kiln_code shape_from_proto(const Onnx__TensorShapeProto *s, kiln_type *t, kiln_error *err) {
  if (!s) {
    t->rank = -1;
    return KILN_OK;
  }
  if (s->n_dim > KILN_MAX_RANK) return kiln_fail(err, KILN_ERR_UNSUPPORTED, "rank %zu exceeds %d", s->n_dim, KILN_MAX_RANK);
  t->rank = (int)s->n_dim;
  for (size_t i = 0; i < s->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = s->dim[i];
    t->dims[i] = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0)
      t->dims[i] = d->dim_value;
    else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param && *d->dim_param)
      t->sym[i] = kiln_strdup(d->dim_param);
  }
  return KILN_OK;
}

kiln_code kiln_type_from_proto(const Onnx__TypeProto *p, kiln_type *t, kiln_error *err) {
  kiln_type_clear(t);
  if (!p) return KILN_OK;
  switch (p->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
      t->kind = KILN_T_TENSOR;
      t->dtype = (kiln_dtype)p->tensor_type->elem_type;
      return shape_from_proto(p->tensor_type->shape, t, err);
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: {
      kiln_type inner = {.rank = -1};
      kiln_code rc = kiln_type_from_proto(p->sequence_type->elem_type, &inner, err);
      t->kind = KILN_T_SEQUENCE;
      t->inner = inner.kind;
      t->dtype = inner.dtype;
      kiln_type_clear(&inner);
      return rc;
    }
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: {
      kiln_type inner = {.rank = -1};
      kiln_code rc = kiln_type_from_proto(p->optional_type->elem_type, &inner, err);
      t->kind = KILN_T_OPTIONAL;
      t->inner = inner.kind;
      t->dtype = inner.dtype;
      kiln_type_clear(&inner);
      return rc;
    }
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE:
      t->kind = KILN_T_MAP;
      return KILN_OK;
    default:
      return KILN_OK;
  }
}
