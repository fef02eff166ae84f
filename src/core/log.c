/* core/log.c - the process-wide log sink. The callback and its user pointer
 * change together under a write lock; delivery holds the read lock, so a
 * setter waits for running callbacks and none runs after it returns. The
 * threshold is also an atomic int that message sites read without the lock
 * (a stale read only costs a formatted message that delivery drops). A line
 * is formatted on the stack: logging never allocates. A line never ends a
 * name inside a UTF-8 character: what a cut leaves of one is dropped. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

#define LINE_MAX_BYTES 4096

atomic_int rf__log_threshold = RF__LOG_OFF;

static pthread_rwlock_t sink_lock = PTHREAD_RWLOCK_INITIALIZER;
static rf_log_fn sink_fn;            /* under sink_lock */
static void *sink_user;              /* under sink_lock */
static int sink_level = RF__LOG_OFF; /* under sink_lock */

static const char *const level_names[] = {"debug", "info", "warn", "error"};
_Static_assert(sizeof level_names / sizeof *level_names == RF__LOG_OFF,
               "one name per level");

const char *rf_log_level_name(rf_log_level level) {
  return (int)level >= 0 && (int)level < RF__LOG_OFF ? level_names[level]
                                                     : "unknown";
}

rf_status *rf_set_log_callback(rf_log_level level, rf_log_fn fn, void *user) {
  if ((int)level < RF_LOG_DEBUG || (int)level > RF_LOG_ERROR)
    return rf__invalid(
        "rf_set_log_callback: level %d is not RF_LOG_DEBUG..RF_LOG_ERROR",
        (int)level);
  pthread_rwlock_wrlock(&sink_lock);
  sink_fn = fn;
  sink_user = fn ? user : NULL;
  sink_level = fn ? (int)level : RF__LOG_OFF;
  atomic_store_explicit(&rf__log_threshold, sink_level, memory_order_relaxed);
  pthread_rwlock_unlock(&sink_lock);
  return NULL;
}

static void deliver(rf_log_level level, const char *msg) {
  pthread_rwlock_rdlock(&sink_lock);
  if (sink_fn && (int)level >= sink_level) sink_fn(level, msg, sink_user);
  pthread_rwlock_unlock(&sink_lock);
}

/* Drops each UTF-8 sequence whose continuation bytes stop short: what
 * "%.200s" or the 4095-byte cut leaves of a character it cut through. Bytes
 * that were never UTF-8 stay as they are. Returns the new length. */
static size_t drop_cut_characters(char *s, size_t len) {
  size_t out = 0;
  for (size_t i = 0; i < len;) {
    unsigned char b = (unsigned char)s[i];
    size_t need = b < 0xc0 ? 0 : b < 0xe0 ? 1 : b < 0xf0 ? 2 : b < 0xf8 ? 3 : 0;
    size_t k = 0;
    while (k < need && i + 1 + k < len &&
           ((unsigned char)s[i + 1 + k] & 0xc0) == 0x80)
      k++;
    if (k < need) { /* cut short: drop the lead and what followed of it */
      i += 1 + k;
      continue;
    }
    memmove(s + out, s + i, 1 + need);
    out += 1 + need;
    i += 1 + need;
  }
  s[out] = '\0';
  return out;
}

void rf__log_write(rf_log_level level, const char *fmt, ...) {
  char line[LINE_MAX_BYTES];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) /* cut: say so */
    memcpy(line + sizeof line - 4, "...", 4);
  /* One line without a trailing newline, whatever a name holds. */
  size_t len = strlen(line);
  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    line[--len] = '\0';
  for (size_t i = 0; i < len; i++)
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  drop_cut_characters(line, len);
  deliver(level, line);
}

rf_status *rf__log_status(rf_log_level level, const char *what, rf_status *st) {
  if (st && rf__log_on(level))
    rf__log_write(level, "%s%s%s", what ? what : "", what ? ": " : "",
                  rf_status_message(st));
  return st;
}
