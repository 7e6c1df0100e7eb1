/* ONNX conformance runner over the test data Debian's libonnx-testdata ships.
 *
 * Every test runs in a forked child, so a crash or a hang is one failed test, not a lost run.
 * A checked-in list of known failures makes the run strict both ways: a listed test that now
 * passes, or an unlisted test that fails, fails the run. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/kiln.h"

#define DEFAULT_DATA "/usr/share/libonnx-testdata/data"
static const char *const DEFAULT_SUITES = "node,pytorch-converted,pytorch-operator,simple";
enum { MAX_SUITES = 16 };
enum { R_PASS = 0, R_FAIL = 1, R_ERROR = 2 };

typedef struct {
  const char *data, *expected, *write_expected, *filter, *suites;
  int verbose, timeout, level;
} opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kiln_conformance [--data DIR] [--expected FILE] [--write-expected FILE]\n"
          "                        [--suites A,B,...] [--filter SUBSTR] [--level N] [--timeout SEC]\n"
          "                        [--inter-op] [-v]\n"
          "Runs every model under DIR/SUITE for each suite (default: node,pytorch-converted,\n"
          "pytorch-operator,simple; `light` runs DIR/light/light_*.onnx against their\n"
          "light_*_output_0.pb) and compares its outputs with the reference (floats:\n"
          "|a-e| <= 1e-5 + 1e-3*|e|; NaN equals NaN).\n"
          "--data DIR         default " DEFAULT_DATA " (Debian 12's ONNX 1.12 data);\n"
          "                   ONNX 1.17's: /var/cache/kiln/onnx-testdata/1.17.0/data\n"
          "--expected FILE    known failures, one 'suite/test  # reason' per line; the run fails\n"
          "                   when a listed test passes or an unlisted one fails\n"
          "--write-expected F write the current failures to F (with kiln's error as the reason)\n"
          "--inter-op         two threads, independent nodes run at the same time\n");
}

/* ---- comparison ---- */

static int cmp_tensor(const kiln_tensor *a, const kiln_tensor *e, char *why, size_t n) {
  if (kiln_tensor_kind(a) != kiln_tensor_kind(e)) {
    snprintf(why, n, "kind %d, expected %d", kiln_tensor_kind(a), kiln_tensor_kind(e));
    return 0;
  }
  if (kiln_tensor_kind(e) == KILN_KIND_NONE) return 1;
  if (kiln_tensor_kind(e) == KILN_KIND_SEQUENCE) {
    size_t la = kiln_sequence_length(a), le = kiln_sequence_length(e);
    if (la != le) {
      snprintf(why, n, "sequence length %zu, expected %zu", la, le);
      return 0;
    }
    for (size_t i = 0; i < le; i++)
      if (!cmp_tensor(kiln_sequence_at(a, i), kiln_sequence_at(e, i), why, n)) return 0;
    return 1;
  }
  kiln_dtype dt = kiln_tensor_dtype(e);
  if (kiln_tensor_dtype(a) != dt) {
    snprintf(why, n, "dtype %s, expected %s", kiln_dtype_name(kiln_tensor_dtype(a)), kiln_dtype_name(dt));
    return 0;
  }
  int r = kiln_tensor_rank(e);
  if (kiln_tensor_rank(a) != r || memcmp(kiln_tensor_dims(a), kiln_tensor_dims(e), (size_t)r * sizeof(int64_t))) {
    snprintf(why, n, "shape rank %d, expected rank %d (or dims differ)", kiln_tensor_rank(a), r);
    return 0;
  }
  int64_t cnt = kiln_tensor_numel(e);
  const void *pa = kiln_tensor_cdata(a), *pe = kiln_tensor_cdata(e);
  for (int64_t i = 0; i < cnt; i++) {
    double x, y;
    switch (dt) {
      case KILN_FLOAT: x = ((const float *)pa)[i]; y = ((const float *)pe)[i]; break;
      case KILN_DOUBLE: x = ((const double *)pa)[i]; y = ((const double *)pe)[i]; break;
      case KILN_FLOAT16: case KILN_BFLOAT16: {
        kiln_tensor *ta = NULL;
        (void)ta;
        uint16_t ha = ((const uint16_t *)pa)[i], he = ((const uint16_t *)pe)[i];
        if (dt == KILN_BFLOAT16) {
          uint32_t ba = (uint32_t)ha << 16, be = (uint32_t)he << 16;
          float fa, fe;
          memcpy(&fa, &ba, 4);
          memcpy(&fe, &be, 4);
          x = fa;
          y = fe;
        } else {
          /* compare half floats through their float value */
          float fa, fe;
          uint16_t h[2] = {ha, he};
          float *f[2] = {&fa, &fe};
          for (int k = 0; k < 2; k++) {
            uint32_t s = (uint32_t)(h[k] >> 15) << 31, ex = (h[k] >> 10) & 31, m = h[k] & 1023u;
            double v = ex == 0 ? ldexp(m, -24) : ex == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024.0, (int)ex - 25);
            *f[k] = (float)(s ? -v : v);
          }
          x = fa;
          y = fe;
        }
        break;
      }
      case KILN_STRING: {
        const char *sa = ((char *const *)pa)[i], *se = ((char *const *)pe)[i];
        if (strcmp(sa, se)) {
          snprintf(why, n, "element %lld is \"%s\", expected \"%s\"", (long long)i, sa, se);
          return 0;
        }
        continue;
      }
      default: {
        size_t esz = kiln_dtype_size(dt);
        if (memcmp((const char *)pa + (size_t)i * esz, (const char *)pe + (size_t)i * esz, esz)) {
          snprintf(why, n, "integer element %lld differs", (long long)i);
          return 0;
        }
        continue;
      }
    }
    if (isnan(y) && isnan(x)) continue;
    if (isinf(y) && x == y) continue;
    if (!(fabs(x - y) <= 1e-5 + 1e-3 * fabs(y))) {
      snprintf(why, n, "element %lld is %.8g, expected %.8g", (long long)i, x, y);
      return 0;
    }
  }
  return 1;
}

