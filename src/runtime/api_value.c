/* Public value API: tensors, sequences, optionals, and their file formats. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "onnx/limits.h"
#include "onnx/proto.h"

kiln_code kiln_tensor_create(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out,
                             kiln_error *err) {
  if (!out || (rank > 0 && !dims)) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_tensor_create: missing argument");
  *out = kiln_tensor_new(dtype, rank, dims, err);
  return *out ? KILN_OK : (err ? err->code : KILN_ERR_NOMEM);
}

kiln_kind kiln_tensor_kind(const kiln_tensor *t) { return t->kind; }
kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t->dtype; }
int kiln_tensor_rank(const kiln_tensor *t) { return t->rank; }
const int64_t *kiln_tensor_dims(const kiln_tensor *t) { return t->dims; }
int64_t kiln_tensor_numel(const kiln_tensor *t) { return t->kind == KILN_KIND_TENSOR ? t->numel : 0; }
void *kiln_tensor_data(kiln_tensor *t) { return t->data; }
const void *kiln_tensor_cdata(const kiln_tensor *t) { return t->data; }
size_t kiln_sequence_length(const kiln_tensor *seq) { return seq->kind == KILN_KIND_SEQUENCE ? seq->n_items : 0; }
const kiln_tensor *kiln_sequence_at(const kiln_tensor *seq, size_t i) {
  return seq->kind == KILN_KIND_SEQUENCE && i < seq->n_items ? seq->items[i] : NULL;
}

kiln_code kiln_tensor_reinterpret(kiln_tensor *t, kiln_dtype dtype, kiln_error *err) {
  if (!t || t->kind != KILN_KIND_TENSOR || t->dtype == KILN_STRING || dtype == KILN_STRING ||
      kiln_dtype_size(dtype) != kiln_dtype_size(t->dtype) || !kiln_dtype_size(dtype))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "cannot reinterpret %s as %s",
                     t ? kiln_dtype_name(t->dtype) : "NULL", kiln_dtype_name(dtype));
  t->dtype = dtype;
  return KILN_OK;
}

/* ---- protobuf files ---- */

