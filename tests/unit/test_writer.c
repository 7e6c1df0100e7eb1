/* The ONNX writer: models read from the ONNX test data, written back and read again, must give
 * the same IR; hand-made additions cover every attribute kind, the type shapes and the
 * writer's choices (stale values dropped, borrowed weights left alone). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "onnx/reader.h"
#include "onnx/writer.h"
#include "testutil.h"

#define DATA "/usr/share/libonnx-testdata/data"

static const char *nz(const char *s) { return s ? s : ""; }
static const char *vname(const kiln_graph *g, int id) { return id < 0 ? "" : g->values[id].name; }

/* ---- structural comparison of two IRs ------------------------------------------------ */

static bool type_eq(const kiln_type *a, const kiln_type *b) {
  if (a->kind != b->kind || a->inner != b->inner || a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++) {
    if (a->dims[i] != b->dims[i] || !a->sym[i] != !b->sym[i]) return false;
    if (a->sym[i] && strcmp(a->sym[i], b->sym[i])) return false;
  }
  return true;
}

static bool tensor_eq(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b) return a == b;
  if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank || a->numel != b->numel) return false;
  if (memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims)) return false;
  if (a->dtype != KILN_STRING) return a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes);
  for (int64_t i = 0; i < a->numel; i++)
    if (strcmp(((char **)a->data)[i], ((char **)b->data)[i])) return false;
  return true;
}

static void cmp_graph(const kiln_graph *a, const kiln_graph *b, const char *where);

static void cmp_attr(const kiln_attr *a, const kiln_attr *b, const char *where) {
  CHECK_MSG(!strcmp(a->name, b->name) && a->kind == b->kind, "%s: attribute %s kind %d vs %s kind %d",
            where, a->name, a->kind, b->name, b->kind);
  CHECK_MSG(!memcmp(&a->f, &b->f, sizeof a->f) && a->i == b->i, "%s: f/i", where);
  CHECK_MSG(!a->s == !b->s && a->s_len == b->s_len && (!a->s || !memcmp(a->s, b->s, a->s_len)), "%s: s", where);
  CHECK_MSG(tensor_eq(a->t, b->t), "%s: t", where);
  CHECK_MSG(a->n == b->n, "%s: n %zu vs %zu", where, a->n, b->n);
  if (a->n != b->n) return;
  CHECK_MSG(!a->floats == !b->floats && (!a->n || !a->floats || !memcmp(a->floats, b->floats, a->n * sizeof(float))),
            "%s: floats", where);
  CHECK_MSG(!a->ints == !b->ints && (!a->n || !a->ints || !memcmp(a->ints, b->ints, a->n * sizeof(int64_t))),
            "%s: ints", where);
  CHECK_MSG(!a->strings == !b->strings && !a->tensors == !b->tensors && !a->graphs == !b->graphs && !a->g == !b->g,
            "%s: list presence", where);
  char sub[512];
  for (size_t k = 0; k < a->n; k++) {
    if (a->strings && b->strings) CHECK_MSG(!strcmp(a->strings[k], b->strings[k]), "%s: strings[%zu]", where, k);
    if (a->tensors && b->tensors) CHECK_MSG(tensor_eq(a->tensors[k], b->tensors[k]), "%s: tensors[%zu]", where, k);
    if (a->graphs && b->graphs) {
      snprintf(sub, sizeof sub, "%s/graphs[%zu]", where, k);
      cmp_graph(a->graphs[k], b->graphs[k], sub);
    }
  }
  if (a->g && b->g) {
    snprintf(sub, sizeof sub, "%s/g", where);
    cmp_graph(a->g, b->g, sub);
  }
  if (a->kind == KILN_ATTR_TYPE_PROTO) CHECK_MSG(type_eq(&a->tp, &b->tp), "%s: tp", where);
}

