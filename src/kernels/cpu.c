/* CPU feature detection: cpuid + xgetbv, probed once. */
#include "kernels/cpu.h"

#include "kiln/kiln.h"
#include "kernels/gemm_amx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KILN_X86 1
#endif

static kiln_cpu_features g_feat;
static kiln_isa g_isa_max = KILN_ISA_SCALAR;
static kiln_isa g_isa = KILN_ISA_SCALAR;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static size_t g_cache[4]; /* data (or unified) cache bytes per level 1..3; 0 unknown */

#ifdef KILN_X86
static unsigned long long xgetbv0(void) {
  unsigned int eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}

static void probe_x86(kiln_cpu_features *f) {
  unsigned int a, b, c, d, max_leaf;
  if (!__get_cpuid(0, &max_leaf, &b, &c, &d)) return;
  memcpy(f->vendor + 0, &b, 4);
  memcpy(f->vendor + 4, &d, 4);
  memcpy(f->vendor + 8, &c, 4);
  f->vendor[12] = 0;
  __cpuid_count(1, 0, a, b, c, d);
  int osxsave = (c >> 27) & 1;
  f->sse42 = (c >> 20) & 1;
  f->avx = (c >> 28) & 1;
  f->f16c = (c >> 29) & 1;
  f->fma = (c >> 12) & 1;
  if (osxsave) {
    unsigned long long xcr0 = xgetbv0();
    f->os_ymm = (xcr0 & 0x6) == 0x6;            /* XMM + YMM */
    f->os_zmm = (xcr0 & 0xe6) == 0xe6;          /* + opmask, ZMM_Hi256, Hi16_ZMM */
    f->os_amx = (xcr0 & 0x60000) == 0x60000;    /* XTILECFG + XTILEDATA */
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = (b >> 5) & 1;
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512cd = (b >> 28) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
    f->avx512_vnni = (c >> 11) & 1;
    f->avx512_fp16 = (d >> 23) & 1;
    f->amx_bf16 = (d >> 22) & 1;
    f->amx_tile = (d >> 24) & 1;
    f->amx_int8 = (d >> 25) & 1;
    unsigned int max7 = a;
    if (max7 >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f->avx_vnni = (a >> 4) & 1;
      f->avx512_bf16 = (a >> 5) & 1;
    }
  }
  if (!f->os_ymm) f->avx = f->avx2 = f->fma = f->f16c = f->avx_vnni = 0;
  if (!f->os_zmm) {
    f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = f->avx512cd = 0;
    f->avx512_vnni = f->avx512_bf16 = f->avx512_fp16 = 0;
  }
  if (!f->os_amx) f->amx_tile = f->amx_bf16 = f->amx_int8 = 0;
}

/* AMD's older cache leaves, where the topology extensions are off (a 2-vCPU AMD EPYC guest
 * showed them off, with 0x80000005/6 intact): L1d KiB in 0x80000005 ECX[31:24], L2 KiB in
 * 0x80000006 ECX[31:16]. Their L3 field is left out: that guest reported 508 MB. */
static void probe_caches_amd_legacy(size_t *bytes) {
  unsigned int a, b, c, d;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000006) return;
  if (__get_cpuid(0x80000005, &a, &b, &c, &d) && !bytes[1]) bytes[1] = (size_t)(c >> 24) << 10;
  if (__get_cpuid(0x80000006, &a, &b, &c, &d) && !bytes[2]) bytes[2] = (size_t)(c >> 16) << 10;
}

/* The deterministic cache parameters: leaf 4 (Intel) or 0x8000001D (AMD, with topology
 * extensions, else the older leaves), one subleaf per cache: type in EAX[4:0] (1 data, 3
 * unified), level EAX[7:5], size = ways x partitions x line x sets. */
static void probe_caches_x86(const kiln_cpu_features *f, size_t *bytes) {
  unsigned int a, b, c, d, leaf = 4;
  if (!strcmp(f->vendor, "AuthenticAMD") || !strcmp(f->vendor, "HygonGenuine")) {
    if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !((c >> 22) & 1)) {
      probe_caches_amd_legacy(bytes);
      return;
    }
    leaf = 0x8000001D;
  } else {
    unsigned int max_leaf;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d) || max_leaf < 4) return;
  }
  for (unsigned int i = 0; i < 16; i++) {
    __cpuid_count(leaf, i, a, b, c, d);
    unsigned int type = a & 31, level = (a >> 5) & 7;
    if (type == 0) break;
    if ((type != 1 && type != 3) || level < 1 || level > 3) continue;
    size_t size = (size_t)((b >> 22) + 1) * (((b >> 12) & 1023) + 1) * ((b & 4095) + 1) * ((size_t)c + 1);
    if (!bytes[level]) bytes[level] = size;
  }
}
#endif

