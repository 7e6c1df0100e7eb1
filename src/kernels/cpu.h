/* CPU feature detection, in one place.
 *
 * The CPU is probed once (cpuid + xgetbv, so features the OS does not save are off). The
 * environment variable KILN_ISA=scalar|avx2|avx512 lowers the level kernels use; it never
 * raises it above what the CPU and OS support (a higher request is clamped, an unknown value
 * ignored). Kernels pick their code path from kiln_cpu_isa().
 */
#ifndef KILN_KERNELS_CPU_H
#define KILN_KERNELS_CPU_H

#include <stddef.h>

/* Instruction-set levels, ordered: a higher level implies every lower one. */
typedef enum kiln_isa {
  KILN_ISA_AUTO = 0,   /* in parameters: "use kiln_cpu_isa()" (so zeroed structs mean auto) */
  KILN_ISA_SCALAR = 1, /* portable C (the compiler's baseline, SSE2 on x86-64) */
  KILN_ISA_AVX2 = 2,   /* AVX2 + FMA (+ F16C) */
  KILN_ISA_AVX512 = 3  /* AVX-512 F/BW/VL/DQ + AVX2/FMA */
} kiln_isa;

#define KILN_ISA_LEVELS 4 /* array size for tables indexed by level (index 0 = AUTO unused) */

typedef struct kiln_cpu_features {
  int sse42, avx, f16c, fma, avx2;
  int avx512f, avx512bw, avx512vl, avx512dq, avx512cd;
  int avx512_vnni, avx512_bf16, avx512_fp16, avx_vnni;
  int amx_tile, amx_bf16, amx_int8;
  int os_ymm, os_zmm, os_amx; /* XCR0 says the OS saves that register state */
  char vendor[13];
} kiln_cpu_features;

/* The probed features (static storage; probed once, thread-safe). */
const kiln_cpu_features *kiln_cpu_get_features(void);
/* Highest level the CPU and OS support, ignoring KILN_ISA. */
kiln_isa kiln_cpu_isa_max(void);
/* The level kernels should use: kiln_cpu_isa_max() lowered by KILN_ISA. */
kiln_isa kiln_cpu_isa(void);
/* Resolve a requested level: AUTO gives kiln_cpu_isa(); a level above kiln_cpu_isa_max()
 * or not a level gives -1 (not runnable here); otherwise the level itself. */
int kiln_isa_resolve(int requested);
/* Bytes of the data (or unified) cache of level 1, 2 or 3 that the first CPU sees (cpuid's
 * deterministic cache parameters, else Linux's sysfs); 0 when neither says. Blocking of the
 * kernels derives from these (kiln_gemm_get_blocking), not from constants of one machine. */
size_t kiln_cpu_cache_bytes(int level);
/* "scalar", "avx2", "avx512" ("auto" for KILN_ISA_AUTO, "?" otherwise). */
const char *kiln_isa_name(int isa);
/* Parse a name as above; returns 0 and sets *out, or -1 if unknown. */
int kiln_isa_parse(const char *name, kiln_isa *out);
/* One line for logs, e.g. "avx512 (max avx512; avx2 fma avx512f/bw/vl/dq vnni bf16)". */
void kiln_cpu_describe(char *buf, size_t cap);

/* The dispatch rule: a kernel's ISA variants live in files of their own under src/kernels/,
 * compiled with that ISA's flags (src/kernels/isa_flags.cmake), and are entered only from
 * plain-C code that chose them from kiln_cpu_isa() (the older kernels use target attributes on
 * static functions behind plain entry points the same way). scripts/check-isa.sh runs the
 * tests on emulated CPUs without AVX-512 and without AVX2. */

#endif
