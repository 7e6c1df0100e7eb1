#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_session_flag(const char *arg, kiln_options *opts) {
  if (!strcmp(arg, "--inter-op")) {
    opts->inter_op = 1;
  } else if (!strcmp(arg, "--strict-fp32")) {
    opts->strict_fp32 = 1;
  } else if (!strcmp(arg, "--lazy-weights")) {
    opts->lazy_weights = 1;
  } else {
    return 0;
  }
  return 1;
}

int cli_parse_dim(cli_dims *d, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || d->n == 32) return -1;
  char *end;
  long long v = strtoll(eq + 1, &end, 10);
  if (*end || v < 0) return -1;
  static char names[32][128];
  size_t len = (size_t)(eq - arg) < 127 ? (size_t)(eq - arg) : 127;
  memcpy(names[d->n], arg, len);
  names[d->n][len] = 0;
  d->names[d->n] = names[d->n];
  d->values[d->n++] = v;
  return 0;
}

static int64_t dim_value(const cli_dims *d, const char *name) {
  for (size_t i = 0; d && name && i < d->n; i++)
    if (!strcmp(d->names[i], name)) return d->values[i];
  return d && d->fallback > 0 ? d->fallback : 1;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

__attribute__((format(printf, 3, 4))) static kiln_code cli_err(kiln_error *err, kiln_code code,
                                                                const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Deterministic random values: floats uniform in [-1, 1), integers in [0, 4), bools 0/1. */
static kiln_code random_input(const kiln_io_info *info, const cli_dims *dims, uint64_t *rng,
                              kiln_tensor **out, kiln_error *err) {
  if (info->kind != KILN_KIND_TENSOR || info->rank < 0 || info->dtype == KILN_UNDEFINED)
    return cli_err(err, KILN_ERR_INVALID_ARG,
                   "input '%s' has no fixed tensor type; give it with --input %s=FILE", info->name, info->name);
  int64_t shape[KILN_MAX_RANK];
  for (int d = 0; d < info->rank; d++)
    shape[d] = info->dims[d] >= 0 ? info->dims[d] : dim_value(dims, info->dim_names[d]);
  kiln_tensor *t;
  kiln_code rc = kiln_tensor_create(info->dtype, info->rank, shape, &t, err);
  if (rc) return rc;
  int64_t n = kiln_tensor_numel(t);
  void *p = kiln_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rng_next(rng);
    double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
    switch (info->dtype) {
      case KILN_FLOAT: ((float *)p)[i] = (float)u; break;
      case KILN_DOUBLE: ((double *)p)[i] = u; break;
      case KILN_INT64: ((int64_t *)p)[i] = (int64_t)(r % 4); break;
      case KILN_INT32: ((int32_t *)p)[i] = (int32_t)(r % 4); break;
      case KILN_INT8: case KILN_UINT8: case KILN_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r % 2); break;
      case KILN_STRING: break;
      default: break; /* other types stay zero */
    }
  }
  *out = t;
  return KILN_OK;
}

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static kiln_pb_format pb_format(const kiln_io_info *info) {
  if (info->kind == KILN_KIND_TENSOR && info->dtype == KILN_UNDEFINED) return KILN_PB_AUTO;
  return (kiln_pb_format)info->kind;
}

static kiln_code load_file(const char *path, const kiln_io_info *info, kiln_tensor **out,
                           kiln_error *err) {
  if (has_suffix(path, ".npy")) return kiln_tensor_load_npy(path, out, err);
  return kiln_value_load_pb(path, pb_format(info), out, err);
}

