/* ai.kiln::Attention's kernels chosen once from kiln_cpu_isa(): plain C, so nothing compiled
 * for a wider ISA runs before the choice. */
#include "kernels/attention.h"

#include <pthread.h>

#include "kernels/cpu.h"

static kiln_attn_kernels g_kernels;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick(void) {
  g_kernels = (kiln_attn_kernels){kiln_attend_portable, NULL, "scalar"};
#if defined(__x86_64__) || defined(__i386__)
  kiln_isa isa = kiln_cpu_isa();
  if (isa >= KILN_ISA_AVX512) g_kernels = (kiln_attn_kernels){kiln_attend_avx512, kiln_attn_pack_rows_avx2, "avx512"};
  else if (isa >= KILN_ISA_AVX2) g_kernels = (kiln_attn_kernels){kiln_attend_avx2, kiln_attn_pack_rows_avx2, "avx2"};
#endif
}

const kiln_attn_kernels *kiln_attn_kernels_get(void) {
  pthread_once(&g_once, pick);
  return &g_kernels;
}
