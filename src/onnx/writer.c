/* ONNX model writer: builds an Onnx__ModelProto from the IR and packs it with protobuf-c.
 *
 * The messages are a temporary view of the IR: names, dims, attribute lists and tensor payloads
 * are not copied, the messages point straight into the model (which outlives the pack). Only the
 * message structs and the few arrays the IR lacks are allocated, and all of them are tracked in
 * a context and freed together after packing, so the builders need no per-field cleanup. */
#include "onnx/writer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "onnx/proto.h"

typedef struct wctx {
  void **ptrs;                /* every allocation, freed by ctx_free */
  size_t n_ptrs, cap_ptrs;
  void **tps;                 /* TensorProtos filled by kiln_tensor_to_proto: need a release */
  size_t n_tps, cap_tps;
  kiln_code rc;               /* first failure; kept here because the caller's err may be NULL */
  kiln_error *err;
} wctx;

static void *oom(wctx *c) {
  c->rc = kiln_fail(c->err, KILN_ERR_NOMEM, "out of memory writing the model");
  return NULL;
}

/* Append p to a growable pointer array; false on allocation failure. */
static bool push_ptr(void ***arr, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 64;
    void **a = realloc(*arr, ncap * sizeof *a);
    if (!a) return false;
    *arr = a;
    *cap = ncap;
  }
  (*arr)[(*n)++] = p;
  return true;
}

/* Zeroed, tracked memory for `count` items; never NULL for count 0 (protobuf-c accepts either). */
static void *walloc(wctx *c, size_t count, size_t size) {
  void *p = kiln_calloc(count, size);
  if (p && !push_ptr(&c->ptrs, &c->n_ptrs, &c->cap_ptrs, p)) {
    free(p);
    p = NULL;
  }
  return p ? p : oom(c);
}

static void ctx_free(wctx *c) {
  /* Release before freeing: the TensorProtos themselves live in ptrs. */
  for (size_t i = 0; i < c->n_tps; i++) kiln_tensor_proto_release((Onnx__TensorProto *)c->tps[i]);
  for (size_t i = 0; i < c->n_ptrs; i++) free(c->ptrs[i]);
  free(c->tps);
  free(c->ptrs);
}

/* ---- types ---------------------------------------------------------------------------- */

static Onnx__TensorShapeProto *shape_proto(wctx *c, const kiln_type *t) {
  size_t rank = (size_t)t->rank;
  Onnx__TensorShapeProto *s = walloc(c, 1, sizeof *s);
  Onnx__TensorShapeProto__Dimension *d = walloc(c, rank, sizeof *d), **dp = walloc(c, rank, sizeof *dp);
  if (!s || !d || !dp) return NULL;
  onnx__tensor_shape_proto__init(s);
  for (size_t i = 0; i < rank; i++) {
    onnx__tensor_shape_proto__dimension__init(&d[i]);
    /* A symbolic name wins over a value; an unknown dim is a Dimension with neither set. */
    if (t->sym[i]) {
      d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d[i].dim_param = t->sym[i];
    } else if (t->dims[i] >= 0) {
      d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d[i].dim_value = t->dims[i];
    }
    dp[i] = &d[i];
  }
  s->n_dim = rank;
  s->dim = dp;
  return s;
}

/* A TypeProto of kind `kind`. `shape` (may be NULL) supplies a tensor's shape; rank -1 writes
 * no shape at all, which is how ONNX says "rank unknown" (an empty shape is a scalar). For
 * sequences and optionals the IR keeps only the items' kind and element type, so anything
 * nested deeper is written as tensors of that element type. */
