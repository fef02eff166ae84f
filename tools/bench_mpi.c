/* tools/bench_mpi.c - the OpenMPI baseline of `ringflow bench`: finds mpirun
 * and the ringflow-mpi-baseline program (bench/mpi_baseline.c), runs it with
 * n ranks over shared memory (--mca btl self,vader) and reads back its CSV.
 * The default run unsets MALLOC_MMAP_THRESHOLD_ so "default" means glibc's
 * default; the other run sets it to 1 GiB for every rank (-x). */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "subprocess.h"
#include "tools.h"

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
    if (tool_executable_errno(given) == 0) return given;
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

/* This environment without MALLOC_MMAP_THRESHOLD_ (the default run), in a
 * malloc'ed array of environ's strings; NULL if out of memory. */
static char **environ_without_mmap_threshold(void) {
  extern char **environ;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = malloc(sizeof *env * (n + 1));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "MALLOC_MMAP_THRESHOLD_=", 23) != 0)
      env[k++] = environ[i];
  env[k] = NULL;
  return env;
}

/* mpirun with an argument vector, its stdout and stderr through a pipe: no
 * shell reads the program's path. */
static FILE *start_mpirun(const bench_mpi_args *a, char *command,
                          size_t command_len, pid_t *pid) {
  char np[16], lo[32], hi[32], factor[16], min_time[32];
  snprintf(np, sizeof np, "%d", a->n);
  snprintf(lo, sizeof lo, "%lld", (long long)a->sizes[0]);
  snprintf(hi, sizeof hi, "%lld", (long long)a->sizes[a->nsizes - 1]);
  snprintf(factor, sizeof factor, "%d", a->factor);
  snprintf(min_time, sizeof min_time, "%g", a->min_time);
  const char *argv[] = {"mpirun",
                        "--allow-run-as-root",
                        "--oversubscribe",
                        "-np",
                        np,
                        "--mca",
                        "btl",
                        "self,vader",
                        a->program,
                        "--min",
                        lo,
                        "--max",
                        hi,
                        "--min-time",
                        min_time,
                        "--csv",
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL};
  /* The sizes step by --factor: the baseline's default is 4, and only other
   * factors are passed, so the usual command line stays as it was. */
  int argc = 16;
  if (a->factor != 4) {
    argv[argc++] = "--factor";
    argv[argc++] = factor;
  }
  if (a->mmap_threshold) { /* -x MMAP_ENV before the program */
    memmove(argv + 10, argv + 8, sizeof *argv * (size_t)(argc - 8));
    argv[8] = "-x";
    argv[9] = MMAP_ENV;
  }
  size_t used = 0;
  if (!a->mmap_threshold)
    used = (size_t)snprintf(command, command_len,
                            "env -u MALLOC_MMAP_THRESHOLD_ ");
  if (used < command_len)
    tool_format_argv(argv, command + used, command_len - used);
  char **env = a->mmap_threshold ? NULL : environ_without_mmap_threshold();
  int fds[2];
  if ((!a->mmap_threshold && !env) || pipe(fds) != 0) {
    free(env);
    return NULL;
  }
  /* Only the dup2'ed copies reach mpirun (and its ranks). */
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  int err = tool_spawn(argv, env, fds[1], pid);
  free(env);
  close(fds[1]);
  FILE *p = err ? NULL : fdopen(fds[0], "r");
  if (!p) {
    close(fds[0]);
    if (!err) tool_wait(*pid);
  }
  return p;
}

const char *bench_mpi_run(const bench_mpi_args *a,
                          bench_row (*rows)[BENCH_MAX_SIZES], char *command,
                          size_t command_len, char *why, size_t why_len) {
  pid_t pid;
  FILE *p = start_mpirun(a, command, command_len, &pid);
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
  fclose(p);
  int status = tool_wait(pid);
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