kiln_code cli_make_feed(kiln_session *s, const char *inputs_dir, size_t n_input_args,
                        char **input_args, const cli_dims *dims, unsigned seed, cli_feed *feed,
                        kiln_error *err) {
  size_t n = kiln_session_input_count(s);
  memset(feed, 0, sizeof *feed);
  feed->names = calloc(n + 1, sizeof *feed->names);
  feed->values = calloc(n + 1, sizeof *feed->values);
  if (!feed->names || !feed->values) return cli_err(err, KILN_ERR_NOMEM, "out of memory");
  feed->n = n;
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ seed;
  kiln_code rc = KILN_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    kiln_io_info info;
    kiln_session_input_info(s, i, &info, NULL);
    feed->names[i] = info.name;
    for (size_t k = 0; k < n_input_args && !rc; k++) {
      const char *eq = strchr(input_args[k], '=');
      if (eq && (size_t)(eq - input_args[k]) == strlen(info.name) &&
          !strncmp(input_args[k], info.name, strlen(info.name))) {
        kiln_tensor_free(feed->values[i]);
        feed->values[i] = NULL;
        rc = load_file(eq + 1, &info, &feed->values[i], err);
      }
    }
    if (!rc && !feed->values[i] && inputs_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/input_%zu.pb", inputs_dir, i);
      rc = kiln_value_load_pb(path, pb_format(&info), &feed->values[i], err);
    }
    if (!rc && !feed->values[i]) rc = random_input(&info, dims, &rng, &feed->values[i], err);
  }
  for (size_t k = 0; k < n_input_args && !rc; k++) {
    const char *eq = strchr(input_args[k], '=');
    size_t len = eq ? (size_t)(eq - input_args[k]) : 0;
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= eq && strlen(feed->names[i]) == len && !strncmp(feed->names[i], input_args[k], len);
    if (!found) rc = cli_err(err, KILN_ERR_INVALID_ARG, "--input %s: the model has no such input (or no NAME=FILE)", input_args[k]);
  }
  return rc;
}

void cli_feed_free(cli_feed *feed) {
  for (size_t i = 0; i < feed->n; i++) kiln_tensor_free(feed->values[i]);
  free(feed->values);
  free(feed->names);
  memset(feed, 0, sizeof *feed);
}

const char *cli_info_str(const kiln_io_info *info, char *buf, size_t n) {
  size_t off = (size_t)snprintf(buf, n, "%s%s", info->kind == KILN_KIND_SEQUENCE ? "seq " : info->kind == KILN_KIND_NONE ? "optional " : "",
                                kiln_dtype_name(info->dtype));
  if (info->rank < 0) {
    if (off < n) snprintf(buf + off, n - off, "[?]");
    return buf;
  }
  if (off < n) off += (size_t)snprintf(buf + off, n - off, "[");
  for (int d = 0; d < info->rank && off < n; d++) {
    const char *sep = d ? "," : "";
    if (info->dim_names[d]) off += (size_t)snprintf(buf + off, n - off, "%s%s", sep, info->dim_names[d]);
    else if (info->dims[d] < 0) off += (size_t)snprintf(buf + off, n - off, "%s?", sep);
    else off += (size_t)snprintf(buf + off, n - off, "%s%lld", sep, (long long)info->dims[d]);
  }
  if (off < n) snprintf(buf + off, n - off, "]");
  return buf;
}

static double elem(const kiln_tensor *t, int64_t i) {
  const void *p = kiln_tensor_cdata(t);
  switch (kiln_tensor_dtype(t)) {
    case KILN_FLOAT: return ((const float *)p)[i];
    case KILN_DOUBLE: return ((const double *)p)[i];
    case KILN_INT64: return (double)((const int64_t *)p)[i];
    case KILN_INT32: return ((const int32_t *)p)[i];
    case KILN_INT8: return ((const int8_t *)p)[i];
    case KILN_UINT8: case KILN_BOOL: return ((const uint8_t *)p)[i];
    case KILN_INT16: return ((const int16_t *)p)[i];
    case KILN_UINT16: return ((const uint16_t *)p)[i];
    case KILN_UINT32: return ((const uint32_t *)p)[i];
    case KILN_UINT64: return (double)((const uint64_t *)p)[i];
    default: return NAN;
  }
}

