/* kiln_malloc_weights (base/status.c), the allocation of weights packed at load: from 1 MiB
 * a block starts on a 2 MiB boundary and its whole 2 MiB pieces are advised as transparent
 * huge pages, so that the kernel maps them with one fault per 2 MiB; where the system lets
 * madvise have them (/sys/kernel/mm/transparent_hugepage/enabled: always or madvise), the
 * process's AnonHugePages grow by at least one such page once the block is written. Smaller
 * blocks stay 64-byte aligned, every block is writable to its last byte and free() takes it;
 * with KILN_THP=0 (a child process) large blocks are no longer put on 2 MiB boundaries. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "testutil.h"

enum { MIB = 1 << 20 };

/* kB of AnonHugePages in /proc/self/smaps_rollup (-1: not readable). */
static long anon_huge_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* Whether the system maps madvised regions with huge pages. */
static int thp_for_madvise(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return 0;
  char s[128] = {0};
  size_t n = fread(s, 1, sizeof s - 1, f);
  fclose(f);
  s[n] = 0;
  return strstr(s, "[always]") || strstr(s, "[madvise]");
}

/* 1 when large blocks come on 2 MiB boundaries (8 tries: one could fall on one by chance). */
static int large_blocks_aligned(void) {
  int aligned = 1;
  for (int i = 0; i < 8; i++) {
    void *p = kiln_malloc_weights((size_t)3 * MIB + 4096 * (size_t)i);
    if (!p) return -1;
    aligned &= (uintptr_t)p % (2 * MIB) == 0;
    free(p);
  }
  return aligned;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return large_blocks_aligned() == 0 ? 0 : 1;
  const char *env = getenv("KILN_THP");
  if (env && !strcmp(env, "0")) {
    printf("KILN_THP=0 is set for this test: unset it to check huge pages\n");
    CHECK(large_blocks_aligned() == 0);
    return kt_finish("test_malloc_weights");
  }

  /* small blocks: 64-byte aligned, writable to the end */
  for (size_t n = 1; n <= (size_t)MIB / 2; n = n * 3 + 7) {
    unsigned char *p = kiln_malloc_weights(n);
    CHECK_MSG(p && (uintptr_t)p % 64 == 0, "%zu bytes", n);
    if (p) {
      memset(p, 0xab, n);
      CHECK(p[n - 1] == 0xab);
    }
    free(p);
  }
  void *z = kiln_malloc_weights(0);
  CHECK(z != NULL);
  free(z);

  /* large blocks: 2 MiB boundaries */
  CHECK(large_blocks_aligned() == 1);

  /* a written 8 MiB block is mapped with huge pages where the system allows it */
  long before = anon_huge_kb();
  size_t n = (size_t)8 * MIB;
  unsigned char *p = kiln_malloc_weights(n);
  CHECK(p != NULL);
  if (p) {
    memset(p, 1, n);
    CHECK(p[n - 1] == 1);
    long after = anon_huge_kb();
    printf("AnonHugePages: %ld kB before, %ld kB after writing 8 MiB (THP for madvise: %s)\n", before,
           after, thp_for_madvise() ? "yes" : "no");
    if (thp_for_madvise() && before >= 0)
      CHECK_MSG(after - before >= 2048, "huge pages mapped: %ld kB", after - before);
  }
  free(p);

  /* KILN_THP=0 turns it off: a child with the variable set */
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "KILN_THP=0 '%s' --child", argv[0]);
  CHECK_MSG(system(cmd) == 0, "with KILN_THP=0 large blocks are not put on 2 MiB boundaries");
  return kt_finish("test_malloc_weights");
}
