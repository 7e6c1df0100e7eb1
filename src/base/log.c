/* kiln's one logging path: kiln_options.log_fn or stderr, filtered by the options' level. */
#include <stdio.h>

#include "base/status.h"

static int threshold(const kiln_options *o) {
  if (!o || o->size < offsetof(kiln_options, log_user) + sizeof o->log_user)
    return o && o->verbose ? KILN_LOG_INFO : KILN_LOG_WARNING;
  if (o->log_level) return o->log_level;
  return o->verbose ? KILN_LOG_INFO : KILN_LOG_WARNING;
}

void kiln_log(const kiln_options *opts, int level, const char *fmt, ...) {
  if (level < threshold(opts)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (opts && opts->size >= offsetof(kiln_options, log_user) + sizeof opts->log_user && opts->log_fn)
    opts->log_fn(opts->log_user, level, msg);
  else
    fprintf(stderr, "kiln: %s\n", msg);
}