static Onnx__TypeProto *type_proto(wctx *c, kiln_tkind kind, kiln_tkind inner, kiln_dtype dtype,
                                   const kiln_type *shape) {
  Onnx__TypeProto *tp = walloc(c, 1, sizeof *tp);
  if (!tp) return NULL;
  onnx__type_proto__init(tp);
  switch (kind) {
    case KILN_T_TENSOR: {
      Onnx__TypeProto__Tensor *tt = walloc(c, 1, sizeof *tt);
      if (!tt) return NULL;
      onnx__type_proto__tensor__init(tt);
      tt->has_elem_type = dtype != KILN_UNDEFINED;
      tt->elem_type = (int32_t)dtype;
      if (shape && shape->rank >= 0 && !(tt->shape = shape_proto(c, shape))) return NULL;
      tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
      tp->tensor_type = tt;
      break;
    }
    case KILN_T_SEQUENCE:
    case KILN_T_OPTIONAL: {
      Onnx__TypeProto *elem = NULL;
      kiln_tkind below = dtype != KILN_UNDEFINED ? KILN_T_TENSOR : KILN_T_UNKNOWN;
      if (inner != KILN_T_UNKNOWN && !(elem = type_proto(c, inner, below, dtype, NULL))) return NULL;
      if (kind == KILN_T_SEQUENCE) {
        Onnx__TypeProto__Sequence *sq = walloc(c, 1, sizeof *sq);
        if (!sq) return NULL;
        onnx__type_proto__sequence__init(sq);
        sq->elem_type = elem;
        tp->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
        tp->sequence_type = sq;
      } else {
        Onnx__TypeProto__Optional *op = walloc(c, 1, sizeof *op);
        if (!op) return NULL;
        onnx__type_proto__optional__init(op);
        op->elem_type = elem;
        tp->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
        tp->optional_type = op;
      }
      break;
    }
    case KILN_T_MAP: {
      /* The IR records only that it is a map; key and value types were not kept. */
      Onnx__TypeProto__Map *mt = walloc(c, 1, sizeof *mt);
      if (!mt) return NULL;
      onnx__type_proto__map__init(mt);
      tp->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
      tp->map_type = mt;
      break;
    }
    default:
      break; /* unknown: an empty TypeProto */
  }
  return tp;
}

static Onnx__TypeProto *full_type(wctx *c, const kiln_type *t) {
  return type_proto(c, t->kind, t->inner, t->dtype, t);
}

/* ---- tensors -------------------------------------------------------------------------- */

/* A TensorProto over t's own memory (raw_data, or string_data for strings): even borrowed
 * (mmap'd) weights are packed straight from where they lie. */
static Onnx__TensorProto *tensor_proto(wctx *c, const kiln_tensor *t, const char *name) {
  if (t->kind != KILN_KIND_TENSOR) {
    c->rc = kiln_fail(c->err, KILN_ERR_UNSUPPORTED,
                      "tensor '%s' is a sequence or an empty optional: ONNX stores only tensors here",
                      name && *name ? name : "<attribute>");
    return NULL;
  }
  Onnx__TensorProto *p = walloc(c, 1, sizeof *p);
  if (!p) return NULL;
  onnx__tensor_proto__init(p);
  if (!push_ptr(&c->tps, &c->n_tps, &c->cap_tps, p)) return oom(c);
  if ((c->rc = kiln_tensor_to_proto(t, name, p, c->err))) return NULL;
  return p;
}

/* The reader densifies sparse tensors, so they go back as COO listing every element by its
 * linear index: any reader rebuilds the same dense tensor from that. */
static Onnx__SparseTensorProto *sparse_proto(wctx *c, const kiln_tensor *t) {
  Onnx__SparseTensorProto *sp = walloc(c, 1, sizeof *sp);
  Onnx__TensorProto *ip = walloc(c, 1, sizeof *ip);
  int64_t *nnz = walloc(c, 1, sizeof *nnz), *idx = walloc(c, (size_t)t->numel, sizeof *idx);
  Onnx__TensorProto *vp = sp && ip && nnz && idx ? tensor_proto(c, t, NULL) : NULL;
  if (!vp) return NULL;
  *nnz = t->numel;
  for (int64_t i = 0; i < t->numel; i++) idx[i] = i;
  vp->n_dims = 1; /* values are the flat list, the dense shape goes on the sparse message */
  vp->dims = nnz;
  onnx__tensor_proto__init(ip);
  ip->n_dims = 1;
  ip->dims = nnz;
  ip->has_data_type = 1;
  ip->data_type = KILN_INT64;
  ip->n_int64_data = (size_t)t->numel;
  ip->int64_data = idx;
  onnx__sparse_tensor_proto__init(sp);
  sp->values = vp;
  sp->indices = ip;
  sp->n_dims = (size_t)t->rank;
  sp->dims = (int64_t *)t->dims;
  return sp;
}

/* ---- attributes, nodes, graphs ------------------------------------------------------- */

static Onnx__GraphProto *graph_proto(wctx *c, const kiln_graph *g);

