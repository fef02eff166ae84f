/* core/log.h - the library's side of the log sink (ringflow/log.h). A message
 * site costs one relaxed atomic load while logging is off or below its level:
 * RF__LOG checks the threshold before it evaluates or formats anything.
 * Print names of nodes, devices and collectives with "%.200s" (user strings
 * are capped at 200 bytes); rf__log_write cuts a line at 4095 bytes and
 * drops what either cut leaves of a UTF-8 character. */
#ifndef RF_CORE_LOG_H
#define RF_CORE_LOG_H

#include <stdatomic.h>
#include <stdbool.h>

#include "ringflow/log.h"

/* The lowest level delivered; RF__LOG_OFF when no callback is set. */
#define RF__LOG_OFF (RF_LOG_ERROR + 1)
extern atomic_int rf__log_threshold;

static inline bool rf__log_on(rf_log_level level) {
  return (int)level >=
         atomic_load_explicit(&rf__log_threshold, memory_order_relaxed);
}

/* Formats and delivers one message (no trailing newline). Call through
 * RF__LOG, or after rf__log_on when building the message takes work. */
void rf__log_write(rf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define RF__LOG(level, ...)                                   \
  do {                                                        \
    if (rf__log_on(level)) rf__log_write(level, __VA_ARGS__); \
  } while (0)

/* Logs "<what>: <st's message>" (what NULL: the message alone) at level and
 * returns st unchanged (NULL logs nothing), for an error that also goes its
 * usual way (a timeout that fails its participants): wrap where it is made. */
rf_status *rf__log_status(rf_log_level level, const char *what, rf_status *st);

#endif
