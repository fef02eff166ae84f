/* io/safe_file.h - files that cannot be hijacked or half-written: paths
 * opened one directory at a time (no length limit, no fixed buffers),
 * replacement through a fresh random name made with O_EXCL|O_NOFOLLOW, fsync
 * and rename, and reads that refuse anything but a regular file. */
#ifndef RF_IO_SAFE_FILE_H
#define RF_IO_SAFE_FILE_H

#include <stddef.h>

#include "ringflow/status.h"

/* Writes the new contents of a file to fd; the error is the replacement's. */
typedef rf_status *(*rf__file_writer)(int fd, void *arg);

/* Replaces `path` with what `write` writes (ringflow/checkpoint.h's
 * rf_checkpoint_save says how and with which codes). `what` names the file
 * in messages ("checkpoint"). */
rf_status *rf__file_replace(const char *path, const char *what,
                            rf__file_writer write, void *arg);

/* Whether rf__file_replace(path) could create its file: makes one and
 * removes it. */
rf_status *rf__file_check_replace(const char *path, const char *what);

/* Opens a regular file for reading; INVALID_ARGUMENT for anything else (a
 * directory, a device, a FIFO: never blocks opening one). *size gets its
 * size. */
rf_status *rf__file_open_read(const char *path, const char *what, int *fd,
                              size_t *size);

/* write(2) until all n bytes are written; the error names path. */
rf_status *rf__file_write_all(int fd, const void *p, size_t n,
                              const char *path);

/* read(2) until n bytes are read; *got gets how many (fewer at the end of
 * the file). */
rf_status *rf__file_read_full(int fd, void *p, size_t n, size_t *got,
                              const char *path);

#endif