/* Values the graph proper mentions: the writer drops the rest. */
static bool is_used(const kiln_graph *g, int id) {
  if (g->values[id].init) return true;
  for (size_t k = 0; k < g->n_inputs; k++) if (g->inputs[k] == id) return true;
  for (size_t k = 0; k < g->n_outputs; k++) if (g->outputs[k] == id) return true;
  for (size_t i = 0; i < g->n_nodes; i++) {
    for (size_t k = 0; k < g->nodes[i].n_in; k++) if (g->nodes[i].in[k] == id) return true;
    for (size_t k = 0; k < g->nodes[i].n_out; k++) if (g->nodes[i].out[k] == id) return true;
  }
  return false;
}

static void cmp_io(const kiln_graph *a, const kiln_graph *b, const int *ia, const int *ib, size_t n,
                   const char *where) {
  for (size_t k = 0; k < n; k++) {
    CHECK_MSG(!strcmp(vname(a, ia[k]), vname(b, ib[k])), "%s: %s vs %s", where, vname(a, ia[k]), vname(b, ib[k]));
    CHECK_MSG(type_eq(&a->values[ia[k]].type, &b->values[ib[k]].type), "%s: type of '%s'", where, vname(a, ia[k]));
  }
}

static void cmp_graph(const kiln_graph *a, const kiln_graph *b, const char *where) {
  char sub[512];
  CHECK_MSG(!strcmp(nz(a->name), nz(b->name)), "%s: graph name '%s' vs '%s'", where, nz(a->name), nz(b->name));
  CHECK_MSG(a->n_nodes == b->n_nodes, "%s: %zu vs %zu nodes", where, a->n_nodes, b->n_nodes);
  for (size_t i = 0; i < a->n_nodes && i < b->n_nodes; i++) {
    const kiln_node *x = &a->nodes[i], *y = &b->nodes[i];
    snprintf(sub, sizeof sub, "%s/node %zu (%s)", where, i, x->op_type);
    CHECK_MSG(!strcmp(x->op_type, y->op_type) && !strcmp(x->domain, y->domain) && !strcmp(nz(x->name), nz(y->name)),
              "%s: op/domain/name", sub);
    CHECK_MSG(x->n_in == y->n_in && x->n_out == y->n_out && x->n_attrs == y->n_attrs, "%s: arity", sub);
    for (size_t k = 0; k < x->n_in && k < y->n_in; k++)
      CHECK_MSG(!strcmp(vname(a, x->in[k]), vname(b, y->in[k])), "%s: input %zu", sub, k);
    for (size_t k = 0; k < x->n_out && k < y->n_out; k++)
      CHECK_MSG(!strcmp(vname(a, x->out[k]), vname(b, y->out[k])), "%s: output %zu", sub, k);
    for (size_t k = 0; k < x->n_attrs && k < y->n_attrs; k++) cmp_attr(&x->attrs[k], &y->attrs[k], sub);
  }
  CHECK_MSG(a->n_inputs == b->n_inputs && a->n_outputs == b->n_outputs, "%s: interface size", where);
  if (a->n_inputs == b->n_inputs) cmp_io(a, b, a->inputs, b->inputs, a->n_inputs, where);
  if (a->n_outputs == b->n_outputs) cmp_io(a, b, a->outputs, b->outputs, a->n_outputs, where);
  size_t na = 0, nb = 0;
  for (size_t v = 0; v < a->n_values; v++) {
    const kiln_value_info *x = &a->values[v];
    na += x->init != NULL;
    if (!is_used(a, (int)v)) continue;
    int id = kiln_graph_find(b, x->name);
    CHECK_MSG(id >= 0 || (!x->init && x->type.kind == KILN_T_UNKNOWN), "%s: value '%s' lost", where, x->name);
    if (id < 0) continue;
    CHECK_MSG(tensor_eq(x->init, b->values[id].init), "%s: initializer '%s'", where, x->name);
    CHECK_MSG(type_eq(&x->type, &b->values[id].type), "%s: type of '%s'", where, x->name);
  }
  for (size_t v = 0; v < b->n_values; v++) { /* and nothing typed appears from nowhere */
    nb += b->values[v].init != NULL;
    int id = kiln_graph_find(a, b->values[v].name);
    if (b->values[v].type.kind != KILN_T_UNKNOWN)
      CHECK_MSG(id >= 0 && type_eq(&a->values[id].type, &b->values[v].type), "%s: new type on '%s'", where,
                b->values[v].name);
  }
  CHECK_MSG(na == nb, "%s: %zu vs %zu initializers", where, na, nb);
}

