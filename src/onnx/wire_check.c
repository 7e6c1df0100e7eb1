/* kiln_wire_check: one pass over the protobuf wire format of a ModelProto, following only the
 * fields through which ONNX messages nest (graphs in attributes, types in types), with an
 * explicit stack instead of recursion. protobuf-c's decoder and kiln's reader both recurse per
 * nesting level and allocate per element, so this runs first and bounds what they will see.
 *
 * Field numbers are onnx.proto's. Fields not listed are skipped whole (their bytes are still
 * bounded by the file's size). Malformed bytes end the scan with the decoder's own message. */
#include "onnx/limits.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"

typedef enum {
  M_SKIP, M_MODEL, M_GRAPH, M_NODE, M_ATTR, M_VALUEINFO, M_TYPE, M_TTENSOR, M_SHAPE, M_DIM,
  M_TSEQ, M_TMAP, M_TOPT, M_TENSOR, M_SPARSE, M_FUNCTION, M_TRAINING, M_STRING,
  M_VALUE, M_VMAP /* SequenceProto / OptionalProto (same numbers), MapProto: onnx-data.proto */
} msg_kind;

/* The kind of field `field` (length-delimited) inside a message of kind `m`. */
static msg_kind child_kind(msg_kind m, uint32_t field) {
  switch (m) {
    case M_MODEL: return field == 7 ? M_GRAPH : field == 25 ? M_FUNCTION : field == 20 ? M_TRAINING
                       : field == 2 || field == 3 || field == 4 || field == 6 ? M_STRING : M_SKIP;
    case M_TRAINING: return field == 1 || field == 2 ? M_GRAPH : M_SKIP;
    case M_FUNCTION: return field == 7 ? M_NODE : field == 1 || field == 4 || field == 5 ? M_STRING : M_SKIP;
    case M_GRAPH:
      return field == 1 ? M_NODE : field == 5 ? M_TENSOR : field == 15 ? M_SPARSE
           : field == 11 || field == 12 || field == 13 ? M_VALUEINFO : field == 2 ? M_STRING : M_SKIP;
    case M_NODE: return field == 5 ? M_ATTR : field <= 4 || field == 7 ? M_STRING : M_SKIP;
    case M_ATTR:
      return field == 5 || field == 10 ? M_TENSOR : field == 6 || field == 11 ? M_GRAPH
           : field == 14 || field == 15 ? M_TYPE : field == 22 || field == 23 ? M_SPARSE
           : field == 1 || field == 4 || field == 9 || field == 21 ? M_STRING : M_SKIP;
    case M_VALUEINFO: return field == 2 ? M_TYPE : field == 1 ? M_STRING : M_SKIP;
    case M_TYPE:
      return field == 1 || field == 8 ? M_TTENSOR : field == 4 ? M_TSEQ : field == 5 ? M_TMAP
           : field == 9 ? M_TOPT : M_SKIP;
    case M_TTENSOR: return field == 2 ? M_SHAPE : M_SKIP;
    case M_SHAPE: return field == 1 ? M_DIM : M_SKIP;
    case M_DIM: return field == 2 || field == 3 ? M_STRING : M_SKIP;
    case M_TSEQ: case M_TOPT: return field == 1 ? M_TYPE : M_SKIP;
    case M_TMAP: return field == 2 ? M_TYPE : M_SKIP;
    case M_TENSOR: return field == 6 || field == 8 ? M_STRING : M_SKIP;
    case M_SPARSE: return field == 1 || field == 2 ? M_TENSOR : M_SKIP;
    case M_VALUE: return field == 5 || field == 7 ? M_VALUE : field == 6 ? M_VMAP : M_SKIP;
    case M_VMAP: return field == 5 ? M_VALUE : M_SKIP;
    default: return M_SKIP;
  }
}

typedef struct frame {
  msg_kind kind;
  size_t end;            /* offset one past the message */
  int64_t attr_bytes;    /* M_ATTR: bytes of its values so far */
} frame;

typedef struct scan {
  const uint8_t *p;
  size_t len, pos;
  const kiln_limits *lim;
  frame *st;
  size_t depth, cap;
  int64_t graphs, types, nodes; /* graphs and types open on the stack; nodes seen */
  int64_t values;               /* M_VALUE open on the stack */
  bool lenient;                 /* malformed bytes end the scan quietly (the decoder decides) */
  bool stop;
  kiln_error *err;
} scan;

