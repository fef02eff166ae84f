/* fuzz/fuzz_idx.c - libFuzzer harness for the IDX reader of `ringflow train`
 * (tools/idx.c): any byte string must parse or be rejected cleanly. */
#include <stddef.h>
#include <stdint.h>

#include "../tools/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  idx_array a;
  rf_status *st = idx_parse(data, size, (size_t)1 << 24, &a);
  if (st) {
    rf_status_free(st);
    return 0;
  }
  /* A parsed array holds exactly what its dims say. */
  uint64_t count = 1;
  for (int i = 0; i < a.rank; i++) count *= (uint64_t)a.dims[i];
  if (count != a.size) __builtin_trap();
  idx_free(&a);
  return 0;
}