/* Fill an array of n message pointers by calling `make` on each source item; the list kinds of
 * attributes differ only in element type, so this keeps attr_proto flat. */
#define BUILD_LIST(dst, count, make)                   \
  do {                                                 \
    if (!((dst) = walloc(c, (count), sizeof *(dst))))  \
      return NULL;                                     \
    for (size_t k_ = 0; k_ < (count); k_++)            \
      if (!((dst)[k_] = (make))) return NULL;          \
  } while (0)

static Onnx__AttributeProto *attr_proto(wctx *c, const kiln_attr *a) {
  Onnx__AttributeProto *p = walloc(c, 1, sizeof *p);
  if (!p) return NULL;
  onnx__attribute_proto__init(p);
  p->name = a->name;
  p->has_type = a->kind != KILN_ATTR_UNDEFINED;
  p->type = (Onnx__AttributeProto__AttributeType)a->kind;
  switch (a->kind) {
    case KILN_ATTR_FLOAT:
      p->has_f = 1;
      p->f = a->f;
      break;
    case KILN_ATTR_INT:
      p->has_i = 1;
      p->i = a->i;
      break;
    case KILN_ATTR_STRING: /* bytes: s_len, not strlen, so embedded NULs survive */
      p->has_s = 1;
      p->s.data = (uint8_t *)a->s;
      p->s.len = a->s ? a->s_len : 0;
      break;
    case KILN_ATTR_TENSOR:
      if (a->t && !(p->t = tensor_proto(c, a->t, NULL))) return NULL;
      break;
    case KILN_ATTR_SPARSE_TENSOR:
      if (a->t && !(p->sparse_tensor = sparse_proto(c, a->t))) return NULL;
      break;
    case KILN_ATTR_GRAPH:
      if (a->g && !(p->g = graph_proto(c, a->g))) return NULL;
      break;
    case KILN_ATTR_TYPE_PROTO:
      if (!(p->tp = full_type(c, &a->tp))) return NULL;
      break;
    case KILN_ATTR_FLOATS:
      p->n_floats = a->n;
      p->floats = a->floats;
      break;
    case KILN_ATTR_INTS:
      p->n_ints = a->n;
      p->ints = a->ints;
      break;
    case KILN_ATTR_STRINGS:
      if (!(p->strings = walloc(c, a->n, sizeof *p->strings))) return NULL;
      for (size_t k = 0; k < a->n; k++) {
        /* the IR keeps list strings NUL-terminated only */
        p->strings[k].data = (uint8_t *)a->strings[k];
        p->strings[k].len = strlen(a->strings[k]);
      }
      p->n_strings = a->n;
      break;
    case KILN_ATTR_TENSORS:
      BUILD_LIST(p->tensors, a->n, tensor_proto(c, a->tensors[k_], NULL));
      p->n_tensors = a->n;
      break;
    case KILN_ATTR_SPARSE_TENSORS:
      BUILD_LIST(p->sparse_tensors, a->n, sparse_proto(c, a->tensors[k_]));
      p->n_sparse_tensors = a->n;
      break;
    case KILN_ATTR_GRAPHS:
      BUILD_LIST(p->graphs, a->n, graph_proto(c, a->graphs[k_]));
      p->n_graphs = a->n;
      break;
    case KILN_ATTR_TYPE_PROTOS:
      break; /* the IR has no list of types (the reader keeps none) */
    default:
      /* Untyped attributes of IR v1 models: keep the scalar values the reader kept. */
      p->has_f = a->f != 0;
      p->f = a->f;
      p->has_i = a->i != 0;
      p->i = a->i;
      p->has_s = a->s != NULL;
      p->s.data = (uint8_t *)a->s;
      p->s.len = a->s ? a->s_len : 0;
      break;
  }
  return p;
}

