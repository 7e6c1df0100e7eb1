/* Error reporting shared by every module: a kiln_error filled with printf-style text. */
#ifndef KILN_BASE_STATUS_H
#define KILN_BASE_STATUS_H

#include <stdbool.h>

#include <stdarg.h>
#include "kiln/kiln.h"

#if defined(__GNUC__)
#define KILN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_PRINTF(a, b)
#endif

/* Set err (may be NULL) to `code` and the formatted message; returns `code`. */
kiln_code kiln_fail(kiln_error *err, kiln_code code, const char *fmt, ...) KILN_PRINTF(3, 4);
kiln_code kiln_vfail(kiln_error *err, kiln_code code, const char *fmt, va_list ap)
    KILN_PRINTF(3, 0);
/* Prefix an existing message with formatted context ("while loading X: ..."). */
void kiln_error_prefix(kiln_error *err, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln_error_clear(kiln_error *err);

/* Checked size arithmetic: return 0 on overflow. */
int kiln_mul_ok(int64_t a, int64_t b, int64_t *out);
int kiln_add_ok(int64_t a, int64_t b, int64_t *out);

/* malloc/calloc that never return NULL for size 0. */
void *kiln_malloc(size_t n);
void *kiln_calloc(size_t n, size_t sz);
char *kiln_strdup(const char *s);
/* 64-byte aligned memory for large, long-lived buffers (the memory arena, tensors); free()
 * releases it. One place for their allocation policy. */
void *kiln_malloc_big(size_t n);
/* As kiln_malloc_big, for weights packed at load: blocks with a whole 2 MiB piece (after
 * rounding the tail up to one where that adds at most a quarter, so from about 1.6 MiB) are
 * 2 MiB-aligned transparent huge pages (madvise; KILN_THP=0 turns them off), one page fault
 * per 2 MiB instead of 512. */
void *kiln_malloc_weights(size_t n);

/* Log a message (log.c): to opts->log_fn when set, else stderr, if `level` (kiln_log_level)
 * is at opts->log_level or more severe. opts may be NULL: stderr at warning level. */
void kiln_log(const kiln_options *opts, int level, const char *fmt, ...) KILN_PRINTF(3, 4);

/* Whether the comma-separated `list` (may be NULL) names `name` exactly ("a,b": a and b). */
bool kiln_list_has(const char *list, const char *name);

#endif
