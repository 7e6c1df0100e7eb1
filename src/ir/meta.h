/* What a ModelProto says about itself (kiln_model_metadata): producer, domain, doc strings,
 * graph name and the metadata_props map, kept by the reader. */
#ifndef KILN_IR_META_H
#define KILN_IR_META_H

#include <stddef.h>
#include <stdint.h>

typedef struct kiln_meta {
  char *producer_name, *producer_version, *domain, *doc_string;
  char *graph_name, *graph_doc_string;
  int64_t model_version;
  size_t n_custom;
  char **keys, **values;
} kiln_meta;

void kiln_meta_free(kiln_meta *m);

#endif
