#include "ops/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ops/fused.h"

extern const kiln_op_schema kiln_ops_elementwise[];
extern const kiln_op_schema kiln_ops_binary[];
extern const kiln_op_schema kiln_ops_cast[];
extern const kiln_op_schema kiln_ops_reduce[];
extern const kiln_op_schema kiln_ops_softmax[];
extern const kiln_op_schema kiln_ops_norm[];
extern const kiln_op_schema kiln_ops_conv[];
extern const kiln_op_schema kiln_ops_pool[];
extern const kiln_op_schema kiln_ops_matmul[];
extern const kiln_op_schema kiln_ops_quant[];
extern const kiln_op_schema kiln_ops_shape[];
extern const kiln_op_schema kiln_ops_shape2[];
extern const kiln_op_schema kiln_ops_gather[];
extern const kiln_op_schema kiln_ops_resize[];
extern const kiln_op_schema kiln_ops_rnn[];
extern const kiln_op_schema kiln_ops_control[];
extern const kiln_op_schema kiln_ops_sequence[];
extern const kiln_op_schema kiln_ops_misc[];
extern const kiln_op_schema kiln_ops_loss[];
extern const kiln_op_schema kiln_ops_random[];
extern const kiln_op_schema kiln_ops_signal[];
extern const kiln_op_schema kiln_ops_training[];
extern const kiln_op_schema kiln_ops_string[];
extern const kiln_op_schema kiln_ops_fused[];
extern const kiln_op_schema kiln_ops_fused_attention[];
extern const kiln_op_schema kiln_ops_fused_norm[];
extern const kiln_op_schema kiln_ops_fused_ew[];

static const kiln_op_schema *const families[] = {
    kiln_ops_elementwise,
    kiln_ops_binary,
    kiln_ops_cast,
    kiln_ops_reduce,
    kiln_ops_softmax,
    kiln_ops_norm,
    kiln_ops_conv,
    kiln_ops_pool,
    kiln_ops_matmul,
    kiln_ops_quant,
    kiln_ops_shape,
    kiln_ops_shape2,
    kiln_ops_gather,
    kiln_ops_resize,
    kiln_ops_rnn,
    kiln_ops_control,
    kiln_ops_sequence,
    kiln_ops_misc,
    kiln_ops_loss,
    kiln_ops_random,
    kiln_ops_signal,
    kiln_ops_training,
    kiln_ops_string,
    kiln_ops_fused,
    kiln_ops_fused_attention,
    kiln_ops_fused_norm,
    kiln_ops_fused_ew,
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