void cli_print_value(FILE *f, const char *name, const kiln_tensor *v) {
  if (kiln_tensor_kind(v) == KILN_KIND_NONE) {
    fprintf(f, "  %s: none\n", name);
    return;
  }
  if (kiln_tensor_kind(v) == KILN_KIND_SEQUENCE) {
    fprintf(f, "  %s: sequence of %zu\n", name, kiln_sequence_length(v));
    for (size_t i = 0; i < kiln_sequence_length(v) && i < 4; i++) cli_print_value(f, "    item", kiln_sequence_at(v, i));
    return;
  }
  fprintf(f, "  %s: %s[", name, kiln_dtype_name(kiln_tensor_dtype(v)));
  for (int d = 0; d < kiln_tensor_rank(v); d++) fprintf(f, d ? ",%lld" : "%lld", (long long)kiln_tensor_dims(v)[d]);
  fprintf(f, "]");
  int64_t n = kiln_tensor_numel(v);
  if (kiln_tensor_dtype(v) == KILN_STRING) {
    fprintf(f, " = [");
    for (int64_t i = 0; i < n && i < 6; i++) fprintf(f, i ? ", \"%s\"" : "\"%s\"", ((char *const *)kiln_tensor_cdata(v))[i]);
    fprintf(f, n > 6 ? ", ...]\n" : "]\n");
    return;
  }
  if (isnan(elem(v, 0)) && n) {
    fprintf(f, "\n");
    return;
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  int64_t arg = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = elem(v, i);
    if (x < mn) mn = x;
    if (x > mx) {
      mx = x;
      arg = i;
    }
    sum += x;
  }
  fprintf(f, " = [");
  for (int64_t i = 0; i < n && i < 6; i++) fprintf(f, i ? ", %.6g" : "%.6g", elem(v, i));
  fprintf(f, n > 6 ? ", ...]" : "]");
  if (n > 1) fprintf(f, "  min %.6g max %.6g (at %lld) mean %.6g", mn, mx, (long long)arg, sum / (double)n);
  fprintf(f, "\n");
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int cli_parse_level(const char *cmd, const char *s, int *level) {
  long n;
  if (cli_parse_long(s, 0, 2, &n)) return cli_usage_error(cmd, "--level expects 0, 1 or 2, got '%s'", s);
  *level = (int)n;
  return CLI_OK;
}

int cli_parse_limit(const char *cmd, const char *arg, kiln_options *opts) {
  static const char *const names[] = {"max_subgraph_depth", "max_nodes", "max_string_bytes",
                                      "max_attribute_bytes", "max_memory_bytes", "max_run_ms"};
  const char *eq = strchr(arg, '=');
  char *end;
  errno = 0;
  long long v = eq ? strtoll(eq + 1, &end, 10) : -1;
  if (eq && end != eq + 1 && !errno && v > 0) {
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if ((shift || !*end) && (!shift || !end[1]) && v <= (INT64_MAX >> shift)) {
      int64_t n = (int64_t)v << shift;
      size_t len = (size_t)(eq - arg), k = 0;
      while (k < 6 && (strlen(names[k]) != len || strncmp(arg, names[k], len))) k++;
      if (k == 0 && n <= 1000000) opts->max_subgraph_depth = (int)n;
      if (k == 1) opts->max_nodes = n;
      if (k == 2) opts->max_string_bytes = n;
      if (k == 3) opts->max_attribute_bytes = n;
      if (k == 4) opts->max_memory_bytes = n;
      if (k == 5) opts->max_run_ms = n;
      if (k < 6 && (k || n <= 1000000)) return CLI_OK;
    }
  }
  return cli_usage_error(cmd, "--limit expects NAME=N with NAME max_subgraph_depth, max_nodes, "
                              "max_string_bytes, max_attribute_bytes, max_memory_bytes or max_run_ms, got '%s'", arg);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(kiln %s --help for usage)\n", cmd);
  va_end(ap);
  return CLI_USAGE;
}
