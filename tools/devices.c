/* tools/devices.c - reads the --devices syntax of devices.h: a count, or a
 * comma-separated list of devices and ranges of one type. */
#include "devices.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A decimal number at *p (advanced past it), saturated at 1000 (past any
 * index or count): 0 with *out set, or -1 when there are no digits. */
static int read_index(const char **p, int *out) {
  const char *s = *p;
  int v = 0;
  if (!isdigit((unsigned char)*s)) return -1;
  for (; isdigit((unsigned char)*s); s++)
    v = v >= 1000 ? 1000 : v * 10 + (*s - '0');
  *p = s;
  *out = v;
  return 0;
}

/* Appends TYPE:lo..hi to d; why on a device given twice. */
static int add_range(tool_devices *d, int lo, int hi, char *why,
                     size_t why_len) {
  for (int i = lo; i <= hi; i++) {
    for (int k = 0; k < d->n; k++)
      if (d->index[k] == i) {
        snprintf(why, why_len, "%s:%d is listed twice", d->gpu ? "gpu" : "cpu",
                 i);
        return -1;
      }
    d->index[d->n] = i;
    snprintf(d->name[d->n], sizeof d->name[0], "%s:%d", d->gpu ? "gpu" : "cpu",
             i);
    d->n++;
    if (i + 1 > d->count) d->count = i + 1;
  }
  return 0;
}

/* One item of a list, at *p (advanced past it); *typed: a type was seen. */
static int read_item(const char **p, tool_devices *d, bool *typed, char *why,
                     size_t why_len) {
  const char *s = *p, *item = s;
  int item_len = (int)strcspn(item, ",");
  if (item_len > 40) item_len = 40;
  if (item_len == 0) {
    snprintf(why, why_len, "an empty item");
    return -1;
  }
  if (strncasecmp(s, "/task:", 6) == 0) {
    snprintf(why, why_len,
             "a /task:N/ part is not allowed: --devices names this "
             "process's own devices");
    return -1;
  }
  if (isalpha((unsigned char)*s)) {
    size_t tlen =
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    bool cpu = tlen == 3 && strncasecmp(s, "cpu", 3) == 0;
    bool gpu = tlen == 3 && strncasecmp(s, "gpu", 3) == 0;
    if (!cpu && !gpu) {
      snprintf(why, why_len, "unknown device type '%.*s' (cpu or gpu)",
               (int)(tlen > 20 ? 20 : tlen), s);
      return -1;
    }
    if (*typed && gpu != d->gpu) {
      snprintf(why, why_len, "mixes CPU and GPU devices (one type per list)");
      return -1;
    }
    d->gpu = gpu;
    *typed = true;
    s += tlen;
    if (*s++ != ':') goto unreadable;
  } else if (!*typed && isdigit((unsigned char)*s)) {
    snprintf(why, why_len,
             "'%.*s' needs a device type before it (cpu:0,2 or gpu:0-3)",
             item_len, item);
    return -1;
  }
  int lo, hi;
  if (read_index(&s, &lo)) goto unreadable;
  hi = lo;
  if (*s == '-') {
    s++;
    if (read_index(&s, &hi)) goto unreadable;
  }
  if (*s && *s != ',') goto unreadable;
  if (lo >= TOOL_MAX_DEVICES || hi >= TOOL_MAX_DEVICES) {
    snprintf(why, why_len, "'%.*s': indices go up to %d", item_len, item,
             TOOL_MAX_DEVICES - 1);
    return -1;
  }
  if (hi < lo) {
    snprintf(why, why_len, "'%.*s': the range goes down", item_len, item);
    return -1;
  }
  *p = s;
  return add_range(d, lo, hi, why, why_len);
unreadable:
  snprintf(why, why_len, "cannot read '%.*s'", item_len, item);
  return -1;
}

int tool_devices_parse(const char *spec, tool_devices *out, char *why,
                       size_t why_len) {
  tool_devices d = {0};
  const char *p = spec;
  if (!*p) {
    snprintf(why, why_len, "no devices");
    return -1;
  }
  if (strspn(p, "0123456789") == strlen(p)) { /* a count */
    int n;
    if (read_index(&p, &n) || n < 1 || n > TOOL_MAX_DEVICES) {
      snprintf(why, why_len, "the count is out of range");
      return -1;
    }
    add_range(&d, 0, n - 1, why, why_len);
    *out = d;
    return 0;
  }
  bool typed = false;
  for (;;) {
    if (read_item(&p, &d, &typed, why, why_len)) return -1;
    if (!*p) break;
    p++; /* past the comma */
  }
  *out = d;
  return 0;
}

void tool_devices_session(const tool_devices *d, rf_session_options *o) {
  o->num_cpu_devices = d->gpu ? 1 : d->count;
  o->num_gpu_devices = d->gpu ? d->count : 0;
}

bool tool_devices_dense(const tool_devices *d) {
  for (int i = 0; i < d->n; i++)
    if (d->index[i] != i) return false;
  return true;
}

void tool_devices_format(const tool_devices *d, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < d->n && used < len; i++) {
    int j = i; /* the run of consecutive indices from i */
    while (j + 1 < d->n && d->index[j + 1] == d->index[j] + 1) j++;
    int w = i == 0 ? snprintf(buf + used, len - used, "%s:%d",
                              d->gpu ? "gpu" : "cpu", d->index[i])
                   : snprintf(buf + used, len - used, ",%d", d->index[i]);
    if (w > 0) used += (size_t)w;
    if (j > i && used < len) {
      w = snprintf(buf + used, len - used, "-%d", d->index[j]);
      if (w > 0) used += (size_t)w;
    }
    i = j;
  }
}

int tool_devices_rank(const tool_devices *d, int i) {
  int r = 0;
  for (int j = 0; j < d->n; j++) r += d->index[j] < d->index[i];
  return r;
}
