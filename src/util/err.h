/* Error reporting: every fallible call fills a loom_err with one human-readable line that names
 * the file, field or rank at fault, and returns -1 (or NULL). Callers add context by prefixing. */
#ifndef LOOM_UTIL_ERR_H
#define LOOM_UTIL_ERR_H
#include "loom.h"

/* Formats into err (if non-NULL) and returns -1, so `return loom_errf(err, ...)` reads naturally. */
int loom_errf(loom_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to an error already set. Returns -1. */
int loom_err_prefix(loom_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