static kiln_code read_all(const char *path, uint8_t **buf, size_t *len, kiln_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return kiln_fail(err, KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  while (b) {
    size_t got = fread(b + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    uint8_t *nb = realloc(b, cap * 2);
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory reading '%s'", path);
  if (bad) {
    free(b);
    return kiln_fail(err, KILN_ERR_IO, "error reading '%s'", path);
  }
  *buf = b;
  *len = n;
  return KILN_OK;
}

static kiln_tensor *from_sequence(const Onnx__SequenceProto *sp, kiln_error *err);

static kiln_tensor *from_optional(const Onnx__OptionalProto *op, kiln_error *err) {
  if (op->tensor_value) return kiln_tensor_from_proto(op->tensor_value, NULL, err);
  if (op->sequence_value) return from_sequence(op->sequence_value, err);
  kiln_tensor *t;
  return kiln_none_create(KILN_UNDEFINED, &t, err) ? NULL : t;
}

static kiln_tensor *from_sequence(const Onnx__SequenceProto *sp, kiln_error *err) {
  kiln_tensor *seq;
  if (sp->n_sequence_values || sp->n_map_values || sp->n_optional_values || sp->n_sparse_tensor_values) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "sequences of non-tensor values are not supported");
    return NULL;
  }
  if (kiln_sequence_create(KILN_UNDEFINED, &seq, err)) return NULL;
  for (size_t i = 0; i < sp->n_tensor_values; i++) {
    kiln_tensor *t = kiln_tensor_from_proto(sp->tensor_values[i], NULL, err);
    if (!t || kiln_sequence_append(seq, t, err)) {
      kiln_tensor_free(t);
      kiln_tensor_free(seq);
      return NULL;
    }
  }
  if (!seq->dtype && sp->n_tensor_values == 0) seq->dtype = KILN_FLOAT;
  return seq;
}

static bool has_tensor_payload(const Onnx__TensorProto *tp) {
  return tp->n_dims || tp->has_raw_data || tp->n_float_data || tp->n_int32_data || tp->n_int64_data ||
         tp->n_double_data || tp->n_uint64_data || tp->n_string_data ||
         (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
}

kiln_code kiln_value_load_pb(const char *path, kiln_pb_format format, kiln_tensor **out,
                             kiln_error *err) {
  if (!path || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "missing argument");
  *out = NULL;
  uint8_t *buf;
  size_t len;
  kiln_code rc = read_all(path, &buf, &len, err);
  if (!rc && (rc = kiln_wire_check_value(buf, len, err))) { /* bounds the decoder's recursion */
    free(buf);
    kiln_error_prefix(err, "%s", path);
  }
  if (rc) return rc;
  kiln_tensor *v = NULL;
  if (format == KILN_PB_AUTO) {
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
    format = tp && has_tensor_payload(tp) ? KILN_PB_TENSOR : KILN_PB_SEQUENCE;
    if (tp) onnx__tensor_proto__free_unpacked(tp, NULL);
  }
  if (format == KILN_PB_SEQUENCE) {
    Onnx__SequenceProto *sp = onnx__sequence_proto__unpack(NULL, len, buf);
    if (sp) v = from_sequence(sp, err);
    else kiln_fail(err, KILN_ERR_IO, "not a SequenceProto");
    if (sp) onnx__sequence_proto__free_unpacked(sp, NULL);
  } else if (format == KILN_PB_OPTIONAL) {
    Onnx__OptionalProto *op = onnx__optional_proto__unpack(NULL, len, buf);
    if (op) v = from_optional(op, err);
    else kiln_fail(err, KILN_ERR_IO, "not an OptionalProto");
    if (op) onnx__optional_proto__free_unpacked(op, NULL);
  } else {
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
    if (tp) v = kiln_tensor_from_proto(tp, NULL, err);
    else kiln_fail(err, KILN_ERR_IO, "not a TensorProto");
    if (tp) onnx__tensor_proto__free_unpacked(tp, NULL);
  }
  free(buf);
  if (!v) {
    kiln_error_prefix(err, "%s", path);
    return err ? err->code : KILN_ERR_IO;
  }
  *out = v;
  return KILN_OK;
}

static kiln_code write_file(const char *path, const uint8_t *buf, size_t len, kiln_error *err) {
  FILE *f = fopen(path, "wb");
  if (!f) return kiln_fail(err, KILN_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
  size_t w = len ? fwrite(buf, 1, len, f) : 0;
  if (fclose(f) != 0 || w != len) return kiln_fail(err, KILN_ERR_IO, "error writing '%s'", path);
  return KILN_OK;
}

kiln_code kiln_value_save_pb(const char *path, const kiln_tensor *v, const char *name,
                             int as_optional, kiln_error *err) {
  if (!path || !v) return kiln_fail(err, KILN_ERR_INVALID_ARG, "missing argument");
  kiln_code rc = KILN_OK;
  size_t n = v->kind == KILN_KIND_SEQUENCE ? v->n_items : 1;
  Onnx__TensorProto *tps = kiln_calloc(n, sizeof *tps);
  Onnx__TensorProto **tpp = kiln_calloc(n, sizeof *tpp);
  uint8_t *buf = NULL;
  size_t len = 0;
  if (!tps || !tpp) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) onnx__tensor_proto__init(&tps[i]);
  Onnx__SequenceProto sp;
  onnx__sequence_proto__init(&sp);
  Onnx__OptionalProto op;
  onnx__optional_proto__init(&op);
  if (v->kind == KILN_KIND_SEQUENCE) {
    for (size_t i = 0; i < n && !rc; i++) {
      rc = kiln_tensor_to_proto(v->items[i], "", &tps[i], err);
      tpp[i] = &tps[i];
    }
    sp.name = (char *)(uintptr_t)(name ? name : "");
    sp.has_elem_type = 1;
    sp.elem_type = ONNX__SEQUENCE_PROTO__DATA_TYPE__TENSOR;
    sp.n_tensor_values = n;
    sp.tensor_values = tpp;
  } else if (v->kind == KILN_KIND_TENSOR) {
    rc = kiln_tensor_to_proto(v, name, &tps[0], err);
  }
  if (rc) goto done;
  const ProtobufCMessage *msg;
  if (as_optional || v->kind == KILN_KIND_NONE) {
    op.name = (char *)(uintptr_t)(name ? name : "");
    op.has_elem_type = 1;
    if (v->kind == KILN_KIND_SEQUENCE) {
      op.elem_type = ONNX__OPTIONAL_PROTO__DATA_TYPE__SEQUENCE;
      op.sequence_value = &sp;
    } else if (v->kind == KILN_KIND_TENSOR) {
      op.elem_type = ONNX__OPTIONAL_PROTO__DATA_TYPE__TENSOR;
      op.tensor_value = &tps[0];
    } else {
      op.elem_type = ONNX__OPTIONAL_PROTO__DATA_TYPE__UNDEFINED;
    }
    msg = &op.base;
  } else {
    msg = v->kind == KILN_KIND_SEQUENCE ? &sp.base : &tps[0].base;
  }
  len = protobuf_c_message_get_packed_size(msg);
  buf = kiln_malloc(len);
  if (!buf) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  protobuf_c_message_pack(msg, buf);
  rc = write_file(path, buf, len, err);
done:
  for (size_t i = 0; tps && i < n; i++) kiln_tensor_proto_release(&tps[i]);
  free(tps);
  free(tpp);
  free(buf);
  return rc;
}

/* ---- .npy ---- */

static kiln_dtype npy_dtype(const char *descr) {
  static const struct { const char *d; kiln_dtype t; } map[] = {
      {"<f4", KILN_FLOAT}, {"<f8", KILN_DOUBLE}, {"<f2", KILN_FLOAT16}, {"|i1", KILN_INT8},
      {"|u1", KILN_UINT8}, {"<i2", KILN_INT16}, {"<u2", KILN_UINT16}, {"<i4", KILN_INT32},
      {"<u4", KILN_UINT32}, {"<i8", KILN_INT64}, {"<u8", KILN_UINT64}, {"|b1", KILN_BOOL}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(descr, map[i].d)) return map[i].t;
  return KILN_UNDEFINED;
}

kiln_code kiln_tensor_load_npy(const char *path, kiln_tensor **out, kiln_error *err) {
  if (!path || !out) return kiln_fail(err, KILN_ERR_INVALID_ARG, "missing argument");
  *out = NULL;
  uint8_t *buf;
  size_t len;
  kiln_code rc = read_all(path, &buf, &len, err);
  if (rc) return rc;
  rc = KILN_ERR_IO;
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
    kiln_fail(err, rc, "'%s' is not a .npy file", path);
    goto done;
  }
  size_t hlen = buf[8] | (size_t)buf[9] << 8, hoff = 10;
  if (buf[6] >= 2) {
    if (len < 12) goto bad;
    hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    hoff = 12;
  }
  if (hoff + hlen > len || hlen > 65536) goto bad;
  char hdr[65537];
  memcpy(hdr, buf + hoff, hlen);
  hdr[hlen] = 0;
  char descr[16] = {0};
  const char *p = strstr(hdr, "'descr':");
  if (!p || sscanf(p, "'descr': '%15[^']'", descr) != 1) goto bad;
  if (strstr(hdr, "'fortran_order': True")) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "'%s': Fortran-order arrays are not supported", path);
    goto done;
  }
  kiln_dtype dt = npy_dtype(descr);
  if (!dt) {
    kiln_fail(err, KILN_ERR_UNSUPPORTED, "'%s': dtype '%s' is not supported", path, descr);
    goto done;
  }
  p = strstr(hdr, "'shape':");
  if (!p || !(p = strchr(p, '('))) goto bad;
  int64_t dims[KILN_MAX_RANK];
  int rank = 0;
  for (p++; *p && *p != ')';) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p || d < 0 || rank == KILN_MAX_RANK) goto bad;
    dims[rank++] = d;
    p = end;
  }
  int64_t need = kiln_tensor_bytes(dt, rank, dims);
  if (need < 0 || (uint64_t)need > len - hoff - hlen) { /* before allocating: the shape may be huge */
    kiln_fail(err, KILN_ERR_IO, "'%s': data is shorter than its shape needs", path);
    goto done;
  }
  kiln_tensor *t = kiln_tensor_new(dt, rank, dims, err);
  if (!t) {
    rc = err ? err->code : KILN_ERR_NOMEM;
    goto done;
  }
  if (len - hoff - hlen < t->nbytes) {
    kiln_tensor_free(t);
    kiln_fail(err, KILN_ERR_IO, "'%s': data is shorter than its shape needs", path);
    goto done;
  }
  memcpy(t->data, buf + hoff + hlen, t->nbytes);
  *out = t;
  rc = KILN_OK;
  goto done;
bad:
  kiln_fail(err, KILN_ERR_IO, "'%s': malformed .npy header", path);
done:
  free(buf);
  return rc;
}
