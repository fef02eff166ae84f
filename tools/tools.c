/* tools/tools.c - shared helpers of the `ringflow` command. */
#define _GNU_SOURCE /* vasprintf */
#include "tools.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/status.h"
#include "ringflow/graph_io.h"
#include "subprocess.h"

int tool_task = -1;

/* One line on stderr in one write (stderr is unbuffered, and one fprintf
 * of a line that fits glibc's helper buffer is one write): lines of the
 * processes of an mpirun job then never run into each other. */
static void line_out(const char *msg) {
  if (tool_task >= 0)
    fprintf(stderr, "ringflow[task %d]: %s\n", tool_task, msg);
  else
    fprintf(stderr, "ringflow: %s\n", msg);
}

int tool_stdout_errno;

void tool_flush(void) {
  errno = 0;
  if (fflush(stdout) != 0 && !tool_stdout_errno) tool_stdout_errno = errno;
}

void tool_load_average(char *buf, size_t len) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a = 0, b = 0, c = 0;
  if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
    snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
  else
    snprintf(buf, len, "unknown");
  if (f) fclose(f);
}

int tool_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
  va_end(ap);
  line_out(msg ? msg : "out of memory");
  free(msg);
  return 2;
}

int tool_report(rf_status *st) {
  char *msg = NULL;
  if (asprintf(&msg, "error (%s): %s", rf_code_name(rf_status_code(st)),
               rf_status_message(st)) < 0)
    msg = NULL;
  line_out(msg ? msg : rf_status_message(st));
  free(msg);
  rf_status_free(st);
  return 1;
}

/* One fprintf per line: stdio's lock keeps lines of several threads whole.
 * tool_task is set before any session logs. */
static void log_to_stderr(rf_log_level level, const char *msg, void *user) {
  (void)user;
  if (tool_task >= 0)
    fprintf(stderr, "ringflow[task %d]: %s: %s\n", tool_task,
            rf_log_level_name(level), msg);
  else
    fprintf(stderr, "ringflow: %s: %s\n", rf_log_level_name(level), msg);
}

int tool_log_from_env(void) {
  const char *v = getenv("RF_LOG");
  if (!v || !*v) return 0;
  for (int l = RF_LOG_DEBUG; l <= RF_LOG_ERROR; l++) {
    if (strcmp(v, rf_log_level_name((rf_log_level)l)) != 0) continue;
    rf_status *st = rf_set_log_callback((rf_log_level)l, log_to_stderr, NULL);
    return st ? tool_report(st) : 0;
  }
  return tool_fail("RF_LOG=%.200s: want debug, info, warn or error", v);
}

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void progress_init(progress *p, int64_t total, bool quiet) {
  p->total = total;
  p->quiet = quiet;
  p->tty = isatty(fileno(stdout));
  p->start = p->last_print = now_seconds();
  p->samples = 0;
}

void progress_step(progress *p, int64_t epoch, int64_t step, double loss,
                   int batch) {
  p->samples += batch;
  double now = now_seconds();
  bool last = step == p->total;
  if (p->quiet || (!last && now - p->last_print < (p->tty ? 0.1 : 5.0))) return;
  p->last_print = now;
  double elapsed = now - p->start,
         rate = p->samples / (elapsed > 0 ? elapsed : 1);
  double eta = step ? elapsed / (double)step * (double)(p->total - step) : 0;
  if (p->tty) {
    int width = 30, filled = (int)(width * step / (p->total ? p->total : 1));
    printf(
        "\r epoch %lld [%.*s%*s] step %lld/%lld  loss %.4f  %.0f samples/s  "
        "ETA %.0fs ",
        (long long)epoch, filled,
        "==============================", width - filled, "", (long long)step,
        (long long)p->total, loss, rate, eta);
  } else {
    printf("epoch %lld step %lld/%lld loss %.4f %.0f samples/s ETA %.0fs\n",
           (long long)epoch, (long long)step, (long long)p->total, loss, rate,
           eta);
  }
  tool_flush();
}

