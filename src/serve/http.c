/* kiln serve: the HTTP side, on libmicrohttpd in thread-pool + epoll mode.
 *
 * An infer request is decoded in the HTTP thread, queued on its version (batch.c), and its
 * connection suspended; the worker that runs it resumes the connection, and the response is
 * encoded in the HTTP thread again. So a few HTTP threads carry any number of requests in
 * flight, and the batcher sees them all. Bodies are bounded (--max-body-bytes: 413, checked on
 * Content-Length before reading and while reading), headers by libmicrohttpd's per-connection
 * memory (--max-header-bytes), slow clients by --conn-timeout-s. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve.h"

struct srv_server {
  struct MHD_Daemon *d;
  srv_repo *repo;
  const srv_config *cfg;
  int draining, quiesced;
  long active;
  MHD_socket listen_fd; /* after srv_http_quiesce */
};

enum { ST_NEW = 0, ST_QUEUED = 1, ST_DONE = 2, ST_ANSWERED = 3 };

typedef struct req_ctx {
  srv_server *s;
  struct MHD_Connection *c;
  srv_buf body;
  int too_large;
  double t0;
  int code;
  size_t resp_bytes;
  char model[SRV_NAME_MAX];
  char version[32];
  char method[8];
  char url[256];
  char id[256];            /* the request's id, for the log */
  pthread_mutex_t mu;
  int state, suspended;
  srv_version *v;
  srv_job *job;
  srv_request req;
} req_ctx;

/* ---- responses ----------------------------------------------------------------------- */

static enum MHD_Result respond(req_ctx *x, int code, const char *ctype, srv_buf *b, size_t json_len,
                               int retry) {
  struct MHD_Response *r;
  size_t len = b->len;
  if (b->data) {
    r = MHD_create_response_from_buffer(len, b->data, MHD_RESPMEM_MUST_FREE);
    b->data = NULL;
    b->len = b->cap = 0;
  } else {
    r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  }
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (json_len) {
    char h[32];
    snprintf(h, sizeof h, "%zu", json_len);
    MHD_add_response_header(r, "Inference-Header-Content-Length", h);
  }
  if (retry) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (__atomic_load_n(&x->s->quiesced, __ATOMIC_RELAXED))
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret = MHD_queue_response(x->c, (unsigned)code, r);
  MHD_destroy_response(r);
  x->code = code;
  x->resp_bytes = len;
  x->state = ST_ANSWERED;
  srv_metrics_http_code(code);
  return ret;
}

static enum MHD_Result respond_json(req_ctx *x, int code, srv_buf *b) {
  return respond(x, code, "application/json", b, 0, code == 503);
}

__attribute__((format(printf, 3, 4))) static enum MHD_Result respond_error(req_ctx *x, int code,
                                                                           const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  srv_buf b = {0};
  srv_buf_puts(&b, "{\"error\":");
  srv_buf_json_str(&b, msg);
  srv_buf_puts(&b, "}");
  return respond_json(x, code, &b);
}

static enum MHD_Result respond_text(req_ctx *x, int code, const char *json) {
  srv_buf b = {0};
  srv_buf_puts(&b, json);
  return respond_json(x, code, &b);
}

/* ---- metadata ------------------------------------------------------------------------ */

static void io_json(srv_buf *b, const srv_io *io, size_t n) {
  srv_buf_puts(b, "[");
  for (size_t i = 0; i < n; i++) {
    srv_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
    srv_buf_json_str(b, io[i].name);
    srv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", srv_v2_dtype(io[i].dtype));
    for (int d = 0; d < io[i].rank; d++) srv_buf_printf(b, "%s%lld", d ? "," : "", (long long)io[i].dims[d]);
    srv_buf_puts(b, "]}");
  }
  srv_buf_puts(b, "]");
}

static enum MHD_Result model_metadata(req_ctx *x, const char *name, const char *version) {
  char msg[512];
  srv_version *v;
  int code = srv_repo_acquire(x->s->repo, name, version, &v, msg, sizeof msg);
  if (code) return respond_error(x, code, "%s", msg);
  srv_buf b = {0};
  srv_buf_puts(&b, "{\"name\":");
  srv_buf_json_str(&b, name);
  srv_buf_puts(&b, ",\"versions\":[");
  if (version && *version) {
    srv_buf_printf(&b, "\"%s\"", v->vstr);
  } else {
    pthread_mutex_lock(&x->s->repo->mu);
    srv_model *m = srv_repo_find(x->s->repo, name);
    for (int i = 0; m && i < m->n_versions; i++) srv_buf_printf(&b, "%s\"%s\"", i ? "," : "", m->versions[i]->vstr);
    pthread_mutex_unlock(&x->s->repo->mu);
  }
  srv_buf_puts(&b, "],\"platform\":\"onnx\",\"inputs\":");
  io_json(&b, v->in, v->n_in);
  srv_buf_puts(&b, ",\"outputs\":");
  io_json(&b, v->out, v->n_out);
  srv_buf_printf(&b, ",\"parameters\":{\"max_batch_size\":%d,\"batching\":%s,\"instances\":%d}}",
                 v->cfg.max_batch_size, v->batchable ? "true" : "false", v->n_inst);
  srv_version_unref(v);
  return respond_json(x, 200, &b);
}

