/* kiln's graph IR: values, nodes with attributes, (sub)graphs, and the model around them.
 * Decoded once from ONNX; the protobuf structures are not kept. */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/tensor.h"

typedef struct kiln_graph kiln_graph;
struct kiln_op_schema;

/* Static type of a value: what inference and the model's value_info know before running. */
typedef enum kiln_tkind {
  KILN_T_UNKNOWN = 0,
  KILN_T_TENSOR,
  KILN_T_SEQUENCE,
  KILN_T_OPTIONAL,
  KILN_T_MAP
} kiln_tkind;

typedef struct kiln_type {
  kiln_tkind kind;
  kiln_tkind inner;              /* OPTIONAL: kind of the wrapped value; SEQUENCE: of items */
  kiln_dtype dtype;              /* element type, UNDEFINED if unknown */
  int rank;                      /* -1 unknown */
  int64_t dims[KILN_MAX_RANK];   /* -1 unknown or symbolic */
  char *sym[KILN_MAX_RANK];      /* dim_param names (owned) or NULL */
} kiln_type;

typedef enum kiln_attr_kind {
  KILN_ATTR_UNDEFINED = 0,
  KILN_ATTR_FLOAT = 1,
  KILN_ATTR_INT = 2,
  KILN_ATTR_STRING = 3,
  KILN_ATTR_TENSOR = 4,
  KILN_ATTR_GRAPH = 5,
  KILN_ATTR_FLOATS = 6,
  KILN_ATTR_INTS = 7,
  KILN_ATTR_STRINGS = 8,
  KILN_ATTR_TENSORS = 9,
  KILN_ATTR_GRAPHS = 10,
  KILN_ATTR_SPARSE_TENSOR = 11,
  KILN_ATTR_SPARSE_TENSORS = 12,
  KILN_ATTR_TYPE_PROTO = 13,
  KILN_ATTR_TYPE_PROTOS = 14
} kiln_attr_kind;

typedef struct kiln_attr {
  char *name;
  kiln_attr_kind kind;
  float f;
  int64_t i;
  char *s;                 /* NUL-terminated copy */
  size_t s_len;            /* byte length (strings may hold bytes) */
  kiln_tensor *t;
  kiln_graph *g;
  size_t n;                /* element count for the list kinds */
  float *floats;
  int64_t *ints;
  char **strings;
  kiln_tensor **tensors;
  kiln_graph **graphs;
  kiln_type tp;            /* TYPE_PROTO */
} kiln_attr;

typedef struct kiln_node {
  char *name;
  char *op_type;
  char *domain;            /* "" for ai.onnx */
  int opset;               /* version of `domain` imported by the model */
  size_t n_in, n_out;
  int *in;                 /* value ids; -1 for an omitted optional input */
  int *out;                /* value ids; -1 for an omitted optional output */
  size_t n_attrs;
  kiln_attr *attrs;
  const struct kiln_op_schema *schema; /* resolved at load */
} kiln_node;

typedef struct kiln_value_info {
  char *name;
  kiln_type type;
  int producer;            /* node index, -1 for graph inputs, initializers and outer values */
  bool is_input;
  bool is_outer;           /* defined in an enclosing graph, resolved by name at run time */
  bool claimed;            /* produced, and its type states a rank or dims that only the model's
                              declaration gives (inference did not prove them, here or upstream):
                              the run does not check them, so passes must not rely on them */
  kiln_tensor *init;       /* initializer or folded constant (owned), else NULL */
} kiln_value_info;

struct kiln_graph {
  char *name;
  kiln_graph *parent;      /* enclosing graph for subgraphs */
  size_t n_values, cap_values;
  kiln_value_info *values;
  size_t n_nodes, cap_nodes;
  kiln_node *nodes;        /* in topological order after kiln_graph_toposort */
  size_t n_inputs, n_outputs;
  int *inputs;             /* value ids, graph order (may include initializers) */
  int *outputs;
  struct kiln_strmap *names; /* name -> value id */
  size_t *uses;            /* per value: readers (see kiln_graph_use_counts), set by prepare */
};

typedef struct kiln_opset {
  char *domain;
  int64_t version;
} kiln_opset;

typedef struct kiln_ir_model {
  int64_t ir_version;
  size_t n_opsets;
  kiln_opset *opsets;
  kiln_graph *graph;
  char *base_dir;          /* folder for external data */
  size_t n_maps;           /* mmap'd external data regions */
  struct { void *addr; size_t len; } *maps;
  struct kiln_meta *meta;  /* what the ModelProto says about itself (ir/meta.h), or NULL */
} kiln_ir_model;

/* The version of `domain` the model imports, or -1. "ai.onnx" and "" are the same domain. */
int64_t kiln_model_opset(const kiln_ir_model *m, const char *domain);

kiln_graph *kiln_graph_new(kiln_graph *parent);
void kiln_graph_free(kiln_graph *g);
void kiln_ir_model_free(kiln_ir_model *m);

/* Value id for `name`, creating it if missing; -1 on allocation failure. */
int kiln_graph_value(kiln_graph *g, const char *name);
/* Value id for `name` or -1. */
int kiln_graph_find(const kiln_graph *g, const char *name);
/* The type of value v that an optimizer pass may rely on: its type or, when it is claimed (a
 * rank or dims only the declaration gives, which the run does not check), a tensor of unknown
 * rank and dtype. */
const kiln_type *kiln_value_type(const kiln_graph *g, int v);
/* Append a node (fields zeroed); returns its index or -1. */
int kiln_graph_add_node(kiln_graph *g);

/* Order nodes so producers precede consumers; fails naming a node on a cycle or on an input
 * that nothing produces. Outer-scope names become is_outer values when `g` has a parent that
 * defines them. */
kiln_code kiln_graph_toposort(kiln_graph *g, kiln_error *err);

/* "node 'name' (domain::Op)" (no domain for ai.onnx) into buf; returns buf. */
const char *kiln_node_label(const kiln_node *n, char *buf, size_t len);

/* Attribute lookup on a node; the typed getters return `def` when absent. */
const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name);
int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t def);
float kiln_attr_float(const kiln_node *n, const char *name, float def);
const char *kiln_attr_str(const kiln_node *n, const char *name, const char *def);
/* List attributes: *count set to the length (0 when absent), returns NULL when absent. */
const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, size_t *count);
const float *kiln_attr_floats(const kiln_node *n, const char *name, size_t *count);

void kiln_attr_clear(kiln_attr *a);
void kiln_type_clear(kiln_type *t);
void kiln_type_copy(kiln_type *dst, const kiln_type *src);
/* "float[N,3,224,224]" */
const char *kiln_type_str(const kiln_type *t, char *buf, size_t n);

#endif