/* ---- one test ---- */

static int count_files(const char *dir, const char *prefix) {
  int n = 0;
  char path[4096];
  for (;; n++) {
    snprintf(path, sizeof path, "%s/%s_%d.pb", dir, prefix, n);
    if (access(path, R_OK) != 0) return n;
  }
}

/* The declared kind says how to read the file; undeclared types are guessed. */
static kiln_pb_format pb_format(const kiln_io_info *info) {
  if (info->kind == KILN_KIND_TENSOR && info->dtype == KILN_UNDEFINED) return KILN_PB_AUTO;
  return (kiln_pb_format)info->kind;
}

/* ONNX 1.12's test generator stored bfloat16 tensors as uint16 (the same bits): read them as
 * the model declares. */
static void bf16_quirk(kiln_tensor *t, const kiln_io_info *info) {
  if (t && info->dtype == KILN_BFLOAT16 && kiln_tensor_kind(t) == KILN_KIND_TENSOR &&
      kiln_tensor_dtype(t) == KILN_UINT16)
    kiln_tensor_reinterpret(t, KILN_BFLOAT16, NULL);
}

/* --inter-op: run every model with two threads and independent nodes at the same time */
static int g_inter_op;

static kiln_session *open_model(const char *path, int level, char *why, size_t n) {
  kiln_error err = {0};
  kiln_options o;
  kiln_options_init(&o);
  o.opt_level = level;
  o.threads = g_inter_op ? 2 : 1;
  o.inter_op = g_inter_op;
  kiln_session *s = NULL;
  if (kiln_session_create(path, &o, &s, &err)) {
    size_t len = strlen(path); /* the message without the model's path */
    const char *m = err.message;
    if (!strncmp(m, path, len) && !strncmp(m + len, ": ", 2)) m += len + 2;
    snprintf(why, n, "load: %s", m);
    return NULL;
  }
  return s;
}

/* Runs s on the ni inputs and compares its outputs with the files exp[0..nout-1]. Twice: the
 * first run measures and builds the memory plan, the second runs in it. */
