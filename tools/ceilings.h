/* This machine's measured ceilings (`kiln calibrate`): float32 FMA peak per ISA level,
 * read/copy/triad bandwidth per cache level, the thread pool's dispatch latency, each at 1
 * and N threads; cached in $XDG_CACHE_HOME/kiln/ceilings.json (default ~/.cache), one entry
 * per (CPU model, ISA). `kiln profile` takes its roofs from them. */
#ifndef KILN_TOOLS_CEILINGS_H
#define KILN_TOOLS_CEILINGS_H

#include <stddef.h>
#include <stdio.h>

enum { CEIL_ISAS = 3, CEIL_LEVELS = 4, CEIL_KINDS = 3 };
enum { CEIL_L1, CEIL_L2, CEIL_L3, CEIL_DRAM };      /* where a buffer lives */
enum { CEIL_READ, CEIL_COPY, CEIL_TRIAD };          /* bandwidth kernels */

extern const char *const ceil_isa_names[CEIL_ISAS];   /* "avx512", "avx2", "sse" (128-bit FMA) */
extern const char *const ceil_level_names[CEIL_LEVELS];
extern const char *const ceil_kind_names[CEIL_KINDS];

typedef struct ceilings {
  char cpu[128];          /* /proc/cpuinfo model name */
  char isa[16];           /* widest FMA level the CPU has: the cache key with cpu */
  int threads;            /* N of the "nt" figures */
  double cache_bytes[3];  /* L1d, L2, L3 as the kernel reports them (per core, per core, shared) */
  double buffer_bytes[CEIL_LEVELS];  /* working set of each bandwidth test (1 thread) */
  double fma[CEIL_ISAS][2];          /* GFLOP/s, [isa][0: 1 thread, 1: N threads]; 0 = absent */
  double bw[CEIL_LEVELS][CEIL_KINDS][2]; /* GB/s */
  double dispatch_us[2];  /* empty parallel loop on the pool: [0] 2 threads, [1] N threads */
  double seconds;         /* how long the calibration took */
} ceilings;

/* Measure them now (quick: about 10x shorter timings, for tests). threads <= 0: one per
 * online CPU. Progress lines go to `progress` when not NULL. Returns 0 on success. */
int ceilings_measure(ceilings *c, int threads, int quick, FILE *progress);
/* The cache file's path into buf; returns buf, or NULL when no home is known. */
const char *ceilings_path(char *buf, size_t n);
/* Read this machine's entry from the cache; returns 0 when found. */
int ceilings_load(ceilings *c);
/* Write (or replace) this machine's entry in the cache; returns 0 on success, else errno. */
int ceilings_save(const ceilings *c);
/* The cached ceilings of this machine, measuring and saving them first when there are none
 * (with a progress line on `progress`). Returns 0 when c holds ceilings. */
int ceilings_get(ceilings *c, FILE *progress);
/* The key of this machine: CPU model and widest ISA. */
void ceilings_key(char *cpu, size_t n_cpu, char *isa, size_t n_isa);
void ceilings_print(FILE *f, const ceilings *c);
/* FMA GFLOP/s at t threads: the best ISA level, interpolated between the 1- and N-thread
 * figures. */
double ceilings_peak(const ceilings *c, int t);
/* Bandwidth GB/s at a level for t threads: the mean of read, copy and triad, interpolated
 * between the 1- and N-thread figures. */
double ceilings_bw(const ceilings *c, int level, int t);
/* Where a node's working set of `bytes` (its inputs and outputs) mostly lives: L3 when it
 * fits there, else DRAM. L1 and L2 are not used as roofs: a node's operands arrive from the
 * node before it and outlive it, so only the shared cache holds them across nodes. */
int ceilings_level_of(const ceilings *c, double bytes, int t);
/* One JSON object of the ceilings (no newline). */
void ceilings_json(FILE *f, const ceilings *c);

#endif