static void cmp_model(const kiln_ir_model *a, const kiln_ir_model *b, const char *where) {
  CHECK_MSG(a->ir_version == b->ir_version, "%s: ir_version", where);
  CHECK_MSG(a->n_opsets == b->n_opsets, "%s: opset count", where);
  for (size_t i = 0; i < a->n_opsets && i < b->n_opsets; i++)
    CHECK_MSG(!strcmp(a->opsets[i].domain, b->opsets[i].domain) && a->opsets[i].version == b->opsets[i].version,
              "%s: opset %zu", where, i);
  cmp_graph(a->graph, b->graph, where);
}

/* ---- helpers ------------------------------------------------------------------------- */

static kiln_ir_model *load(const char *rel) {
  char path[512];
  snprintf(path, sizeof path, DATA "/%s/model.onnx", rel);
  kiln_ir_model *m = NULL;
  kiln_error err = {0};
  kiln_code rc = kiln_model_read_file(path, NULL, &m, &err);
  CHECK_MSG(rc == KILN_OK, "read %s: %s", rel, err.message);
  return m;
}

/* Write to memory, read back, compare; returns the re-read model (or NULL). */
static kiln_ir_model *roundtrip(const kiln_ir_model *a, const char *where) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  kiln_error err = {0};
  kiln_code rc = kiln_model_write_memory(a, &bytes, &len, &err);
  CHECK_MSG(rc == KILN_OK && bytes && len > 0, "%s: write: %s", where, err.message);
  kiln_ir_model *b = NULL;
  if (!rc) {
    rc = kiln_model_read_memory(bytes, len, NULL, NULL, &b, &err);
    CHECK_MSG(rc == KILN_OK, "%s: read back: %s", where, err.message);
  }
  if (b) cmp_model(a, b, where);
  free(bytes);
  return b;
}

/* Session creation on two files must agree: same code, same message after the path. */
static void cmp_sessions(const char *pa, const char *pb, const char *where) {
  kiln_session *sa = NULL, *sb = NULL;
  kiln_error ea = {0}, eb = {0};
  kiln_code ra = kiln_session_create(pa, NULL, &sa, &ea), rb = kiln_session_create(pb, NULL, &sb, &eb);
  CHECK_MSG(ra == rb, "%s: session %s vs %s (%s | %s)", where, kiln_code_name(ra), kiln_code_name(rb), ea.message,
            eb.message);
  if (ra && rb) {
    const char *ma = strncmp(ea.message, pa, strlen(pa)) ? ea.message : ea.message + strlen(pa);
    const char *mb = strncmp(eb.message, pb, strlen(pb)) ? eb.message : eb.message + strlen(pb);
    CHECK_MSG(!strcmp(ma, mb), "%s: '%s' vs '%s'", where, ea.message, eb.message);
  }
  if (sa && sb) {
    CHECK(kiln_session_input_count(sa) == kiln_session_input_count(sb));
    CHECK(kiln_session_output_count(sa) == kiln_session_output_count(sb));
    for (size_t i = 0; i < kiln_session_input_count(sa) + kiln_session_output_count(sa); i++) {
      size_t ni = kiln_session_input_count(sa), k = i < ni ? i : i - ni;
      kiln_io_info x, y;
      kiln_code rx = i < ni ? kiln_session_input_info(sa, k, &x, NULL) : kiln_session_output_info(sa, k, &x, NULL);
      kiln_code ry = i < ni ? kiln_session_input_info(sb, k, &y, NULL) : kiln_session_output_info(sb, k, &y, NULL);
      CHECK(!rx && !ry && !strcmp(x.name, y.name) && x.kind == y.kind && x.dtype == y.dtype && x.rank == y.rank);
      for (int d = 0; !rx && !ry && d < x.rank && d < y.rank; d++)
        CHECK(x.dims[d] == y.dims[d] && !strcmp(nz(x.dim_names[d]), nz(y.dim_names[d])));
    }
    kiln_model_stats x, y;
    CHECK(kiln_session_stats(sa, &x) == KILN_OK && kiln_session_stats(sb, &y) == KILN_OK);
    CHECK(x.n_nodes == y.n_nodes && x.n_initializers == y.n_initializers && x.param_bytes == y.param_bytes);
  }
  kiln_session_free(sa);
  kiln_session_free(sb);
}

