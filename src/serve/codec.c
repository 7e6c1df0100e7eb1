/* kiln serve: v2 tensors from an infer request (JSON "data", flat or nested, or the binary tensor
 * data extension) into kiln tensors checked against the model's inputs, and outputs back to JSON
 * or binary. JSON numbers: FP32 and FP16/BF16 printed with 9 significant digits and FP64 with 17,
 * so a client parsing them as the declared type gets the bits kiln computed; non-finite values
 * are the strings "nan", "inf" and "-inf" (accepted on input too). BYTES elements in binary are
 * a 4-byte little-endian length then the bytes. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const struct {
  const char *name;
  kiln_dtype t;
} dtypes[] = {
    {"BOOL", KILN_BOOL},     {"UINT8", KILN_UINT8},   {"UINT16", KILN_UINT16},
    {"UINT32", KILN_UINT32}, {"UINT64", KILN_UINT64}, {"INT8", KILN_INT8},
    {"INT16", KILN_INT16},   {"INT32", KILN_INT32},   {"INT64", KILN_INT64},
    {"FP16", KILN_FLOAT16},  {"FP32", KILN_FLOAT},    {"FP64", KILN_DOUBLE},
    {"BF16", KILN_BFLOAT16}, {"BYTES", KILN_STRING},
};

const char *srv_v2_dtype(kiln_dtype t) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (dtypes[i].t == t) return dtypes[i].name;
  return "UNDEFINED";
}

static kiln_dtype v2_dtype(const char *s) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (!strcmp(dtypes[i].name, s)) return dtypes[i].t;
  return KILN_UNDEFINED;
}

uint16_t srv_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int ee = (int)e - 127 + 15;
  if (ee >= 31) return (uint16_t)(sign | 0x7c00u);
  if (ee <= 0) {
    if (ee < -10) return (uint16_t)sign;
    m |= 0x800000u;
    int shift = 14 - ee;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)ee << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float srv_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) {
    if (!m) {
      x = sign;
    } else {
      int k = -1;
      do {
        k++;
        m <<= 1;
      } while (!(m & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t srv_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float srv_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

long srv_json_depth(const char *s, size_t n) {
  long depth = 0, max = 0;
  int in_str = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max) max = depth;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return max;
}

/* ---- decoding ------------------------------------------------------------------------ */

typedef struct fill_ctx {
  kiln_tensor *t;
  const char *name;
  int64_t pos, numel;
  char *msg;
  size_t n;
} fill_ctx;

static int nonfinite(const char *s, double *out) {
  if (!s) return 0;
  if (!strcmp(s, "nan") || !strcmp(s, "NaN")) *out = NAN;
  else if (!strcmp(s, "inf") || !strcmp(s, "Infinity")) *out = INFINITY;
  else if (!strcmp(s, "-inf") || !strcmp(s, "-Infinity")) *out = -INFINITY;
  else return 0;
  return 1;
}

static int int_range(kiln_dtype t, json_int_t v) {
  switch (t) {
  case KILN_UINT8: return v >= 0 && v <= 255;
  case KILN_INT8: return v >= -128 && v <= 127;
  case KILN_UINT16: return v >= 0 && v <= 65535;
  case KILN_INT16: return v >= -32768 && v <= 32767;
  case KILN_UINT32: return v >= 0 && v <= 4294967295LL;
  case KILN_INT32: return v >= -2147483648LL && v <= 2147483647LL;
  case KILN_UINT64: return v >= 0;
  default: return 1;
  }
}