static Onnx__NodeProto *node_proto(wctx *c, const kiln_graph *g, const kiln_node *n,
                                   Onnx__NodeProto *p) {
  onnx__node_proto__init(p);
  p->name = n->name;
  p->op_type = n->op_type;
  p->domain = n->domain; /* "" is ai.onnx, as the opset imports say */
  p->input = walloc(c, n->n_in, sizeof *p->input);
  p->output = walloc(c, n->n_out, sizeof *p->output);
  if (!p->input || !p->output) return NULL;
  /* An omitted optional input or output is the empty name. */
  for (size_t k = 0; k < n->n_in; k++) p->input[k] = n->in[k] >= 0 ? g->values[n->in[k]].name : "";
  for (size_t k = 0; k < n->n_out; k++) p->output[k] = n->out[k] >= 0 ? g->values[n->out[k]].name : "";
  p->n_input = n->n_in;
  p->n_output = n->n_out;
  if (!(p->attribute = walloc(c, n->n_attrs, sizeof *p->attribute))) return NULL;
  for (size_t k = 0; k < n->n_attrs; k++)
    if (!(p->attribute[k] = attr_proto(c, &n->attrs[k]))) { /* say where, subgraphs nest */
      kiln_error_prefix(c->err, "node '%s' (%s) attribute '%s'", n->name ? n->name : "",
                        n->op_type ? n->op_type : "", n->attrs[k].name);
      return NULL;
    }
  p->n_attribute = n->n_attrs;
  return p;
}

static Onnx__ValueInfoProto *value_info(wctx *c, const kiln_value_info *v, Onnx__ValueInfoProto *p) {
  onnx__value_info_proto__init(p);
  p->name = v->name;
  if (v->type.kind != KILN_T_UNKNOWN && !(p->type = full_type(c, &v->type))) return NULL;
  return p;
}

/* Which values the graph proper refers to (the IR keeps values of removed nodes around). */
enum { ROLE_NODE = 1, ROLE_IO = 2 };

/* n ValueInfoProtos for the value ids in `ids`, marking them as graph interface in `role`. */
static Onnx__ValueInfoProto **io_list(wctx *c, const kiln_graph *g, const int *ids, size_t n,
                                      uint8_t *role) {
  Onnx__ValueInfoProto *vi = walloc(c, n, sizeof *vi), **vp = walloc(c, n, sizeof *vp);
  if (!vi || !vp) return NULL;
  for (size_t k = 0; k < n; k++) {
    role[ids[k]] |= ROLE_IO;
    if (!(vp[k] = value_info(c, &g->values[ids[k]], &vi[k]))) return NULL;
  }
  return vp;
}

/* value_info carries the known types of the values other than the graph's inputs and outputs
 * that a node or an initializer defines. Outer references belong to the enclosing graph, and
 * values no node mentions any more are left over from removed nodes. */
static bool wants_value_info(const kiln_value_info *vi, uint8_t role) {
  return vi->type.kind != KILN_T_UNKNOWN && !vi->is_outer && !(role & ROLE_IO) &&
         ((role & ROLE_NODE) || vi->init);
}

static Onnx__GraphProto *graph_proto(wctx *c, const kiln_graph *g) {
  Onnx__GraphProto *p = walloc(c, 1, sizeof *p);
  uint8_t *role = walloc(c, g->n_values, 1);
  Onnx__NodeProto *nodes = walloc(c, g->n_nodes, sizeof *nodes);
  Onnx__NodeProto **np = walloc(c, g->n_nodes, sizeof *np);
  if (!p || !role || !nodes || !np) return NULL;
  onnx__graph_proto__init(p);
  p->name = g->name;

  /* Nodes in their current order: after kiln_graph_toposort that is a topological one, which
   * ONNX requires. */
  for (size_t i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!(np[i] = node_proto(c, g, n, &nodes[i]))) return NULL;
    for (size_t k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) role[n->in[k]] |= ROLE_NODE;
    for (size_t k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) role[n->out[k]] |= ROLE_NODE;
  }
  p->node = np;
  p->n_node = g->n_nodes;

  if (!(p->input = io_list(c, g, g->inputs, g->n_inputs, role))) return NULL;
  p->n_input = g->n_inputs;
  if (!(p->output = io_list(c, g, g->outputs, g->n_outputs, role))) return NULL;
  p->n_output = g->n_outputs;

  /* Every value holding a tensor is an initializer; folded Constant nodes come back this way.
   * To drop a dead weight, a pass frees its init. */
  size_t n_init = 0, n_vi = 0;
  for (size_t v = 0; v < g->n_values; v++) n_init += g->values[v].init != NULL;
  if (!(p->initializer = walloc(c, n_init, sizeof *p->initializer))) return NULL;
  for (size_t v = 0; v < g->n_values; v++) {
    const kiln_value_info *vi = &g->values[v];
    if (vi->init && !(p->initializer[p->n_initializer++] = tensor_proto(c, vi->init, vi->name))) return NULL;
  }

  for (size_t v = 0; v < g->n_values; v++) n_vi += wants_value_info(&g->values[v], role[v]);
  Onnx__ValueInfoProto *vis = walloc(c, n_vi, sizeof *vis);
  if (!vis || !(p->value_info = walloc(c, n_vi, sizeof *p->value_info))) return NULL;
  for (size_t v = 0; v < g->n_values; v++) {
    if (!wants_value_info(&g->values[v], role[v])) continue;
    Onnx__ValueInfoProto *vp = value_info(c, &g->values[v], &vis[p->n_value_info]);
    if (!vp) return NULL;
    p->value_info[p->n_value_info++] = vp;
  }
  return p;
}

