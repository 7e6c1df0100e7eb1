#include "ops/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ops/fused.h"
#include "plugin/plugin.h"

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

/* kiln's own ops described through the plugin ABI (kiln_op.h), adapted once per process:
 * lists ended by an entry without a description. */
extern const kiln_described_op kiln_ops_fused_described[];

static const kiln_described_op *const described_lists[] = {
    kiln_ops_fused_described,
};

enum { MAX_DESCRIBED = 64 };
static kiln_adapted_op described[MAX_DESCRIBED]; /* written once, under described_once */
static size_t n_described;
static pthread_once_t described_once = PTHREAD_ONCE_INIT;

static void adapt_described(void) {
  for (size_t l = 0; l < sizeof described_lists / sizeof described_lists[0]; l++)
    for (const kiln_described_op *d = described_lists[l]; d->desc && n_described < MAX_DESCRIBED; d++) {
      kiln_error e;
      kiln_adapted_op *a = &described[n_described];
      if (kiln_adapt_op(d->desc, false, a, &e) == KILN_OK) {
        a->schema.flags = d->facts.flags;
        a->schema.prepare = d->facts.prepare;
        a->schema.cost = d->facts.cost;
        a->schema.flow = d->facts.flow;
        n_described++;
      } else /* a bug in kiln's own description; the unit tests catch it */
        kiln_log(NULL, KILN_LOG_ERROR, "built-in op description rejected: %s", e.message);
    }
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
  pthread_once(&described_once, adapt_described);
  for (size_t i = 0; i < n_described; i++) {
    const kiln_adapted_op *d = &described[i];
    if (strcmp(d->d.name, name) == 0 && domain_eq(d->d.domain, domain) && d->d.since_version <= opset &&
        (d->d.until_version == 0 || opset <= d->d.until_version) && (!best || d->schema.since > best->since))
      best = &d->schema;
  }
  return best;
}

bool kiln_op_known(const char *domain, const char *name) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const kiln_op_schema *s = families[f]; s->name; s++)
      if (strcmp(s->name, name) == 0 && domain_eq(s->domain, domain)) return true;
  pthread_once(&described_once, adapt_described);
  for (size_t i = 0; i < n_described; i++)
    if (strcmp(described[i].d.name, name) == 0 && domain_eq(described[i].d.domain, domain)) return true;
  return false;
}

const kiln_op_schema *kiln_op_find_in(const struct kiln_plugin_set *ps, const char *domain,
                                      const char *name, int opset) {
  const kiln_op_schema *s = kiln_op_find(domain, name, opset);
  return s ? s : kiln_plugins_find(ps, domain, name, opset);
}