/* Store scalar v as element c->pos of c->t, converted to its dtype. */
static int put_value(fill_ctx *c, const srv_scalar *v) {
  kiln_dtype t = kiln_tensor_dtype(c->t);
  void *p = kiln_tensor_data(c->t);
  int64_t i = c->pos;
  if (t == KILN_STRING) {
    if (v->kind != SRV_SC_STR) goto bad;
    return kiln_tensor_set_string(c->t, i, v->s, NULL) ? -1 : 0;
  }
  if (t == KILN_BOOL) {
    if (v->kind == SRV_SC_BOOL || (v->kind == SRV_SC_INT && (v->i == 0 || v->i == 1)))
      ((uint8_t *)p)[i] = (uint8_t)v->i;
    else goto bad;
    return 0;
  }
  if (t == KILN_FLOAT || t == KILN_DOUBLE || t == KILN_FLOAT16 || t == KILN_BFLOAT16) {
    double d = v->d;
    if (v->kind == SRV_SC_STR ? !nonfinite(v->s, &d) : v->kind != SRV_SC_INT && v->kind != SRV_SC_BIGINT && v->kind != SRV_SC_REAL)
      goto bad;
    if (t == KILN_FLOAT) ((float *)p)[i] = (float)d;
    else if (t == KILN_DOUBLE) ((double *)p)[i] = d;
    else if (t == KILN_FLOAT16) ((uint16_t *)p)[i] = srv_f32_to_f16((float)d);
    else ((uint16_t *)p)[i] = srv_f32_to_bf16((float)d);
    return 0;
  }
  if (v->kind != SRV_SC_INT && v->kind != SRV_SC_BIGINT) goto bad;
  long long x = v->i;
  if (v->kind == SRV_SC_BIGINT || !int_range(t, x)) {
    srv_msg(c->msg, c->n, "input '%s': value %.17g at element %lld is out of range for %s", c->name,
            v->d, (long long)i, srv_v2_dtype(t));
    return -1;
  }
  switch (t) {
  case KILN_UINT8: ((uint8_t *)p)[i] = (uint8_t)x; break;
  case KILN_INT8: ((int8_t *)p)[i] = (int8_t)x; break;
  case KILN_UINT16: ((uint16_t *)p)[i] = (uint16_t)x; break;
  case KILN_INT16: ((int16_t *)p)[i] = (int16_t)x; break;
  case KILN_UINT32: ((uint32_t *)p)[i] = (uint32_t)x; break;
  case KILN_INT32: ((int32_t *)p)[i] = (int32_t)x; break;
  case KILN_UINT64: ((uint64_t *)p)[i] = (uint64_t)x; break;
  default: ((int64_t *)p)[i] = (int64_t)x; break;
  }
  return 0;
bad:
  srv_msg(c->msg, c->n, "input '%s': element %lld is not a valid %s value", c->name, (long long)i,
          srv_v2_dtype(t));
  return -1;
}

static int put_scalar(fill_ctx *c, const json_t *j) {
  srv_scalar v = {SRV_SC_OTHER, 0, 0, NULL};
  if (json_is_integer(j)) {
    v.kind = SRV_SC_INT;
    v.i = json_integer_value(j);
    v.d = (double)v.i;
  } else if (json_is_real(j)) {
    v.kind = SRV_SC_REAL;
    v.d = json_real_value(j);
  } else if (json_is_boolean(j)) {
    v.kind = SRV_SC_BOOL;
    v.i = json_is_true(j);
  } else if (json_is_string(j)) {
    v.kind = SRV_SC_STR;
    v.s = json_string_value(j);
  }
  return put_value(c, &v);
}

/* The fast path's callback (datascan.c): one scalar of a data array read from the text. */
static int put_scanned(void *ctx, const srv_scalar *v) {
  fill_ctx *c = ctx;
  if (c->pos >= c->numel) {
    c->pos++;
    return 0; /* counted, reported by the caller */
  }
  if (put_value(c, v)) return -1;
  c->pos++;
  return 0;
}

static int fill(fill_ctx *c, const json_t *a) {
  size_t k;
  json_t *e;
  json_array_foreach(a, k, e) {
    if (json_is_array(e)) {
      if (fill(c, e)) return -1;
      continue;
    }
    if (c->pos >= c->numel) {
      c->pos++;
      continue; /* counted, reported below */
    }
    if (put_scalar(c, e)) return -1;
    c->pos++;
  }
  return 0;
}

