/* Measuring this machine's ceilings (ceilings.h): register-only FMA loops per ISA level
 * (fma_loop.h), read/copy/triad loops over buffers sized for each cache level, and the thread
 * pool's dispatch latency, at 1 and N threads. N threads run the same loop on their own data
 * between two barriers; the rate is the total work over the slowest thread's time. Each
 * figure is the best of several timed rounds (noise only ever slows a loop down). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ceilings.h"
#include "cli.h"
#include "fma_loop.h"

typedef float v16 __attribute__((vector_size(64), aligned(64)));

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- bandwidth loops over n v16 vectors, one version per ISA (vector extensions) ---- */

#define BW_LOOPS(SUFFIX, TARGET)                                                          \
  TARGET static float bw_read##SUFFIX(const v16 *a, size_t n) {                            \
    v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};                                            \
    for (size_t i = 0; i + 4 <= n; i += 4) {                                               \
      s0 += a[i]; s1 += a[i + 1]; s2 += a[i + 2]; s3 += a[i + 3];                          \
    }                                                                                      \
    v16 s = s0 + s1 + s2 + s3;                                                             \
    return s[0] + s[5] + s[15];                                                            \
  }                                                                                        \
  TARGET static void bw_copy##SUFFIX(v16 *restrict d, const v16 *restrict a, size_t n) {   \
    for (size_t i = 0; i < n; i++) d[i] = a[i];                                            \
  }                                                                                        \
  TARGET static void bw_triad##SUFFIX(v16 *restrict d, const v16 *restrict a,              \
                                      const v16 *restrict b, size_t n) {                   \
    const v16 k = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, \
                   0.5f, 0.5f, 0.5f, 0.5f};                                                \
    for (size_t i = 0; i < n; i++) d[i] = a[i] + k * b[i];                                 \
  }

#if defined(__x86_64__)
BW_LOOPS(_512, __attribute__((target("avx512f"), noinline)))
BW_LOOPS(_256, __attribute__((target("avx2,fma"), noinline)))
#endif
BW_LOOPS(_base, __attribute__((noinline)))

static int g_wide; /* 2: avx512f, 1: avx2, 0: baseline */
static volatile float g_sink; /* keeps the caller's loop results live */

static float bw_run(int kind, v16 *d, const v16 *a, const v16 *b, size_t n) {
#if defined(__x86_64__)
  if (g_wide == 2) {
    if (kind == CEIL_READ) return bw_read_512(a, n);
    kind == CEIL_COPY ? bw_copy_512(d, a, n) : bw_triad_512(d, a, b, n);
    return d[0][0];
  }
  if (g_wide == 1) {
    if (kind == CEIL_READ) return bw_read_256(a, n);
    kind == CEIL_COPY ? bw_copy_256(d, a, n) : bw_triad_256(d, a, b, n);
    return d[0][0];
  }
#endif
  if (kind == CEIL_READ) return bw_read_base(a, n);
  kind == CEIL_COPY ? bw_copy_base(d, a, n) : bw_triad_base(d, a, b, n);
  return d[0][0];
}

/* ---- N threads running one job between barriers ---- */

typedef struct job {
  int what;          /* 0: fma, 1: bandwidth */
  int isa, kind;
  long reps;         /* loop repetitions per round */
  size_t n;          /* v16 vectors per array per thread */
  int threads;
  pthread_barrier_t start, end;
  int gate;          /* 0: workers wait, 1: go, -1: give up (atomic) */
  v16 **bufs;        /* 3 arrays per thread */
} job;

typedef struct worker {
  job *j;
  int tid;
  int rounds;
  volatile float sink; /* keeps the loops' results live */
} worker;

static float fma_run(int isa, long iters) {
#if defined(__x86_64__)
  if (isa == 0) return fma512(iters);
  if (isa == 1) return fma256(iters);
  return fma128(iters);
#else
  (void)isa;
  (void)iters;
  return 0;
#endif
}

