/* libFuzzer target: arbitrary bytes as a model must give a session or a clear error, never a
 * crash, a sanitizer report or a leak. A session that loads is also run once on zero inputs.
 * Built and run by scripts/check-fuzz.sh (clang, ASan + UBSan, seed corpus from the
 * conformance models by scripts/fuzz-corpus.sh); crashes found and fixed stay as inputs in
 * tests/fuzz/regress/fuzz_model/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_error err;
  kiln_session *s = NULL;
  kiln_options o;
  kiln_options_init(&o);
  o.threads = 1;
  o.max_memory_bytes = (int64_t)1 << 30; /* under libFuzzer's 3 GiB: a model asking more is refused */
  o.max_run_ms = 2000; /* a Loop of 2^60 cheap iterations is a valid model, not a bug: stop it */
  if (kiln_session_create_from_memory(data, size, NULL, &o, &s, &err) != KILN_OK) return 0;
  size_t ni = kiln_session_input_count(s), no = kiln_session_output_count(s);
  if (ni > 8 || no > 8) {
    kiln_session_free(s);
    return 0;
  }
  kiln_tensor *in[8] = {0}, *out[8] = {0};
  const char *names[8];
  int ok = 1;
  for (size_t i = 0; i < ni && ok; i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, NULL);
    names[i] = info.name;
    int64_t dims[KILN_MAX_RANK];
    int64_t n = 1;
    for (int d = 0; info.rank > 0 && d < info.rank; d++) {
      dims[d] = info.dims[d] > 0 && info.dims[d] <= 64 ? info.dims[d] : 1;
      n *= dims[d];
    }
    ok = info.kind == KILN_KIND_TENSOR && info.rank >= 0 && n <= 1 << 16 && info.dtype != KILN_UNDEFINED &&
         kiln_tensor_create(info.dtype, info.rank, dims, &in[i], NULL) == KILN_OK;
  }
  if (ok) kiln_session_run(s, ni, names, (const kiln_tensor *const *)in, no, NULL, out, &err);
  for (size_t i = 0; i < 8; i++) {
    kiln_tensor_free(in[i]);
    kiln_tensor_free(out[i]);
  }
  kiln_session_free(s);
  return 0;
}