static int from_binary(kiln_tensor *t, const char *name, const unsigned char *p, size_t size,
                       char *msg, size_t n) {
  kiln_dtype dt = kiln_tensor_dtype(t);
  int64_t numel = kiln_tensor_numel(t);
  if (dt != KILN_STRING) {
    size_t want = (size_t)numel * kiln_dtype_size(dt);
    if (size != want) {
      srv_msg(msg, n, "input '%s': binary_data_size is %zu bytes, shape and datatype need %zu", name,
              size, want);
      return -1;
    }
    if (size) memcpy(kiln_tensor_data(t), p, size);
    if (dt == KILN_BOOL)
      for (size_t i = 0; i < size; i++) ((uint8_t *)kiln_tensor_data(t))[i] = p[i] != 0;
    return 0;
  }
  size_t off = 0;
  for (int64_t i = 0; i < numel; i++) {
    if (size - off < 4) goto short_data;
    uint32_t len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                   (uint32_t)p[off + 3] << 24;
    off += 4;
    if (size - off < len) goto short_data;
    char *s = malloc((size_t)len + 1);
    if (!s) return -1;
    memcpy(s, p + off, len);
    s[len] = 0;
    off += len;
    int rc = kiln_tensor_set_string(t, i, s, NULL);
    free(s);
    if (rc) return -1;
  }
  if (off != size) {
    srv_msg(msg, n, "input '%s': %zu bytes of binary data left after %lld BYTES elements", name,
            size - off, (long long)numel);
    return -1;
  }
  return 0;
short_data:
  srv_msg(msg, n, "input '%s': binary data ends inside a BYTES element (binary_data_size %zu)", name, size);
  return -1;
}

static int find_io(const srv_io *io, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name)) return (int)i;
  return -1;
}

static void io_names(const srv_io *io, size_t n, char *dst, size_t dn) {
  size_t off = 0;
  dst[0] = 0;
  for (size_t i = 0; i < n && off < dn; i++)
    off += (size_t)snprintf(dst + off, dn - off, "%s'%s'", i ? ", " : "", io[i].name);
}

/* The shape array, checked against the model's declared dims. */
static int parse_shape(const srv_version *v, int idx, const json_t *shape, int64_t *dims, int *rank,
                       const srv_limits *lim, char *msg, size_t n) {
  const srv_io *io = &v->in[idx];
  if (!json_is_array(shape) || json_array_size(shape) > KILN_MAX_RANK) {
    srv_msg(msg, n, "input '%s': \"shape\" must be an array of at most %d dims", io->name, KILN_MAX_RANK);
    return -1;
  }
  *rank = (int)json_array_size(shape);
  int64_t numel = 1;
  for (int d = 0; d < *rank; d++) {
    json_t *e = json_array_get(shape, (size_t)d);
    if (!json_is_integer(e) || json_integer_value(e) < 0) {
      srv_msg(msg, n, "input '%s': shape dim %d is not a non-negative integer", io->name, d);
      return -1;
    }
    dims[d] = json_integer_value(e);
    if (dims[d] && numel > lim->max_tensor_elements / dims[d]) {
      srv_msg(msg, n, "input '%s': more than %ld elements (--max-tensor-elements)", io->name,
              lim->max_tensor_elements);
      return -1;
    }
    numel *= dims[d];
  }
  if (io->rank >= 0 && io->rank != *rank) {
    srv_msg(msg, n, "input '%s': shape has %d dims, the model expects %d", io->name, *rank, io->rank);
    return -1;
  }
  for (int d = 0; io->rank >= 0 && d < *rank; d++)
    if (io->dims[d] >= 0 && io->dims[d] != dims[d]) {
      srv_msg(msg, n, "input '%s': dim %d is %lld, the model expects %lld", io->name, d,
              (long long)dims[d], (long long)io->dims[d]);
      return -1;
    }
  return 0;
}

