/* Inference backends: a kiln session in this process (the public API only), or a KServe v2
 * server over HTTP/JSON (POST {base}/v2/models/{name}/infer). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/kiln.h>

#include "anomaly.h"

struct am_backend {
  const am_config *cfg;
  kiln_session *session;             /* in-process */
  char host[256], path[1024], *body; /* HTTP */
  int port, binary;
  size_t body_cap;
  am_http *http;
};

static int check_io(const am_backend *b, char *err) {
  kiln_io_info in;
  kiln_error kerr;
  if (kiln_session_input_count(b->session) != 1 ||
      kiln_session_input_info(b->session, 0, &in, &kerr) || in.rank != 3 ||
      strcmp(in.name, b->cfg->input_name) != 0) {
    snprintf(err, AM_ERR_LEN, "%s: expected one input \"%s\" of rank 3 (N, W, C)",
             b->cfg->model_path, b->cfg->input_name);
    return -1;
  }
  if ((in.dims[1] >= 0 && in.dims[1] != b->cfg->window) ||
      (in.dims[2] >= 0 && in.dims[2] != b->cfg->channels)) {
    snprintf(err, AM_ERR_LEN, "%s: input is (N, %lld, %lld), config.json says window %d, %d "
             "channels", b->cfg->model_path, (long long)in.dims[1], (long long)in.dims[2],
             b->cfg->window, b->cfg->channels);
    return -1;
  }
  return 0;
}

am_backend *am_backend_kiln(const am_config *cfg, int threads, char *err) {
  am_backend *b = calloc(1, sizeof(*b));
  b->cfg = cfg;
  kiln_options o;
  kiln_options_init(&o);
  o.threads = threads;
  kiln_error kerr;
  if (kiln_session_create(cfg->model_path, &o, &b->session, &kerr)) {
    snprintf(err, AM_ERR_LEN, "%s", kerr.message);
    free(b);
    return NULL;
  }
  if (check_io(b, err)) {
    am_backend_free(b);
    return NULL;
  }
  return b;
}

static int run_kiln(am_backend *b, const float *in, int n, float *out, char *err) {
  const am_config *cfg = b->cfg;
  int64_t dims[3] = {n, cfg->window, cfg->channels};
  size_t count = (size_t)n * (size_t)cfg->window * (size_t)cfg->channels;
  kiln_tensor *x, *y = NULL;
  kiln_error kerr;
  if (kiln_tensor_create(KILN_FLOAT, 3, dims, &x, &kerr)) {
    snprintf(err, AM_ERR_LEN, "%s", kerr.message);
    return -1;
  }
  memcpy(kiln_tensor_data(x), in, count * sizeof(float));
  const char *in_names[] = {cfg->input_name}, *out_names[] = {cfg->output_name};
  int rc = 0;
  if (kiln_session_run(b->session, 1, in_names, (const kiln_tensor *const *)&x, 1, out_names,
                       &y, &kerr)) {
    snprintf(err, AM_ERR_LEN, "%s", kerr.message);
    rc = -1;
  } else if (kiln_tensor_dtype(y) != KILN_FLOAT || (size_t)kiln_tensor_numel(y) != count) {
    snprintf(err, AM_ERR_LEN, "output \"%s\" is not float (N, W, C)", cfg->output_name);
    rc = -1;
  } else {
    memcpy(out, kiln_tensor_cdata(y), count * sizeof(float));
  }
  kiln_tensor_free(y);
  kiln_tensor_free(x);
  return rc;
}

/* http://host[:port][/prefix] */
static int parse_url(am_backend *b, const char *url, const char *model, char *err) {
  if (strncmp(url, "http://", 7) != 0) {
    snprintf(err, AM_ERR_LEN, "--serve %s: only http:// URLs are supported", url);
    return -1;
  }
  const char *h = url + 7, *slash = strchr(h, '/'), *end = slash ? slash : h + strlen(h);
  const char *colon = memchr(h, ':', (size_t)(end - h));
  size_t hl = (size_t)((colon ? colon : end) - h);
  if (hl == 0 || hl >= sizeof(b->host)) {
    snprintf(err, AM_ERR_LEN, "--serve %s: no host", url);
    return -1;
  }
  memcpy(b->host, h, hl);
  b->host[hl] = '\0';
  b->port = colon ? atoi(colon + 1) : 80;
  if (b->port <= 0 || b->port > 65535) {
    snprintf(err, AM_ERR_LEN, "--serve %s: bad port", url);
    return -1;
  }
  size_t pl = slash ? strlen(slash) : 0;
  while (pl > 0 && slash[pl - 1] == '/') pl--;
  snprintf(b->path, sizeof(b->path), "%.*s/v2/models/%s/infer", (int)pl, slash ? slash : "",
           model);
  return 0;
}

