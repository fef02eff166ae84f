/* core/status.h - internal helpers around rf_status: construction and the
 * propagation macros every layer uses. */
#ifndef RF_CORE_STATUS_H
#define RF_CORE_STATUS_H

#include "ringflow/status.h"

/* rf_status_new with a code known not to be RF_OK. */
#define rf__error(code, ...) rf_status_new((code), __VA_ARGS__)
#define rf__invalid(...) rf_status_new(RF_INVALID_ARGUMENT, __VA_ARGS__)
#define rf__internal(...) rf_status_new(RF_INTERNAL, __VA_ARGS__)

/* The shared status returned when memory runs out. */
rf_status *rf__oom(void);

/* The code for a failed file operation's errno (ENOENT: NOT_FOUND, EACCES:
 * PERMISSION_DENIED, ENOSPC: RESOURCE_EXHAUSTED, ...; UNKNOWN otherwise). */
rf_code rf__errno_code(int e);

/* Prefixes "<prefix>: " to st's message (st may be NULL); returns st or a new
 * status replacing it (the old one is freed). */
rf_status *rf__status_prefix(rf_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Returns from the enclosing function with the status of expr if it is an
 * error. */
#define RF_CHECK(expr)           \
  do {                           \
    rf_status *rf__st_ = (expr); \
    if (rf__st_) return rf__st_; \
  } while (0)

/* Stores an error status in `st` and jumps to `label`. */
#define RF_CHECK_GOTO(expr, st, label) \
  do {                                 \
    (st) = (expr);                     \
    if (st) goto label;                \
  } while (0)

/* Returns RESOURCE_EXHAUSTED when p is NULL. */
#define RF_CHECK_ALLOC(p)       \
  do {                          \
    if (!(p)) return rf__oom(); \
  } while (0)

#endif
