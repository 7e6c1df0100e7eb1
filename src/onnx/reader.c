#include "onnx/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "ir/edit.h"
#include "onnx/meta_read.h"
#include "onnx/proto.h"

static kiln_code convert_graph(const Onnx__GraphProto *gp, kiln_graph *g, const kiln_ext_ctx *ext,
                               kiln_error *err);

static char *dup_or_empty(const char *s) { return kiln_strdup(s ? s : ""); }

static kiln_code convert_attr(const Onnx__AttributeProto *ap, kiln_attr *a, kiln_graph *owner,
                              const kiln_ext_ctx *ext, kiln_error *err) {
  a->name = dup_or_empty(ap->name);
  if (!a->name) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (ap->ref_attr_name && *ap->ref_attr_name)
    return kiln_fail(err, KILN_ERR_UNSUPPORTED, "attribute '%s' refers to a function attribute", a->name);
  a->kind = (kiln_attr_kind)ap->type;
  a->f = ap->f;
  a->i = ap->i;
  if (ap->has_s || a->kind == KILN_ATTR_STRING) {
    a->s = malloc(ap->s.len + 1);
    if (!a->s) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if (ap->s.len) memcpy(a->s, ap->s.data, ap->s.len);
    a->s[ap->s.len] = 0;
    a->s_len = ap->s.len;
  }
  if (ap->t && !(a->t = kiln_tensor_from_proto(ap->t, ext, err))) return err ? err->code : KILN_ERR_MODEL;
  if (ap->sparse_tensor && !(a->t = kiln_sparse_from_proto(ap->sparse_tensor, err))) return KILN_ERR_MODEL;
  if (ap->g) {
    if (!(a->g = kiln_graph_new(owner))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    kiln_code rc = convert_graph(ap->g, a->g, ext, err);
    if (rc) return rc;
  }
  if (ap->tp) {
    kiln_code rc = kiln_type_from_proto(ap->tp, &a->tp, err);
    if (rc) return rc;
  }
  switch (a->kind) {
    case KILN_ATTR_FLOATS:
      a->n = ap->n_floats;
      a->floats = kiln_malloc(a->n * sizeof(float));
      if (!a->floats) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      if (a->n) memcpy(a->floats, ap->floats, a->n * sizeof(float));
      break;
    case KILN_ATTR_INTS:
      a->n = ap->n_ints;
      a->ints = kiln_malloc(a->n * sizeof(int64_t));
      if (!a->ints) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      if (a->n) memcpy(a->ints, ap->ints, a->n * sizeof(int64_t));
      break;
    case KILN_ATTR_STRINGS:
      a->strings = kiln_calloc(ap->n_strings, sizeof(char *));
      if (!a->strings) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      a->n = ap->n_strings;
      for (size_t i = 0; i < a->n; i++) {
        if (!(a->strings[i] = malloc(ap->strings[i].len + 1))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        if (ap->strings[i].len) memcpy(a->strings[i], ap->strings[i].data, ap->strings[i].len);
        a->strings[i][ap->strings[i].len] = 0;
      }
      break;
    case KILN_ATTR_TENSORS:
      a->tensors = kiln_calloc(ap->n_tensors, sizeof(kiln_tensor *));
      if (!a->tensors) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      a->n = ap->n_tensors;
      for (size_t i = 0; i < a->n; i++)
        if (!(a->tensors[i] = kiln_tensor_from_proto(ap->tensors[i], ext, err))) return KILN_ERR_MODEL;
      break;
    case KILN_ATTR_GRAPHS:
      a->graphs = kiln_calloc(ap->n_graphs, sizeof(kiln_graph *));
      if (!a->graphs) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      a->n = ap->n_graphs;
      for (size_t i = 0; i < a->n; i++) {
        if (!(a->graphs[i] = kiln_graph_new(owner))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        kiln_code rc = convert_graph(ap->graphs[i], a->graphs[i], ext, err);
        if (rc) return rc;
      }
      break;
    default:
      break;
  }
  return KILN_OK;
}

/* The value a Constant node holds, as a new tensor. */
static kiln_tensor *constant_value(const kiln_node *n, kiln_error *err) {
  if (n->n_attrs != 1) {
    kiln_fail(err, KILN_ERR_MODEL, "Constant node '%s' needs exactly one value attribute", n->name);
    return NULL;
  }
  const kiln_attr *a = &n->attrs[0];
  kiln_tensor *t = NULL;
  int64_t len = (int64_t)a->n;
  if (!strcmp(a->name, "value") || !strcmp(a->name, "sparse_value")) {
    if (a->t) t = kiln_tensor_clone(a->t, err);
  } else if (!strcmp(a->name, "value_float")) {
    if ((t = kiln_tensor_new(KILN_FLOAT, 0, NULL, err))) ((float *)t->data)[0] = a->f;
  } else if (!strcmp(a->name, "value_int")) {
    if ((t = kiln_tensor_new(KILN_INT64, 0, NULL, err))) ((int64_t *)t->data)[0] = a->i;
  } else if (!strcmp(a->name, "value_string")) {
    if ((t = kiln_tensor_new(KILN_STRING, 0, NULL, err))) kiln_tensor_set_string(t, 0, a->s ? a->s : "", err);
  } else if (!strcmp(a->name, "value_floats")) {
    if ((t = kiln_tensor_new(KILN_FLOAT, 1, &len, err)) && len) memcpy(t->data, a->floats, (size_t)len * 4);
  } else if (!strcmp(a->name, "value_ints")) {
    if ((t = kiln_tensor_new(KILN_INT64, 1, &len, err)) && len) memcpy(t->data, a->ints, (size_t)len * 8);
  } else if (!strcmp(a->name, "value_strings")) {
    if ((t = kiln_tensor_new(KILN_STRING, 1, &len, err)))
      for (int64_t i = 0; i < len; i++) kiln_tensor_set_string(t, i, a->strings[i], err);
  } else {
    kiln_fail(err, KILN_ERR_MODEL, "Constant node '%s' has unknown attribute '%s'", n->name, a->name);
  }
  if (!t && err && err->code == KILN_OK) kiln_fail(err, KILN_ERR_MODEL, "Constant node '%s' has no value", n->name);
  return t;
}

static kiln_code set_io(kiln_graph *g, Onnx__ValueInfoProto *const *vis, size_t n, int **ids,
                        size_t *count, bool is_input, kiln_error *err) {
  *ids = kiln_malloc(n * sizeof **ids);
  if (!*ids) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  *count = n;
  for (size_t i = 0; i < n; i++) {
    const char *name = vis[i]->name ? vis[i]->name : "";
    if (!*name) return kiln_fail(err, KILN_ERR_MODEL, "graph %s %zu has no name", is_input ? "input" : "output", i);
    int id = kiln_graph_value(g, name);
    if (id < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    (*ids)[i] = id;
    if (is_input) g->values[id].is_input = true;
    if (vis[i]->type) {
      kiln_code rc = kiln_type_from_proto(vis[i]->type, &g->values[id].type, err);
      if (rc) {
        kiln_error_prefix(err, "graph value '%s'", name);
        return rc;
      }
    }
  }
  return KILN_OK;
}

static kiln_code convert_node(const Onnx__NodeProto *np, kiln_graph *g, const kiln_ext_ctx *ext,
                              kiln_error *err) {
  int idx = kiln_graph_add_node(g);
  if (idx < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  kiln_node *n = &g->nodes[idx];
  n->name = dup_or_empty(np->name);
  n->op_type = dup_or_empty(np->op_type);
  n->domain = dup_or_empty(np->domain);
  if (!strcmp(n->domain, "ai.onnx")) n->domain[0] = 0;
  n->in = kiln_malloc(np->n_input * sizeof(int));
  n->out = kiln_malloc(np->n_output * sizeof(int));
  n->attrs = kiln_calloc(np->n_attribute, sizeof(kiln_attr));
  if (!n->name || !n->op_type || !n->domain || !n->in || !n->out || !n->attrs)
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  if (!*n->op_type) return kiln_fail(err, KILN_ERR_MODEL, "node %d ('%s') has no op_type", idx, n->name);
  n->n_in = np->n_input;
  n->n_out = np->n_output;
  n->n_attrs = np->n_attribute;
  for (size_t i = 0; i < np->n_attribute; i++) {
    kiln_code rc = convert_attr(np->attribute[i], &n->attrs[i], g, ext, err);
    if (rc) {
      kiln_error_prefix(err, "node '%s' (%s) attribute '%s'", n->name, n->op_type,
                        np->attribute[i]->name ? np->attribute[i]->name : "");
      return rc;
    }
  }
  for (size_t i = 0; i < np->n_input; i++) {
    const char *nm = np->input[i] ? np->input[i] : "";
    n->in[i] = *nm ? kiln_graph_value(g, nm) : -1;
    if (*nm && n->in[i] < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < np->n_output; i++) {
    const char *nm = np->output[i] ? np->output[i] : "";
    n->out[i] = *nm ? kiln_graph_value(g, nm) : -1;
    if (*nm && n->out[i] < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  /* Constant nodes become constant values right away: every later stage sees a plain initializer. */
  if (!*n->domain && !strcmp(n->op_type, "Constant") && n->n_out == 1 && n->out[0] >= 0) {
    kiln_tensor *t = constant_value(n, err);
    if (!t) {
      kiln_error_prefix(err, "node '%s' (Constant)", n->name);
      return err ? err->code : KILN_ERR_MODEL;
    }
    kiln_value_info *v = &g->values[n->out[0]];
    if (v->init) {
      kiln_tensor_free(t);
      return kiln_fail(err, KILN_ERR_MODEL, "value '%s' is produced twice", v->name);
    }
    v->init = t;
    kiln_node_clear(n);
    g->n_nodes--;
  }
  return KILN_OK;
}

static kiln_code convert_graph(const Onnx__GraphProto *gp, kiln_graph *g, const kiln_ext_ctx *ext,
                               kiln_error *err) {
  kiln_code rc;
  g->name = dup_or_empty(gp->name);
  if (!g->name) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < gp->n_initializer; i++) {
    Onnx__TensorProto *tp = gp->initializer[i];
    if (!tp->name || !*tp->name) return kiln_fail(err, KILN_ERR_MODEL, "initializer %zu has no name", i);
    int id = kiln_graph_value(g, tp->name);
    if (id < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if (g->values[id].init) return kiln_fail(err, KILN_ERR_MODEL, "initializer '%s' is defined twice", tp->name);
    if (!(g->values[id].init = kiln_tensor_take_proto(tp, ext, err))) return err ? err->code : KILN_ERR_MODEL;
  }
  for (size_t i = 0; i < gp->n_sparse_initializer; i++) {
    const Onnx__SparseTensorProto *sp = gp->sparse_initializer[i];
    const char *nm = sp->values && sp->values->name ? sp->values->name : "";
    if (!*nm) return kiln_fail(err, KILN_ERR_MODEL, "sparse initializer %zu has no name", i);
    int id = kiln_graph_value(g, nm);
    if (id < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if (!(g->values[id].init = kiln_sparse_from_proto(sp, err))) return KILN_ERR_MODEL;
  }
  if ((rc = set_io(g, gp->input, gp->n_input, &g->inputs, &g->n_inputs, true, err))) return rc;
  if ((rc = set_io(g, gp->output, gp->n_output, &g->outputs, &g->n_outputs, false, err))) return rc;
  for (size_t i = 0; i < gp->n_value_info; i++) {
    const Onnx__ValueInfoProto *vi = gp->value_info[i];
    if (!vi->name || !*vi->name || !vi->type) continue;
    int id = kiln_graph_value(g, vi->name);
    if (id < 0) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if ((rc = kiln_type_from_proto(vi->type, &g->values[id].type, err))) return rc;
  }
  for (size_t i = 0; i < gp->n_node; i++)
    if ((rc = convert_node(gp->node[i], g, ext, err))) return rc;
  return KILN_OK;
}

static kiln_code unpack_model(const void *bytes, size_t len, const kiln_limits *lim,
                              Onnx__ModelProto **mp, kiln_error *err) {
  if (len == 0) return kiln_fail(err, KILN_ERR_MODEL, "not an ONNX model: the file is empty");
  kiln_code rc = kiln_wire_check(bytes, len, lim, err);
  if (rc) return rc;
  *mp = onnx__model_proto__unpack(NULL, len, bytes);
  if (!*mp) return kiln_fail(err, KILN_ERR_MODEL, "not an ONNX model: protobuf decoding failed (truncated or corrupt file?)");
  return KILN_OK;
}

/* Convert and free the decoded message. Initializer bytes move from the message into kiln's
 * tensors rather than being copied, so a model's weights are in memory once, not twice. */
static kiln_code convert_model(Onnx__ModelProto *mp, const char *base_dir, kiln_ir_model **out,
                               kiln_error *err) {
  kiln_code rc = KILN_OK;
  kiln_ir_model *m = calloc(1, sizeof *m);
  if (!m) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  if (!mp->graph) {
    rc = kiln_fail(err, KILN_ERR_MODEL, "not an ONNX model: it has no graph");
    goto done;
  }
  m->ir_version = mp->ir_version;
  if (base_dir && !(m->base_dir = kiln_strdup(base_dir))) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  m->opsets = kiln_calloc(mp->n_opset_import + 1, sizeof *m->opsets);
  if (!m->opsets) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    m->opsets[m->n_opsets].domain = dup_or_empty(o->domain);
    if (!m->opsets[m->n_opsets].domain) {
      rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
      goto done;
    }
    if (!strcmp(m->opsets[m->n_opsets].domain, "ai.onnx")) m->opsets[m->n_opsets].domain[0] = 0;
    m->opsets[m->n_opsets++].version = o->version;
  }
  if (mp->n_opset_import == 0) {
    /* IR version 1/2 models predate opset_import: they speak opset 1. */
    m->opsets[0].domain = kiln_strdup("");
    m->opsets[0].version = 1;
    m->n_opsets = 1;
  }
  if (!(m->graph = kiln_graph_new(NULL))) {
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  kiln_ext_ctx ext = {base_dir, m};
  rc = convert_graph(mp->graph, m->graph, &ext, err);
  if (!rc) rc = kiln_meta_from_proto(mp, &m->meta, err);
done:
  onnx__model_proto__free_unpacked(mp, NULL);
  if (rc) kiln_ir_model_free(m);
  else *out = m;
  return rc;
}

kiln_code kiln_model_read_memory(const void *bytes, size_t len, const char *base_dir,
                                 const kiln_limits *lim, kiln_ir_model **out, kiln_error *err) {
  *out = NULL;
  Onnx__ModelProto *mp;
  kiln_code rc = unpack_model(bytes, len, lim, &mp, err);
  return rc ? rc : convert_model(mp, base_dir, out, err);
}

kiln_code kiln_model_read_file(const char *path, const kiln_limits *lim, kiln_ir_model **out,
                               kiln_error *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kiln_fail(err, KILN_ERR_IO, "cannot open model '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return kiln_fail(err, KILN_ERR_IO, "model '%s' is not a regular file", path);
  }
  size_t len = (size_t)st.st_size;
  void *bytes = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (len && bytes == MAP_FAILED) return kiln_fail(err, KILN_ERR_IO, "cannot map model '%s': %s", path, strerror(errno));
  char *dirbuf = kiln_strdup(path);
  if (!dirbuf) {
    if (len) munmap(bytes, len);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  /* The file is unmapped as soon as it is decoded, before conversion: peak memory is the
   * decoded message plus kiln's IR, and the IR takes the weights over from the message. */
  Onnx__ModelProto *mp = NULL;
  kiln_code rc = unpack_model(bytes, len, lim, &mp, err);
  if (len) munmap(bytes, len);
  if (!rc) rc = convert_model(mp, dirname(dirbuf), out, err);
  if (rc && err) kiln_error_prefix(err, "%s", path);
  free(dirbuf);
  return rc;
}