am_backend *am_backend_http(const am_config *cfg, const char *url, const char *model, int binary,
                            char *err) {
  am_backend *b = calloc(1, sizeof(*b));
  b->cfg = cfg;
  b->binary = binary;
  if (parse_url(b, url, model, err)) {
    free(b);
    return NULL;
  }
  b->http = am_http_open(b->host, b->port);
  return b;
}

static void body_grow(am_backend *b, size_t need) {
  if (need <= b->body_cap) return;
  b->body_cap = need * 2;
  b->body = realloc(b->body, b->body_cap);
}

static size_t build_request(am_backend *b, const float *in, int n) {
  const am_config *cfg = b->cfg;
  size_t count = (size_t)n * (size_t)cfg->window * (size_t)cfg->channels;
  body_grow(b, count * 18 + 512);
  size_t len = (size_t)snprintf(b->body, b->body_cap,
                                "{\"inputs\":[{\"name\":\"%s\",\"shape\":[%d,%d,%d],"
                                "\"datatype\":\"FP32\",\"data\":[",
                                cfg->input_name, n, cfg->window, cfg->channels);
  for (size_t i = 0; i < count; i++)
    len += (size_t)snprintf(b->body + len, b->body_cap - len, "%s%.9g", i ? "," : "", (double)in[i]);
  len += (size_t)snprintf(b->body + len, b->body_cap - len, "]}]}");
  return len;
}

/* The binary extension's body: the JSON header, then the input's raw float32 values. */
static size_t build_request_binary(am_backend *b, const float *in, int n, long *json_len) {
  const am_config *cfg = b->cfg;
  size_t bytes = (size_t)n * (size_t)cfg->window * (size_t)cfg->channels * sizeof(float);
  body_grow(b, bytes + 1024);
  int hl = snprintf(b->body, b->body_cap,
                    "{\"inputs\":[{\"name\":\"%s\",\"shape\":[%d,%d,%d],\"datatype\":\"FP32\","
                    "\"parameters\":{\"binary_data_size\":%zu}}],\"outputs\":[{\"name\":\"%s\","
                    "\"parameters\":{\"binary_data\":true}}]}",
                    cfg->input_name, n, cfg->window, cfg->channels, bytes, cfg->output_name);
  memcpy(b->body + hl, in, bytes); /* little-endian, as the extension wants (x86, ARM) */
  *json_len = hl;
  return (size_t)hl + bytes;
}

/* A binary response: the output's bytes follow the JSON header, after those of any output
 * before it. */
static int parse_binary(const am_backend *b, json_t *outs, const char *raw, size_t raw_len,
                        size_t count, float *out, char *err) {
  size_t off = 0;
  for (size_t i = 0; i < json_array_size(outs); i++) {
    json_t *o = json_array_get(outs, i), *name = json_object_get(o, "name");
    json_t *sz = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
    size_t n = json_is_integer(sz) ? (size_t)json_integer_value(sz) : 0;
    if (json_is_string(name) && strcmp(json_string_value(name), b->cfg->output_name) == 0) {
      if (n != count * sizeof(float) || off + n > raw_len) {
        snprintf(err, AM_ERR_LEN, "server response: output \"%s\" has %zu binary bytes, "
                 "expected %zu", b->cfg->output_name, n, count * sizeof(float));
        return -1;
      }
      memcpy(out, raw + off, n);
      return 0;
    }
    off += n;
  }
  snprintf(err, AM_ERR_LEN, "server response: no binary output \"%s\"", b->cfg->output_name);
  return -1;
}

