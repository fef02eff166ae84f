/* runtime/device.h - a device of a session: its name, allocator, thread pool
 * and the variables that live on it across steps. */
#ifndef RF_RUNTIME_DEVICE_H
#define RF_RUNTIME_DEVICE_H

#include <pthread.h>

#include "core/hash.h"
#include "core/tensor.h"
#include "graph/device_name.h"
#include "runtime/threadpool.h"

/* A variable's state. The value is replaced (never written) while other
 * references exist, so readers' snapshots stay immutable; when the variable
 * holds the only reference the update may happen in place. */
typedef struct rf__variable {
  pthread_mutex_t mu;
  char *name; /* the Variable node's name */
  rf_dtype dtype;
  rf_shape shape;
  rf_tensor *value; /* NULL until first assigned */
  UT_hash_handle hh;
} rf__variable;

typedef struct rf__device {
  int index;                /* in the session's device list */
  rf__device_name name;
  char canonical[RF_DEVICE_NAME_MAX];
  rf_allocator *allocator;  /* host memory for CPU devices; not owned */
  rf__threadpool *pool;     /* not owned */
  pthread_mutex_t vars_mu;
  rf__variable *vars;       /* uthash by name */
  /* GPU devices (GPU_DESIGN.md); CPU devices: -1, NULL, NULL. */
  int gpu_ordinal;          /* the physical GPU this virtual device runs on */
  void *stream;             /* cudaStream_t, one per virtual device */
  void *gpu;                /* per-physical-GPU context; not owned */
} rf__device;

/* The variable `name` of the device, created (uninitialised) on first use with
 * the given dtype and shape. FAILED_PRECONDITION if one exists with another
 * dtype. The variable lives until the device (session) is freed. */
rf_status *rf__device_variable(rf__device *d, const char *name, rf_dtype dtype,
                               const rf_shape *shape, rf__variable **out);

/* Fills *d as device `index` named `name`, with no variables. allocator and
 * pool are borrowed. Returns nothing: it cannot fail. */
void rf__device_init(rf__device *d, int index, const rf__device_name *name,
                     rf_allocator *allocator, rf__threadpool *pool);
/* Frees d's variables (releasing their values); d itself is the caller's. */
void rf__device_destroy(rf__device *d);

/* The index in devices[0..n) of the device named by `name` (parsed), or -1. */
int rf__device_find(const rf__device *devices, int n,
                    const rf__device_name *name);
/* Describes a device list for messages: "cpu:0", "cpu:0..cpu:3",
 * "cpu:0..cpu:3, gpu:0..gpu:1". */
void rf__device_list_format(const rf__device *devices, int n, char *buf,
                            size_t len);

#endif
