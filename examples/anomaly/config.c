/* config.json, as train.py writes it, read with jansson. Every field is checked: a missing or
 * mistyped one is an error naming it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "anomaly.h"

static int get_int(json_t *root, const char *key, int lo, int *out, char *err) {
  json_t *v = json_object_get(root, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > 1000000) {
    snprintf(err, AM_ERR_LEN, "config.json: \"%s\" must be an integer >= %d", key, lo);
    return -1;
  }
  *out = (int)json_integer_value(v);
  return 0;
}

static int get_doubles(json_t *root, const char *key, int n, double **out, char *err) {
  json_t *a = json_object_get(root, key);
  if (!json_is_array(a) || (int)json_array_size(a) != n) {
    snprintf(err, AM_ERR_LEN, "config.json: \"%s\" must be an array of %d numbers", key, n);
    return -1;
  }
  *out = calloc((size_t)n, sizeof(double));
  for (int i = 0; i < n; i++) {
    json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_number(v)) {
      snprintf(err, AM_ERR_LEN, "config.json: \"%s\"[%d] is not a number", key, i);
      return -1;
    }
    (*out)[i] = json_number_value(v);
  }
  return 0;
}

static char *get_str(json_t *root, const char *key, const char *dflt) {
  json_t *v = json_object_get(root, key);
  return strdup(json_is_string(v) ? json_string_value(v) : dflt);
}

static int read_channels(json_t *root, am_config *cfg, char *err) {
  json_t *a = json_object_get(root, "channels");
  if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 4096) {
    snprintf(err, AM_ERR_LEN, "config.json: \"channels\" must be a non-empty array of names");
    return -1;
  }
  cfg->channels = (int)json_array_size(a);
  cfg->names = calloc((size_t)cfg->channels, sizeof(char *));
  for (int i = 0; i < cfg->channels; i++) {
    json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_string(v)) {
      snprintf(err, AM_ERR_LEN, "config.json: \"channels\"[%d] is not a string", i);
      return -1;
    }
    cfg->names[i] = strdup(json_string_value(v));
  }
  return 0;
}

static int read_limits(json_t *root, am_config *cfg, char *err) {
  double *d = NULL;
  cfg->flat_limit = calloc((size_t)cfg->channels, sizeof(int));
  if (!json_object_get(root, "flat_limit")) { /* no stuck-sensor check */
    for (int i = 0; i < cfg->channels; i++) cfg->flat_limit[i] = 0;
    return 0;
  }
  if (get_doubles(root, "flat_limit", cfg->channels, &d, err)) {
    free(d);
    return -1;
  }
  for (int i = 0; i < cfg->channels; i++) cfg->flat_limit[i] = d[i] < 2 ? 0 : (int)d[i];
  free(d);
  return 0;
}

/* One (W, C) matrix of "edge_threshold" into out (row-major). */
static int get_matrix(json_t *obj, const char *key, int rows, int cols, double **out, char *err) {
  json_t *a = json_object_get(obj, key);
  *out = calloc((size_t)rows * (size_t)cols, sizeof(double));
  if (!json_is_array(a) || (int)json_array_size(a) != rows) {
    snprintf(err, AM_ERR_LEN, "config.json: \"edge_threshold\".\"%s\" must be %d arrays of %d numbers",
             key, rows, cols);
    return -1;
  }
  for (int i = 0; i < rows; i++) {
    json_t *r = json_array_get(a, (size_t)i);
    if (!json_is_array(r) || (int)json_array_size(r) != cols) {
      snprintf(err, AM_ERR_LEN, "config.json: \"edge_threshold\".\"%s\"[%d] must be an array of %d numbers",
               key, i, cols);
      return -1;
    }
    for (int j = 0; j < cols; j++) {
      json_t *v = json_array_get(r, (size_t)j);
      double d = json_is_number(v) ? json_number_value(v) : -1;
      if (!(d > 0)) {
        snprintf(err, AM_ERR_LEN, "config.json: \"edge_threshold\".\"%s\"[%d][%d] must be a number > 0",
                 key, i, j);
        return -1;
      }
      (*out)[(size_t)i * (size_t)cols + (size_t)j] = d;
    }
  }
  return 0;
}