/* The output named like config.json's, else the only one; its data must hold `count` numbers. */
static int parse_response(const am_backend *b, const char *resp, size_t resp_len, long json_len,
                          size_t count, float *out, char *err) {
  json_error_t jerr;
  size_t jl = json_len >= 0 && (size_t)json_len <= resp_len ? (size_t)json_len : resp_len;
  json_t *root = json_loadb(resp, jl, 0, &jerr), *outs = json_object_get(root, "outputs"), *o = NULL;
  if (root && json_len >= 0 && json_is_array(outs)) {
    int rc = parse_binary(b, outs, resp + jl, resp_len - jl, count, out, err);
    json_decref(root);
    return rc;
  }
  for (size_t i = 0; json_is_array(outs) && i < json_array_size(outs); i++) {
    json_t *name = json_object_get(json_array_get(outs, i), "name");
    if (json_is_string(name) && strcmp(json_string_value(name), b->cfg->output_name) == 0)
      o = json_array_get(outs, i);
  }
  if (!o && json_is_array(outs) && json_array_size(outs) == 1) o = json_array_get(outs, 0);
  json_t *data = json_object_get(o, "data");
  int rc = 0;
  if (!root) {
    snprintf(err, AM_ERR_LEN, "server response is not JSON: %s", jerr.text);
    rc = -1;
  } else if (!json_is_array(data) || json_array_size(data) != count) {
    snprintf(err, AM_ERR_LEN, "server response: no output \"%s\" with %zu numbers in \"data\"",
             b->cfg->output_name, count);
    rc = -1;
  }
  for (size_t i = 0; rc == 0 && i < count; i++) {
    json_t *v = json_array_get(data, i);
    if (!json_is_number(v)) {
      snprintf(err, AM_ERR_LEN, "server response: data[%zu] is not a number", i);
      rc = -1;
    } else {
      out[i] = (float)json_number_value(v);
    }
  }
  json_decref(root);
  return rc;
}

static int run_http(am_backend *b, const float *in, int n, float *out, char *err) {
  long json_len = -1, resp_json_len = -1;
  size_t len = b->binary ? build_request_binary(b, in, n, &json_len) : build_request(b, in, n);
  size_t resp_len = 0;
  char *resp = NULL;
  int status = 0;
  if (am_http_post(b->http, b->path, b->body, len, json_len, &resp, &resp_len, &status,
                   &resp_json_len, err))
    return -1;
  int rc = 0;
  if (status != 200) {
    snprintf(err, AM_ERR_LEN, "POST http://%s:%d%s: HTTP %d: %.200s", b->host, b->port, b->path,
             status, resp);
    rc = -1;
  } else {
    rc = parse_response(b, resp, resp_len, resp_json_len,
                        (size_t)n * (size_t)b->cfg->window * (size_t)b->cfg->channels, out, err);
  }
  free(resp);
  return rc;
}

int am_backend_run(am_backend *b, const float *in, int n, float *out, char *err) {
  return b->session ? run_kiln(b, in, n, out, err) : run_http(b, in, n, out, err);
}

void am_backend_summary(const am_backend *b, FILE *out) {
  if (!b->session) {
    fprintf(out, "optimisation: done by the server (http://%s:%d%s, %s tensors, %ld HTTP "
            "connection(s))\n", b->host, b->port, b->path, b->binary ? "binary" : "JSON",
            am_http_connections(b->http));
    return;
  }
  const char *pass;
  size_t rewrites;
  fprintf(out, "optimisation passes that rewrote the graph:");
  for (size_t i = 0; kiln_session_pass_stat(b->session, i, &pass, &rewrites) == KILN_OK; i++)
    if (rewrites) fprintf(out, " %s(%zu)", pass, rewrites);
  fprintf(out, "\nfused nodes:");
  kiln_fusion_info fi;
  size_t n = 0;
  for (size_t i = 0; kiln_session_fusion_info(b->session, i, &fi) == KILN_OK; i++, n++)
    fprintf(out, " %s (%s, replaces %zu nodes)%s", fi.op_type, fi.name, fi.replaced,
            fi.fallen_back ? " [fell back]" : "");
  if (n == 0) fprintf(out, " none");
  fprintf(out, "\nkernel threads: %d; fused nodes fallen back: %zu\n",
          kiln_session_threads(b->session), kiln_session_fallback_count(b->session));
}

void am_backend_free(am_backend *b) {
  if (!b) return;
  kiln_session_free(b->session);
  am_http_close(b->http);
  free(b->body);
  free(b);
}
