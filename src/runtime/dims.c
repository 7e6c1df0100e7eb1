/* Free-dimension overrides (kiln_options.dim_overrides): named dims of the main graph's values
 * fixed to given sizes before the model is checked and optimised. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "runtime/dims.h"

/* Fix every dim called `name` in the main graph's declared types; returns how many inputs had one. */
static size_t fix_dim(kiln_graph *g, const char *name, int64_t value) {
  size_t inputs = 0;
  for (size_t v = 0; v < g->n_values; v++) {
    kiln_type *t = &g->values[v].type;
    bool hit = false;
    for (int d = 0; d < t->rank; d++)
      if (t->sym[d] && !strcmp(t->sym[d], name)) {
        free(t->sym[d]);
        t->sym[d] = NULL;
        t->dims[d] = value;
        hit = true;
      }
    inputs += hit && g->values[v].is_input;
  }
  return inputs;
}

kiln_code kiln_dims_override(kiln_ir_model *m, const char *const *overrides, kiln_error *err) {
  for (const char *const *o = overrides; o && *o; o++) {
    const char *eq = strchr(*o, '=');
    char name[256];
    if (!eq || eq == *o || (size_t)(eq - *o) >= sizeof name)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "free-dimension override '%s' is not NAME=VALUE", *o);
    memcpy(name, *o, (size_t)(eq - *o));
    name[eq - *o] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (errno || end == eq + 1 || *end || v < 0)
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "free-dimension override '%s': the size must be an integer >= 0", *o);
    if (!fix_dim(m->graph, name, (int64_t)v))
      return kiln_fail(err, KILN_ERR_INVALID_ARG, "free-dimension override '%s': no input has a dim named '%s'", *o, name);
  }
  return KILN_OK;
}
