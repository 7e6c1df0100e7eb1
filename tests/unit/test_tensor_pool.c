/* The large-block cache behind kiln_tensor_new (ir/tensor.c): a freed block of 1 MiB or more
 * serves the next tensor that fits it (at most its size, at least half), zero-filled for
 * kiln_tensor_new; small tensors and strings never use it; the cache holds a bounded number of
 * blocks; threads allocating and freeing at once neither lose nor share blocks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tensor.h"
#include "testutil.h"

static kiln_tensor *floats(int64_t n, int zero) {
  int64_t dims[1] = {n};
  return zero ? kiln_tensor_new(KILN_FLOAT, 1, dims, NULL) : kiln_tensor_new_uninit(KILN_FLOAT, 1, dims, NULL);
}

static void *worker(void *arg) {
  int *ok = arg;
  for (int i = 0; i < 200; i++) {
    int64_t n = (1 << 18) + (i % 7) * 4096; /* 1 MiB and a little more */
    kiln_tensor *t = floats(n, i % 2);
    if (!t) {
      *ok = 0;
      break;
    }
    float *p = t->data;
    for (int64_t k = 0; k < n; k += 1024) p[k] = (float)i; /* a shared block would be overwritten */
    for (int64_t k = 0; k < n; k += 1024)
      if (p[k] != (float)i) *ok = 0;
    kiln_tensor_free(t);
  }
  return NULL;
}

int main(void) {
  /* reuse, zero-filling */
  kiln_tensor *a = floats(1 << 20, 1); /* 4 MiB */
  CHECK(a && a->pool_cap >= a->nbytes);
  void *pa = a->data;
  memset(a->data, 0x5a, a->nbytes);
  kiln_tensor_free(a);
  kiln_tensor *b = floats(1 << 20, 1);
  CHECK(b && b->data == pa);
  int zero = 1;
  for (size_t i = 0; b && i < b->nbytes; i += 4093) zero &= ((unsigned char *)b->data)[i] == 0;
  CHECK_MSG(zero, "a reused block must be zero-filled by kiln_tensor_new");
  kiln_tensor_free(b);
  /* uninit: reused as is (the caller writes every element) */
  kiln_tensor *u = floats((1 << 20) - 1000, 0);
  CHECK(u && u->data == pa);
  kiln_tensor_free(u);
  /* a block more than twice the request is not taken */
  kiln_tensor *small = floats(1 << 18, 0); /* 1 MiB: the 4 MiB block would waste 3 */
  CHECK(small && small->data != pa);
  kiln_tensor_free(small);
  /* below 1 MiB and strings: ordinary memory */
  kiln_tensor *tiny = floats(1000, 1);
  CHECK(tiny && tiny->pool_cap == 0);
  kiln_tensor_free(tiny);
  int64_t sd[1] = {1 << 18};
  kiln_tensor *s = kiln_tensor_new(KILN_STRING, 1, sd, NULL);
  CHECK(s && s->pool_cap == 0 && ((char **)s->data)[0] && !*((char **)s->data)[0]);
  kiln_tensor_free(s);
  /* bounded: freeing many blocks keeps only a few (the rest go back to the system) */
  kiln_tensor *many[8];
  for (int i = 0; i < 8; i++) many[i] = floats((1 << 18) * (i + 1), 0);
  for (int i = 0; i < 8; i++) kiln_tensor_free(many[i]);
  CHECK(kiln_tensor_pool_blocks() <= 4);
  int reused = 0;
  for (int i = 0; i < 8; i++) {
    many[i] = floats((1 << 18) * (i + 1), 0);
    reused += many[i] && many[i]->data != NULL;
  }
  CHECK(reused == 8);
  for (int i = 0; i < 8; i++) kiln_tensor_free(many[i]);
  /* threads */
  pthread_t th[4];
  int ok[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, &ok[i]);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  CHECK(ok[0] && ok[1] && ok[2] && ok[3]);
  return kt_finish("test_tensor_pool");
}
