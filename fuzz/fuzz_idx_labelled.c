/* fuzz/fuzz_idx_labelled.c - libFuzzer harness for the labelled-set checks
 * of `ringflow train` (idx_check_labelled, tools/idx.c): an input is two IDX
 * files, images then labels, the first's length in the first two bytes (big
 * endian). When both parse, the check must pass exactly when the images are
 * of rank 3, the labels of rank 1, the counts equal and every label 0..9,
 * and otherwise fail with a message; a wrong answer traps. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tools/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t first = (size_t)data[0] << 8 | data[1];
  if (first > size - 2) return 0;
  idx_array im, lb;
  rf_status *st = idx_parse(data + 2, first, 1 << 20, &im);
  if (st) {
    rf_status_free(st);
    return 0;
  }
  st = idx_parse(data + 2 + first, size - 2 - first, 1 << 20, &lb);
  if (st) {
    rf_status_free(st);
    idx_free(&im);
    return 0;
  }
  /* The reference: the same rules, written out. */
  bool want = im.rank == 3 && lb.rank == 1 && im.dims[0] == lb.dims[0];
  for (size_t i = 0; want && i < lb.size; i++) want = lb.data[i] <= 9;
  st = idx_check_labelled(&im, "images", &lb, "labels", 10);
  if (want != !st || (st && !rf_status_message(st)[0])) __builtin_trap();
  rf_status_free(st);
  idx_free(&im);
  idx_free(&lb);
  return 0;
}
