#include "ops/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ops/fused.h"

#define KILN_OP_FAMILY(f) extern const kiln_op_schema kiln_ops_##f[];
#include "ops/families.def"
#undef KILN_OP_FAMILY

static const kiln_op_schema *const families[] = {
#define KILN_OP_FAMILY(f) kiln_ops_##f,
#include "ops/families.def"
#undef KILN_OP_FAMILY
};

/* Schemas registered by the layer above (kiln's own ops described through the plugin ABI,
 * plugin/builtin.c): written once, before any lookup that needs them, then only read. */
static const kiln_op_schema *const *extra;
static size_t n_extra;

void kiln_op_register_extra(const kiln_op_schema *const *schemas, size_t n) {
  __atomic_store_n(&extra, schemas, __ATOMIC_RELEASE);
  __atomic_store_n(&n_extra, n, __ATOMIC_RELEASE);
}

static bool domain_eq(const char *a, const char *b) {
  if (strcmp(a, "ai.onnx") == 0) a = "";
  if (strcmp(b, "ai.onnx") == 0) b = "";
  return strcmp(a, b) == 0;
}

const kiln_op_schema *kiln_op_find(const char *domain, const char *name, int opset) {
  const kiln_op_schema *best = NULL;
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const kiln_op_schema *s = families[f]; s->name; s++)
      if (strcmp(s->name, name) == 0 && domain_eq(s->domain, domain) && s->since <= opset &&
          (!best || s->since > best->since))
        best = s;
  size_t n = __atomic_load_n(&n_extra, __ATOMIC_ACQUIRE);
  const kiln_op_schema *const *x = __atomic_load_n(&extra, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < n; i++) {
    const kiln_op_schema *s = x[i];
    if (strcmp(s->name, name) == 0 && domain_eq(s->domain, domain) && s->since <= opset &&
        (!best || s->since > best->since))
      best = s;
  }
  return best;
}

bool kiln_op_known(const char *domain, const char *name) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const kiln_op_schema *s = families[f]; s->name; s++)
      if (strcmp(s->name, name) == 0 && domain_eq(s->domain, domain)) return true;
  size_t n = __atomic_load_n(&n_extra, __ATOMIC_ACQUIRE);
  const kiln_op_schema *const *x = __atomic_load_n(&extra, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < n; i++)
    if (strcmp(x[i]->name, name) == 0 && domain_eq(x[i]->domain, domain)) return true;
  return false;
}


const kiln_op_schema *kiln_op_at(size_t i) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const kiln_op_schema *s = families[f]; s->name; s++)
      if (i-- == 0) return s;
  size_t n = __atomic_load_n(&n_extra, __ATOMIC_ACQUIRE);
  const kiln_op_schema *const *x = __atomic_load_n(&extra, __ATOMIC_ACQUIRE);
  return i < n ? x[i] : NULL;
}
