/* The C example in README.md compiles against the public header and library, and runs. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#ifdef KILN_TEST_SANITIZE
#define SAN_FLAGS "-fsanitize=address,undefined"
#else
#define SAN_FLAGS ""
#endif

int main(void) {
  FILE *f = fopen(KILN_SOURCE_DIR "/README.md", "r");
  CHECK(f != NULL);
  if (!f) return kt_finish("test_readme_example");
  char line[1024];
  char src[16384] = {0};
  size_t len = 0;
  int in_block = 0, done = 0;
  while (!done && fgets(line, sizeof line, f)) {
    if (!in_block && !strncmp(line, "```c", 4)) {
      in_block = 1;
    } else if (in_block && !strncmp(line, "```", 3)) {
      done = 1;
    } else if (in_block && len + strlen(line) < sizeof src) {
      memcpy(src + len, line, strlen(line));
      len += strlen(line);
    }
  }
  fclose(f);
  CHECK_MSG(done && len > 0, "no ```c block in README.md");
  const char *path = kt_write_temp("readme.c", src, len);
  char exe[256], cmd[2048], out[8192];
  snprintf(exe, sizeof exe, "%s.bin", path);
  snprintf(cmd, sizeof cmd,
           "cc -std=c11 -Wall -Werror %s -I%s/include -x c %s -x none %s/libkiln.a -lprotobuf-c -lm -lpthread -ldl -o %s",
           SAN_FLAGS, KILN_SOURCE_DIR, path, KILN_BINARY_DIR, exe);
  int rc = kt_run(cmd, out, sizeof out);
  CHECK_MSG(rc == 0, "compile failed: %s", out);
  if (rc == 0) {
    snprintf(cmd, sizeof cmd, "cd %s && %s", KILN_SOURCE_DIR, exe);
    rc = kt_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "example failed: %s", out);
    CHECK_MSG(strstr(out, "class 0 probability 0.") != NULL, "unexpected output: %s", out);
  }
  unlink(path);
  unlink(exe);
  return kt_finish("test_readme_example");
}