/* What parse_input reads besides the JSON tree: the binary data after the JSON header, and the
 * numeric data arrays the fast path took out of jansson's copy (datascan.c). */
typedef struct bin_cursor {
  const unsigned char *p;
  size_t left;
  const char *text;       /* the JSON header as received */
  const srv_span *spans;
  int n_spans;
  size_t index;           /* of the input being parsed in "inputs" */
} bin_cursor;

/* The input's data array as taken out by the fast path, or NULL. */
static const srv_span *scanned_data(const bin_cursor *bin) {
  for (int i = 0; i < bin->n_spans; i++)
    if (bin->spans[i].input == bin->index) return &bin->spans[i];
  return NULL;
}

static int fill_scanned(fill_ctx *c, const bin_cursor *bin, const srv_span *sp) {
  size_t off = 0;
  int rc = srv_scan_numbers(bin->text + sp->start, sp->end - sp->start, put_scanned, c, &off);
  if (rc < 0)
    srv_msg(c->msg, c->n, "malformed JSON in the \"data\" of input '%s' at byte %zu", c->name,
            sp->start + off);
  return rc ? -1 : 0;
}

static int parse_input(const srv_version *v, const json_t *in, srv_request *req, bin_cursor *bin,
                       const srv_limits *lim, char *msg, size_t n) {
  const char *name = json_string_value(json_object_get(in, "name"));
  const char *dts = json_string_value(json_object_get(in, "datatype"));
  if (!json_is_object(in) || !name) {
    srv_msg(msg, n, "every input needs a \"name\" string");
    return -1;
  }
  int idx = find_io(v->in, v->n_in, name);
  if (idx < 0) {
    char names[512];
    io_names(v->in, v->n_in, names, sizeof names);
    srv_msg(msg, n, "unknown input '%s'; the model's inputs are %s", name, names);
    return -1;
  }
  if (req->inputs[idx]) {
    srv_msg(msg, n, "input '%s' is given twice", name);
    return -1;
  }
  kiln_dtype t = dts ? v2_dtype(dts) : KILN_UNDEFINED;
  if (t == KILN_UNDEFINED) {
    srv_msg(msg, n, "input '%s': \"datatype\" must be one of BOOL, UINT8..UINT64, INT8..INT64, FP16, "
            "BF16, FP32, FP64, BYTES", name);
    return -1;
  }
  if (v->in[idx].dtype != KILN_UNDEFINED && v->in[idx].dtype != t) {
    srv_msg(msg, n, "input '%s' has datatype %s, the model expects %s", name, dts,
            srv_v2_dtype(v->in[idx].dtype));
    return -1;
  }
  int64_t dims[KILN_MAX_RANK];
  int rank;
  if (parse_shape(v, idx, json_object_get(in, "shape"), dims, &rank, lim, msg, n)) return -1;
  if (kiln_tensor_create(t, rank, dims, &req->inputs[idx], NULL) != KILN_OK) {
    srv_msg(msg, n, "input '%s': out of memory", name);
    return -1;
  }
  json_t *bsz = json_object_get(json_object_get(in, "parameters"), "binary_data_size");
  json_t *data = json_object_get(in, "data");
  if (bsz) {
    if (!json_is_integer(bsz) || json_integer_value(bsz) < 0 || data) {
      srv_msg(msg, n, "input '%s': binary_data_size must be a non-negative integer, without \"data\"", name);
      return -1;
    }
    size_t size = (size_t)json_integer_value(bsz);
    if (size > bin->left) {
      srv_msg(msg, n, "input '%s': binary_data_size %zu is more than the %zu bytes of binary data left",
              name, size, bin->left);
      return -1;
    }
    if (from_binary(req->inputs[idx], name, bin->p, size, msg, n)) return -1;
    bin->p += size;
    bin->left -= size;
    return 0;
  }
  if (!json_is_array(data)) {
    srv_msg(msg, n, "input '%s' needs a \"data\" array or a binary_data_size parameter", name);
    return -1;
  }
  fill_ctx c = {req->inputs[idx], name, 0, kiln_tensor_numel(req->inputs[idx]), msg, n};
  const srv_span *sp = json_array_size(data) ? NULL : scanned_data(bin);
  if (sp ? fill_scanned(&c, bin, sp) : fill(&c, data)) return -1;
  if (c.pos != c.numel) {
    srv_msg(msg, n, "input '%s': \"data\" has %lld values, its shape needs %lld", name,
            (long long)c.pos, (long long)c.numel);
    return -1;
  }
  return 0;
}