void progress_epoch(progress *p, int64_t epoch, double accuracy,
                    double spread) {
  if (p->tty && !p->quiet) printf("\n");
  printf(
      "epoch %lld: test accuracy %.2f%%, replicas %s (max parameter "
      "difference %.3g), %.1f s\n",
      (long long)epoch, 100 * accuracy,
      spread == 0 ? "bit-identical" : "DIFFER", spread,
      now_seconds() - p->start);
  tool_flush();
}

/* "DIR/STEM.EXT", malloc'ed (any length), or NULL. A relative DIR starting
 * with '-' gets "./" in front, so that dot never reads the path as an
 * option. */
static char *dir_file(const char *dir, const char *stem, const char *ext) {
  const char *lead = dir[0] == '-' ? "./" : "";
  int len = snprintf(NULL, 0, "%s%s/%s.%s", lead, dir, stem, ext);
  char *p = len < 0 ? NULL : malloc((size_t)len + 1);
  if (p) snprintf(p, (size_t)len + 1, "%s%s/%s.%s", lead, dir, stem, ext);
  return p;
}

/* Graphviz's dot renders DOT to SVG, run without a shell. Not installed
 * (ENOENT): no SVG, silently, as documented; any other failure: a note. */
static void write_svg(const char *dot_path, const char *svg_path, bool say) {
  const char *argv[] = {"dot", "-Tsvg", "-o", svg_path, dot_path, NULL};
  pid_t pid;
  int err = tool_spawn(argv, NULL, -1, &pid);
  if (err == ENOENT) return;
  int status = err ? -1 : tool_wait(pid);
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    if (say) printf("wrote %s\n", svg_path);
  } else {
    unlink(svg_path); /* what a failed dot wrote is cut short */
    fprintf(stderr, "ringflow: no %s: Graphviz's dot %s\n", svg_path,
            err ? strerror(err) : "failed");
  }
}

int tool_executable_errno(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) return errno;
  if (S_ISDIR(sb.st_mode)) return EISDIR;
  return access(path, X_OK) != 0 ? errno : 0;
}

/* DIR/STEM.dot, and DIR/STEM.svg when Graphviz's `dot` is installed. */
rf_status *tool_make_dir(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    int e = errno;
    rf_code code = rf__errno_code(e); /* ENAMETOOLONG: INVALID_ARGUMENT */
    return rf_status_new(code == RF_UNKNOWN ? RF_PERMISSION_DENIED : code,
                         "cannot create the directory %s: %s", dir,
                         strerror(e));
  }
  /* EEXIST: a file of that name fails here, not after the command's work */
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return rf_status_new(RF_FAILED_PRECONDITION,
                         "%s exists and is not a directory", dir);
  return NULL;
}

rf_status *tool_write_dot(const rf_graph *g, const char *dir, const char *stem,
                          bool say) {
  rf_status *made = tool_make_dir(dir);
  if (made) return made;
  char *dot = NULL, *path = dir_file(dir, stem, "dot"),
       *svg = dir_file(dir, stem, "svg");
  rf_status *st = path && svg
                      ? rf_graph_to_dot(g, &dot)
                      : rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  FILE *f = st ? NULL : fopen(path, "w");
  if (!st && !f)
    st = rf_status_new(RF_PERMISSION_DENIED, "cannot write %s: %s", path,
                       strerror(errno));
  if (f) {
    errno = 0;
    bool ok = fputs(dot, f) >= 0;
    int err = errno;
    if (fclose(f) != 0 && ok) ok = false, err = errno;
    if (!ok) {
      unlink(path); /* no file cut short (a full disk) */
      st = rf_status_new(RF_DATA_LOSS, "writing %s failed%s%s", path,
                         err ? ": " : "", err ? strerror(err) : "");
    }
  }
  rf_string_free(dot);
  if (!st) {
    if (say) printf("wrote %s\n", path);
    tool_flush(); /* before dot's own messages */
    write_svg(path, svg, say);
  }
  free(path);
  free(svg);
  return st;
}
