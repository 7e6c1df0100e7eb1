/* libFuzzer target: a plugin's op description (kiln_op_desc, with its inputs, outputs and
 * attributes) built from arbitrary bytes goes through the adapter that checks and copies what
 * plugins register (src/plugin/adapter.c). It must be accepted or refused with a message; never
 * a crash or leak. The arrays always hold the counts they claim, except where the bytes ask
 * for a NULL array (which the adapter must refuse): a plugin that lies about an array's length
 * breaks the ABI's contract and is out of scope. Built by scripts/check-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_op.h"
#include "plugin/plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct bytes {
  const uint8_t *p;
  size_t n;
} bytes;

static uint32_t u32(bytes *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4 && b->n; i++, b->p++, b->n--) v |= (uint32_t)*b->p << (8 * i);
  return v;
}

static uint8_t u8(bytes *b) {
  if (!b->n) return 0;
  b->n--;
  return *b->p++;
}

/* A string from the bytes (up to 15 characters), NULL, or "" by the first byte. */
static const char *str(bytes *b, char (*pool)[16], size_t *used) {
  uint8_t k = u8(b);
  if (k == 0) return NULL;
  char *s = pool[(*used)++ % 64];
  size_t len = k % 16;
  for (size_t i = 0; i < len; i++) s[i] = (char)u8(b);
  s[len] = 0;
  return s;
}

static kiln_status compute(kiln_kernel_ctx *ctx, const kiln_api *api, void *state) {
  (void)ctx, (void)api, (void)state;
  return KILN_STATUS_OK;
}
static kiln_status create(const kiln_op_attrs *attrs, const kiln_api *api, void *user, void **state) {
  (void)attrs, (void)api, (void)user, (void)state;
  return KILN_STATUS_OK;
}
static void destroy(void *state, void *user) { (void)state, (void)user; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes b = {data, size};
  char pool[64][16];
  size_t used = 0;
  kiln_op_io ios[2][10];
  kiln_op_attr attrs[10];
  kiln_op_desc d;
  memset(&d, 0, sizeof d);
  uint8_t sz = u8(&b);
  d.size = sz < 200 ? (uint32_t)sizeof d : sz; /* mostly right, sometimes anything */
  d.abi_version = u8(&b) < 230 ? KILN_OP_ABI_VERSION : u32(&b);
  d.domain = str(&b, pool, &used);
  d.name = str(&b, pool, &used);
  d.since_version = (int32_t)(u8(&b) % 24) - 2;
  d.until_version = (int32_t)(u8(&b) % 24) - 2;
  for (int k = 0; k < 2; k++) {
    uint8_t n = u8(&b);
    uint32_t count = n % 10;
    for (uint32_t i = 0; i < count; i++)
      ios[k][i] = (kiln_op_io){str(&b, pool, &used), u32(&b), u8(&b) % 8};
    if (k == 0) d.n_inputs = n >= 250 ? 40 : count, d.inputs = n >= 240 ? NULL : ios[0];
    else d.n_outputs = n >= 250 ? 40 : count, d.outputs = n >= 240 ? NULL : ios[1];
    if (n >= 250 && (k == 0 ? d.inputs : d.outputs)) { /* a count over the cap, with a short array */
      if (k == 0) d.inputs = NULL;
      else d.outputs = NULL;
    }
  }
  uint8_t na = u8(&b);
  d.n_attrs = na % 10;
  d.attrs = na >= 240 ? NULL : attrs;
  for (uint32_t i = 0; i < d.n_attrs; i++)
    attrs[i] = (kiln_op_attr){str(&b, pool, &used), u8(&b) % 8, u8(&b) % 3, (int64_t)u32(&b),
                              (double)u32(&b), str(&b, pool, &used)};
  uint8_t fn = u8(&b);
  d.compute = fn & 1 ? compute : NULL;
  d.create = fn & 2 ? create : NULL;
  d.destroy = fn & 4 ? destroy : NULL;
  d.flags = fn & 8 ? u32(&b) : 0;
  kiln_adapted_op op;
  kiln_error err;
  for (int copy = 0; copy < 2; copy++)
    if (kiln_adapt_op(&d, copy, &op, &err) == KILN_OK) {
      /* the schema must describe what was declared */
      if (op.d.n_outputs < 1 || !op.schema.name || !op.d.compute) abort();
      kiln_adapted_op_clear(&op);
    }
  return 0;
}