/* A varint that ends within the current message. */
static bool varint(scan *s, uint64_t *v) {
  *v = 0;
  size_t end = s->st[s->depth - 1].end;
  for (int shift = 0; shift < 64 && s->pos < end; shift += 7) {
    uint8_t b = s->p[s->pos++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

static kiln_code corrupt(scan *s) {
  if (s->lenient) {
    s->stop = true;
    return KILN_OK;
  }
  return kiln_fail(s->err, KILN_ERR_MODEL,
                   "not an ONNX model: protobuf decoding failed (truncated or corrupt file?)");
}

static kiln_code over(scan *s, const char *what, int64_t have, const char *limit, int64_t value) {
  return kiln_fail(s->err, KILN_ERR_MODEL,
                   "%s (%lld) exceeds the limit %s = %lld; raise it with the session option "
                   "kiln_options.%s (kiln run --limit %s=N) if the model is trusted", what,
                   (long long)have, limit, (long long)value, limit, limit);
}

static kiln_code push(scan *s, msg_kind k, size_t end) {
  if (k == M_GRAPH && ++s->graphs > s->lim->max_subgraph_depth + 1)
    return over(s, "subgraph nesting depth", s->graphs - 1, "max_subgraph_depth", s->lim->max_subgraph_depth);
  if (k == M_TYPE && ++s->types > s->lim->max_subgraph_depth)
    return over(s, "type nesting depth", s->types, "max_subgraph_depth", s->lim->max_subgraph_depth);
  if (k == M_VALUE && ++s->values > s->lim->max_subgraph_depth + 1)
    return kiln_fail(s->err, KILN_ERR_MODEL, "sequences, maps and optionals nested deeper than %lld "
                     "levels (the limit max_subgraph_depth's default)", (long long)s->lim->max_subgraph_depth);
  if (k == M_NODE && ++s->nodes > s->lim->max_nodes)
    return over(s, "node count", s->nodes, "max_nodes", s->lim->max_nodes);
  if (s->depth == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    frame *st = realloc(s->st, cap * sizeof *st);
    if (!st) return kiln_fail(s->err, KILN_ERR_NOMEM, "out of memory");
    s->st = st;
    s->cap = cap;
  }
  s->st[s->depth++] = (frame){k, end, 0};
  return KILN_OK;
}

static void pop(scan *s) {
  msg_kind k = s->st[--s->depth].kind;
  if (k == M_GRAPH) s->graphs--;
  if (k == M_TYPE) s->types--;
  if (k == M_VALUE) s->values--;
}

/* Values of an attribute: s (4), floats (7), ints (8), strings (9), in bytes on the wire; a
 * non-packed float or int counts as its decoded 8 bytes at most. */
static kiln_code attr_value(scan *s, frame *f, uint32_t field, uint64_t bytes) {
  if (f->kind != M_ATTR || (field != 4 && field != 7 && field != 8 && field != 9)) return KILN_OK;
  f->attr_bytes += (int64_t)bytes;
  if (f->attr_bytes > s->lim->max_attribute_bytes)
    return over(s, "an attribute's size in bytes", f->attr_bytes, "max_attribute_bytes", s->lim->max_attribute_bytes);
  return KILN_OK;
}

/* One field of the message on top of the stack. */
static kiln_code field(scan *s) {
  frame *f = &s->st[s->depth - 1];
  uint64_t key, v;
  if (!varint(s, &key)) return corrupt(s);
  uint32_t num = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
  size_t left = f->end - s->pos;
  switch (wt) {
    case 0:
      if (!varint(s, &v)) return corrupt(s);
      return attr_value(s, f, num, 8);
    case 1:
    case 5: {
      size_t n = wt == 1 ? 8 : 4;
      if (left < n) return corrupt(s);
      s->pos += n;
      return attr_value(s, f, num, 8);
    }
    case 2: break;
    default: return corrupt(s);
  }
  if (!varint(s, &v) || v > f->end - s->pos) return corrupt(s);
  size_t end = s->pos + (size_t)v;
  kiln_code rc = attr_value(s, f, num, v);
  if (rc) return rc;
  msg_kind k = child_kind(f->kind, num);
  if (k == M_STRING && (int64_t)v > s->lim->max_string_bytes)
    return over(s, "a string's size in bytes", (int64_t)v, "max_string_bytes", s->lim->max_string_bytes);
  if (k == M_SKIP || k == M_STRING) {
    s->pos = end;
    return KILN_OK;
  }
  return push(s, k, end);
}

static kiln_code run_scan(const uint8_t *bytes, size_t len, const kiln_limits *lim, msg_kind root,
                          kiln_error *err) {
  kiln_limits dflt;
  if (!lim) {
    kiln_limits_from_options(NULL, &dflt);
    lim = &dflt;
  }
  scan s = {.p = bytes, .len = len, .lim = lim, .err = err, .lenient = root == M_VALUE};
  kiln_code rc = push(&s, root, len);
  while (!rc && !s.stop && s.depth > 0) {
    if (s.pos == s.st[s.depth - 1].end) pop(&s);
    else rc = field(&s);
  }
  free(s.st);
  return rc;
}

kiln_code kiln_wire_check(const uint8_t *bytes, size_t len, const kiln_limits *lim,
                          kiln_error *err) {
  return run_scan(bytes, len, lim, M_MODEL, err);
}

kiln_code kiln_wire_check_value(const uint8_t *bytes, size_t len, kiln_error *err) {
  return run_scan(bytes, len, NULL, M_VALUE, err);
}

void kiln_limits_from_options(const kiln_options *opts, kiln_limits *lim) {
  kiln_options o;
  kiln_options_init(&o);
  if (opts) memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
  lim->max_subgraph_depth = o.max_subgraph_depth > 0 ? o.max_subgraph_depth : KILN_DEFAULT_MAX_SUBGRAPH_DEPTH;
  lim->max_nodes = o.max_nodes > 0 ? o.max_nodes : KILN_DEFAULT_MAX_NODES;
  lim->max_string_bytes = o.max_string_bytes > 0 ? o.max_string_bytes : KILN_DEFAULT_MAX_STRING_BYTES;
  lim->max_attribute_bytes = o.max_attribute_bytes > 0 ? o.max_attribute_bytes : KILN_DEFAULT_MAX_ATTRIBUTE_BYTES;
  lim->max_memory_bytes = o.max_memory_bytes > 0 ? o.max_memory_bytes : 0;
}

int64_t kiln_limits_memory(const kiln_limits *lim) {
  if (lim && lim->max_memory_bytes > 0) return lim->max_memory_bytes;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : INT64_MAX;
}
