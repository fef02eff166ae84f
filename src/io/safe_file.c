/* io/safe_file.c - the one place files are replaced and opened for reading.
 * A path is split into its directory, opened component by component (so its
 * length is not limited by PATH_MAX and no buffer holds it whole), and its
 * last component, which every operation names relative to that directory.
 * The temporary file of a replacement has a random name, is created with
 * O_EXCL|O_NOFOLLOW (a planted file or symlink makes the name taken, never
 * followed) and is removed on every error. */
#define _GNU_SOURCE
#include "io/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/status.h"

#ifndef O_PATH
#define O_PATH O_RDONLY
#endif

/* The file's final mode (documented in ringflow/checkpoint.h). */
#define FINAL_MODE 0644

static rf_code code_of(int e) {
  switch (e) {
    case ENAMETOOLONG:
    case EISDIR:
    case ELOOP: return RF_INVALID_ARGUMENT;
    case ENOMEM: return RF_RESOURCE_EXHAUSTED;
    case EIO: return RF_DATA_LOSS;
    default: return rf__errno_code(e);
  }
}

static rf_status *sys_error(int e, const char *what, const char *path,
                            const char *doing) {
  return rf_status_new(code_of(e), "%s '%s': %s: %s", what, path, doing,
                       strerror(e));
}

/* Opens the directory of path (O_RDONLY, so it can be synced) into *dirfd
 * and copies path's last component into *base. */
static rf_status *open_parent(const char *path, const char *what, int *dirfd,
                              char **base) {
  if (!path || !*path)
    return rf_status_new(RF_INVALID_ARGUMENT, "%s: %s path", what,
                         path ? "empty" : "NULL");
  const char *slash = strrchr(path, '/');
  const char *last = slash ? slash + 1 : path;
  if (!*last || !strcmp(last, ".") || !strcmp(last, ".."))
    return rf_status_new(RF_INVALID_ARGUMENT, "%s '%s' names a directory", what,
                         path);
  if (strlen(last) > NAME_MAX)
    return rf_status_new(RF_INVALID_ARGUMENT,
                         "%s '%s': its file name is %zu bytes; at most %d",
                         what, path, strlen(last), NAME_MAX);
  char *comp = rf__malloc(strlen(path) + 1);
  *base = rf__strdup(last);
  if (!comp || !*base) {
    rf__free(comp);
    rf__free(*base);
    return rf__oom();
  }
  int fd = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  const char *p = path;
  while (fd >= 0 && p < last) {
    size_t n = strcspn(p, "/");
    if (n > 0) {
      memcpy(comp, p, n);
      comp[n] = '\0';
      int next = openat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
      int e = errno;
      close(fd);
      fd = next;
      errno = e;
    }
    p += n + (p[n] == '/');
  }
  rf_status *st = NULL;
  if (fd >= 0) { /* reopen readable: a path fd cannot be synced */
    int rd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    close(fd);
    fd = rd;
    errno = e;
  }
  if (fd < 0) {
    int e = errno;
    st = rf_status_new(e == ENAMETOOLONG ? RF_INVALID_ARGUMENT : code_of(e),
                       "%s '%s': cannot open its directory: %s", what, path,
                       strerror(e));
    rf__free(*base);
  } else {
    *dirfd = fd;
  }
  rf__free(comp);
  return st;
}

rf_status *rf__file_write_all(int fd, const void *p, size_t n,
                              const char *path) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return sys_error(w < 0 ? errno : ENOSPC, "file", path, "write failed");
    c += w;
    n -= (size_t)w;
  }
  return NULL;
}

rf_status *rf__file_read_full(int fd, void *p, size_t n, size_t *got,
                              const char *path) {
  char *c = p;
  *got = 0;
  while (*got < n) {
    size_t want = n - *got;
    ssize_t r =
        read(fd, c + *got, want > ((size_t)1 << 30) ? (size_t)1 << 30 : want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sys_error(errno, "file", path, "read failed");
    if (r == 0) break;
    *got += (size_t)r;
  }
  return NULL;
}

/* A fresh name for the temporary file: short (any base fits NAME_MAX) and
 * random, so nobody can plant something there in advance. */
static void temp_name(char out[32]) {
  static _Atomic uint64_t counter;
  uint64_t r[2] = {0, 0};
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r[0] ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15u ^ (uint64_t)getpid();
  }
  r[0] += counter++ * 0xD1B54A32D192ED03u;
  snprintf(out, 32, ".rf-%016llx.tmp", (unsigned long long)r[0]);
}

