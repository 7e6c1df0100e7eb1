/* kiln serve: a model's settings, and DIR/NAME/config.json. Unknown keys are errors, so a
 * misspelt setting is reported instead of ignored. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

void srv_model_config_default(srv_model_config *c) {
  memset(c, 0, sizeof *c);
  c->max_queue_size = 256;
  c->instances = 1;
  c->level = 2;
  c->policy = SRV_POLICY_LATEST;
  c->latest_n = 1;
  c->required = 1;
  c->validate_atol = 1e-4;
  c->validate_rtol = 1e-3;
  c->warmup_runs = 1;
}

static int get_int(json_t *j, const char *key, long lo, long hi, long *out, char *msg, size_t n) {
  if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi) {
    srv_msg(msg, n, "\"%s\" must be an integer in [%ld, %ld]", key, lo, hi);
    return -1;
  }
  *out = (long)json_integer_value(j);
  return 0;
}

static int int_list(json_t *j, const char *key, long lo, long hi, long *dst, int max, int *count,
                    char *msg, size_t n) {
  if (!json_is_array(j) || json_array_size(j) > (size_t)max) {
    srv_msg(msg, n, "\"%s\" must be an array of at most %d integers", key, max);
    return -1;
  }
  size_t i;
  json_t *e;
  json_array_foreach(j, i, e) if (get_int(e, key, lo, hi, &dst[i], msg, n)) return -1;
  *count = (int)json_array_size(j);
  return 0;
}

static int parse_policy(json_t *j, srv_model_config *c, char *msg, size_t n) {
  long v;
  if (json_is_string(j) && !strcmp(json_string_value(j), "all")) {
    c->policy = SRV_POLICY_ALL;
    return 0;
  }
  if (json_is_object(j) && json_object_size(j) == 1) {
    if (json_object_get(j, "all")) {
      c->policy = SRV_POLICY_ALL;
      return 0;
    }
    if (json_object_get(j, "latest")) {
      if (get_int(json_object_get(j, "latest"), "latest", 1, SRV_MAX_VERSIONS, &v, msg, n)) return -1;
      c->policy = SRV_POLICY_LATEST;
      c->latest_n = (int)v;
      return 0;
    }
    if (json_object_get(j, "specific")) {
      c->policy = SRV_POLICY_SPECIFIC;
      return int_list(json_object_get(j, "specific"), "specific", 0, 1L << 40, c->specific,
                      SRV_MAX_VERSIONS, &c->n_specific, msg, n);
    }
  }
  srv_msg(msg, n, "\"version_policy\" must be {\"latest\": N}, {\"all\": {}} or {\"specific\": [V, ...]}");
  return -1;
}

static int parse_labels(json_t *j, srv_model_config *c, char *msg, size_t n) {
  if (!json_is_object(j) || json_object_size(j) > SRV_MAX_LABELS) {
    srv_msg(msg, n, "\"labels\" must be an object of at most %d label: version pairs", SRV_MAX_LABELS);
    return -1;
  }
  const char *k;
  json_t *v;
  c->n_labels = 0;
  json_object_foreach(j, k, v) {
    if (strlen(k) >= sizeof c->label_name[0] || !*k || strspn(k, "0123456789") == strlen(k)) {
      srv_msg(msg, n, "label '%s': a label is 1 to 31 characters, not all digits", k);
      return -1;
    }
    snprintf(c->label_name[c->n_labels], sizeof c->label_name[0], "%s", k);
    if (get_int(v, k, 0, 1L << 40, &c->label_version[c->n_labels], msg, n)) return -1;
    c->n_labels++;
  }
  return 0;
}

static int parse_key(const char *k, json_t *v, srv_model_config *c, const char *dir, char *msg, size_t n) {
  long x;
  if (!strcmp(k, "max_batch_size")) {
    if (get_int(v, k, 0, 1024, &x, msg, n)) return -1;
    c->max_batch_size = (int)x;
  } else if (!strcmp(k, "preferred_batch_sizes")) {
    long tmp[SRV_MAX_PREFERRED];
    if (int_list(v, k, 1, 1024, tmp, SRV_MAX_PREFERRED, &c->n_preferred, msg, n)) return -1;
    for (int i = 0; i < c->n_preferred; i++) c->preferred[i] = (int)tmp[i];
  } else if (!strcmp(k, "max_queue_delay_us")) {
    if (get_int(v, k, 0, 10000000, &x, msg, n)) return -1;
    c->max_queue_delay_us = x;
  } else if (!strcmp(k, "max_queue_size")) {
    if (get_int(v, k, 1, 1000000, &x, msg, n)) return -1;
    c->max_queue_size = (int)x;
  } else if (!strcmp(k, "instances")) {
    if (get_int(v, k, 1, 64, &x, msg, n)) return -1;
    c->instances = (int)x;
  } else if (!strcmp(k, "threads")) {
    if (get_int(v, k, 0, 1024, &x, msg, n)) return -1;
    c->threads = (int)x;
  } else if (!strcmp(k, "level")) {
    if (get_int(v, k, 0, 2, &x, msg, n)) return -1;
    c->level = (int)x;
  } else if (!strcmp(k, "run_timeout_ms")) {
    if (get_int(v, k, 0, 86400000, &x, msg, n)) return -1;
    c->run_timeout_ms = x;
  } else if (!strcmp(k, "warmup_runs")) {
    if (get_int(v, k, 0, 64, &x, msg, n)) return -1;
    c->warmup_runs = (int)x;
  } else if (!strcmp(k, "required") || !strcmp(k, "validate")) {
    if (!json_is_boolean(v)) {
      srv_msg(msg, n, "\"%s\" must be true or false", k);
      return -1;
    }
    *(!strcmp(k, "required") ? &c->required : &c->validate) = json_is_true(v);
  } else if (!strcmp(k, "validate_atol") || !strcmp(k, "validate_rtol") || !strcmp(k, "latency_budget_ms")) {
    if (!json_is_number(v) || json_number_value(v) < 0) {
      srv_msg(msg, n, "\"%s\" must be a non-negative number", k);
      return -1;
    }
    *(!strcmp(k, "validate_atol") ? &c->validate_atol
      : !strcmp(k, "validate_rtol") ? &c->validate_rtol : &c->latency_budget_ms) = json_number_value(v);
  } else if (!strcmp(k, "plugins")) {
    if (!json_is_array(v) || json_array_size(v) > SRV_MAX_PLUGINS) {
      srv_msg(msg, n, "\"plugins\" must be an array of at most %d paths", SRV_MAX_PLUGINS);
      return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      const char *p = json_string_value(e);
      if (!p) {
        srv_msg(msg, n, "\"plugins\" entries must be paths");
        return -1;
      }
      if (p[0] == '/') snprintf(c->plugins[i], sizeof c->plugins[i], "%s", p);
      else snprintf(c->plugins[i], sizeof c->plugins[i], "%s/%s", dir, p);
    }
    c->n_plugins = (int)json_array_size(v);
  } else if (!strcmp(k, "version_policy")) {
    return parse_policy(v, c, msg, n);
  } else if (!strcmp(k, "labels")) {
    return parse_labels(v, c, msg, n);
  } else {
    srv_msg(msg, n, "unknown setting \"%s\"", k);
    return -1;
  }
  return 0;
}

int srv_model_config_parse(const char *path, srv_model_config *c, char *msg, size_t n) {
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  if (!root) {
    srv_msg(msg, n, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
    return -1;
  }
  int rc = 0;
  if (!json_is_object(root)) {
    srv_msg(msg, n, "%s: must be a JSON object", path);
    rc = -1;
  }
  const char *k;
  json_t *v;
  char why[400];
  json_object_foreach(root, k, v) if (!rc && parse_key(k, v, c, dir, why, sizeof why)) {
    srv_msg(msg, n, "%s: %s", path, why);
    rc = -1;
  }
  if (!rc && c->max_batch_size)
    for (int i = 0; i < c->n_preferred; i++)
      if (c->preferred[i] > c->max_batch_size) {
        srv_msg(msg, n, "%s: preferred batch size %d is over max_batch_size %d", path, c->preferred[i],
                c->max_batch_size);
        rc = -1;
      }
  json_decref(root);
  return rc;
}
