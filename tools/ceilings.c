/* The ceilings cache (ceilings.h): a JSON file holding one entry per (CPU model, ISA), one
 * entry per line so that replacing this machine's entry keeps the others. */
#include "ceilings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const ceil_isa_names[CEIL_ISAS] = {"avx512", "avx2", "sse"};
const char *const ceil_level_names[CEIL_LEVELS] = {"L1", "L2", "L3", "DRAM"};
const char *const ceil_kind_names[CEIL_KINDS] = {"read", "copy", "triad"};

void ceilings_key(char *cpu, size_t n_cpu, char *isa, size_t n_isa) {
  snprintf(cpu, n_cpu, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) continue;
    for (v++; *v == ' ' || *v == '\t'; v++) {}
    size_t k = 0;
    for (; v[k] && v[k] != '\n' && k + 1 < n_cpu; k++) cpu[k] = v[k] == '"' || v[k] == '\\' ? '_' : v[k];
    cpu[k] = 0;
    break;
  }
  if (f) fclose(f);
  const char *best = "none";
#if defined(__x86_64__)
  __builtin_cpu_init();
  best = __builtin_cpu_supports("avx512f") ? "avx512" : __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma") ? "avx2" : __builtin_cpu_supports("fma") ? "sse" : "none";
#endif
  snprintf(isa, n_isa, "%s", best);
}

const char *ceilings_path(char *buf, size_t n) {
  const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (x && *x == '/') snprintf(buf, n, "%s/kiln/ceilings.json", x);
  else if (home && *home) snprintf(buf, n, "%s/.cache/kiln/ceilings.json", home);
  else return NULL;
  return buf;
}

void ceilings_json(FILE *f, const ceilings *c) {
  fprintf(f, "{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"seconds\": %.2f", c->cpu, c->isa,
          c->threads, c->seconds);
  for (int l = 0; l < 3; l++) fprintf(f, ", \"%s_bytes\": %.0f", ceil_level_names[l], c->cache_bytes[l]);
  for (int l = 0; l < CEIL_LEVELS; l++)
    fprintf(f, ", \"%s_buffer_bytes\": %.0f", ceil_level_names[l], c->buffer_bytes[l]);
  for (int i = 0; i < CEIL_ISAS; i++)
    fprintf(f, ", \"fma_%s_gflops_1t\": %.2f, \"fma_%s_gflops_nt\": %.2f", ceil_isa_names[i], c->fma[i][0],
            ceil_isa_names[i], c->fma[i][1]);
  for (int l = 0; l < CEIL_LEVELS; l++)
    for (int k = 0; k < CEIL_KINDS; k++)
      fprintf(f, ", \"%s_%s_gbs_1t\": %.2f, \"%s_%s_gbs_nt\": %.2f", ceil_level_names[l], ceil_kind_names[k],
              c->bw[l][k][0], ceil_level_names[l], ceil_kind_names[k], c->bw[l][k][1]);
  fprintf(f, ", \"dispatch_us_2t\": %.3f, \"dispatch_us_nt\": %.3f}", c->dispatch_us[0], c->dispatch_us[1]);
}

/* The number after "key": in line, or -1 when absent. */
static double field(const char *line, const char *key) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(line, pat);
  return p ? strtod(p + strlen(pat), NULL) : -1;
}

static int str_field(const char *line, const char *key, char *out, size_t n) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  const char *p = strstr(line, pat);
  if (!p) return -1;
  p += strlen(pat);
  size_t k = 0;
  while (p[k] && p[k] != '"' && k + 1 < n) out[k] = p[k], k++;
  out[k] = 0;
  return 0;
}

static int parse_entry(const char *line, ceilings *c) {
  memset(c, 0, sizeof *c);
  if (str_field(line, "cpu", c->cpu, sizeof c->cpu) || str_field(line, "isa", c->isa, sizeof c->isa)) return -1;
  c->threads = (int)field(line, "threads");
  c->seconds = field(line, "seconds");
  char k[64];
  for (int l = 0; l < 3; l++) {
    snprintf(k, sizeof k, "%s_bytes", ceil_level_names[l]);
    c->cache_bytes[l] = field(line, k);
  }
  for (int l = 0; l < CEIL_LEVELS; l++) {
    snprintf(k, sizeof k, "%s_buffer_bytes", ceil_level_names[l]);
    c->buffer_bytes[l] = field(line, k);
  }
  for (int i = 0; i < CEIL_ISAS; i++)
    for (int t = 0; t < 2; t++) {
      snprintf(k, sizeof k, "fma_%s_gflops_%s", ceil_isa_names[i], t ? "nt" : "1t");
      c->fma[i][t] = field(line, k);
    }
  for (int l = 0; l < CEIL_LEVELS; l++)
    for (int b = 0; b < CEIL_KINDS; b++)
      for (int t = 0; t < 2; t++) {
        snprintf(k, sizeof k, "%s_%s_gbs_%s", ceil_level_names[l], ceil_kind_names[b], t ? "nt" : "1t");
        c->bw[l][b][t] = field(line, k);
        if (c->bw[l][b][t] <= 0) return -1; /* an entry of an older or damaged file */
      }
  c->dispatch_us[0] = field(line, "dispatch_us_2t");
  c->dispatch_us[1] = field(line, "dispatch_us_nt");
  return c->threads >= 1 && c->fma[0][0] >= 0 && c->cache_bytes[2] > 0 ? 0 : -1;
}