/* "edge_threshold": {"head": (W, C), "tail": (W, C)}; absent: no edge re-check. */
static int read_edge(json_t *root, am_config *cfg, char *err) {
  json_t *e = json_object_get(root, "edge_threshold");
  if (!e) return 0;
  if (!json_is_object(e)) {
    snprintf(err, AM_ERR_LEN, "config.json: \"edge_threshold\" must be an object with \"head\" and \"tail\"");
    return -1;
  }
  if (cfg->stride != 1) {
    snprintf(err, AM_ERR_LEN, "config.json: \"edge_threshold\" needs stride 1, not %d", cfg->stride);
    return -1;
  }
  return get_matrix(e, "head", cfg->window, cfg->channels, &cfg->edge_head, err) ||
                 get_matrix(e, "tail", cfg->window, cfg->channels, &cfg->edge_tail, err)
             ? -1
             : 0;
}

static int check_values(const am_config *cfg, char *err) {
  for (int i = 0; i < cfg->channels; i++) {
    if (!(cfg->std[i] > 0) || !(cfg->threshold[i] > 0)) {
      snprintf(err, AM_ERR_LEN, "config.json: channel %s: std and threshold must be > 0",
               cfg->names[i]);
      return -1;
    }
  }
  return 0;
}

/* "smooth_rule": "min" (train.py) or "mean" (models from before the rule was recorded). */
static int read_smooth_rule(json_t *root, am_config *cfg, char *err) {
  char *rule = get_str(root, "smooth_rule", "mean");
  int rc = 0;
  if (strcmp(rule, "min") == 0) {
    cfg->smooth_min = 1;
  } else if (strcmp(rule, "mean") != 0) {
    snprintf(err, AM_ERR_LEN,
             "config.json: \"smooth_rule\" must be \"min\" or \"mean\", not \"%.100s\"", rule);
    rc = -1;
  }
  free(rule);
  return rc;
}

static int parse(json_t *root, const char *model_dir, am_config *cfg, char *err) {
  if (!json_is_object(root)) {
    snprintf(err, AM_ERR_LEN, "config.json: not a JSON object");
    return -1;
  }
  if (read_channels(root, cfg, err) || get_int(root, "window", 1, &cfg->window, err) ||
      get_int(root, "stride", 1, &cfg->stride, err) ||
      get_int(root, "smooth", 1, &cfg->smooth, err) || read_smooth_rule(root, cfg, err) ||
      get_int(root, "merge_gap", 0, &cfg->merge_gap, err) ||
      get_doubles(root, "mean", cfg->channels, &cfg->mean, err) ||
      get_doubles(root, "std", cfg->channels, &cfg->std, err) ||
      get_doubles(root, "threshold", cfg->channels, &cfg->threshold, err) ||
      read_limits(root, cfg, err) || check_values(cfg, err) || read_edge(root, cfg, err))
    return -1;
  if (cfg->stride > cfg->window) {
    snprintf(err, AM_ERR_LEN, "config.json: stride %d is larger than window %d", cfg->stride,
             cfg->window);
    return -1;
  }
  char *model = get_str(root, "model", "model.onnx");
  size_t len = strlen(model_dir) + strlen(model) + 2;
  cfg->model_path = malloc(len);
  snprintf(cfg->model_path, len, "%s/%s", model_dir, model);
  free(model);
  cfg->input_name = get_str(root, "input", "window");
  cfg->output_name = get_str(root, "output", "reconstruction");
  return 0;
}

int am_config_load(const char *model_dir, am_config *cfg, char *err) {
  memset(cfg, 0, sizeof(*cfg));
  char path[4096];
  snprintf(path, sizeof(path), "%s/config.json", model_dir);
  json_error_t jerr;
  json_t *root = json_load_file(path, 0, &jerr);
  if (!root) {
    snprintf(err, AM_ERR_LEN, "%s: %s (line %d)", path, jerr.text, jerr.line);
    return -1;
  }
  int rc = parse(root, model_dir, cfg, err);
  json_decref(root);
  if (rc) am_config_free(cfg);
  return rc;
}

void am_config_free(am_config *cfg) {
  for (int i = 0; cfg->names && i < cfg->channels; i++) free(cfg->names[i]);
  free(cfg->names);
  free(cfg->mean);
  free(cfg->std);
  free(cfg->threshold);
  free(cfg->flat_limit);
  free(cfg->edge_head);
  free(cfg->edge_tail);
  free(cfg->model_path);
  free(cfg->input_name);
  free(cfg->output_name);
  memset(cfg, 0, sizeof(*cfg));
}