static int run_compare(kiln_session *s, int ni, const char **names, kiln_tensor **in,
                       char exp[][4096], char *why, size_t n) {
  kiln_error err = {0};
  size_t nout = kiln_session_output_count(s);
  kiln_tensor **out = calloc(nout + 1, sizeof *out);
  int result = R_PASS;
  for (int pass = 0; pass < 2 && result == R_PASS; pass++) {
    for (size_t i = 0; i < nout; i++) {
      kiln_tensor_free(out[i]);
      out[i] = NULL;
    }
    const char *tag = pass ? " (second run, planned memory)" : "";
    if (kiln_session_run(s, (size_t)ni, names, (const kiln_tensor *const *)in, nout, NULL, out, &err)) {
      snprintf(why, n, "run%s: %s", tag, err.message);
      result = R_ERROR;
    }
    for (size_t i = 0; i < nout && result == R_PASS; i++) {
      kiln_tensor *e = NULL;
      kiln_io_info oinfo;
      kiln_session_output_info(s, i, &oinfo, NULL);
      if (kiln_value_load_pb(exp[i], pb_format(&oinfo), &e, &err)) {
        snprintf(why, n, "expected output: %s", err.message);
        result = R_ERROR;
      } else {
        bf16_quirk(e, &oinfo);
        char w[600];
        if (!cmp_tensor(out[i], e, w, sizeof w)) {
          snprintf(why, n, "output '%s'%s: %s", oinfo.name, tag, w);
          result = R_FAIL;
        }
      }
      kiln_tensor_free(e);
    }
  }
  for (size_t i = 0; i < nout; i++) kiln_tensor_free(out[i]);
  free(out);
  return result;
}

/* A test directory: model.onnx and test_data_set_N/{input,output}_K.pb. */
static int run_test(const char *dir, int level, char *why, size_t n) {
  char path[4096];
  kiln_error err = {0};
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  kiln_session *s = open_model(path, level, why, n);
  if (!s) return R_ERROR;
  int result = R_PASS;
  DIR *d = opendir(dir);
  struct dirent *de;
  int sets = 0;
  while (result == R_PASS && d && (de = readdir(d))) {
    if (strncmp(de->d_name, "test_data_set_", 14)) continue;
    sets++;
    char set[4096];
    snprintf(set, sizeof set, "%s/%s", dir, de->d_name);
    int ni = count_files(set, "input"), no = count_files(set, "output");
    size_t nfeed = kiln_session_input_count(s), nout = kiln_session_output_count(s);
    kiln_tensor **in = calloc((size_t)ni + 1, sizeof *in);
    const char **names = calloc((size_t)ni + 1, sizeof *names);
    char(*exp)[4096] = calloc((size_t)no + 1, sizeof *exp);
    if ((size_t)no != nout) {
      snprintf(why, n, "model has %zu outputs, test data %d", nout, no);
      result = R_ERROR;
    }
    if ((size_t)ni > nfeed) {
      snprintf(why, n, "model has %zu inputs to feed, test data %d", nfeed, ni);
      result = R_ERROR;
    }
    for (int i = 0; i < ni && result == R_PASS; i++) {
      snprintf(path, sizeof path, "%s/input_%d.pb", set, i);
      kiln_io_info info;
      kiln_session_input_info(s, (size_t)i, &info, NULL);
      names[i] = info.name;
      if (kiln_value_load_pb(path, pb_format(&info), &in[i], &err)) {
        snprintf(why, n, "input: %s", err.message);
        result = R_ERROR;
      }
      bf16_quirk(in[i], &info);
    }
    for (int i = 0; i < no; i++) snprintf(exp[i], sizeof exp[i], "%s/output_%d.pb", set, i);
    if (result == R_PASS) result = run_compare(s, ni, names, in, exp, why, n);
    for (int i = 0; i < ni; i++) kiln_tensor_free(in[i]);
    free(in);
    free(names);
    free(exp);
  }
  if (d) closedir(d);
  if (result == R_PASS && sets == 0) {
    snprintf(why, n, "no test data sets");
    result = R_ERROR;
  }
  kiln_session_free(s);
  return result;
}

/* A `light` model (ONNX 1.14+): NAME.onnx, its weights made by ConstantOfShape, and the
 * expected NAME_output_0.pb for an input the suite does not store. Its outputs do not depend
 * on the input (every channel carries the same constants), so any input does: one float
 * tensor in [0, 1) of the declared shape. */
