/* graph/device_name.h - parsing and printing device names.
 *
 * Accepted: "cpu", "cpu:3", "gpu:0", "/cpu:1", "/device:GPU:2", any case;
 * canonical form is "<type>:<index>" in lower case. The task part for several
 * processes ("/task:1/gpu:0") is parsed and kept; -1 means this process. */
#ifndef RF_GRAPH_DEVICE_NAME_H
#define RF_GRAPH_DEVICE_NAME_H

#include <stdbool.h>
#include <stddef.h>

#include "ringflow/status.h"

#define RF_DEVICE_NAME_MAX 48

typedef enum rf__device_type {
  RF_DEVICE_CPU,
  RF_DEVICE_GPU,
  RF_DEVICE_TYPE_COUNT
} rf__device_type;

typedef struct rf__device_name {
  int task; /* -1: this process */
  rf__device_type type;
  int index;
} rf__device_name;

/* Parses s; INVALID_ARGUMENT naming s when malformed. "" is an error. */
rf_status *rf__device_name_parse(const char *s, rf__device_name *out);
/* Writes the canonical name into buf (RF_DEVICE_NAME_MAX bytes suffice). */
void rf__device_name_format(const rf__device_name *d, char *buf, size_t len);
const char *rf__device_type_name(rf__device_type t); /* "cpu", "gpu" */
bool rf__device_name_equal(const rf__device_name *a, const rf__device_name *b);

#endif
