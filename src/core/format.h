/* core/format.h - printf for error messages, with every quoted string capped.
 *
 * Messages quote what users named: nodes, ops, devices, collectives, attrs,
 * files. A name may be 100 MB long, and a message must stay readable, so each
 * %s argument longer than RF_STATUS_QUOTE_MAX bytes is cut to its first
 * RF_STATUS_QUOTE_MAX bytes (never inside a UTF-8 sequence) followed by
 * "... (N bytes)". Every status message is built here (rf_status_new and the
 * helpers of core/status.h); a whole message that is carried into another
 * (a prefix, a copy) is appended as it is, never through %s. */
#ifndef RF_CORE_FORMAT_H
#define RF_CORE_FORMAT_H

#include <stdarg.h>
#include <stddef.h>

/* The formatted text in a buffer from rf__malloc (free with rf__free), or
 * NULL when memory runs out. Supports the C99 conversions (flags, width,
 * precision, '*', length modifiers hh h l ll j z t L); %n writes nothing. */
char *rf__vformat(const char *fmt, va_list ap);
char *rf__format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
