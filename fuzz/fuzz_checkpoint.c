/* fuzz/fuzz_checkpoint.c - libFuzzer harness for the checkpoint reader of
 * `ringflow train --load` (tools/checkpoint.c). The CRC would reject almost
 * every mutation before the parser runs, so the harness fixes the CRC of each
 * input first: the parser behind it gets fuzzed too. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../tools/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4 || size > (1u << 20)) return 0;
  uint8_t *buf = malloc(size);
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (data[0] & 1) { /* half the inputs keep their CRC as it is */
    uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(size - 4));
    for (int i = 0; i < 4; i++) buf[size - 4 + i] = (uint8_t)(crc >> (8 * i));
  }
  checkpoint c;
  rf_status *st = checkpoint_parse(buf, size, &c);
  if (st) {
    rf_status_free(st);
  } else {
    for (int i = 0; i < c.n; i++)
      if (!c.tensors[i] || !c.names[i][0]) __builtin_trap();
    checkpoint_clear(&c);
  }
  free(buf);
  return 0;
}