static int run_light(const char *model, int level, char *why, size_t n) {
  kiln_session *s = open_model(model, level, why, n);
  if (!s) return R_ERROR;
  int result = R_PASS;
  kiln_error err = {0};
  kiln_io_info info;
  kiln_tensor *in = NULL;
  char exp[1][4096];
  snprintf(exp[0], sizeof exp[0], "%.*s_output_0.pb", (int)(strlen(model) - 5), model);
  if (kiln_session_input_count(s) != 1 || kiln_session_output_count(s) != 1 ||
      kiln_session_input_info(s, 0, &info, NULL) || info.dtype != KILN_FLOAT || info.rank < 0 ||
      info.rank > 16) {
    snprintf(why, n, "a light model has one float input of known rank and one output");
    result = R_ERROR;
  } else {
    int64_t dims[16];
    for (int i = 0; i < info.rank && i < 16; i++) dims[i] = info.dims[i] > 0 ? info.dims[i] : 1;
    if (kiln_tensor_create(KILN_FLOAT, info.rank, dims, &in, &err)) {
      snprintf(why, n, "input: %s", err.message);
      result = R_ERROR;
    } else {
      float *x = kiln_tensor_data(in);
      for (int64_t i = 0; i < kiln_tensor_numel(in); i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f;
      const char *names[1] = {info.name};
      result = run_compare(s, 1, names, &in, exp, why, n);
    }
  }
  kiln_tensor_free(in);
  kiln_session_free(s);
  return result;
}

static int run_any(const char *path, int level, char *why, size_t n) {
  size_t len = strlen(path);
  if (len > 5 && !strcmp(path + len - 5, ".onnx")) return run_light(path, level, why, n);
  return run_test(path, level, why, n);
}

/* Fork, run, and read the verdict back through a pipe. */
static int run_isolated(const char *dir, const opts *o, char *why, size_t n) {
  int fds[2];
  if (pipe(fds) != 0) return run_any(dir, o->level, why, n);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm((unsigned)o->timeout);
    char w[1500] = {0};
    int r = run_any(dir, o->level, w, sizeof w);
    ssize_t wr = write(fds[1], w, strlen(w));
    (void)wr;
    close(fds[1]);
    _exit(r);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t k;
  while (got + 1 < n && (k = read(fds[0], why + got, n - 1 - got)) > 0) got += (size_t)k;
  why[got] = 0;
  close(fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    snprintf(why, n, "fork failed");
    return R_ERROR;
  }
  if (WIFSIGNALED(status)) {
    snprintf(why, n, WTERMSIG(status) == SIGALRM ? "timed out after %d s" : "crashed with signal %d",
             WTERMSIG(status) == SIGALRM ? o->timeout : WTERMSIG(status));
    return R_ERROR;
  }
  int code = WEXITSTATUS(status);
  return code <= R_ERROR ? code : R_ERROR;
}

/* ---- known failures ---- */

typedef struct {
  char **names;
  bool *may_pass; /* the reason says "(may pass)": a random op whose draw can match by chance */
  size_t n;
} list;

static void load_list(const char *path, list *l) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ') p++;
    if (*p == '#' || *p == '\n' || !*p) continue;
    size_t len = strcspn(p, " \t#\n");
    bool may_pass = strstr(p + len, "(may pass)") != NULL;
    p[len] = 0;
    l->names = realloc(l->names, (l->n + 1) * sizeof *l->names);
    l->may_pass = realloc(l->may_pass, (l->n + 1) * sizeof *l->may_pass);
    l->may_pass[l->n] = may_pass;
    l->names[l->n++] = strdup(p);
  }
  fclose(f);
}