static float job_body(job *j, int tid) {
  float s = 0;
  if (j->what == 0) {
    s = fma_run(j->isa, j->reps);
  } else {
    v16 **b = j->bufs + 3 * tid;
    for (long r = 0; r < j->reps; r++) s += bw_run(j->kind, b[2], b[0], b[1], j->n);
  }
  return s;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  int g;
  while (!(g = __atomic_load_n(&w->j->gate, __ATOMIC_ACQUIRE))) sched_yield();
  for (int r = 0; r < w->rounds && g > 0; r++) {
    pthread_barrier_wait(&w->j->start);
    w->sink += job_body(w->j, w->tid);
    pthread_barrier_wait(&w->j->end);
  }
  return NULL;
}

/* Best time of `rounds` rounds of the job on j->threads threads, seconds; -1 when the threads
 * could not be started. */
static double job_time(job *j, int rounds) {
  pthread_t th[256];
  worker w[256];
  int t = j->threads < 256 ? j->threads : 256, started = 1;
  j->gate = 0;
  for (int i = 1; i < t; i++) {
    w[i] = (worker){j, i, rounds, 0};
    if (pthread_create(&th[i], NULL, worker_main, &w[i])) break;
    started++;
  }
  if (started == t) {
    pthread_barrier_init(&j->start, NULL, (unsigned)t);
    pthread_barrier_init(&j->end, NULL, (unsigned)t);
  }
  __atomic_store_n(&j->gate, started == t ? 1 : -1, __ATOMIC_RELEASE);
  double best = started == t ? 1e30 : -1;
  for (int r = 0; r < rounds && started == t; r++) {
    pthread_barrier_wait(&j->start);
    double t0 = now_s();
    g_sink += job_body(j, 0);
    pthread_barrier_wait(&j->end);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
  if (started == t) {
    pthread_barrier_destroy(&j->start);
    pthread_barrier_destroy(&j->end);
  }
  return best;
}

/* Repetitions that make one round last about `target` seconds on one thread. */
static long calibrate_reps(job *j, double target) {
  int threads = j->threads;
  j->threads = 1;
  j->reps = 1;
  double dt;
  while ((dt = job_time(j, 1)) < target / 8 && j->reps < (1L << 40)) j->reps *= 4;
  j->threads = threads;
  long r = (long)((double)j->reps * target / (dt > 1e-9 ? dt : 1e-9));
  return r > 0 ? r : 1;
}

static void fma_measure(ceilings *c, int isa, int threads, double target, int rounds) {
  job j = {.what = 0, .isa = isa, .threads = 1};
  j.reps = 2000;
  j.reps = calibrate_reps(&j, target);
  for (int k = 0; k < 2; k++) {
    j.threads = k ? threads : 1;
    double dt = job_time(&j, rounds);
    int w = isa == 0 ? 16 : isa == 1 ? 8 : 4;
    c->fma[isa][k] = dt > 0 ? (double)j.reps * 12 * w * 2 * j.threads / (dt * 1e9) : 0;
  }
}

static int bw_measure(ceilings *c, int level, int threads, double target, int rounds) {
  /* one thread's working set: half of L1 and L2 (private), half of L3 or 4x L3 shared by all */
  double ws = level == CEIL_L1 ? c->cache_bytes[0] / 2 : level == CEIL_L2 ? c->cache_bytes[1] / 2
            : level == CEIL_L3 ? c->cache_bytes[2] / 2 : 4 * c->cache_bytes[2];
  if (level == CEIL_DRAM && ws < 64e6) ws = 64e6;
  if (level == CEIL_DRAM && ws > 512e6) ws = 512e6;
  /* ... but past L3 all the same: hypervisors report L3s of 480-508 MiB (the host's, all
   * slices together) that the 512 MB cap would not clear (Intel Xeon and AMD EPYC guests) */
  if (level == CEIL_DRAM && ws < 1.25 * c->cache_bytes[2]) ws = 1.25 * c->cache_bytes[2];
  c->buffer_bytes[level] = ws;
  int shared = level >= CEIL_L3;
  job j = {.what = 1, .threads = 1};
  j.bufs = calloc((size_t)threads * 3, sizeof *j.bufs);
  if (!j.bufs) return -1;
  int rc = 0;
  for (int k = 0; k < 2 && !rc; k++) {
    int t = k ? threads : 1;
    double per = shared ? ws / t : ws; /* bytes of the three arrays of one thread */
    j.n = (size_t)(per / 3 / sizeof(v16)) & ~(size_t)3;
    if (j.n < 4) j.n = 4;
    for (int i = 0; i < 3 * t && !rc; i++) {
      j.bufs[i] = aligned_alloc(64, j.n * sizeof(v16));
      if (!j.bufs[i]) rc = -1;
      else for (size_t e = 0; e < j.n; e++) for (int l = 0; l < 16; l++) j.bufs[i][e][l] = 1.0f;
    }
    for (int kind = 0; kind < CEIL_KINDS && !rc; kind++) {
      j.kind = kind;
      j.threads = 1;
      j.reps = calibrate_reps(&j, target);
      j.threads = t;
      double dt = job_time(&j, rounds);
      double streams = kind == CEIL_READ ? 1 : kind == CEIL_COPY ? 2 : 3;
      c->bw[level][kind][k] = dt > 0 ? streams * (double)(j.n * sizeof(v16)) * (double)j.reps * t / (dt * 1e9) : 0;
    }
    for (int i = 0; i < 3 * t; i++) {
      free(j.bufs[i]);
      j.bufs[i] = NULL;
    }
  }
  free(j.bufs);
  return rc;
}

static void cache_sizes(ceilings *c) {
  static const int sc[3] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE};
  static const double fallback[3] = {32768, 1 << 20, 16 << 20};
  for (int l = 0; l < 3; l++) {
    long b = (long)kiln_cpu_cache_bytes(l + 1); /* the kernels' blocking reads the same */
    if (b <= 0) b = sysconf(sc[l]);
    c->cache_bytes[l] = b > 0 ? (double)b : fallback[l];
  }
}

