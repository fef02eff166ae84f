/* core/status.c - the rf_status object. The out-of-memory status is a static
 * object so that reporting an allocation failure never allocates. Messages
 * are formatted by core/format.c, which caps every quoted string. */
#include "core/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/format.h"
#include "core/mem.h"

struct rf_status {
  rf_code code;
  char *message;
};

static struct rf_status oom_status = {RF_RESOURCE_EXHAUSTED,
                                      (char *)"out of memory"};

static const char *const code_names[] = {
#define RF_X(code, name) name,
    RF_CODE_LIST(RF_X)
#undef RF_X
};
_Static_assert(sizeof(code_names) / sizeof(code_names[0]) == RF_CODE_COUNT,
               "one name per code");

rf_status *rf__oom(void) { return &oom_status; }

rf_code rf_status_code(const rf_status *s) { return s ? s->code : RF_OK; }

const char *rf_status_message(const rf_status *s) {
  return s ? s->message : "";
}

const char *rf_code_name(rf_code code) {
  if ((int)code < 0 || code >= RF_CODE_COUNT) return "UNKNOWN_CODE";
  return code_names[code];
}

void rf_status_free(rf_status *s) {
  if (!s || s == &oom_status) return;
  rf__free(s->message);
  rf__free(s);
}

/* A status owning msg (from rf__malloc); NULL msg means memory ran out. */
static rf_status *status_take(rf_code code, char *msg) {
  rf_status *s = msg ? rf__malloc(sizeof *s) : NULL;
  if (!s) {
    rf__free(msg);
    return &oom_status;
  }
  s->code = code;
  s->message = msg;
  return s;
}

rf_status *rf__status_vnew(rf_code code, const char *fmt, va_list ap) {
  if (code == RF_OK) return NULL;
  return status_take(code, rf__vformat(fmt ? fmt : "", ap));
}

rf_status *rf_status_new(rf_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_status *s = rf__status_vnew(code, fmt, ap);
  va_end(ap);
  return s;
}

rf_status *rf__status_text(rf_code code, const char *text) {
  if (code == RF_OK) return NULL;
  return status_take(code, rf__strdup(text ? text : ""));
}

rf_status *rf__status_copy(const rf_status *st) {
  if (!st || st == &oom_status) return (rf_status *)st;
  return rf__status_text(st->code, st->message);
}

/* The shared out-of-memory status gets a prefix too, in a status of its own:
 * the allocation that failed is usually not the one this small one needs,
 * and "out of memory" alone names no node, op or device. */
rf_status *rf__status_prefix(rf_status *st, const char *fmt, ...) {
  if (!st) return st;
  va_list ap;
  va_start(ap, fmt);
  char *prefix = rf__vformat(fmt, ap);
  va_end(ap);
  size_t np = prefix ? strlen(prefix) : 0, nm = strlen(st->message);
  char *msg = prefix ? rf__malloc(np + 2 + nm + 1) : NULL;
  if (msg) { /* st's message goes in whole: it was capped when made */
    memcpy(msg, prefix, np);
    memcpy(msg + np, ": ", 2);
    memcpy(msg + np + 2, st->message, nm + 1);
    if (st == &oom_status) {
      st = status_take(RF_RESOURCE_EXHAUSTED, msg); /* oom_status if none */
    } else {
      rf__free(st->message);
      st->message = msg;
    }
  }
  rf__free(prefix);
  return st; /* without memory: the message as it was */
}

rf_code rf__errno_code(int e) {
  switch (e) {
    case ENOENT:
    case ENOTDIR: return RF_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return RF_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return RF_RESOURCE_EXHAUSTED;
    case ENAMETOOLONG: return RF_INVALID_ARGUMENT; /* the path given */
    default: return RF_UNKNOWN;
  }
}