int ceilings_load(ceilings *c) {
  char path[1024], cpu[128], isa[16], line[8192];
  if (!ceilings_path(path, sizeof path)) return -1;
  ceilings_key(cpu, sizeof cpu, isa, sizeof isa);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int found = -1;
  while (found && fgets(line, sizeof line, f))
    if (!parse_entry(line, c) && !strcmp(c->cpu, cpu) && !strcmp(c->isa, isa)) found = 0;
  fclose(f);
  return found;
}

static int mkdirs(char *path) { /* every folder of a file path */
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int bad = mkdir(path, 0755) && errno != EEXIST;
    *p = '/';
    if (bad) return errno;
  }
  return 0;
}

int ceilings_save(const ceilings *c) {
  char path[1024], tmp[1100], line[8192];
  if (!ceilings_path(path, sizeof path)) return ENOENT;
  int e = mkdirs(path);
  if (e) return e;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *in = fopen(path, "r"), *out = fopen(tmp, "w");
  if (!out) {
    e = errno;
    if (in) fclose(in);
    return e;
  }
  fprintf(out, "[\n");
  ceilings other;
  while (in && fgets(line, sizeof line, in)) { /* keep the other machines' entries */
    if (parse_entry(line, &other) || (!strcmp(other.cpu, c->cpu) && !strcmp(other.isa, c->isa))) continue;
    ceilings_json(out, &other);
    fprintf(out, ",\n");
  }
  if (in) fclose(in);
  ceilings_json(out, c);
  fprintf(out, "\n]\n");
  e = ferror(out) ? EIO : 0;
  if (fclose(out) && !e) e = errno;
  if (!e && rename(tmp, path)) e = errno;
  if (e) remove(tmp);
  return e;
}

int ceilings_get(ceilings *c, FILE *progress) {
  if (!ceilings_load(c)) return 0;
  if (progress) fprintf(progress, "kiln: no cached ceilings for this machine: calibrating once (kiln calibrate)\n");
  if (ceilings_measure(c, 0, 0, progress)) return -1;
  char path[1024];
  int e = ceilings_save(c);
  if (e && progress)
    fprintf(progress, "kiln: cannot cache the ceilings in %s: %s\n",
            ceilings_path(path, sizeof path) ? path : "(no cache directory)", strerror(e));
  return 0;
}

void ceilings_print(FILE *f, const ceilings *c) {
  fprintf(f, "ceilings of %s (%s), N = %d threads, measured in %.1f s\n", c->cpu, c->isa, c->threads, c->seconds);
  fprintf(f, "caches: L1d %.0f KiB, L2 %.0f KiB, L3 %.1f MiB\n", c->cache_bytes[0] / 1024,
          c->cache_bytes[1] / 1024, c->cache_bytes[2] / 1048576);
  fprintf(f, "\nFMA peak, float32 GFLOP/s %10s %10s\n", "1 thread", "N threads");
  for (int i = 0; i < CEIL_ISAS; i++)
    if (c->fma[i][0] > 0) fprintf(f, "  %-24s %10.1f %10.1f\n", ceil_isa_names[i], c->fma[i][0], c->fma[i][1]);
  fprintf(f, "\nbandwidth GB/s    buffer %8s %8s %8s   %8s %8s %8s\n", "read", "copy", "triad", "read", "copy", "triad");
  fprintf(f, "                         %26s   %26s\n", "------- 1 thread -------", "------ N threads -------");
  for (int l = 0; l < CEIL_LEVELS; l++) {
    double b = c->buffer_bytes[l];
    fprintf(f, "  %-6s %12.0f KiB", ceil_level_names[l], b / 1024);
    for (int t = 0; t < 2; t++) {
      for (int k = 0; k < CEIL_KINDS; k++) fprintf(f, " %8.1f", c->bw[l][k][t]);
      fprintf(f, t ? "\n" : "  ");
    }
  }
  fprintf(f, "\nthread-pool dispatch (empty parallel loop): %.2f us on 2 threads, %.2f us on %d\n",
          c->dispatch_us[0], c->dispatch_us[1], c->threads);
}

static double lerp_threads(double one, double many, int n, int t) {
  if (t <= 1 || n <= 1) return one;
  if (t >= n) return many;
  return one + (many - one) * (double)(t - 1) / (double)(n - 1);
}

double ceilings_peak(const ceilings *c, int t) {
  double best = 0;
  for (int i = 0; i < CEIL_ISAS; i++) {
    double g = lerp_threads(c->fma[i][0], c->fma[i][1], c->threads, t);
    if (g > best) best = g;
  }
  return best;
}

double ceilings_bw(const ceilings *c, int level, int t) {
  double s = 0;
  for (int k = 0; k < CEIL_KINDS; k++) s += lerp_threads(c->bw[level][k][0], c->bw[level][k][1], c->threads, t);
  return s / CEIL_KINDS;
}

int ceilings_level_of(const ceilings *c, double bytes, int t) {
  (void)t;
  return bytes <= c->cache_bytes[2] ? CEIL_L3 : CEIL_DRAM;
}
