/* bench/memcpy_count.c - an LD_PRELOAD library for bench/mpi_copies.sh: the
 * bytes that memcpy and memmove calls of 4 KiB and more copy, summed per
 * calling object (the executable, libopen-pal, an MCA component...), written
 * at exit to $MEMCPY_COUNT_DIR/mc.<pid>. Calls inside libc itself (and the
 * kernel's copies, e.g. OpenMPI's CMA single copy) are not seen: it counts
 * what a program and its libraries copy through the PLT. Not built by CMake
 * (bench/CMakeLists.txt leaves it out): cc -O2 -shared -fPIC -o
 * memcpy_count.so bench/memcpy_count.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OBJECTS 64
#define MIN_BYTES 4096

static char names[MAX_OBJECTS][128];
static atomic_llong bytes[MAX_OBJECTS], calls[MAX_OBJECTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);

static void add(void *caller, size_t n) {
  if (n < MIN_BYTES) return;
  Dl_info info;
  const char *f =
      dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "?";
  const char *base = strrchr(f, '/');
  base = base ? base + 1 : f;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < MAX_OBJECTS; k++) {
    if (!names[k][0]) snprintf(names[k], sizeof names[k], "%s", base);
    if (strcmp(names[k], base) == 0) {
      bytes[k] += (long long)n;
      calls[k]++;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
}

void *memcpy(void *d, const void *s, size_t n) {
  if (!real_memcpy) real_memcpy = dlsym(RTLD_NEXT, "memcpy");
  add(__builtin_return_address(0), n);
  return real_memcpy(d, s, n);
}

void *memmove(void *d, const void *s, size_t n) {
  if (!real_memmove) real_memmove = dlsym(RTLD_NEXT, "memmove");
  add(__builtin_return_address(0), n);
  return real_memmove(d, s, n);
}

__attribute__((destructor)) static void report(void) {
  const char *dir = getenv("MEMCPY_COUNT_DIR");
  char path[512];
  snprintf(path, sizeof path, "%s/mc.%d", dir ? dir : "/tmp", (int)getpid());
  FILE *out = fopen(path, "w");
  if (!out) return;
  for (int k = 0; k < MAX_OBJECTS && names[k][0]; k++)
    fprintf(out, "%s %lld %lld\n", names[k], (long long)bytes[k],
            (long long)calls[k]);
  fclose(out);
}
