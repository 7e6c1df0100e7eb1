/* What the files of src/plugin share: the structs behind the ABI's opaque handles and the
 * functions of the kiln_api table, which live in the file of their subject. */
#ifndef KILN_PLUGIN_INTERNAL_H
#define KILN_PLUGIN_INTERNAL_H

#include "kiln/kiln_op.h"
#include "opt/pattern.h"
#include "plugin/plugin.h"

struct kiln_op_attrs {
  const kiln_node *node;
  const kiln_adapted_op *op; /* NULL for a matched standard node: no declared defaults */
  kiln_error *err;           /* where attrs_error writes */
  kiln_code *code;           /* where attrs_error records its code (NULL: nowhere) */
};

typedef struct kiln_plugin_lib {
  char *path;   /* as given */
  void *handle; /* dlopen handle; closed when the set is freed */
} kiln_plugin_lib;

typedef struct kiln_plugin_fusion {
  kiln_pattern pattern;          /* steps' op strings point into `strings` */
  char *name, *domain, *op_type;
  size_t n_inputs;
  kiln_fusion_input *inputs;
  kiln_fusion_check_fn check;
  void *user;
  const kiln_adapted_op *op;     /* the replacement op */
  const kiln_plugin_lib *lib;
  char *strings[KILN_PAT_MAX];
} kiln_plugin_fusion;

typedef struct kiln_plugin_state {
  const kiln_node *node;
  const kiln_adapted_op *op;
  void *state;
} kiln_plugin_state;

struct kiln_plugin_set {
  size_t n_libs;
  kiln_plugin_lib **libs;
  size_t n_ops;
  kiln_adapted_op **ops;
  size_t n_fusions;
  kiln_plugin_fusion **fusions;
  size_t n_states, cap_states;
  kiln_plugin_state *states; /* sorted by node address after instantiate */
};

struct kiln_registry {
  kiln_plugin_set *set;
  const kiln_plugin_lib *lib;
  kiln_error *err;  /* first problem, prefixed with the plugin's path by the loader */
  kiln_code code;   /* KILN_OK until a registration fails */
  size_t n_registered;
  char reason[700]; /* registry_error's message, for when kiln_register_ops fails */
};

struct kiln_fusion_match {
  const kiln_graph *g;
  const kiln_match *m;
  kiln_node *attrs;  /* attributes for the fused node (a scratch node) */
  const kiln_plugin_fusion *f;
  kiln_op_attrs step_attrs[KILN_PAT_MAX];
};

/* loader.c */
kiln_status kiln_api_register_op(kiln_registry *reg, const kiln_op_desc *desc);
kiln_status kiln_api_register_fusion(kiln_registry *reg, const kiln_fusion_desc *desc);
kiln_status kiln_api_registry_error(kiln_registry *reg, kiln_status code, const char *fmt, ...)
    KILN_PRINTF(3, 4);

/* fusion.c */
size_t kiln_api_match_step_count(const kiln_fusion_match *m);
const char *kiln_api_match_op_type(const kiln_fusion_match *m, size_t step);
const kiln_op_attrs *kiln_api_match_attrs(const kiln_fusion_match *m, size_t step);
size_t kiln_api_match_input_count(const kiln_fusion_match *m, size_t step);
size_t kiln_api_match_chain_input(const kiln_fusion_match *m, size_t step);
int32_t kiln_api_match_input_dtype(const kiln_fusion_match *m, size_t step, size_t i);
int kiln_api_match_input_rank(const kiln_fusion_match *m, size_t step, size_t i);
int64_t kiln_api_match_input_dim(const kiln_fusion_match *m, size_t step, size_t i, int d);
const kiln_op_tensor *kiln_api_match_input_const(const kiln_fusion_match *m, size_t step, size_t i);
int32_t kiln_api_match_output_dtype(const kiln_fusion_match *m, size_t step);
int kiln_api_match_output_rank(const kiln_fusion_match *m, size_t step);
int64_t kiln_api_match_output_dim(const kiln_fusion_match *m, size_t step, int d);
kiln_status kiln_api_match_set_attr_int(kiln_fusion_match *m, const char *name, int64_t v);
kiln_status kiln_api_match_set_attr_float(kiln_fusion_match *m, const char *name, float v);
kiln_status kiln_api_match_set_attr_string(kiln_fusion_match *m, const char *name, const char *v);
kiln_status kiln_api_match_set_attr_ints(kiln_fusion_match *m, const char *name, const int64_t *v,
                                         size_t count);

/* adapter.c */
kiln_code kiln_code_from_status(kiln_status st);
const char *kiln_status_text(kiln_status st);
/* "domain::name" (or just name in the default domain) into buf. */
const char *kiln_op_label(const char *domain, const char *name, char *buf, size_t len);
/* The declared attribute `name` of op, or NULL. */
const kiln_op_attr *kiln_adapted_attr(const kiln_adapted_op *op, const char *name);

#endif