static void test_testdata(const char *rel) {
  kiln_ir_model *a = load(rel);
  if (!a) return;
  kiln_ir_model *b = roundtrip(a, rel);

  /* Deterministic, and the file holds exactly what memory gets. */
  uint8_t *m1 = NULL, *m2 = NULL;
  size_t l1 = 0, l2 = 0;
  CHECK(kiln_model_write_memory(a, &m1, &l1, NULL) == KILN_OK);
  CHECK(kiln_model_write_memory(a, &m2, &l2, NULL) == KILN_OK);
  CHECK_MSG(l1 == l2 && m1 && m2 && !memcmp(m1, m2, l1), "%s: output not deterministic", rel);
  const char *tmp = kt_write_temp("writer.onnx", "", 0);
  kiln_error err = {0};
  CHECK_MSG(kiln_model_write_file(a, tmp, &err) == KILN_OK, "%s: write file: %s", rel, err.message);
  FILE *f = fopen(tmp, "rb");
  uint8_t *fb = malloc(l1 + 1);
  size_t fl = f && fb ? fread(fb, 1, l1 + 1, f) : 0;
  if (f) fclose(f);
  CHECK_MSG(fl == l1 && !memcmp(fb, m1, l1), "%s: file differs from memory (%zu vs %zu bytes)", rel, fl, l1);
  free(fb);
  free(m1);
  free(m2);

  kiln_ir_model *c = NULL;
  CHECK_MSG(kiln_model_read_file(tmp, NULL, &c, &err) == KILN_OK, "%s: read file: %s", rel, err.message);
  if (c) cmp_model(a, c, rel);
  char orig[512];
  snprintf(orig, sizeof orig, DATA "/%s/model.onnx", rel);
  cmp_sessions(orig, tmp, rel);
  unlink(tmp);
  kiln_ir_model_free(a);
  kiln_ir_model_free(b);
  kiln_ir_model_free(c);
}

/* ---- hand-made IR: every attribute kind and type shape ------------------------------- */

static kiln_attr *add_attr(kiln_node *n, const char *name, kiln_attr_kind kind) {
  kiln_attr *a = realloc(n->attrs, (n->n_attrs + 1) * sizeof *a);
  if (!a) abort();
  n->attrs = a;
  a = &n->attrs[n->n_attrs++];
  memset(a, 0, sizeof *a);
  a->name = strdup(name);
  a->kind = kind;
  return a;
}

static kiln_tensor *tensor_i32(int rank, const int64_t *dims) {
  kiln_tensor *t = kiln_tensor_new(KILN_INT32, rank, dims, NULL);
  for (int64_t i = 0; t && i < t->numel; i++) ((int32_t *)t->data)[i] = (int32_t)(i % 3 ? 0 : i + 1);
  return t;
}

static kiln_tensor *tensor_str(const char *s0, const char *s1) {
  int64_t two = 2;
  kiln_tensor *t = kiln_tensor_new(KILN_STRING, 1, &two, NULL);
  kiln_tensor_set_string(t, 0, s0, NULL);
  kiln_tensor_set_string(t, 1, s1, NULL);
  return t;
}

/* The main graph of another model, detached to serve as a subgraph. */
static kiln_graph *borrow_graph(const char *rel, kiln_graph *parent) {
  kiln_ir_model *m = load(rel);
  if (!m) abort();
  kiln_graph *g = m->graph;
  m->graph = NULL;
  kiln_ir_model_free(m);
  g->parent = parent;
  return g;
}

static void set_tensor_type(kiln_type *t, kiln_dtype dt, int rank, const int64_t *dims, const char *const *sym) {
  kiln_type_clear(t);
  t->kind = KILN_T_TENSOR;
  t->dtype = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) {
    t->dims[i] = dims[i];
    t->sym[i] = sym && sym[i] ? strdup(sym[i]) : NULL;
  }
}