/* ---- model ---------------------------------------------------------------------------- */

static kiln_code model_proto(wctx *c, const kiln_ir_model *m, Onnx__ModelProto *mp) {
  onnx__model_proto__init(mp);
  if (!m->graph) return kiln_fail(c->err, KILN_ERR_INVALID_ARG, "the model has no graph to write");
  mp->has_ir_version = 1;
  mp->ir_version = m->ir_version;
  mp->producer_name = "kiln";
  mp->producer_version = KILN_VERSION_STRING;
  Onnx__OperatorSetIdProto *os = walloc(c, m->n_opsets, sizeof *os);
  if (!os || !(mp->opset_import = walloc(c, m->n_opsets, sizeof *mp->opset_import))) return c->rc;
  for (size_t i = 0; i < m->n_opsets; i++) {
    onnx__operator_set_id_proto__init(&os[i]);
    os[i].domain = m->opsets[i].domain; /* "" stays "": the default ai.onnx domain */
    os[i].has_version = 1;
    os[i].version = m->opsets[i].version;
    mp->opset_import[i] = &os[i];
  }
  mp->n_opset_import = m->n_opsets;
  if (!(mp->graph = graph_proto(c, m->graph))) return c->rc ? c->rc : KILN_ERR_NOMEM;
  return KILN_OK;
}

kiln_code kiln_model_write_memory(const kiln_ir_model *m, uint8_t **bytes, size_t *len,
                                  kiln_error *err) {
  if (!m || !bytes || !len) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model, bytes and len are required");
  *bytes = NULL;
  *len = 0;
  wctx c = {.err = err};
  Onnx__ModelProto mp;
  kiln_code rc = model_proto(&c, m, &mp);
  if (!rc) {
    size_t n = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = kiln_malloc(n);
    if (!buf) {
      rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory: the model needs %zu bytes", n);
    } else {
      *len = onnx__model_proto__pack(&mp, buf);
      *bytes = buf;
    }
  }
  ctx_free(&c);
  return rc;
}

/* A protobuf-c output buffer that streams to a file, so a large model is never held twice. */
typedef struct file_sink {
  ProtobufCBuffer base;
  FILE *f;
  bool failed;
} file_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  file_sink *s = (file_sink *)b;
  if (!s->failed && len && fwrite(data, 1, len, s->f) != len) s->failed = true;
}

kiln_code kiln_model_write_file(const kiln_ir_model *m, const char *path, kiln_error *err) {
  if (!m || !path) return kiln_fail(err, KILN_ERR_INVALID_ARG, "model and path are required");
  wctx c = {.err = err};
  Onnx__ModelProto mp;
  kiln_code rc = model_proto(&c, m, &mp);
  if (rc) {
    ctx_free(&c);
    return rc;
  }
  /* Built before opening, so a model that cannot be written leaves no file behind. */
  file_sink sink = {.base = {.append = sink_append}, .f = fopen(path, "wb")};
  if (!sink.f) {
    rc = kiln_fail(err, KILN_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
  } else {
    onnx__model_proto__pack_to_buffer(&mp, &sink.base);
    int e = sink.failed ? errno : 0;
    if (fclose(sink.f) != 0 && !e) e = errno;
    if (sink.failed || e) {
      rc = kiln_fail(err, KILN_ERR_IO, "cannot write '%s': %s", path, strerror(e ? e : EIO));
      remove(path); /* no truncated model left behind */
    }
  }
  ctx_free(&c);
  return rc;
}