/* Linux's view of cpu0's caches, where cpuid said nothing (other CPUs, some hypervisors). */
static size_t sysfs_cache_bytes(int level) {
  for (int i = 0; i < 16; i++) {
    char path[96], type[32];
    long lv = 0, sz = 0;
    char unit = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *fp = fopen(path, "r");
    if (!fp) break;
    int ok = fscanf(fp, "%ld", &lv) == 1;
    fclose(fp);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (!ok || lv != level || !(fp = fopen(path, "r"))) continue;
    ok = fgets(type, sizeof type, fp) != NULL;
    fclose(fp);
    if (!ok || (strncmp(type, "Data", 4) && strncmp(type, "Unified", 7))) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!(fp = fopen(path, "r"))) continue;
    int got = fscanf(fp, "%ld%c", &sz, &unit);
    fclose(fp);
    if (got >= 1 && sz > 0) return (size_t)sz * (unit == 'M' ? 1u << 20 : unit == 'K' ? 1u << 10 : 1);
  }
  return 0;
}

static void probe(void) {
  memset(&g_feat, 0, sizeof g_feat);
#ifdef KILN_X86
  probe_x86(&g_feat);
#endif
  const kiln_cpu_features *f = &g_feat;
  g_isa_max = KILN_ISA_SCALAR;
  if (f->avx2 && f->fma) g_isa_max = KILN_ISA_AVX2;
  if (g_isa_max == KILN_ISA_AVX2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq)
    g_isa_max = KILN_ISA_AVX512;
  memset(g_cache, 0, sizeof g_cache);
#ifdef KILN_X86
  probe_caches_x86(f, g_cache);
#endif
  for (int l = 1; l <= 3; l++)
    if (!g_cache[l]) g_cache[l] = sysfs_cache_bytes(l);
  g_isa = g_isa_max;
  const char *env = getenv("KILN_ISA");
  kiln_isa want;
  if (env && *env && kiln_isa_parse(env, &want) == 0 && want != KILN_ISA_AUTO && want < g_isa)
    g_isa = want;
}

const kiln_cpu_features *kiln_cpu_get_features(void) {
  pthread_once(&g_once, probe);
  return &g_feat;
}

kiln_isa kiln_cpu_isa_max(void) {
  pthread_once(&g_once, probe);
  return g_isa_max;
}

kiln_isa kiln_cpu_isa(void) {
  pthread_once(&g_once, probe);
  return g_isa;
}

size_t kiln_cpu_cache_bytes(int level) {
  pthread_once(&g_once, probe);
  return level >= 1 && level <= 3 ? g_cache[level] : 0;
}

int kiln_isa_resolve(int requested) {
  if (requested == KILN_ISA_AUTO) return (int)kiln_cpu_isa();
  if (requested < KILN_ISA_SCALAR || requested > (int)kiln_cpu_isa_max()) return -1;
  return requested;
}

const char *kiln_isa_name(int isa) {
  switch (isa) {
    case KILN_ISA_AUTO: return "auto";
    case KILN_ISA_SCALAR: return "scalar";
    case KILN_ISA_AVX2: return "avx2";
    case KILN_ISA_AVX512: return "avx512";
    default: return "?";
  }
}

int kiln_isa_parse(const char *name, kiln_isa *out) {
  static const struct { const char *n; kiln_isa v; } names[] = {
      {"auto", KILN_ISA_AUTO}, {"scalar", KILN_ISA_SCALAR}, {"avx2", KILN_ISA_AVX2},
      {"avx512", KILN_ISA_AVX512}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(name, names[i].n)) {
      *out = names[i].v;
      return 0;
    }
  return -1;
}

void kiln_cpu_describe(char *buf, size_t cap) {
  const kiln_cpu_features *f = kiln_cpu_get_features();
  if (!cap) return;
  snprintf(buf, cap, "%s (max %s; %s%s%s%s%s%s%s%s%s%s%s)", kiln_isa_name(kiln_cpu_isa()),
           kiln_isa_name(kiln_cpu_isa_max()), f->vendor[0] ? f->vendor : "unknown-cpu",
           f->avx2 ? " avx2" : "", f->fma ? " fma" : "", f->f16c ? " f16c" : "",
           f->avx512f ? " avx512f" : "",
           (f->avx512bw && f->avx512vl && f->avx512dq) ? "/bw/vl/dq" : "",
           f->avx512_vnni ? " avx512vnni" : "", f->avx512_bf16 ? " avx512bf16" : "",
           f->avx512_fp16 ? " avx512fp16" : "", f->avx_vnni ? " avxvnni" : "",
           f->amx_tile ? " amx" : "");
}

const char *kiln_cpu_isa_level(void) { return kiln_isa_name(kiln_cpu_isa()); }

int kiln_cpu_amx(void) { return kiln_amx_available(); }

void kiln_cpu_describe_line(char *buf, size_t cap) { kiln_cpu_describe(buf, cap); }