static void test_every_kind(void) {
  kiln_ir_model *m = load("node/test_if");
  if (!m) return;
  kiln_graph *g = m->graph;

  /* A custom-domain node holding one attribute of each kind, with omitted optional I/O. */
  kiln_opset *os = realloc(m->opsets, (m->n_opsets + 1) * sizeof *os);
  if (!os) abort();
  m->opsets = os;
  m->opsets[m->n_opsets].domain = strdup("com.example");
  m->opsets[m->n_opsets++].version = 3;
  int idx = kiln_graph_add_node(g);
  kiln_node *n = &g->nodes[idx];
  n->name = strdup("everything");
  n->op_type = strdup("Everything");
  n->domain = strdup("com.example");
  int cond = g->inputs[0], extra = kiln_graph_value(g, "extra_out"), w = kiln_graph_value(g, "w_borrowed");
  n = &g->nodes[idx];
  n->n_in = 3;
  n->in = malloc(3 * sizeof(int));
  n->in[0] = cond, n->in[1] = -1, n->in[2] = w;
  n->n_out = 2;
  n->out = malloc(2 * sizeof(int));
  n->out[0] = -1, n->out[1] = extra;

  add_attr(n, "f", KILN_ATTR_FLOAT)->f = -1.25f;
  add_attr(n, "i", KILN_ATTR_INT)->i = -7;
  kiln_attr *a = add_attr(n, "s", KILN_ATTR_STRING);
  a->s = malloc(4);
  memcpy(a->s, "a\0b", 4); /* bytes with an embedded NUL */
  a->s_len = 3;
  int64_t d23[2] = {2, 3};
  add_attr(n, "t", KILN_ATTR_TENSOR)->t = tensor_str("hello", "");
  add_attr(n, "sparse", KILN_ATTR_SPARSE_TENSOR)->t = tensor_i32(2, d23);
  add_attr(n, "g", KILN_ATTR_GRAPH)->g = borrow_graph("node/test_conv_with_strides_padding", g);
  a = add_attr(n, "floats", KILN_ATTR_FLOATS);
  a->n = 2;
  a->floats = malloc(2 * sizeof(float));
  a->floats[0] = 0.5f, a->floats[1] = -3e10f;
  a = add_attr(n, "ints_empty", KILN_ATTR_INTS);
  a->ints = malloc(1);
  a = add_attr(n, "ints", KILN_ATTR_INTS);
  a->n = 3;
  a->ints = malloc(3 * sizeof(int64_t));
  a->ints[0] = INT64_MIN, a->ints[1] = 0, a->ints[2] = INT64_MAX;
  a = add_attr(n, "strings", KILN_ATTR_STRINGS);
  a->n = 2;
  a->strings = malloc(2 * sizeof(char *));
  a->strings[0] = strdup("x"), a->strings[1] = strdup("");
  a = add_attr(n, "tensors", KILN_ATTR_TENSORS);
  a->n = 2;
  a->tensors = malloc(2 * sizeof(kiln_tensor *));
  a->tensors[0] = tensor_str("p", "q");
  a->tensors[1] = tensor_i32(0, NULL);
  a = add_attr(n, "graphs", KILN_ATTR_GRAPHS);
  a->n = 2;
  a->graphs = malloc(2 * sizeof(kiln_graph *));
  a->graphs[0] = borrow_graph("node/test_scan9_sum", g);
  a->graphs[1] = borrow_graph("node/test_loop11", g);
  int64_t dims[3] = {-1, 3, -1};
  const char *sym[3] = {"N", NULL, NULL};
  set_tensor_type(&add_attr(n, "tp_tensor", KILN_ATTR_TYPE_PROTO)->tp, KILN_INT64, 3, dims, sym);
  set_tensor_type(&add_attr(n, "tp_scalar", KILN_ATTR_TYPE_PROTO)->tp, KILN_BOOL, 0, NULL, NULL);
  set_tensor_type(&add_attr(n, "tp_anyrank", KILN_ATTR_TYPE_PROTO)->tp, KILN_FLOAT16, -1, NULL, NULL);
  kiln_type *tp = &add_attr(n, "tp_seq", KILN_ATTR_TYPE_PROTO)->tp;
  *tp = (kiln_type){.kind = KILN_T_SEQUENCE, .inner = KILN_T_TENSOR, .dtype = KILN_FLOAT, .rank = -1};
  tp = &add_attr(n, "tp_seqseq", KILN_ATTR_TYPE_PROTO)->tp;
  *tp = (kiln_type){.kind = KILN_T_SEQUENCE, .inner = KILN_T_SEQUENCE, .dtype = KILN_INT8, .rank = -1};
  tp = &add_attr(n, "tp_opt", KILN_ATTR_TYPE_PROTO)->tp;
  *tp = (kiln_type){.kind = KILN_T_OPTIONAL, .inner = KILN_T_TENSOR, .dtype = KILN_DOUBLE, .rank = -1};
  tp = &add_attr(n, "tp_map", KILN_ATTR_TYPE_PROTO)->tp;
  *tp = (kiln_type){.kind = KILN_T_MAP, .rank = -1};
  add_attr(n, "untyped", KILN_ATTR_UNDEFINED)->i = 42;

  /* Interface and value types: symbolic, fixed and unknown dims; a typed intermediate; a
   * borrowed initializer; a stale typed value no node mentions. */
  set_tensor_type(&g->values[g->outputs[0]].type, KILN_FLOAT, 3, dims, sym);
  set_tensor_type(&g->values[extra].type, KILN_UINT8, 1, (int64_t[]){7}, NULL);
  static const float wdata[4] = {1, 2, 3, 4};
  kiln_tensor *wt = kiln_tensor_new(KILN_FLOAT, 1, (int64_t[]){4}, NULL);
  free(wt->data);
  wt->data = (void *)wdata;
  wt->borrowed = true;
  g->values[w].init = wt;
  set_tensor_type(&g->values[w].type, KILN_FLOAT, 1, (int64_t[]){4}, NULL);
  int stale = kiln_graph_value(g, "stale");
  set_tensor_type(&g->values[stale].type, KILN_FLOAT, 0, NULL, NULL);

  kiln_ir_model *b = roundtrip(m, "every kind");
  if (b) {
    CHECK(kiln_graph_find(b->graph, "stale") < 0);
    int bi = kiln_graph_find(b->graph, "w_borrowed");
    CHECK(bi >= 0 && b->graph->values[bi].init && !b->graph->values[bi].init->borrowed);
    const kiln_node *bn = &b->graph->nodes[b->graph->n_nodes - 1];
    CHECK(bn->n_in == 3 && bn->in[1] == -1 && bn->n_out == 2 && bn->out[0] == -1);
    const kiln_attr *s = kiln_node_attr(bn, "s");
    CHECK(s && s->s_len == 3 && !memcmp(s->s, "a\0b", 3));
    const kiln_attr *ie = kiln_node_attr(bn, "ints_empty");
    CHECK(ie && ie->kind == KILN_ATTR_INTS && ie->n == 0);
    CHECK(kiln_model_opset(b, "com.example") == 3);
  }
  /* The writer left the borrowed weights where they were. */
  CHECK(wt->data == (void *)wdata && wt->borrowed);
  kiln_ir_model_free(b);
  kiln_ir_model_free(m);
}