static enum MHD_Result model_ready(req_ctx *x, const char *name, const char *version) {
  char msg[512];
  srv_version *v;
  int code = srv_repo_acquire(x->s->repo, name, version, &v, msg, sizeof msg);
  if (code) return respond_error(x, code, "%s", msg);
  srv_version_unref(v);
  if (__atomic_load_n(&x->s->draining, __ATOMIC_RELAXED))
    return respond_error(x, 503, "the server is shutting down");
  srv_buf b = {0};
  srv_buf_puts(&b, "{\"name\":");
  srv_buf_json_str(&b, name);
  srv_buf_printf(&b, ",\"version\":\"%s\",\"ready\":true}", v->vstr);
  return respond_json(x, 200, &b);
}

static enum MHD_Result server_ready(req_ctx *x) {
  if (__atomic_load_n(&x->s->draining, __ATOMIC_RELAXED))
    return respond_error(x, 503, "not ready: the server is shutting down");
  if (!srv_repo_ready(x->s->repo))
    return respond_error(x, 503, "not ready: a required model has no version serving");
  return respond_text(x, 200, "{\"ready\":true}");
}

static enum MHD_Result server_metadata(req_ctx *x) {
  return respond_text(x, 200, "{\"name\":\"kiln\",\"version\":\"" KILN_VERSION_STRING
                              "\",\"extensions\":[\"binary_tensor_data\",\"model_repository\"]}");
}

static enum MHD_Result metrics(req_ctx *x) {
  srv_buf b = {0};
  srv_metrics_render(x->s->repo, &b);
  return respond(x, 200, "text/plain; version=0.0.4", &b, 0, 0);
}

/* ---- repository API ------------------------------------------------------------------ */

static int admin_ok(req_ctx *x, enum MHD_Result *ret) {
  const char *tok = x->s->cfg->admin_token;
  if (!tok) {
    *ret = respond_error(x, 403, "the repository API is off: start kiln serve with --admin-token");
    return 0;
  }
  const char *h = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncmp(h, "Bearer ", 7) || strcmp(h + 7, tok)) {
    *ret = respond_error(x, 401, "the repository API needs 'Authorization: Bearer <admin token>'");
    return 0;
  }
  return 1;
}

static enum MHD_Result repo_call(req_ctx *x, const char *name, const char *op) {
  enum MHD_Result ret;
  if (!admin_ok(x, &ret)) return ret;
  char msg[1024] = {0};
  snprintf(x->model, sizeof x->model, "%s", name ? name : "");
  if (!name) {
    srv_buf b = {0};
    srv_repo_index_json(x->s->repo, &b);
    return respond_json(x, 200, &b);
  }
  int code = !strcmp(op, "load") ? srv_repo_scan(x->s->repo, name, 1, msg, sizeof msg)
                                 : srv_repo_unload(x->s->repo, name, msg, sizeof msg);
  if (code) return respond_error(x, code, "%s", msg);
  return respond_text(x, 200, "{}");
}

/* ---- inference ----------------------------------------------------------------------- */

static void job_done(srv_job *j, void *ctx) {
  (void)j;
  req_ctx *x = ctx;
  /* x may be freed as soon as the connection resumes: read what is needed first, and resume
   * outside the lock (the handler held it from submitting to suspending, so it is suspended) */
  struct MHD_Connection *c = x->c;
  pthread_mutex_lock(&x->mu);
  x->state = ST_DONE;
  int resume = x->suspended;
  x->suspended = 0;
  pthread_mutex_unlock(&x->mu);
  if (resume) MHD_resume_connection(c);
}

static int64_t batch_rows(const srv_version *v, kiln_tensor **in) {
  if (!v->batchable) return -1;
  int64_t rows = kiln_tensor_dims(in[0])[0];
  for (size_t i = 1; i < v->n_in; i++)
    if (kiln_tensor_dims(in[i])[0] != rows) return -1;
  return rows > 0 && rows <= v->cfg.max_batch_size ? rows : -1;
}

static srv_job *make_job(req_ctx *x) {
  srv_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->v = x->v;
  j->inputs = x->req.inputs;
  x->req.inputs = NULL;
  j->n_out = x->req.n_out;
  j->out_idx = calloc(j->n_out + 1, sizeof *j->out_idx);
  j->outputs = calloc(j->n_out + 1, sizeof *j->outputs);
  if (!j->out_idx || !j->outputs) {
    srv_job_free(j);
    return NULL;
  }
  memcpy(j->out_idx, x->req.out_idx, j->n_out * sizeof *j->out_idx);
  j->rows = batch_rows(x->v, j->inputs);
  j->done = job_done;
  j->ctx = x;
  return j;
}

