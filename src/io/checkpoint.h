/* io/checkpoint.h - the checkpoint object shared by its writer
 * (checkpoint.c) and reader (checkpoint_read.c), and the reader's entry
 * point on an open file (for the fuzzer). Names are unique within one
 * checkpoint; tensors are host tensors, one reference each. */
#ifndef RF_IO_CHECKPOINT_H
#define RF_IO_CHECKPOINT_H

#include <stddef.h>

#include "ringflow/checkpoint.h"

typedef struct rf__ckpt_entry {
  char *name;
  rf_tensor *t;
} rf__ckpt_entry;

struct rf_checkpoint {
  rf__ckpt_entry *e;
  int n, cap;
  char **meta; /* key, value, key, value, ... (2 * nmeta) */
  int nmeta, meta_cap;
  int64_t step; /* -1: none */
};

#define RF__CKPT_STEP_KEY "ringflow.step"
#define RF__CKPT_CRC_KEY "ringflow.crc32"
#define RF__CKPT_RESERVED "ringflow."

/* The safetensors name of dtype ("F32"), NULL for none; and back
 * (RF_DTYPE_INVALID for a name ringflow lacks). */
const char *rf__ckpt_dtype_name(rf_dtype dtype);
rf_dtype rf__ckpt_dtype_from_name(const char *name);

/* Appends without the public checks (the reader's names are checked). */
rf_status *rf__ckpt_append(rf_checkpoint *c, const char *name, rf_tensor *t);
rf_status *rf__ckpt_put_meta(rf_checkpoint *c, const char *key,
                             const char *value);

/* Reads a checkpoint from fd, a regular file of `size` bytes positioned at
 * its start; `path` names it in messages. */
rf_status *rf__checkpoint_read_fd(int fd, size_t size, const char *path,
                                  rf_checkpoint **out);

#endif
