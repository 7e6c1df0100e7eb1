/* A small HTTP/1.1 client for http:// URLs: one POST per connection (Connection: close),
 * Content-Length or chunked responses, a 30 s socket timeout and a 256 MiB response cap; with
 * json_len >= 0 the body is the binary tensor data extension's (JSON header, then raw bytes).
 * Written here rather than taken from libcurl: kiln-anomaly needs only plain-HTTP POSTs to a
 * KServe v2 endpoint, and this keeps the application's dependencies to jansson and
 * libmicrohttpd, which kiln already uses. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "anomaly.h"

#define AM_HTTP_MAX (256u << 20)

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

static char *recv_all(int fd, size_t *len, char *err) {
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (n == cap) {
      if (cap >= AM_HTTP_MAX) {
        snprintf(err, AM_ERR_LEN, "response larger than %u bytes", AM_HTTP_MAX);
        free(buf);
        return NULL;
      }
      cap *= 2;
      buf = realloc(buf, cap + 1);
    }
    ssize_t r = recv(fd, buf + n, cap - n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(err, AM_ERR_LEN, "recv: %s", strerror(errno));
      free(buf);
      return NULL;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Decode a chunked body in place; returns its length or -1. */
static long dechunk(char *p, size_t n) {
  size_t in = 0, out = 0;
  for (;;) {
    char *end;
    unsigned long sz = strtoul(p + in, &end, 16);
    char *nl = strstr(end, "\r\n");
    if (end == p + in || !nl) return -1;
    in = (size_t)(nl - p) + 2;
    if (sz == 0) return (long)out;
    if (in + sz > n) return -1;
    memmove(p + out, p + in, sz);
    out += sz;
    in += sz + 2;
    if (in > n) return -1;
  }
}

static const char *header(const char *head, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n"))
    if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') return p + 3 + nl;
  return NULL;
}

static int parse_reply(char *buf, size_t n, char **resp, size_t *resp_len, int *status,
                       long *json_len, char *err) {
  char *sep = strstr(buf, "\r\n\r\n");
  if (!sep || sscanf(buf, "HTTP/%*d.%*d %d", status) != 1) {
    snprintf(err, AM_ERR_LEN, "not an HTTP response");
    return -1;
  }
  *sep = '\0';
  char *body = sep + 4;
  size_t blen = n - (size_t)(body - buf);
  const char *te = header(buf, "Transfer-Encoding"), *cl = header(buf, "Content-Length");
  const char *ih = header(buf, "Inference-Header-Content-Length");
  *json_len = ih ? strtol(ih, NULL, 10) : -1;
  if (te && strstr(te, "chunked")) {
    long d = dechunk(body, blen);
    if (d < 0) {
      snprintf(err, AM_ERR_LEN, "malformed chunked response");
      return -1;
    }
    blen = (size_t)d;
  } else if (cl) {
    size_t want = (size_t)strtoull(cl, NULL, 10);
    if (want > blen) {
      snprintf(err, AM_ERR_LEN, "response cut short: %zu of %zu bytes", blen, want);
      return -1;
    }
    blen = want;
  }
  *resp = malloc(blen + 1);
  memcpy(*resp, body, blen);
  (*resp)[blen] = '\0';
  *resp_len = blen;
  return 0;
}

int am_http_post(const char *host, int port, const char *path, const char *body, size_t len,
                 long json_len, char **resp, size_t *resp_len, int *status, long *resp_json_len,
                 char *err) {
  int fd = connect_to(host, port, err);
  if (fd < 0) return -1;
  char head[1536], binary[96] = "";
  if (json_len >= 0)
    snprintf(binary, sizeof(binary), "Inference-Header-Content-Length: %ld\r\n", json_len);
  int hl = snprintf(head, sizeof(head),
                    "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\n%s"
                    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                    path, host, port, json_len >= 0 ? "application/octet-stream" : "application/json",
                    binary, len);
  size_t n = 0;
  char *buf = NULL;
  int rc = -1;
  if (send_all(fd, head, (size_t)hl, err) == 0 && send_all(fd, body, len, err) == 0 &&
      (buf = recv_all(fd, &n, err)) != NULL)
    rc = parse_reply(buf, n, resp, resp_len, status, resp_json_len, err);
  free(buf);
  close(fd);
  return rc;
}