static void release(req_ctx *x) {
  if (x->job) srv_job_free(x->job);
  x->job = NULL;
  if (x->v) srv_request_free(&x->req, x->v->n_in);
  if (x->v) srv_version_unref(x->v);
  x->v = NULL;
}

static enum MHD_Result finish_infer(req_ctx *x) {
  srv_job *j = x->job;
  srv_version *v = x->v;
  enum MHD_Result ret;
  if (j->status != 200) {
    ret = respond_error(x, j->status, "%s", j->error);
  } else {
    srv_buf b = {0};
    size_t json_len = 0;
    char msg[512];
    int code = srv_encode_response(v, &x->req, j->outputs, &b, &json_len, msg, sizeof msg);
    if (code) {
      srv_buf_free(&b);
      ret = respond_error(x, code, "%s", msg);
    } else {
      ret = respond(x, 200, json_len ? "application/octet-stream" : "application/json", &b, json_len, 0);
    }
  }
  pthread_mutex_lock(&v->mu);
  srv_hist_add(&v->stats.request, srv_time_buckets, srv_now() - x->t0);
  pthread_mutex_unlock(&v->mu);
  release(x);
  return ret;
}

static enum MHD_Result infer(req_ctx *x, const char *name, const char *version) {
  char msg[1024];
  if (x->too_large)
    return respond_error(x, 413, "request body over --max-body-bytes %ld", x->s->cfg->max_body_bytes);
  const char *hl = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  long json_len = 0;
  if (hl && srv_parse_long(hl, 0, x->s->cfg->max_body_bytes, &json_len))
    return respond_error(x, 400, "Inference-Header-Content-Length '%s' is not a byte count", hl);
  if (hl && !json_len) return respond_error(x, 400, "Inference-Header-Content-Length is 0");
  srv_limits lim = {x->s->cfg->max_tensor_elements, x->s->cfg->max_json_depth};
  for (int attempt = 0; attempt < 3; attempt++) {
    int code = srv_repo_acquire(x->s->repo, name, version, &x->v, msg, sizeof msg);
    if (code) return respond_error(x, code, "%s", msg);
    snprintf(x->version, sizeof x->version, "%s", x->v->vstr);
    code = srv_decode_request(x->v, x->body.data ? x->body.data : "", x->body.len, (size_t)json_len,
                              &lim, &x->req, msg, sizeof msg);
    if (code) {
      release(x);
      return respond_error(x, code, "%s", msg);
    }
    snprintf(x->id, sizeof x->id, "%s", x->req.id);
    if (!(x->job = make_job(x))) {
      release(x);
      return respond_error(x, 500, "out of memory");
    }
    pthread_mutex_lock(&x->mu);
    int sub = srv_submit(x->v, x->job);
    if (sub == SRV_SUBMIT_OK) {
      x->state = ST_QUEUED;
      MHD_suspend_connection(x->c);
      x->suspended = 1;
      pthread_mutex_unlock(&x->mu);
      return MHD_YES;
    }
    pthread_mutex_unlock(&x->mu);
    long depth = x->v->cfg.max_queue_size;
    release(x);
    if (sub == SRV_SUBMIT_FULL)
      return respond_error(x, 503, "model '%s' version %s: queue full (%ld requests waiting)", name,
                           x->version, depth);
    /* the version was being unloaded: a request for "the newest" goes to the one now serving */
    if (version && *version) break;
  }
  return respond_error(x, 503, "model '%s' version %s is being unloaded", name, x->version);
}

/* ---- routing ------------------------------------------------------------------------- */

static int split(const char *url, char *buf, size_t bn, char **seg, int max) {
  snprintf(buf, bn, "%s", url);
  int n = 0;
  char *save = NULL;
  for (char *p = strtok_r(buf, "/", &save); p && n < max; p = strtok_r(NULL, "/", &save)) seg[n++] = p;
  return n;
}

