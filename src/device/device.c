/* device/device.c - session devices and the variables living on them.
 * A variable is created once per (device, name) and never removed before the
 * device is destroyed, so kernels may keep pointers to it across steps. */
#include "device/device.h"

#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/mem.h"
#include "core/status.h"

void rf__device_init(rf__device *d, int index, const rf__device_name *name,
                     rf_allocator *allocator, rf__threadpool *pool) {
  memset(d, 0, sizeof *d);
  d->index = index;
  d->name = *name;
  rf__device_name_format(name, d->canonical, sizeof d->canonical);
  d->allocator = allocator;
  d->pool = pool;
  pthread_mutex_init(&d->vars_mu, NULL);
  pthread_mutex_init(&d->capture_mu, NULL);
  d->vars = NULL;
  d->gpu_ordinal = -1;
  d->host_allocator = rf_default_allocator();
}

void rf__device_destroy(rf__device *d) {
  rf__variable *v, *tmp;
  HASH_ITER(hh, d->vars, v, tmp) {
    HASH_DEL(d->vars, v);
    rf_tensor_release(v->value);
    pthread_mutex_destroy(&v->mu);
    rf__free(v->name);
    rf__free(v);
  }
  pthread_mutex_destroy(&d->vars_mu);
  pthread_mutex_destroy(&d->capture_mu);
}

static rf__variable *variable_new(const char *name, rf_dtype dtype,
                                  const rf_shape *shape) {
  rf__variable *v = rf__calloc(1, sizeof *v);
  if (!v) return NULL;
  v->name = rf__strdup(name);
  if (!v->name) {
    rf__free(v);
    return NULL;
  }
  pthread_mutex_init(&v->mu, NULL);
  v->dtype = dtype;
  v->shape = shape ? *shape : rf_shape_unknown();
  v->value = NULL;
  return v;
}

rf_status *rf__device_variable(rf__device *d, const char *name, rf_dtype dtype,
                               const rf_shape *shape, rf__variable **out) {
  rf_status *st = NULL;
  pthread_mutex_lock(&d->vars_mu);
  rf__variable *v = NULL;
  HASH_FIND_STR(d->vars, name, v);
  if (v) {
    if (v->dtype != dtype)
      st = rf__error(RF_FAILED_PRECONDITION,
                     "variable '%s' on %s holds %s, but %s was requested", name,
                     d->canonical, rf_dtype_name(v->dtype),
                     rf_dtype_name(dtype));
  } else {
    v = variable_new(name, dtype, shape);
    int rf__hash_oom = 0;
    if (v) HASH_ADD_KEYPTR(hh, d->vars, v->name, strlen(v->name), v);
    if (!v || rf__hash_oom) {
      if (v) {
        pthread_mutex_destroy(&v->mu);
        rf__free(v->name);
        rf__free(v);
      }
      st = rf__oom();
    }
  }
  pthread_mutex_unlock(&d->vars_mu);
  if (!st) *out = v;
  return st;
}

int rf__device_find(const rf__device *devices, int n,
                    const rf__device_name *name) {
  for (int i = 0; i < n; i++) {
    const rf__device_name *d = &devices[i].name;
    bool task_ok = name->task < 0 ? !devices[i].remote
                   : d->task < 0  ? name->task == 0
                                  : name->task == d->task;
    if (task_ok && d->type == name->type && d->index == name->index) return i;
  }
  return -1;
}

/* Appends s to buf (always NUL-terminated). */
static void append(char *buf, size_t len, size_t *pos, const char *s) {
  int k = snprintf(buf + *pos, len - *pos, "%s", s);
  if (k > 0) *pos += (size_t)k;
  if (*pos >= len) *pos = len - 1;
}

void rf__device_list_format(const rf__device *devices, int n, char *buf,
                            size_t len) {
  size_t pos = 0;
  if (len == 0) return;
  buf[0] = '\0';
  if (n == 0) {
    append(buf, len, &pos, "no devices");
    return;
  }
  /* Runs of one task and type with consecutive indices print as
   * "first..last". */
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && devices[j + 1].name.type == devices[i].name.type &&
           devices[j + 1].name.task == devices[i].name.task &&
           devices[j + 1].name.index == devices[j].name.index + 1)
      j++;
    if (i > 0) append(buf, len, &pos, ", ");
    append(buf, len, &pos, devices[i].canonical);
    if (j > i) {
      append(buf, len, &pos, "..");
      append(buf, len, &pos, devices[j].canonical);
    }
    i = j + 1;
  }
}
