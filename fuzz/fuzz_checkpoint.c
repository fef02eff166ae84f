/* fuzz/fuzz_checkpoint.c - libFuzzer harness for the safetensors checkpoint
 * reader (src/io/checkpoint_read.c, rf_checkpoint_load) and the load-time
 * checks `ringflow train --load` makes with rf_checkpoint_get (name, dtype,
 * shape, finite values, non-negative second moments). The input is the file,
 * read from a memfd. A CRC would reject almost every mutation of the data,
 * so for half the inputs the harness rewrites the 8 hex digits after
 * "ringflow.crc32":" to the data's CRC: the value checks get fuzzed too. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "io/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fix_crc(uint8_t *buf, size_t size) {
  if (size < 8) return;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
  if (hlen > size - 8) return;
  static const char key[] = "\"ringflow.crc32\":\"";
  char *h = (char *)buf + 8;
  char *at = memmem(h, hlen, key, sizeof key - 1);
  if (!at || (size_t)(at - h) + sizeof key - 1 + 8 > hlen) return;
  char hex[9];
  uLong crc = crc32(0L, buf + 8 + hlen, (uInt)(size - 8 - hlen));
  snprintf(hex, sizeof hex, "%08lx", crc & 0xffffffffu);
  memcpy(at + sizeof key - 1, hex, 8);
}

/* What the trainer asks of a loaded checkpoint, on every tensor. */
static void check_all(const rf_checkpoint *c) {
  for (int i = 0; i < rf_checkpoint_count(c); i++) {
    const char *name = rf_checkpoint_name(c, i);
    rf_tensor *t = rf_checkpoint_tensor(c, i), *got = NULL;
    if (!name || !*name || !t) __builtin_trap();
    rf_shape s = rf_tensor_shape(t), other = rf_shape_of(1, 3);
    rf_status *st = rf_checkpoint_get(
        c, name, rf_tensor_dtype(t), &s,
        RF_CHECKPOINT_FINITE | RF_CHECKPOINT_NONNEGATIVE, &got);
    if (!st && got != t) __builtin_trap();
    if (st && rf_status_code(st) != RF_INVALID_ARGUMENT) __builtin_trap();
    rf_status_free(st);
    st = rf_checkpoint_get(c, name, RF_FLOAT32, &other, 0, &got);
    rf_status_free(st);
  }
  rf_tensor *none;
  rf_status *st =
      rf_checkpoint_get(c, "W0", RF_FLOAT32, NULL, RF_CHECKPOINT_FINITE, &none);
  rf_status_free(st);
  int64_t step = rf_checkpoint_step(c);
  if (step < -1 || step > RF_CHECKPOINT_STEP_MAX) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0;
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (size && (data[size - 1] & 1)) fix_crc(buf, size);
  int fd = memfd_create("checkpoint", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  if (size && write(fd, buf, size) != (ssize_t)size) __builtin_trap();
  lseek(fd, 0, SEEK_SET);
  rf_checkpoint *c = NULL;
  rf_status *st = rf__checkpoint_read_fd(fd, size, "fuzz", &c);
  if (st) {
    if (c) __builtin_trap();
    rf_status_free(st);
  } else {
    check_all(c);
    rf_checkpoint_free(c);
  }
  close(fd);
  free(buf);
  return 0;
}