/* 0: not listed; 1: listed; 2: listed as "(may pass)" */
static int in_list(const list *l, const char *name) {
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->names[i], name)) return l->may_pass[i] ? 2 : 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  opts o = {DEFAULT_DATA, NULL, NULL, NULL, DEFAULT_SUITES, 0, 60, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-v")) {
      o.verbose = 1;
    } else if (!strcmp(a, "--inter-op")) {
      g_inter_op = 1;
    } else if (next && !strcmp(a, "--data")) {
      o.data = argv[++i];
    } else if (next && !strcmp(a, "--expected")) {
      o.expected = argv[++i];
    } else if (next && !strcmp(a, "--write-expected")) {
      o.write_expected = argv[++i];
    } else if (next && !strcmp(a, "--suites")) {
      o.suites = argv[++i];
    } else if (next && !strcmp(a, "--filter")) {
      o.filter = argv[++i];
    } else if (next && !strcmp(a, "--level")) {
      o.level = atoi(argv[++i]);
    } else if (next && !strcmp(a, "--timeout")) {
      o.timeout = atoi(argv[++i]);
    } else {
      fprintf(stderr, "kiln_conformance: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  list known = {0};
  load_list(o.expected, &known);
  FILE *wf = o.write_expected ? fopen(o.write_expected, "w") : NULL;
  if (o.write_expected && !wf) {
    fprintf(stderr, "cannot write %s: %s\n", o.write_expected, strerror(errno));
    return 2;
  }
  if (wf) fprintf(wf, "# Known conformance failures: suite/test  # reason (kiln's error).\n"
                      "# Regenerate: kiln_conformance [--data DIR] [--suites ...] --write-expected FILE\n");
  char suite_buf[512], *suites[MAX_SUITES];
  int nsuites = 0;
  snprintf(suite_buf, sizeof suite_buf, "%s", o.suites);
  for (char *tok = strtok(suite_buf, ","); tok && nsuites < MAX_SUITES; tok = strtok(NULL, ","))
    suites[nsuites++] = tok;
  int tot[3] = {0}, unexpected = 0, fixed = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  printf("%-20s %7s %7s %7s   (%s, level %d)\n", "suite", "passed", "failed", "errored", o.data, o.level);
  for (int s = 0; s < nsuites; s++) {
    char sdir[4096];
    int light = !strcmp(suites[s], "light");
    snprintf(sdir, sizeof sdir, "%s/%s", o.data, suites[s]);
    DIR *d = opendir(sdir);
    if (!d) {
      fprintf(stderr, "cannot open %s: %s (run scripts/install-deps.sh --test, which fetches "
              "the ONNX test data)\n", sdir, strerror(errno));
      return 2;
    }
    char **names = NULL;
    size_t nn = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
      size_t len = strlen(de->d_name);
      if (light) {
        if (strncmp(de->d_name, "light_", 6) || len < 6 || strcmp(de->d_name + len - 5, ".onnx")) continue;
      } else if (strncmp(de->d_name, "test_", 5)) {
        continue;
      }
      names = realloc(names, (nn + 1) * sizeof *names);
      names[nn++] = light ? strndup(de->d_name, len - 5) : strdup(de->d_name);
    }
    closedir(d);
    if (nn) qsort(names, nn, sizeof *names, cmp_str);
    if (!nn) {
      fprintf(stderr, "%s holds no tests (run scripts/install-deps.sh --test)\n", sdir);
      return 2;
    }
    int cnt[3] = {0};
    for (size_t i = 0; i < nn; i++) {
      char full[512], dir[4096], why[1500];
      snprintf(full, sizeof full, "%s/%s", suites[s], names[i]);
      if (o.filter && !strstr(full, o.filter)) {
        free(names[i]);
        continue;
      }
      snprintf(dir, sizeof dir, "%s/%s%s", sdir, names[i], light ? ".onnx" : "");
      int r = run_isolated(dir, &o, why, sizeof why);
      cnt[r]++;
      int listed = in_list(&known, full);
      for (char *p = why; *p; p++)
        if (*p == '\n' || *p == '#') *p = ' ';
      if (r != R_PASS && wf) fprintf(wf, "%s  # %s%.200s\n", full, r == R_FAIL ? "wrong output: " : "", why);
      if (o.expected && r != R_PASS && !listed) {
        printf("UNEXPECTED FAILURE %s: %s\n", full, why);
        unexpected++;
      } else if (o.expected && r == R_PASS && listed == 1) {
        printf("NOW PASSES (remove it from the known failures) %s\n", full);
        fixed++;
      } else if (o.verbose && r != R_PASS) {
        printf("%s %s: %s\n", r == R_FAIL ? "FAIL " : "ERROR", full, why);
      }
      free(names[i]);
    }
    free(names);
    printf("%-20s %7d %7d %7d\n", suites[s], cnt[0], cnt[1], cnt[2]);
    for (int k = 0; k < 3; k++) tot[k] += cnt[k];
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (wf) fclose(wf);
  for (size_t i = 0; i < known.n; i++) free(known.names[i]);
  free(known.names);
  free(known.may_pass);
  printf("%-20s %7d %7d %7d   (%.1f s)\n", "total", tot[0], tot[1], tot[2],
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
  if (o.expected)
    printf("known failures: %d unexpected failures, %d listed tests now pass\n", unexpected, fixed);
  printf("%d passed, %d failed\n", tot[0], tot[1] + tot[2]);
  return unexpected || fixed ? 1 : 0;
}