/* Creates the temporary file in dirfd; *fd and name get it. */
static rf_status *create_temp(int dirfd, const char *what, const char *path,
                              char name[32], int *fd) {
  for (int tries = 0; tries < 64; tries++) {
    temp_name(name);
    *fd = openat(dirfd, name,
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (*fd >= 0) return NULL;
    if (errno != EEXIST && errno != EINTR) break;
  }
  return sys_error(errno, what, path, "cannot create a file in its directory");
}

/* Refuses a path that names a directory (rename would fail only at the end). */
static rf_status *check_target(int dirfd, const char *base, const char *what,
                               const char *path) {
  struct stat sb;
  if (fstatat(dirfd, base, &sb, AT_SYMLINK_NOFOLLOW) != 0) return NULL;
  if (S_ISDIR(sb.st_mode))
    return rf_status_new(RF_INVALID_ARGUMENT, "%s '%s' names a directory", what,
                         path);
  /* A device, FIFO or socket is never renamed over: `--save /dev/null` run
   * as root would replace the system's /dev/null with a file. */
  if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
    return rf_status_new(RF_INVALID_ARGUMENT,
                         "%s '%s' is not a regular file (a device, FIFO or "
                         "socket is never replaced)",
                         what, path);
  return NULL;
}

/* fsync of a directory; file systems that cannot sync one say EINVAL. */
static int sync_dir(int dirfd) {
  return fsync(dirfd) == 0 || errno == EINVAL ? 0 : -1;
}

rf_status *rf__file_replace(const char *path, const char *what,
                            rf__file_writer write, void *arg) {
  int dirfd, fd = -1;
  char *base, name[32];
  RF_CHECK(open_parent(path, what, &dirfd, &base));
  rf_status *st = check_target(dirfd, base, what, path);
  if (!st) st = create_temp(dirfd, what, path, name, &fd);
  if (st) goto out;
  st = write(fd, arg);
  if (!st && fsync(fd) != 0) st = sys_error(errno, what, path, "fsync failed");
  if (!st && fchmod(fd, FINAL_MODE) != 0)
    st = sys_error(errno, what, path, "chmod failed");
  if (close(fd) != 0 && !st) st = sys_error(errno, what, path, "close failed");
  fd = -1;
  if (!st && sync_dir(dirfd) != 0)
    st = sys_error(errno, what, path, "fsync of its directory failed");
  if (!st && renameat(dirfd, name, dirfd, base) != 0)
    st = sys_error(errno, what, path, "rename failed");
  if (st) {
    unlinkat(dirfd, name, 0);
  } else if (sync_dir(dirfd) != 0) {
    st = sys_error(errno, what, path,
                   "written, but the fsync of its directory failed");
  }
out:
  if (fd >= 0) close(fd);
  close(dirfd);
  rf__free(base);
  return st;
}

rf_status *rf__file_check_replace(const char *path, const char *what) {
  int dirfd, fd;
  char *base, name[32];
  RF_CHECK(open_parent(path, what, &dirfd, &base));
  rf_status *st = check_target(dirfd, base, what, path);
  if (!st) st = create_temp(dirfd, what, path, name, &fd);
  if (!st) {
    close(fd);
    unlinkat(dirfd, name, 0);
  }
  close(dirfd);
  rf__free(base);
  return st;
}

rf_status *rf__file_open_read(const char *path, const char *what, int *fd,
                              size_t *size) {
  int dirfd;
  char *base;
  RF_CHECK(open_parent(path, what, &dirfd, &base));
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int f = openat(dirfd, base, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int e = errno;
  close(dirfd);
  rf__free(base);
  if (f < 0) return sys_error(e, what, path, "cannot open");
  struct stat sb;
  rf_status *st = NULL;
  if (fstat(f, &sb) != 0)
    st = sys_error(errno, what, path, "cannot stat");
  else if (!S_ISREG(sb.st_mode))
    st = rf_status_new(RF_INVALID_ARGUMENT, "%s '%s' is not a regular file",
                       what, path);
  else if (fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) != 0)
    st = sys_error(errno, what, path, "fcntl failed");
  if (st) {
    close(f);
    return st;
  }
  *fd = f;
  *size = (size_t)sb.st_size;
  return NULL;
}
