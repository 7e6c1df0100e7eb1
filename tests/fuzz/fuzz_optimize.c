/* libFuzzer target: a model (arbitrary bytes) that loads at level 0 is loaded again at level 2
 * (every optimizer pass) with verify_fusions on (each fused node checked against the chain it
 * replaced on its first run, as kiln validate --per-fusion does), and both run on the same
 * zero inputs. Errors are fine; crashes, sanitizer reports and leaks are not. When both runs
 * succeed, their outputs must have the same kinds, types and shapes (values may differ within
 * floating-point reassociation, so they are not compared). Built by scripts/check-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_IO = 8 };

typedef struct io {
  size_t ni, no;
  const char *names[MAX_IO];
  kiln_tensor *in[MAX_IO], *out[MAX_IO];
} io;

/* Zero inputs of the declared shapes (unknown dims 1); 0 when the session's inputs do not suit. */
static int make_inputs(kiln_session *s, io *x) {
  x->ni = kiln_session_input_count(s);
  x->no = kiln_session_output_count(s);
  if (x->ni > MAX_IO || x->no > MAX_IO) return 0;
  for (size_t i = 0; i < x->ni; i++) {
    kiln_io_info info;
    if (kiln_session_input_info(s, i, &info, NULL) != KILN_OK) return 0;
    x->names[i] = info.name;
    int64_t dims[KILN_MAX_RANK], n = 1;
    for (int d = 0; d < info.rank; d++) {
      dims[d] = info.dims[d] > 0 && info.dims[d] <= 64 ? info.dims[d] : 1;
      n *= dims[d];
    }
    if (info.kind != KILN_KIND_TENSOR || info.rank < 0 || n > 1 << 16 || info.dtype == KILN_UNDEFINED ||
        kiln_tensor_create(info.dtype, info.rank, dims, &x->in[i], NULL) != KILN_OK)
      return 0;
  }
  return 1;
}

static void io_free(io *x) {
  for (size_t i = 0; i < MAX_IO; i++) {
    kiln_tensor_free(x->in[i]);
    kiln_tensor_free(x->out[i]);
  }
}

static kiln_session *load(const uint8_t *data, size_t size, int level) {
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 1;
  o.opt_level = level;
  o.verify_fusions = level > 0;
  /* Two sessions live at once (s0 with its outputs while s2 runs), beside libFuzzer's corpus and
   * ASan's quarantine, all under -rss_limit_mb=3072: at 1 GiB each the target itself could pass
   * that limit with kiln within its own (512 MiB each keeps the worst case near 1 GiB). */
  o.max_memory_bytes = (int64_t)1 << 29;
  o.max_run_ms = 2000; /* a Loop of 2^60 cheap iterations is a valid model, not a bug: stop it */
  kiln_session *s = NULL;
  kiln_error err;
  return kiln_session_create_from_memory(data, size, NULL, &o, &s, &err) == KILN_OK ? s : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_session *s0 = load(data, size, 0);
  if (!s0) return 0;
  kiln_session *s2 = load(data, size, 2);
  io a = {0}, b = {0};
  kiln_error err;
  if (s2 && make_inputs(s0, &a) && make_inputs(s2, &b) && a.ni == b.ni && a.no == b.no &&
      kiln_session_run(s0, a.ni, a.names, (const kiln_tensor *const *)a.in, a.no, NULL, a.out, &err) == KILN_OK &&
      kiln_session_run(s2, b.ni, b.names, (const kiln_tensor *const *)b.in, b.no, NULL, b.out, &err) == KILN_OK) {
    for (size_t i = 0; i < a.no; i++) {
      if (!a.out[i] || !b.out[i]) continue;
      if (kiln_tensor_kind(a.out[i]) != kiln_tensor_kind(b.out[i])) abort();
      if (kiln_tensor_kind(a.out[i]) != KILN_KIND_TENSOR) continue;
      if (kiln_tensor_dtype(a.out[i]) != kiln_tensor_dtype(b.out[i]) ||
          kiln_tensor_rank(a.out[i]) != kiln_tensor_rank(b.out[i]) ||
          memcmp(kiln_tensor_dims(a.out[i]), kiln_tensor_dims(b.out[i]),
                 sizeof(int64_t) * (size_t)kiln_tensor_rank(a.out[i])))
        abort(); /* the optimizer changed an output's type or shape */
    }
  }
  io_free(&a);
  io_free(&b);
  kiln_session_free(s2);
  kiln_session_free(s0);
  return 0;
}
