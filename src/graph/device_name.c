/* graph/device_name.c - parsing and printing device names. A name is a '/'
 * separated list of parts: at most one "task:N" and exactly one device part
 * ("cpu", "gpu:2", "device:GPU:2"); matching ignores case. Nothing allocates
 * except the error status. */
#include "graph/device_name.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/status.h"

#define MAX_INDEX 1000000

static const char *const type_names[] = {"cpu", "gpu"};
_Static_assert(sizeof(type_names) / sizeof(type_names[0]) ==
                   RF_DEVICE_TYPE_COUNT,
               "one name per device type");

const char *rf__device_type_name(rf__device_type t) {
  if ((int)t < 0 || t >= RF_DEVICE_TYPE_COUNT) return "unknown";
  return type_names[t];
}

/* Parses the decimal index in [s, s+n); -1 when malformed or too large. */
static int parse_index(const char *s, size_t n) {
  if (n == 0 || n > 7) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= MAX_INDEX ? v : -1;
}

static bool prefix_ci(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  return n >= k && strncasecmp(s, p, k) == 0;
}

/* "cpu", "cpu:3" (also after "device:"). */
static bool parse_device_part(const char *s, size_t n, rf__device_name *d) {
  for (int t = 0; t < RF_DEVICE_TYPE_COUNT; t++) {
    size_t k = strlen(type_names[t]);
    if (!prefix_ci(s, n, type_names[t])) continue;
    if (n == k) {
      d->type = (rf__device_type)t;
      d->index = 0;
      return true;
    }
    if (s[k] != ':') return false;
    int idx = parse_index(s + k + 1, n - k - 1);
    if (idx < 0) return false;
    d->type = (rf__device_type)t;
    d->index = idx;
    return true;
  }
  return false;
}

rf_status *rf__device_name_parse(const char *s, rf__device_name *out) {
  if (!s) return rf__invalid("invalid device name: NULL");
  rf__device_name d = {-1, RF_DEVICE_CPU, 0};
  bool have_device = false, have_task = false;
  const char *p = s;
  if (*p == '/') p++;
  if (*p == '\0') goto bad;
  while (*p) {
    const char *end = strchr(p, '/');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (prefix_ci(p, n, "task:")) {
      int t = parse_index(p + 5, n - 5);
      if (t < 0 || have_task) goto bad;
      d.task = t;
      have_task = true;
    } else {
      const char *dp = p;
      size_t dn = n;
      if (prefix_ci(p, n, "device:")) {
        dp += 7;
        dn -= 7;
      }
      if (have_device || !parse_device_part(dp, dn, &d)) goto bad;
      have_device = true;
    }
    if (!end) break;
    p = end + 1;
    if (*p == '\0') goto bad; /* trailing '/' */
  }
  if (!have_device) goto bad;
  if (out) *out = d;
  return NULL;
bad:
  return rf__invalid(
      "invalid device name '%s' (expected e.g. \"cpu:0\", \"gpu:1\", "
      "\"/device:GPU:1\")",
      s);
}

void rf__device_name_format(const rf__device_name *d, char *buf, size_t len) {
  if (!buf || len == 0) return;
  if (!d) {
    buf[0] = '\0';
    return;
  }
  if (d->task >= 0)
    snprintf(buf, len, "/task:%d/%s:%d", d->task, rf__device_type_name(d->type),
             d->index);
  else
    snprintf(buf, len, "%s:%d", rf__device_type_name(d->type), d->index);
}

bool rf__device_name_equal(const rf__device_name *a,
                           const rf__device_name *b) {
  if (!a || !b) return false;
  return a->task == b->task && a->type == b->type && a->index == b->index;
}
