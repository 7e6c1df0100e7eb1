/* A small HTTP/1.1 client for http:// URLs: POSTs over one kept-alive connection (reopened when
 * the server closes it or it fails: a request on a reused connection that ends before any byte
 * of the reply is sent again once, on a new one), Content-Length, chunked or read-to-close
 * responses, a 30 s socket timeout and a 256 MiB response cap; with json_len >= 0 the body is the
 * binary tensor data extension's (JSON header, then raw bytes). Written here rather than taken
 * from libcurl: kiln-anomaly needs only plain-HTTP POSTs to a KServe v2 endpoint, and this keeps
 * the application's dependencies to jansson and libmicrohttpd, which kiln already uses. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "anomaly.h"

#define AM_HTTP_MAX (256u << 20)
#define AM_HTTP_HEAD_MAX (64u << 10)

struct am_http {
  char host[256];
  int port, fd;
  long connects; /* connections opened, for the summary */
};

static int connect_to(const char *host, int port, char *err) {
  char ports[16];
  snprintf(ports, sizeof(ports), "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, ports, &hints, &res);
  if (rc) {
    snprintf(err, AM_ERR_LEN, "%s:%d: %s", host, port, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    /* a request goes out as head + body: without this, on a kept connection the body waits for
     * the ACK of the head (Nagle), which the server delays (40 ms a request) */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) snprintf(err, AM_ERR_LEN, "%s:%d: cannot connect: %s", host, port, strerror(errno));
  return fd;
}

static int send_all(int fd, const char *p, size_t n, char *err) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      snprintf(err, AM_ERR_LEN, "send: %s", w < 0 ? strerror(errno) : "connection closed");
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static const char *header(const char *head, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n"))
    if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') return p + 3 + nl;
  return NULL;
}

/* Is the chunked body p[0, n) complete? Its length in bytes (trailer included) or 0; -1 when
 * malformed. */
static long chunked_end(const char *p, size_t n) {
  size_t in = 0;
  for (;;) {
    const char *nl = memmem(p + in, n - in, "\r\n", 2);
    if (!nl) return 0;
    char *end;
    unsigned long sz = strtoul(p + in, &end, 16);
    if (end == p + in) return -1;
    in = (size_t)(nl - p) + 2;
    if (sz == 0) {
      const char *t = memmem(p + in - 2, n - (in - 2), "\r\n\r\n", 4);
      return t ? (long)(t - p) + 4 : 0;
    }
    if (sz > AM_HTTP_MAX || in + sz + 2 > n) return 0;
    in += sz + 2;
  }
}

/* Decode a complete chunked body in place; returns its length. */
static size_t dechunk(char *p) {
  size_t in = 0, out = 0;
  for (;;) {
    char *end;
    unsigned long sz = strtoul(p + in, &end, 16);
    in = (size_t)(strstr(end, "\r\n") - p) + 2;
    if (sz == 0) return out;
    memmove(p + out, p + in, sz);
    out += sz;
    in += sz + 2;
  }
}

typedef struct reply {
  char *buf;
  size_t n, cap, head_len; /* head_len: through the blank line, 0 until seen */
  long body_len;           /* -1: to the close; -2: chunked */
  int keep;                /* the server keeps the connection open */
} reply;

/* After the head arrived: how the body ends and whether the connection stays. */
static int read_head(reply *r, int *status, long *json_len, char *err) {
  int minor = 0;
  if (sscanf(r->buf, "HTTP/1.%d %d", &minor, status) != 2) {
    snprintf(err, AM_ERR_LEN, "not an HTTP response");
    return -1;
  }
  r->buf[r->head_len - 2] = '\0'; /* headers end in one CRLF for header() */
  const char *te = header(r->buf, "Transfer-Encoding"), *cl = header(r->buf, "Content-Length");
  const char *ih = header(r->buf, "Inference-Header-Content-Length");
  const char *conn = header(r->buf, "Connection");
  *json_len = ih ? strtol(ih, NULL, 10) : -1;
  r->keep = conn ? strcasestr(conn, "keep-alive") != NULL : minor >= 1;
  if (conn && strcasestr(conn, "close")) r->keep = 0;
  if (te && strcasestr(te, "chunked")) {
    r->body_len = -2;
  } else if (cl) {
    unsigned long long want = strtoull(cl, NULL, 10);
    if (want > AM_HTTP_MAX) {
      snprintf(err, AM_ERR_LEN, "response larger than %u bytes", AM_HTTP_MAX);
      return -1;
    }
    r->body_len = (long)want;
  } else {
    r->body_len = -1;
    r->keep = 0;
  }
  return 0;
}

/* The reply is complete when this returns 1. */
static int body_done(reply *r, char *err) {
  size_t have = r->n - r->head_len;
  if (r->body_len >= 0) return have >= (size_t)r->body_len;
  if (r->body_len == -1) return 0;
  long e = chunked_end(r->buf + r->head_len, have);
  if (e < 0) snprintf(err, AM_ERR_LEN, "malformed chunked response");
  return e < 0 ? -1 : e > 0;
}

/* Read one reply. 0: complete; -1: error; -2: the connection ended before any byte. */
static int read_reply(int fd, reply *r, int *status, long *json_len, char *err) {
  for (;;) {
    if (r->n == r->cap) {
      if (r->cap >= AM_HTTP_MAX + AM_HTTP_HEAD_MAX) {
        snprintf(err, AM_ERR_LEN, "response larger than %u bytes", AM_HTTP_MAX);
        return -1;
      }
      r->cap *= 2;
      r->buf = realloc(r->buf, r->cap + 1);
    }
    ssize_t got = recv(fd, r->buf + r->n, r->cap - r->n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      snprintf(err, AM_ERR_LEN, "recv: %s", strerror(errno));
      return r->n == 0 && (errno == ECONNRESET || errno == EPIPE) ? -2 : -1;
    }
    if (got == 0) {
      if (r->n == 0) {
        snprintf(err, AM_ERR_LEN, "connection closed before the response");
        return -2;
      }
      if (r->head_len && r->body_len == -1) return 0;
      snprintf(err, AM_ERR_LEN, "connection closed in the middle of the response");
      return -1;
    }
    r->n += (size_t)got;
    r->buf[r->n] = '\0';
    if (!r->head_len) {
      char *sep = strstr(r->buf, "\r\n\r\n");
      if (!sep) {
        if (r->n > AM_HTTP_HEAD_MAX) {
          snprintf(err, AM_ERR_LEN, "response headers over %u bytes", AM_HTTP_HEAD_MAX);
          return -1;
        }
        continue;
      }
      r->head_len = (size_t)(sep - r->buf) + 4;
      if (read_head(r, status, json_len, err)) return -1;
    }
    int d = body_done(r, err);
    if (d) return d < 0 ? -1 : 0;
  }
}

static void take_body(reply *r, char **resp, size_t *resp_len) {
  char *body = r->buf + r->head_len;
  size_t blen = r->n - r->head_len;
  if (r->body_len == -2) blen = dechunk(body);
  else if (r->body_len >= 0) blen = (size_t)r->body_len;
  *resp = malloc(blen + 1);
  memcpy(*resp, body, blen);
  (*resp)[blen] = '\0';
  *resp_len = blen;
}

am_http *am_http_open(const char *host, int port) {
  am_http *h = calloc(1, sizeof(*h));
  snprintf(h->host, sizeof(h->host), "%s", host);
  h->port = port;
  h->fd = -1;
  return h;
}

static void drop(am_http *h) {
  if (h->fd >= 0) close(h->fd);
  h->fd = -1;
}

/* One try: -2 when a reused connection turned out closed before the reply began. */
static int post_once(am_http *h, const char *head, size_t hl, const char *body, size_t len,
                     char **resp, size_t *resp_len, int *status, long *json_len, char *err) {
  int reused = h->fd >= 0;
  if (!reused) {
    h->fd = connect_to(h->host, h->port, err);
    if (h->fd < 0) return -1;
    h->connects++;
  }
  if (send_all(h->fd, head, hl, err) || send_all(h->fd, body, len, err)) {
    drop(h);
    return reused ? -2 : -1;
  }
  reply r = {.buf = malloc(65536 + 1), .cap = 65536};
  int rc = read_reply(h->fd, &r, status, json_len, err);
  if (rc == 0) take_body(&r, resp, resp_len);
  if (rc != 0 || !r.keep) drop(h);
  free(r.buf);
  return rc == -2 && !reused ? -1 : rc;
}

int am_http_post(am_http *h, const char *path, const char *body, size_t len, long json_len,
                 char **resp, size_t *resp_len, int *status, long *resp_json_len, char *err) {
  char head[1536], binary[96] = "";
  if (json_len >= 0)
    snprintf(binary, sizeof(binary), "Inference-Header-Content-Length: %ld\r\n", json_len);
  int hl = snprintf(head, sizeof(head),
                    "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\n%s"
                    "Content-Length: %zu\r\n\r\n",
                    path, h->host, h->port,
                    json_len >= 0 ? "application/octet-stream" : "application/json", binary, len);
  int rc = post_once(h, head, (size_t)hl, body, len, resp, resp_len, status, resp_json_len, err);
  if (rc == -2) /* the server had closed the kept connection: once more, on a new one */
    rc = post_once(h, head, (size_t)hl, body, len, resp, resp_len, status, resp_json_len, err);
  return rc < 0 ? -1 : 0;
}

long am_http_connections(const am_http *h) { return h->connects; }

void am_http_close(am_http *h) {
  if (!h) return;
  drop(h);
  free(h);
}
