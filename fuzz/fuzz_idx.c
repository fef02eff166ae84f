/* fuzz/fuzz_idx.c - libFuzzer harness for the IDX reader of `ringflow train`
 * (tools/idx.c). Every input is read twice: from memory (idx_parse) and as a
 * file through zlib (idx_read of a memfd; gzip when it starts with 1f 8b,
 * plain otherwise), so the streaming reader, the gzip path and its errors
 * are covered. Each read gives a clean error or an array holding exactly
 * what its dims say; for a plain file both reads agree. A broken promise
 * traps, which libFuzzer reports as a crash. */
#define _GNU_SOURCE /* memfd_create */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../tools/idx.h"

#define MAX_BYTES ((size_t)1 << 24)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An array read without error holds what its dims say. */
static void check_array(const idx_array *a) {
  uint64_t count = 1;
  for (int i = 0; i < a->rank; i++) count *= (uint64_t)a->dims[i];
  if (a->rank < 1 || a->rank > IDX_MAX_DIMS || count != a->size ||
      count > MAX_BYTES || !a->data)
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz_idx", 0);
    if (fd < 0) __builtin_trap();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 ||
      (size && pwrite(fd, data, size, 0) != (ssize_t)size))
    __builtin_trap();
  idx_array a, b;
  rf_status *sa = idx_parse(data, size, MAX_BYTES, &a);
  rf_status *sb = idx_read(path, MAX_BYTES, &b);
  if (!sa) check_array(&a);
  if (!sb) check_array(&b);
  if ((sa && !rf_status_message(sa)[0]) || (sb && !rf_status_message(sb)[0]))
    __builtin_trap();
  bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gz) { /* the same bytes from memory and from a plain file */
    if (rf_status_code(sa) != rf_status_code(sb)) __builtin_trap();
    if (!sa && (a.rank != b.rank || a.size != b.size ||
                memcmp(a.dims, b.dims, sizeof a.dims) != 0 ||
                memcmp(a.data, b.data, a.size) != 0))
      __builtin_trap();
  }
  if (sa)
    rf_status_free(sa);
  else
    idx_free(&a);
  if (sb)
    rf_status_free(sb);
  else
    idx_free(&b);
  return 0;
}