static int parse_outputs(const srv_version *v, const json_t *root, srv_request *req, char *msg, size_t n) {
  json_t *outs = json_object_get(root, "outputs");
  int bin_all = json_is_true(json_object_get(json_object_get(root, "parameters"), "binary_data_output"));
  size_t k = outs ? json_array_size(outs) : v->n_out;
  if (outs && (!json_is_array(outs) || !k)) {
    srv_msg(msg, n, "\"outputs\" must be a non-empty array of {\"name\": ...}");
    return -1;
  }
  req->n_out = k;
  req->out_idx = calloc(k + 1, sizeof *req->out_idx);
  req->out_binary = calloc(k + 1, sizeof *req->out_binary);
  if (!req->out_idx || !req->out_binary) return -1;
  for (size_t i = 0; i < k; i++) {
    req->out_binary[i] = bin_all;
    if (!outs) {
      req->out_idx[i] = (int)i;
      continue;
    }
    json_t *o = json_array_get(outs, i);
    const char *name = json_string_value(json_object_get(o, "name"));
    int idx = name ? find_io(v->out, v->n_out, name) : -1;
    if (idx < 0) {
      char names[512];
      io_names(v->out, v->n_out, names, sizeof names);
      srv_msg(msg, n, "unknown output '%s'; the model's outputs are %s", name ? name : "(no name)", names);
      return -1;
    }
    for (size_t p = 0; p < i; p++)
      if (req->out_idx[p] == idx) {
        srv_msg(msg, n, "output '%s' is requested twice", name);
        return -1;
      }
    req->out_idx[i] = idx;
    json_t *b = json_object_get(json_object_get(o, "parameters"), "binary_data");
    if (b) req->out_binary[i] = json_is_true(b);
  }
  return 0;
}

static int decode_root(const srv_version *v, const json_t *root, bin_cursor *bin,
                       const srv_limits *lim, srv_request *req, char *msg, size_t n) {
  if (!json_is_object(root)) {
    srv_msg(msg, n, "the request must be a JSON object");
    return -1;
  }
  json_t *id = json_object_get(root, "id");
  if (id) {
    if (!json_is_string(id) || strlen(json_string_value(id)) >= sizeof req->id) {
      srv_msg(msg, n, "\"id\" must be a string of fewer than %zu bytes", sizeof req->id);
      return -1;
    }
    snprintf(req->id, sizeof req->id, "%s", json_string_value(id));
    req->has_id = 1;
  }
  json_t *params = json_object_get(root, "parameters");
  if (params && !json_is_object(params)) {
    srv_msg(msg, n, "\"parameters\" must be an object");
    return -1;
  }
  json_t *inputs = json_object_get(root, "inputs");
  if (!json_is_array(inputs)) {
    srv_msg(msg, n, "the request needs an \"inputs\" array");
    return -1;
  }
  size_t k;
  json_t *in;
  json_array_foreach(inputs, k, in) {
    bin->index = k;
    if (parse_input(v, in, req, bin, lim, msg, n)) return -1;
  }
  for (size_t i = 0; i < v->n_in; i++)
    if (!req->inputs[i]) {
      srv_msg(msg, n, "missing input '%s'", v->in[i].name);
      return -1;
    }
  if (bin->left) {
    srv_msg(msg, n, "%zu bytes of binary data follow the inputs' binary_data_size", bin->left);
    return -1;
  }
  return parse_outputs(v, root, req, msg, n);
}

