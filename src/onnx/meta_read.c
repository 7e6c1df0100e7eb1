#include "onnx/meta_read.h"

#include <stdlib.h>

#include "base/status.h"

static int dup_into(char **dst, const char *s) {
  *dst = kiln_strdup(s ? s : "");
  return *dst != NULL;
}

kiln_code kiln_meta_from_proto(const Onnx__ModelProto *mp, kiln_meta **out, kiln_error *err) {
  kiln_meta *m = calloc(1, sizeof *m);
  if (!m) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  const Onnx__GraphProto *g = mp->graph;
  int ok = dup_into(&m->producer_name, mp->producer_name) &&
           dup_into(&m->producer_version, mp->producer_version) &&
           dup_into(&m->domain, mp->domain) && dup_into(&m->doc_string, mp->doc_string) &&
           dup_into(&m->graph_name, g ? g->name : NULL) &&
           dup_into(&m->graph_doc_string, g ? g->doc_string : NULL);
  m->model_version = mp->has_model_version ? mp->model_version : 0;
  size_t n = mp->n_metadata_props;
  m->keys = kiln_calloc(n, sizeof *m->keys);
  m->values = kiln_calloc(n, sizeof *m->values);
  ok = ok && m->keys && m->values;
  if (ok) m->n_custom = n; /* entries not yet made are NULL, which kiln_meta_free skips */
  for (size_t i = 0; ok && i < n; i++) {
    const Onnx__StringStringEntryProto *e = mp->metadata_props[i];
    ok = dup_into(&m->keys[i], e->key) && dup_into(&m->values[i], e->value);
  }
  if (!ok) {
    kiln_meta_free(m);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
  }
  *out = m;
  return KILN_OK;
}
