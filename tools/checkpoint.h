/* tools/checkpoint.h - training state on disk: named tensors in one file with
 * a header and a CRC-32 over everything (docs/CHECKPOINT.md has the layout).
 * A truncated, corrupt or foreign file is rejected whole: nothing is returned
 * half-read. */
#ifndef RF_TOOLS_CHECKPOINT_H
#define RF_TOOLS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ringflow/ringflow.h"

#define CKPT_MAX_TENSORS 256
#define CKPT_NAME_MAX 64

typedef struct checkpoint {
  int n;
  char names[CKPT_MAX_TENSORS][CKPT_NAME_MAX];
  rf_tensor *tensors[CKPT_MAX_TENSORS]; /* owned */
  int64_t step;                         /* optimizer steps taken */
} checkpoint;

/* Writes atomically (to PATH.tmp, then rename). */
rf_status *checkpoint_save(const checkpoint *c, const char *path);
/* Reads into *c (fresh; free with checkpoint_clear). */
rf_status *checkpoint_load(const char *path, checkpoint *c);
/* Parses a whole file image (for the fuzzer and checkpoint_load). */
rf_status *checkpoint_parse(const uint8_t *buf, size_t len, checkpoint *c);
void checkpoint_clear(checkpoint *c);

#endif