/* ---- failures ------------------------------------------------------------------------ */

static void test_errors(void) {
  kiln_ir_model *m = load("node/test_conv_with_strides_padding");
  if (!m) return;
  kiln_error err = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  CHECK(kiln_model_write_memory(NULL, &bytes, &len, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_model_write_memory(m, NULL, &len, NULL) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_model_write_file(m, NULL, &err) == KILN_ERR_INVALID_ARG);
  CHECK(kiln_model_write_file(m, "/nonexistent-dir/x.onnx", &err) == KILN_ERR_IO);
  CHECK_MSG(strstr(err.message, "/nonexistent-dir/x.onnx") != NULL, "%s", err.message);

  /* A sequence cannot be an initializer: refused with no file left behind (and no leak). */
  int v = kiln_graph_value(m->graph, "a_sequence");
  kiln_sequence_create(KILN_FLOAT, &m->graph->values[v].init, NULL);
  const char *tmp = kt_write_temp("writer_bad.onnx", "", 0);
  unlink(tmp);
  CHECK(kiln_model_write_file(m, tmp, &err) == KILN_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(err.message, "a_sequence") != NULL, "%s", err.message);
  CHECK(access(tmp, F_OK) != 0);
  CHECK(kiln_model_write_memory(m, &bytes, &len, NULL) == KILN_ERR_UNSUPPORTED && !bytes && !len);
  kiln_tensor_free(m->graph->values[v].init);
  m->graph->values[v].init = NULL;

  /* Likewise as an attribute, and the message says which node holds it. */
  kiln_attr *a = add_attr(&m->graph->nodes[0], "bad", KILN_ATTR_TENSORS);
  a->n = 1;
  a->tensors = calloc(1, sizeof(kiln_tensor *));
  kiln_none_create(KILN_FLOAT, &a->tensors[0], NULL);
  CHECK(kiln_model_write_memory(m, &bytes, &len, &err) == KILN_ERR_UNSUPPORTED && !bytes);
  CHECK_MSG(strstr(err.message, "(Conv) attribute 'bad'") != NULL, "%s", err.message);
  kiln_ir_model_free(m);
}

/* ---- through the public API ---------------------------------------------------------- */

/* Relu is implemented, so a written model can be loaded into a session and run end to end:
 * it must reproduce the test data's expected output. */
static void test_session_runs(void) {
  kiln_ir_model *m = load("node/test_relu");
  if (!m) return;
  const char *tmp = kt_write_temp("writer_relu.onnx", "", 0);
  kiln_error err = {0};
  CHECK_MSG(kiln_model_write_file(m, tmp, &err) == KILN_OK, "%s", err.message);
  kiln_ir_model_free(m);
  kiln_session *s = NULL;
  kiln_tensor *in = NULL, *want = NULL, *out = NULL;
  CHECK_MSG(kiln_session_create(tmp, NULL, &s, &err) == KILN_OK, "%s", err.message);
  CHECK(kiln_value_load_pb(DATA "/node/test_relu/test_data_set_0/input_0.pb", KILN_PB_TENSOR, &in, NULL) == KILN_OK);
  CHECK(kiln_value_load_pb(DATA "/node/test_relu/test_data_set_0/output_0.pb", KILN_PB_TENSOR, &want, NULL) == KILN_OK);
  kiln_io_info info;
  if (s && in && want && kiln_session_input_info(s, 0, &info, NULL) == KILN_OK) {
    const kiln_tensor *ins[1] = {in};
    CHECK_MSG(kiln_session_run(s, 1, &info.name, ins, 1, NULL, &out, &err) == KILN_OK, "%s", err.message);
    CHECK(out && kiln_tensor_dtype(out) == KILN_FLOAT && kiln_tensor_numel(out) == kiln_tensor_numel(want) &&
          !memcmp(kiln_tensor_cdata(out), kiln_tensor_cdata(want), (size_t)kiln_tensor_numel(want) * sizeof(float)));
  }
  kiln_tensor_free(in);
  kiln_tensor_free(want);
  kiln_tensor_free(out);
  kiln_session_free(s);
  unlink(tmp);
}

int main(void) {
  static const char *const models[] = {
      "node/test_conv_with_strides_padding",    "node/test_if",
      "node/test_loop11",                       "node/test_scan9_sum",
      "node/test_sequence_map_identity_1_sequence",
      "simple/test_strnorm_model_monday_casesensintive_lower",
      "pytorch-converted/test_ConvTranspose2d", "node/test_optional_has_element",
      "node/test_optional_get_element_sequence", "node/test_constant",
      "node/test_constantofshape_float_ones",   "node/test_cast_FLOAT_to_STRING",
      "node/test_castlike_FLOAT_to_STRING_expanded", "node/test_relu",
  };
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) test_testdata(models[i]);
  test_every_kind();
  test_errors();
  test_session_runs();
  return kt_finish("test_writer");
}