/* The progress line: redrawn in place on a terminal, else one line when measuring starts. */
static void note(FILE *f, const char *what) {
  if (!f) return;
  if (isatty(fileno(f))) fprintf(f, "\rkiln calibrate: measuring %-40s", what);
  else if (!strcmp(what, "start")) fprintf(f, "kiln calibrate: measuring FMA peak, bandwidth and pool latency ...\n");
  fflush(f);
}

static void note_done(FILE *f) {
  if (f && isatty(fileno(f))) fprintf(f, "\r%70s\r", "");
}

int ceilings_measure(ceilings *c, int threads, int quick, FILE *progress) {
  double t0 = now_s();
  memset(c, 0, sizeof *c);
  ceilings_key(c->cpu, sizeof c->cpu, c->isa, sizeof c->isa);
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  c->threads = threads;
  cache_sizes(c);
  g_wide = !strcmp(c->isa, "avx512") ? 2 : !strcmp(c->isa, "avx2") ? 1 : 0;
  /* many short rounds: on a loaded machine the best of them still catches a quiet slice */
  double target = quick ? 0.001 : 0.005;
  int rounds = quick ? 3 : 15;
  note(progress, "start");
  int first = !strcmp(c->isa, "avx512") ? 0 : !strcmp(c->isa, "avx2") ? 1 : !strcmp(c->isa, "sse") ? 2 : CEIL_ISAS;
  for (int isa = first; isa < CEIL_ISAS; isa++) {
    char what[64];
    snprintf(what, sizeof what, "FMA peak (%s)", ceil_isa_names[isa]);
    note(progress, what);
    fma_measure(c, isa, threads, target, rounds);
  }
  for (int l = 0; l < CEIL_LEVELS; l++) {
    char what[64];
    snprintf(what, sizeof what, "%s bandwidth", ceil_level_names[l]);
    note(progress, what);
    if (bw_measure(c, l, threads, l == CEIL_DRAM ? target * 4 : target, l == CEIL_DRAM ? 5 : rounds)) {
      note_done(progress);
      return -1;
    }
  }
  note(progress, "thread-pool dispatch latency");
  kiln_error err = {0};
  double ns = 0;
  if (kiln_pool_dispatch_ns(2, &ns, &err) == KILN_OK) c->dispatch_us[0] = ns * 1e-3;
  if (kiln_pool_dispatch_ns(threads, &ns, &err) == KILN_OK) c->dispatch_us[1] = ns * 1e-3;
  for (int i = 0; i < CEIL_ISAS; i++) /* N threads can always do what one does */
    if (c->fma[i][1] < c->fma[i][0]) c->fma[i][1] = c->fma[i][0];
  for (int l = 0; l < CEIL_LEVELS; l++)
    for (int k = 0; k < CEIL_KINDS; k++)
      if (c->bw[l][k][1] < c->bw[l][k][0]) c->bw[l][k][1] = c->bw[l][k][0];
  note_done(progress);
  c->seconds = now_s() - t0;
  return 0;
}