static enum MHD_Result route(req_ctx *x, const char *url, const char *method) {
  char buf[1024], *seg[9];
  int n = split(url, buf, sizeof buf, seg, 9);
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
  if (n == 1 && !strcmp(seg[0], "health") && get) return server_ready(x);
  if (n == 1 && !strcmp(seg[0], "metrics") && get) return metrics(x);
  if (n < 1 || strcmp(seg[0], "v2")) return respond_error(x, 404, "no such endpoint '%s'", url);
  if (n == 1 && get) return server_metadata(x);
  if (n == 3 && !strcmp(seg[1], "health") && get) {
    if (!strcmp(seg[2], "live")) return respond_text(x, 200, "{\"live\":true}");
    if (!strcmp(seg[2], "ready")) return server_ready(x);
  }
  if (n >= 3 && !strcmp(seg[1], "models")) {
    const char *name = seg[2], *version = NULL;
    int k = 3;
    if (n >= 5 && !strcmp(seg[3], "versions")) {
      version = seg[4];
      k = 5;
    }
    snprintf(x->model, sizeof x->model, "%s", name);
    if (n == k && get) return model_metadata(x, name, version);
    if (n == k + 1 && !strcmp(seg[k], "ready") && get) return model_ready(x, name, version);
    if (n == k + 1 && !strcmp(seg[k], "infer") && post) return infer(x, name, version);
  }
  if (n == 3 && !strcmp(seg[1], "repository") && !strcmp(seg[2], "index") && (post || get))
    return repo_call(x, NULL, NULL);
  if (n == 5 && !strcmp(seg[1], "repository") && !strcmp(seg[2], "models") && post &&
      (!strcmp(seg[4], "load") || !strcmp(seg[4], "unload")))
    return repo_call(x, seg[3], seg[4]);
  return respond_error(x, get || post ? 404 : 405, "no endpoint %s %s", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
  (void)version;
  srv_server *s = cls;
  req_ctx *x = *req_cls;
  if (!x) {
    if (!(x = calloc(1, sizeof *x))) return MHD_NO;
    x->s = s;
    x->c = c;
    x->t0 = srv_now();
    pthread_mutex_init(&x->mu, NULL);
    snprintf(x->method, sizeof x->method, "%s", method);
    snprintf(x->url, sizeof x->url, "%s", url);
    __atomic_add_fetch(&s->active, 1, __ATOMIC_RELAXED);
    *req_cls = x;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes) {
      x->too_large = 1;
      return respond_error(x, 413, "request body of %s bytes is over --max-body-bytes %ld", cl,
                           s->cfg->max_body_bytes);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!x->too_large && x->body.len + *upload_size > (size_t)s->cfg->max_body_bytes) {
      x->too_large = 1;
      srv_buf_free(&x->body);
    }
    if (!x->too_large) srv_buf_put(&x->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  if (x->state == ST_DONE) return finish_infer(x);
  if (x->state != ST_NEW) return MHD_YES;
  if (x->body.failed) return respond_error(x, 503, "out of memory reading the request");
  return route(x, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  srv_server *s = cls;
  req_ctx *x = *req_cls;
  if (!x) return;
  srv_log_request(s->cfg->log_format, x->method, x->url, x->code, x->resp_bytes, (srv_now() - x->t0) * 1e3,
                  x->model[0] ? x->model : NULL,
                  x->version[0] ? x->version : NULL, x->id[0] ? x->id : NULL);
  release(x);
  srv_buf_free(&x->body);
  pthread_mutex_destroy(&x->mu);
  free(x);
  *req_cls = NULL;
  __atomic_sub_fetch(&s->active, 1, __ATOMIC_RELAXED);
}

srv_server *srv_http_start(srv_repo *r, const srv_config *cfg, char *msg, size_t n) {
  srv_server *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->repo = r;
  s->cfg = cfg;
  s->listen_fd = MHD_INVALID_SOCKET;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)cfg->port);
  if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
    srv_msg(msg, n, "--host '%s' is not an IPv4 address", cfg->host);
    free(s);
    return NULL;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
  s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                          MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->conn_timeout_s,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->max_header_bytes,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
  if (!s->d) {
    srv_msg(msg, n, "cannot listen on %s:%ld (address in use, or no permission)", cfg->host, cfg->port);
    free(s);
    return NULL;
  }
  return s;
}

int srv_http_port(srv_server *s) {
  const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  return i ? i->port : -1;
}

void srv_http_set_draining(srv_server *s) { __atomic_store_n(&s->draining, 1, __ATOMIC_RELAXED); }

void srv_http_quiesce(srv_server *s) {
  __atomic_store_n(&s->quiesced, 1, __ATOMIC_RELAXED);
  s->listen_fd = MHD_quiesce_daemon(s->d);
  /* MHD's threads may still hold the socket until MHD_stop_daemon, so it is closed only then;
   * shutting it down now makes the kernel refuse new connections instead of queueing them */
  if (s->listen_fd != MHD_INVALID_SOCKET) shutdown(s->listen_fd, SHUT_RDWR);
}

long srv_http_active(srv_server *s) { return __atomic_load_n(&s->active, __ATOMIC_RELAXED); }

void srv_http_stop(srv_server *s) {
  if (!s) return;
  MHD_stop_daemon(s->d);
  if (s->listen_fd != MHD_INVALID_SOCKET) close(s->listen_fd);
  free(s);
}
