/* tools/bench_mpi.c - the OpenMPI baseline of `ringflow bench`: finds mpirun
 * and the ringflow-mpi-baseline program (bench/mpi_baseline.c), runs it with
 * n ranks over shared memory (--mca btl self,vader) and reads back its CSV.
 * The default run unsets MALLOC_MMAP_THRESHOLD_ so "default" means glibc's
 * default; the other run sets it to 1 GiB for every rank (-x). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MMAP_ENV "MALLOC_MMAP_THRESHOLD_=1073741824"

static bool in_path(const char *prog) {
  const char *path = getenv("PATH");
  char dir[PATH_MAX], full[PATH_MAX + 64];
  while (path && *path) {
    size_t len = strcspn(path, ":");
    if (len > 0 && len < sizeof dir) {
      memcpy(dir, path, len);
      dir[len] = 0;
      snprintf(full, sizeof full, "%s/%s", dir, prog);
      if (access(full, X_OK) == 0) return true;
    }
    path += len + (path[len] == ':');
  }
  return false;
}

const char *bench_mpi_find(const char *given, const char **why) {
  static char buf[PATH_MAX];
  if (!in_path("mpirun")) {
    *why = "mpirun not found";
    return NULL;
  }
  if (given) {
    if (access(given, X_OK) == 0) return given;
    *why = "--mpi-baseline is not an executable file";
    return NULL;
  }
#ifdef RF_MPI_BASELINE
  if (access(RF_MPI_BASELINE, X_OK) == 0) return RF_MPI_BASELINE;
#endif
  /* Installed: next to the ringflow binary. */
  ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 32);
  char *slash = len > 0 ? (buf[len] = 0, strrchr(buf, '/')) : NULL;
  if (slash) {
    strcpy(slash + 1, "ringflow-mpi-baseline");
    if (access(buf, X_OK) == 0) return buf;
  }
  *why = "ringflow-mpi-baseline was not built (no MPI when configuring)";
  return NULL;
}

static int coll_from_name(const char *name) {
  for (int c = 0; c < BC_COUNT; c++)
    if (strcmp(name, bench_coll_name((bench_coll)c)) == 0) return c;
  return -1;
}

/* Stores one "openmpi,coll,n,bytes,iters,time_us,algbw,busbw" line; false if
 * it is not one. */
static bool take_row(const bench_mpi_args *a, const char *line,
                     bench_row (*rows)[BENCH_MAX_SIZES]) {
  char name[32];
  int n, iters;
  double bytes, us, alg, bus;
  if (sscanf(line, "openmpi,%31[^,],%d,%lf,%d,%lf,%lf,%lf", name, &n, &bytes,
             &iters, &us, &alg, &bus) != 7)
    return false;
  int c = coll_from_name(name);
  if (c < 0 || n != a->n) return false;
  for (int i = 0; i < a->nsizes; i++) {
    if (bench_counted_bytes((bench_coll)c, n, a->sizes[i]) != bytes) continue;
    rows[c][i] = (bench_row){true, bytes, iters, us, alg, bus};
    return true;
  }
  return false;
}

const char *bench_mpi_run(const bench_mpi_args *a,
                          bench_row (*rows)[BENCH_MAX_SIZES], char *command,
                          size_t command_len, char *why, size_t why_len) {
  snprintf(command, command_len,
           "%smpirun --allow-run-as-root --oversubscribe -np %d --mca btl "
           "self,vader%s %s --min %lld --max %lld --min-time %g --csv",
           a->mmap_threshold ? "" : "env -u MALLOC_MMAP_THRESHOLD_ ", a->n,
           a->mmap_threshold ? " -x " MMAP_ENV : "", a->program,
           (long long)a->sizes[0], (long long)a->sizes[a->nsizes - 1],
           a->min_time);
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", command);
  FILE *p = popen(full, "r");
  if (!p) return "cannot start mpirun";
  char line[1024];
  size_t used = 0;
  int taken = 0;
  why[0] = 0;
  while (fgets(line, sizeof line, p)) {
    if (take_row(a, line, rows)) {
      taken++;
    } else if (strncmp(line, "impl,", 5) != 0 && used + 1 < why_len) {
      /* Anything else is a message from mpirun or MPI: keep the start. */
      snprintf(why + used, why_len - used, "%s", line);
      used += strlen(why + used);
    }
  }
  int status = pclose(p);
  if (status == 0 && taken > 0) return NULL;
  char head[160];
  snprintf(head, sizeof head, "mpirun %s %d, %d rows read; its output:\n",
           WIFEXITED(status) ? "exited with status" : "ended by signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), taken);
  size_t hl = strlen(head);
  if (hl + used + 1 > why_len) used = why_len > hl + 1 ? why_len - hl - 1 : 0;
  memmove(why + hl, why, used);
  memcpy(why, head, hl);
  why[hl + used] = 0;
  return why;
}
