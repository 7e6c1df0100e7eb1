/* RegexFullMatch (opset 20): whether each string of X matches `pattern` as a whole.
 *
 * ONNX specifies RE2 syntax; kiln runs the pattern on libc's POSIX extended regular
 * expressions (regcomp with REG_EXTENDED | REG_NEWLINE), after rewriting the RE2 forms ERE
 * lacks: \d \D \w \W \s \S (also inside [...]), escapes inside [...] such as [\w.\-], \t \n
 * \r \f \v, (?:...) and (?P<name>...) groups (plain groups here), and lazy quantifiers (*? +?
 * ?? {n,m}?), which cannot change whether a full match exists. \b and \B pass to glibc.
 * A full match is a leftmost-longest match spanning the string (POSIX's rule), so alternation
 * order does not matter. Patterns compile and run under the C.UTF-8 locale (switched per
 * thread with uselocale, never globally), so '.' and [^...] take one UTF-8 character as in
 * RE2; \d \w \s stay ASCII as in RE2 ([0-9], [0-9A-Za-z_], [\t\n\f\r ]). Differences from
 * RE2 that remain: flags ((?i) ...), \p{..} classes, lookarounds, \A \z and \Q..\E are refused
 * with an error naming the construct; where C.UTF-8 is missing, matching falls back to bytes.
 * The compiled pattern is kept in the node's cache. */
#include <locale.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* A growing output buffer for the rewritten pattern. */
typedef struct rbuf {
  char *s;
  size_t n, cap;
  bool oom;
} rbuf;

