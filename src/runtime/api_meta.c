/* Public API for what a binding needs beside runs: model metadata, what an optional holds,
 * tensors over caller memory. */
#include <stdint.h>
#include <string.h>

#include "base/status.h"
#include "ir/meta.h"
#include "runtime/session.h"

kiln_code kiln_model_metadata(const kiln_model *m, kiln_model_meta *meta, kiln_error *err) {
  if (!m || !meta) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_model_metadata: missing argument");
  const kiln_meta *k = m->ir->meta;
  static const char *const none[1] = {NULL};
  memset(meta, 0, sizeof *meta);
  meta->producer_name = k ? k->producer_name : "";
  meta->producer_version = k ? k->producer_version : "";
  meta->domain = k ? k->domain : "";
  meta->doc_string = k ? k->doc_string : "";
  meta->graph_name = k ? k->graph_name : "";
  meta->graph_doc_string = k ? k->graph_doc_string : "";
  meta->model_version = k ? k->model_version : 0;
  meta->n_custom = k ? k->n_custom : 0;
  meta->custom_keys = k && k->n_custom ? (const char *const *)k->keys : none;
  meta->custom_values = k && k->n_custom ? (const char *const *)k->values : none;
  return KILN_OK;
}

kiln_code kiln_session_io_content(const kiln_session *s, int output, size_t i, kiln_kind *content,
                                  kiln_error *err) {
  if (!s || !content) return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_session_io_content: missing argument");
  const kiln_graph *g = s->model->ir->graph;
  size_t n = output ? g->n_outputs : s->model->n_feeds;
  if (i >= n) return kiln_fail(err, KILN_ERR_INVALID_ARG, "%s %zu does not exist", output ? "output" : "input", i);
  const kiln_type *t = &g->values[output ? g->outputs[i] : s->model->feeds[i]].type;
  kiln_tkind k = t->kind == KILN_T_OPTIONAL ? t->inner : t->kind;
  *content = k == KILN_T_SEQUENCE ? KILN_KIND_SEQUENCE : KILN_KIND_TENSOR;
  return KILN_OK;
}

kiln_code kiln_tensor_create_from_data(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                                       size_t nbytes, kiln_release_fn release, void *user,
                                       kiln_tensor **out, kiln_error *err) {
  if (!out || (rank > 0 && !dims))
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "kiln_tensor_create_from_data: missing argument");
  *out = NULL;
  size_t esize = kiln_dtype_size(dtype);
  if (!esize || dtype == KILN_STRING)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "cannot wrap memory as a %s tensor", kiln_dtype_name(dtype));
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "rank %d is outside 0..%d", rank, KILN_MAX_RANK);
  int64_t bytes = kiln_tensor_bytes(dtype, rank, dims);
  if (bytes < 0) return kiln_fail(err, KILN_ERR_INVALID_ARG, "a negative or overflowing dim");
  if ((uint64_t)bytes > nbytes)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "the shape needs %lld bytes, the buffer holds %zu",
                     (long long)bytes, nbytes);
  if (bytes && !data) return kiln_fail(err, KILN_ERR_INVALID_ARG, "data is NULL");
  size_t align = esize > 8 ? 8 : esize;
  if ((uintptr_t)data % align)
    return kiln_fail(err, KILN_ERR_INVALID_ARG, "data is not aligned to %zu bytes (%s elements)", align,
                     kiln_dtype_name(dtype));
  kiln_tensor *t = kiln_tensor_wrap(dtype, rank, dims, data, err);
  if (!t) return err ? err->code : KILN_ERR_NOMEM;
  t->release = release;
  t->release_user = user;
  *out = t;
  return KILN_OK;
}