/* ---- the command ---- */

static void help(FILE *f) {
  fprintf(f,
          "usage: kiln calibrate [--threads N] [--quick] [--json FILE] [--cached]\n"
          "Measures this machine's ceilings (in well under 20 s) and caches them for kiln profile:\n"
          "  - float32 FMA peak per ISA level (avx512, avx2, sse: 16-, 8-, 4-lane FMA) at 1 and N\n"
          "    threads (a register-only loop of 12 independent FMA chains);\n"
          "  - read, copy and triad (a = b + k*c) bandwidth from buffers sized for L1 (half of it),\n"
          "    L2 (half), L3 (half, shared by the threads) and DRAM (4x L3 within 64-512 MB, and\n"
          "    at least 1.25x L3) at 1 and N threads; bytes counted as read + written (copy 2,\n"
          "    triad 3 per element);\n"
          "  - the thread pool's dispatch latency (an empty parallel loop) on 2 and N threads.\n"
          "Cache sizes come from cpuid (else /sys/devices/system/cpu/cpu0/cache). The results are stored in\n"
          "$XDG_CACHE_HOME/kiln/ceilings.json (default ~/.cache/kiln/ceilings.json), one entry per\n"
          "CPU model and ISA, replacing the entry of this machine.\n"
          "  --threads N  N of the multi-thread figures (default: one per online CPU)\n"
          "  --quick      about 10x shorter timings (noisier; for tests)\n"
          "  --cached     print the cached ceilings without measuring (exit 1 when none)\n"
          "  --json FILE  also write them as JSON ('-' for stdout)\n"
          "Exit codes: 0 ok, 1 measurement or cache error, 2 usage error.\n");
}

int cmd_calibrate(int argc, char **argv) {
  long threads = 0;
  int quick = 0, cached = 0;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      help(stdout);
      return CLI_OK;
    } else if (!strcmp(o, "--quick")) {
      quick = 1;
    } else if (!strcmp(o, "--cached")) {
      cached = 1;
    } else if (!strcmp(o, "--threads") || !strcmp(o, "--json")) {
      if (!v) return cli_usage_error("calibrate", "%s needs a value", o);
      if (!strcmp(o, "--json")) json = v;
      else if (cli_parse_long(v, 1, 256, &threads))
        return cli_usage_error("calibrate", "--threads expects a number in [1, 256], got '%s'", v);
      i++;
    } else {
      return cli_usage_error("calibrate", "unknown option '%s'", o);
    }
  }
  ceilings c;
  char path[1024];
  if (cached) {
    if (ceilings_load(&c)) {
      fprintf(stderr, "kiln calibrate: no cached ceilings for this machine in %s\n",
              ceilings_path(path, sizeof path) ? path : "(no cache directory)");
      return CLI_ERR;
    }
  } else {
    if (ceilings_measure(&c, (int)threads, quick, stderr)) {
      fprintf(stderr, "kiln calibrate: out of memory for the bandwidth buffers\n");
      return CLI_ERR;
    }
    int e = ceilings_save(&c);
    if (e) fprintf(stderr, "kiln calibrate: cannot write %s: %s\n",
                   ceilings_path(path, sizeof path) ? path : "the cache", strerror(e));
    if (e) return CLI_ERR;
  }
  ceilings_print(stdout, &c);
  if (json) {
    FILE *f = strcmp(json, "-") ? fopen(json, "w") : stdout;
    if (!f) {
      fprintf(stderr, "kiln calibrate: cannot write '%s': %s\n", json, strerror(errno));
      return CLI_ERR;
    }
    ceilings_json(f, &c);
    fputc('\n', f);
    if (f != stdout) fclose(f);
  }
  return CLI_OK;
}
