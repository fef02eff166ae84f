/* core/status.c - the rf_status object. The out-of-memory status is a static
 * object so that reporting an allocation failure never allocates. */
#include "core/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

static rf_status *status_vnew(rf_code code, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  rf_status *s = rf__malloc(sizeof *s);
  char *msg = rf__malloc((size_t)n + 1);
  if (!s || !msg) {
    rf__free(s);
    rf__free(msg);
    return &oom_status;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  s->code = code;
  s->message = msg;
  return s;
}

rf_status *rf_status_new(rf_code code, const char *fmt, ...) {
  if (code == RF_OK) return NULL;
  if (!fmt) fmt = "";
  va_list ap;
  va_start(ap, fmt);
  rf_status *s = status_vnew(code, fmt, ap);
  va_end(ap);
  return s;
}

rf_status *rf__status_prefix(rf_status *st, const char *fmt, ...) {
  if (!st || st == &oom_status) return st;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  rf_status *out = rf_status_new(st->code, "%s: %s", prefix, st->message);
  if (out == &oom_status) return st;
  rf_status_free(st);
  return out;
}

rf_code rf__errno_code(int e) {
  switch (e) {
    case ENOENT:
    case ENOTDIR: return RF_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return RF_PERMISSION_DENIED;
    case ENOSPC: return RF_RESOURCE_EXHAUSTED;
    default: return RF_UNKNOWN;
  }
}
