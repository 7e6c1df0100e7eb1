/* libFuzzer target: arbitrary bytes as an input value file must give a value or a clear error,
 * never a crash, a sanitizer report or a leak. The first byte picks the reader: .npy, or .pb as
 * TensorProto, SequenceProto, OptionalProto or guessed (KILN_PB_AUTO); the rest is the file,
 * handed over through an in-memory file (memfd). Built by scripts/check-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch(const kiln_tensor *v) {
  /* read every element of a tensor, every item of a sequence: a bad size shows up here */
  if (kiln_tensor_kind(v) == KILN_KIND_SEQUENCE) {
    for (size_t i = 0; i < kiln_sequence_length(v); i++) touch(kiln_sequence_at(v, i));
  } else if (kiln_tensor_kind(v) == KILN_KIND_TENSOR && kiln_tensor_dtype(v) != KILN_STRING) {
    volatile uint8_t sink = 0;
    const uint8_t *p = kiln_tensor_cdata(v);
    size_t n = (size_t)kiln_tensor_numel(v);
    for (size_t i = 0; p && i < n; i++) sink ^= p[i];
    (void)sink;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int fd = memfd_create("kiln_fuzz_input", 0);
  if (fd < 0) return 0;
  if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) {
    close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  kiln_error err;
  kiln_tensor *v = NULL;
  static const kiln_pb_format formats[] = {KILN_PB_AUTO, KILN_PB_TENSOR, KILN_PB_SEQUENCE, KILN_PB_OPTIONAL};
  kiln_code rc = data[0] % 5 == 4 ? kiln_tensor_load_npy(path, &v, &err)
                                  : kiln_value_load_pb(path, formats[data[0] % 5], &v, &err);
  if (rc == KILN_OK) {
    touch(v);
    kiln_tensor_free(v);
  }
  close(fd);
  return 0;
}
