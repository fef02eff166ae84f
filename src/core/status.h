/* core/status.h - internal helpers around rf_status: construction and the
 * propagation macros every layer uses. Every message is formatted with each
 * %s argument capped at RF_STATUS_QUOTE_MAX bytes (core/format.h), so a huge
 * node, op, device, collective, attr or file name cannot make a huge
 * message. */
#ifndef RF_CORE_STATUS_H
#define RF_CORE_STATUS_H

#include <stdarg.h>

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

/* rf_status_new with a va_list. */
rf_status *rf__status_vnew(rf_code code, const char *fmt, va_list ap);

/* A status holding `text` whole (copied), for messages made elsewhere (another
 * status, another process); RF_OK gives NULL. */
rf_status *rf__status_text(rf_code code, const char *text);

/* A new status with st's code and whole message (st itself when NULL or the
 * shared out-of-memory status). Carry a message into another through this or
 * rf__status_prefix, never through "%s": %s arguments are capped at
 * RF_STATUS_QUOTE_MAX bytes (core/format.h). */
rf_status *rf__status_copy(const rf_status *st);

/* Prefixes "<prefix>: " to st's message (st may be NULL) and returns st, or,
 * for the shared out-of-memory status, a new RESOURCE_EXHAUSTED status with
 * the prefixed message. The prefix's %s arguments are capped; st's message is
 * kept whole. When memory runs out the status is returned as it was. */
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
