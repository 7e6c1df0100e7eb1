#include "ir/meta.h"

#include <stdlib.h>

void kiln_meta_free(kiln_meta *m) {
  if (!m) return;
  free(m->producer_name);
  free(m->producer_version);
  free(m->domain);
  free(m->doc_string);
  free(m->graph_name);
  free(m->graph_doc_string);
  for (size_t i = 0; i < m->n_custom; i++) {
    free(m->keys[i]);
    free(m->values[i]);
  }
  free(m->keys);
  free(m->values);
  free(m);
}
