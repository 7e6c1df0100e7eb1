/* What kiln supports: the opset range and the operator list (kiln info --ops). */
#include "kiln/kiln.h"
#include "ops/registry.h"
#include "plugin/plugin.h"
#include "runtime/session.h"

int kiln_max_opset(void) { return KILN_MAX_OPSET; }

kiln_code kiln_supported_op(size_t i, const char **domain, const char **name, int *since) {
  kiln_builtin_ops_init(); /* kiln's ops described through the plugin ABI are listed too */
  const kiln_op_schema *s = kiln_op_at(i);
  if (!s) return KILN_ERR_INVALID_ARG;
  if (domain) *domain = s->domain;
  if (name) *name = s->name;
  if (since) *since = s->since;
  return KILN_OK;
}