int srv_decode_request(const srv_version *v, const char *body, size_t len, size_t json_len,
                       const srv_limits *lim, srv_request *req, char *msg, size_t n) {
  memset(req, 0, sizeof *req);
  if (!json_len) json_len = len;
  if (json_len > len) {
    srv_msg(msg, n, "Inference-Header-Content-Length %zu is more than the body's %zu bytes", json_len, len);
    return 400;
  }
  long depth = srv_json_depth(body, json_len);
  if (depth > lim->max_json_depth) {
    srv_msg(msg, n, "JSON nested %ld deep, more than --max-json-depth %ld", depth, lim->max_json_depth);
    return 400;
  }
  /* numeric data arrays are read by datascan.c: jansson parses a copy without them */
  srv_span spans[SRV_MAX_IO];
  int n_spans = srv_find_data_spans(body, json_len, spans, SRV_MAX_IO);
  char *copy = n_spans ? malloc(json_len) : NULL;
  if (copy) {
    memcpy(copy, body, json_len);
    for (int i = 0; i < n_spans; i++) {
      memset(copy + spans[i].start, ' ', spans[i].end - spans[i].start);
      copy[spans[i].start] = '[';
      copy[spans[i].start + 1] = ']';
    }
  } else {
    n_spans = 0;
  }
  json_error_t je;
  json_t *root = json_loadb(copy ? copy : body, json_len, JSON_REJECT_DUPLICATES, &je);
  free(copy);
  if (!root) {
    srv_msg(msg, n, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    return 400;
  }
  req->inputs = calloc(v->n_in + 1, sizeof *req->inputs);
  bin_cursor bin = {(const unsigned char *)body + json_len, len - json_len, body, spans, n_spans, 0};
  int rc = req->inputs ? decode_root(v, root, &bin, lim, req, msg, n) : -1;
  json_decref(root);
  if (rc) {
    srv_request_free(req, v->n_in);
    return 400;
  }
  return 0;
}

void srv_request_free(srv_request *req, size_t n_in) {
  for (size_t i = 0; req->inputs && i < n_in; i++) kiln_tensor_free(req->inputs[i]);
  free(req->inputs);
  free(req->out_idx);
  free(req->out_binary);
  memset(req, 0, sizeof *req);
}

/* ---- encoding ------------------------------------------------------------------------ */

static void put_float(srv_buf *b, double d, int digits) {
  if (isnan(d)) srv_buf_puts(b, "\"nan\"");
  else if (isinf(d)) srv_buf_puts(b, d > 0 ? "\"inf\"" : "\"-inf\"");
  else srv_buf_printf(b, "%.*g", digits, d);
}

static void json_data(srv_buf *b, const kiln_tensor *t) {
  kiln_dtype dt = kiln_tensor_dtype(t);
  const void *p = kiln_tensor_cdata(t);
  int64_t n = kiln_tensor_numel(t);
  srv_buf_puts(b, "[");
  for (int64_t i = 0; i < n && !b->failed; i++) {
    if (i) srv_buf_puts(b, ",");
    switch (dt) {
    case KILN_FLOAT: put_float(b, ((const float *)p)[i], 9); break;
    case KILN_DOUBLE: put_float(b, ((const double *)p)[i], 17); break;
    case KILN_FLOAT16: put_float(b, srv_f16_to_f32(((const uint16_t *)p)[i]), 9); break;
    case KILN_BFLOAT16: put_float(b, srv_bf16_to_f32(((const uint16_t *)p)[i]), 9); break;
    case KILN_BOOL: srv_buf_puts(b, ((const uint8_t *)p)[i] ? "true" : "false"); break;
    case KILN_UINT8: srv_buf_printf(b, "%u", ((const uint8_t *)p)[i]); break;
    case KILN_INT8: srv_buf_printf(b, "%d", ((const int8_t *)p)[i]); break;
    case KILN_UINT16: srv_buf_printf(b, "%u", ((const uint16_t *)p)[i]); break;
    case KILN_INT16: srv_buf_printf(b, "%d", ((const int16_t *)p)[i]); break;
    case KILN_UINT32: srv_buf_printf(b, "%u", ((const uint32_t *)p)[i]); break;
    case KILN_INT32: srv_buf_printf(b, "%d", ((const int32_t *)p)[i]); break;
    case KILN_UINT64: srv_buf_printf(b, "%llu", (unsigned long long)((const uint64_t *)p)[i]); break;
    case KILN_INT64: srv_buf_printf(b, "%lld", (long long)((const int64_t *)p)[i]); break;
    case KILN_STRING: srv_buf_json_str(b, ((char *const *)p)[i]); break;
    default: srv_buf_puts(b, "null"); break;
    }
  }
  srv_buf_puts(b, "]");
}

static void binary_data(srv_buf *b, const kiln_tensor *t) {
  kiln_dtype dt = kiln_tensor_dtype(t);
  int64_t n = kiln_tensor_numel(t);
  if (dt != KILN_STRING) {
    srv_buf_put(b, kiln_tensor_cdata(t), (size_t)n * kiln_dtype_size(dt));
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    const char *s = ((char *const *)kiln_tensor_cdata(t))[i];
    uint32_t len = (uint32_t)strlen(s);
    unsigned char le[4] = {(unsigned char)len, (unsigned char)(len >> 8), (unsigned char)(len >> 16),
                           (unsigned char)(len >> 24)};
    srv_buf_put(b, le, 4);
    srv_buf_put(b, s, len);
  }
}

int srv_encode_response(const srv_version *v, const srv_request *req, kiln_tensor **outs,
                        srv_buf *b, size_t *json_len, char *msg, size_t n) {
  srv_buf bin = {0};
  srv_buf_puts(b, "{\"model_name\":");
  srv_buf_json_str(b, v->model->name);
  srv_buf_printf(b, ",\"model_version\":\"%s\"", v->vstr);
  if (req->has_id) {
    srv_buf_puts(b, ",\"id\":");
    srv_buf_json_str(b, req->id);
  }
  srv_buf_puts(b, ",\"outputs\":[");
  for (size_t i = 0; i < req->n_out; i++) {
    const kiln_tensor *t = outs[i];
    const char *name = v->out[req->out_idx[i]].name;
    if (!t || kiln_tensor_kind(t) != KILN_KIND_TENSOR || !strcmp(srv_v2_dtype(kiln_tensor_dtype(t)), "UNDEFINED")) {
      srv_msg(msg, n, "output '%s' is not a tensor of a v2 datatype", name);
      srv_buf_free(&bin);
      return 500;
    }
    srv_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
    srv_buf_json_str(b, name);
    srv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", srv_v2_dtype(kiln_tensor_dtype(t)));
    for (int d = 0; d < kiln_tensor_rank(t); d++)
      srv_buf_printf(b, "%s%lld", d ? "," : "", (long long)kiln_tensor_dims(t)[d]);
    srv_buf_puts(b, "]");
    if (req->out_binary[i]) {
      size_t before = bin.len;
      binary_data(&bin, t);
      srv_buf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}", bin.len - before);
    } else {
      srv_buf_puts(b, ",\"data\":");
      json_data(b, t);
      srv_buf_puts(b, "}");
    }
  }
  srv_buf_puts(b, "]}");
  *json_len = 0;
  for (size_t i = 0; i < req->n_out; i++)
    if (req->out_binary[i]) *json_len = b->len;
  if (*json_len) srv_buf_put(b, bin.data ? bin.data : "", bin.len);
  int failed = b->failed || bin.failed;
  srv_buf_free(&bin);
  if (failed) {
    srv_msg(msg, n, "out of memory writing the response");
    return 500;
  }
  return 0;
}