static void put(rbuf *b, const char *t) {
  size_t l = strlen(t);
  if (b->n + l + 1 > b->cap) {
    size_t cap = (b->n + l + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  memcpy(b->s + b->n, t, l + 1);
  b->n += l;
}

static void putc1(rbuf *b, char ch) { put(b, (char[2]){ch, 0}); }

/* The bracket class for a shorthand escape (d, w, s, upper case negated), or NULL. */
static const char *shorthand(char e, bool *neg) {
  *neg = e >= 'A' && e <= 'Z';
  switch (e) {
    case 'd': case 'D': return "0-9";
    case 'w': case 'W': return "_0-9A-Za-z";
    case 's': case 'S': return "\t\n\f\r ";
    default: return NULL;
  }
}

static char control_escape(char e) {
  switch (e) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default: return 0;
  }
}

/* RE2's POSIX classes are ASCII; under C.UTF-8 libc's would also take other letters. The
 * ASCII members as bracket items, or NULL for a name RE2 does not have. */
static const char *ascii_class(const char *name, size_t len) {
  static const char *const map[][2] = {
      {"alnum", "0-9A-Za-z"}, {"alpha", "A-Za-z"}, {"ascii", "\x01-\x7f"}, {"blank", "\t "},
      {"cntrl", "\x01-\x1f\x7f"}, {"digit", "0-9"}, {"graph", "!-~"}, {"lower", "a-z"},
      {"print", " -~"}, {"punct", "!-/:-@[-`{-~"}, {"space", "\t\n\v\f\r "}, {"upper", "A-Z"},
      {"word", "0-9A-Za-z_"}, {"xdigit", "0-9A-Fa-f"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strlen(map[i][0]) == len && !strncmp(map[i][0], name, len)) return map[i][1];
  return NULL;
}

/* Rewrite the class starting at p[0] == '['; returns the position after it, or NULL with why. */
static const char *rewrite_class(const char *p, rbuf *b, const char **why) {
  p++;
  bool neg = *p == '^', dash = false, caret = false, close = false;
  if (neg) p++;
  rbuf items = {0};
  if (*p == ']') { /* a leading ] is a literal */
    close = true;
    p++;
  }
  for (; *p && *p != ']'; p++) {
    char ch = *p;
    if (ch == '[' && p[1] == ':') { /* [:alpha:]: its ASCII members, as RE2 */
      const char *end = strstr(p + 2, ":]");
      const char *members = end ? ascii_class(p + 2, (size_t)(end - p - 2)) : NULL;
      if (!members) {
        *why = "an unknown [:class:]";
        free(items.s);
        return NULL;
      }
      put(&items, members);
      p = end + 1;
      continue;
    }
    if (ch == '\\' && p[1]) {
      ch = *++p;
      bool sneg;
      const char *cls = shorthand(ch, &sneg);
      if (cls && sneg) {
        *why = "a negated shorthand (\\D, \\W, \\S) inside [...]";
        free(items.s);
        return NULL;
      }
      if (cls) {
        put(&items, cls);
        continue;
      }
      if (control_escape(ch)) ch = control_escape(ch);
      else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) {
        *why = "an escape inside [...] other than \\d \\w \\s \\t \\n \\r \\f \\v";
        free(items.s);
        return NULL;
      }
    } else if (ch == '-' && p[1] != ']' && items.n && !(p[-1] == '[' || p[-1] == '^')) {
      putc1(&items, '-'); /* a range a-z */
      continue;
    }
    if (ch == ']') close = true;
    else if (ch == '-') dash = true;
    else if (ch == '^') caret = true;
    else putc1(&items, ch);
  }
  if (*p != ']') {
    *why = "an unterminated [...]";
    free(items.s);
    return NULL;
  }
  /* POSIX: ] first, ^ anywhere but first, - last */
  put(b, neg ? "[^" : "[");
  if (close) putc1(b, ']');
  if (items.s) put(b, items.s);
  if (caret) putc1(b, '^');
  if (dash) putc1(b, '-');
  if (!close && !items.n && !dash && caret) { /* [^] would be wrong: the lone literal ^ */
    b->n -= neg ? 3 : 2;
    b->s[b->n] = 0;
    put(b, neg ? "[^^]" : "\\^");
  } else {
    putc1(b, ']');
  }
  free(items.s);
  return p + 1;
}

/* The ERE for an RE2 pattern, or NULL with *why (malloc'ed result). */
static char *rewrite(const char *p, const char **why) {
  rbuf b = {0};
  put(&b, "");
  while (*p && !b.oom) {
    char ch = *p;
    if (ch == '[') {
      if (!(p = rewrite_class(p, &b, why))) break;
      continue;
    }
    if (ch == '(' && p[1] == '?') {
      if (p[2] == ':') {
        put(&b, "(");
        p += 3;
        continue;
      }
      if (p[2] == 'P' && p[3] == '<') { /* (?P<name>...) */
        const char *end = strchr(p, '>');
        if (!end) {
          *why = "an unterminated (?P<name>";
          break;
        }
        put(&b, "(");
        p = end + 1;
        continue;
      }
      *why = "a (?...) flag or group kind";
      break;
    }
    if ((ch == '*' || ch == '+' || ch == '?' || ch == '}') && p[1] == '?') { /* lazy: same set */
      putc1(&b, ch);
      p += 2;
      continue;
    }
    if (ch == '\\' && p[1]) {
      char e = p[1];
      bool neg;
      const char *cls = shorthand(e, &neg);
      if (cls) {
        put(&b, neg ? "[^" : "[");
        put(&b, cls);
        put(&b, "]");
      } else if (control_escape(e)) {
        putc1(&b, control_escape(e));
      } else if (e == 'p' || e == 'P' || e == 'A' || e == 'z' || e == 'Q' || e == 'E' || e == 'C') {
        *why = "\\p, \\P, \\A, \\z, \\Q..\\E or \\C";
        break;
      } else {
        putc1(&b, '\\');
        putc1(&b, e);
      }
      p += 2;
      continue;
    }
    putc1(&b, ch);
    p++;
  }
  if (b.oom) *why = "out of memory";
  if (*p || b.oom) {
    if (!*why) *why = "an unsupported construct";
    free(b.s);
    return NULL;
  }
  return b.s;
}

typedef struct compiled {
  regex_t re;
  locale_t loc; /* C.UTF-8, or (locale_t)0 to run in the thread's locale */
} compiled;

static void compiled_free(void *p) {
  compiled *cp = p;
  if (!cp) return;
  regfree(&cp->re);
  if (cp->loc) freelocale(cp->loc);
  free(cp);
}

static compiled *compile(kiln_kctx *c, const char *pattern) {
  const char *why = NULL;
  char *ere = rewrite(pattern, &why);
  if (!ere) {
    kiln_kunsup(c, "pattern '%.200s' uses %s, which kiln's POSIX-based matcher does not take", pattern, why);
    return NULL;
  }
  compiled *cp = calloc(1, sizeof *cp);
  int rc = REG_ESPACE;
  if (cp) {
    cp->loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    locale_t old = cp->loc ? uselocale(cp->loc) : (locale_t)0;
    rc = regcomp(&cp->re, ere, REG_EXTENDED | REG_NEWLINE);
    if (old) uselocale(old);
  }
  free(ere);
  if (rc) {
    char msg[200];
    regerror(rc, cp ? &cp->re : NULL, msg, sizeof msg);
    if (cp && cp->loc) freelocale(cp->loc);
    free(cp);
    kiln_kfail(c, "pattern '%.200s' is not a regular expression kiln can compile (%s)", pattern, msg);
    return NULL;
  }
  return cp;
}

static bool full_match(const regex_t *re, const char *s) {
  regmatch_t m;
  s = s ? s : "";
  return !regexec(re, s, 1, &m, 0) && m.rm_so == 0 && (size_t)m.rm_eo == strlen(s);
}

static kiln_code regex_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0);
  if (x->dtype != KILN_STRING) return kiln_kfail(c, "input must be a string tensor, not %s", kiln_dtype_name(x->dtype));
  const char *pattern = kiln_attr_str(c->node, "pattern", NULL);
  if (!pattern) return kiln_kfail(c, "attribute 'pattern' is missing");
  compiled *cp = kiln_cache_get(c), *own = NULL;
  if (!cp) {
    compiled *mine = compile(c, pattern);
    if (!mine) return c->err->code;
    cp = kiln_cache_publish(c, mine, compiled_free);
    if (!cp && !(cp = own = compile(c, pattern))) return c->err->code; /* no node state */
  }
  kiln_tensor *y = kiln_out(c, 0, KILN_BOOL, x->rank, x->dims);
  rc = y ? KILN_OK : (c->err->code ? c->err->code : KILN_ERR_NOMEM);
  locale_t old = cp->loc ? uselocale(cp->loc) : (locale_t)0;
  for (int64_t i = 0; y && i < x->numel; i++)
    ((uint8_t *)y->data)[i] = full_match(&cp->re, ((char *const *)x->data)[i]);
  if (old) uselocale(old);
  compiled_free(own);
  return rc;
}

static kiln_code regex_infer(kiln_ictx *c) {
  const kiln_type *x = kiln_itype(c, 0);
  kiln_infer_tensor(c, 0, KILN_BOOL, x ? x->rank : -1, x && x->rank >= 0 ? x->dims : NULL);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_regex_full_match[] = {
    {.domain = "", .name = "RegexFullMatch", .since = 20, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = regex_infer, .run = regex_run, .flow = KILN_FLOW_SAME},
    {0},
};
