/* tools/tools.h - what the `ringflow` subcommands share: error reporting,
 * progress output, DOT files (options: options.h; --devices: devices.h). */
#ifndef RF_TOOLS_TOOLS_H
#define RF_TOOLS_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ringflow/ringflow.h"

/* This process's task in an MPI job, or -1: messages then start
 * "ringflow[task N]: ". */
extern int tool_task;

/* Prints "ringflow: <message>" to stderr; returns 2 (usage error). */
int tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The 1/5/15-minute load averages as "0.12 0.34 0.56", or "unknown": benches
 * print them beside their figures. */
void tool_load_average(char *buf, size_t len);
/* fflush(stdout), keeping the errno of the first flush that failed in
 * tool_stdout_errno: main's last flush then names why (ENOSPC) even when
 * the bytes were lost in an earlier one. */
void tool_flush(void);
extern int tool_stdout_errno;
/* Prints the status (code and message) and frees it; returns 1. */
int tool_report(rf_status *st);

/* In a function returning rf_status *: return on error. */
#define RF_TOOL_CHECK(expr)        \
  do {                             \
    rf_status *tool_st_ = (expr);  \
    if (tool_st_) return tool_st_; \
  } while (0)
/* In a command returning int: report and exit the command on error. */
#define RF_TOOL_TRY(expr)                       \
  do {                                          \
    rf_status *tool_st_ = (expr);               \
    if (tool_st_) return tool_report(tool_st_); \
  } while (0)

/* RF_LOG=debug|info|warn|error: installs a log sink (ringflow/log.h) that
 * prints "ringflow: <level>: <message>" lines to stderr. Unset or empty:
 * nothing. Any other value: reports it and returns 2; 0 otherwise. */
int tool_log_from_env(void);

/* Progress: a bar redrawn in place on a terminal, plain lines otherwise. */
typedef struct progress {
  int64_t total;
  bool tty, quiet;
  double start, last_print;
  double samples;
} progress;

void progress_init(progress *p, int64_t total_steps, bool quiet);
void progress_step(progress *p, int64_t epoch, int64_t step, double loss,
                   int batch);
void progress_epoch(progress *p, int64_t epoch, double accuracy, double spread);
double now_seconds(void);

/* Writes g as DIR/STEM.dot (creating DIR), and DIR/STEM.svg when Graphviz's
 * `dot` is installed (run without a shell: tools/subprocess.h); prints what
 * it wrote. DIR may be any length and hold any characters. */
rf_status *tool_write_dot(const rf_graph *g, const char *dir, const char *stem,
                          bool say);
/* mkdir DIR (one level) unless it exists: NOT_FOUND or PERMISSION_DENIED
 * naming it. Commands call it before their work, so a bad --dot fails
 * first. */
rf_status *tool_make_dir(const char *dir);

/* 0 when path is a file this process may execute; else why not: the errno
 * of stat or access, or EISDIR for a directory (which access(X_OK) passes). */
int tool_executable_errno(const char *path);

int cmd_train(int argc, char **argv);
int cmd_lower(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
