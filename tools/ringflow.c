/* tools/ringflow.c - the `ringflow` command: one binary, one subcommand per
 * job (train, lower, ...). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "crash_report.h"
#include "stop_signal.h"
#include "tools.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} commands[] = {
    {"train", cmd_train, "data-parallel training on Fashion-MNIST"},
    {"lower", cmd_lower, "print a graph file before and after lowering"},
    {"bench", cmd_bench, "time the collectives against memory and OpenMPI"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: ringflow COMMAND [options]   (ringflow COMMAND --help)\n\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "  %-8s %s\n", "version", "print the version");
  fprintf(
      f,
      "\nenvironment:\n"
      "  RF_LOG=debug|info|warn|error  print ringflow's log messages of "
      "that level\n"
      "                                and above to stderr (default: none)\n"
      "  RF_DUMP_GRAPH_DIR=DIR         write each compile's graph before "
      "and after\n"
      "                                every phase to DIR as JSON and DOT\n");
  fprintf(f,
          "\nexit status: 0 done, 1 an error while running (its message on "
          "stderr),\n2 a usage error (one line on stderr naming the option "
          "or argument);\na crash prints the signal and a backtrace on "
          "stderr and ends the process by that\nsignal (exit status 128 + "
          "its number in a shell)\n");
}

static int run_command(int argc, char **argv) {
  /* No command is a usage error like any other: one line on stderr. */
  if (argc < 2)
    return tool_fail(
        "no command (train, lower, bench or version); see ringflow --help");
  bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0;
  bool version =
      strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0;
  /* `version --help` is the help; anything else after them is garbage */
  if (version && argc == 3 && strcmp(argv[2], "--help") == 0)
    help = true, version = false, argc = 2;
  if ((help || version) && argc > 2)
    return tool_fail("%s takes no argument (got '%.200s'); see ringflow --help",
                     argv[1], argv[2]);
  if (help) {
    usage(stdout);
    return 0;
  }
  if (version) {
    printf("ringflow %d.%d.%d\n", RINGFLOW_VERSION_MAJOR,
           RINGFLOW_VERSION_MINOR, RINGFLOW_VERSION_PATCH);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    int rc = tool_log_from_env();
    return rc ? rc : commands[i].run(argc - 1, argv + 1);
  }
  return tool_fail("unknown command '%.200s'; see ringflow --help", argv[1]);
}

int main(int argc, char **argv) {
  crash_report_install();
  int rc = run_command(argc, argv);
  /* Output that did not arrive (a full disk, /dev/full) fails the command:
   * `ringflow bench --csv > f` must not exit 0 with f cut short. */
  errno = 0;
  bool lost = fflush(stdout) != 0;
  int err = errno ? errno : tool_stdout_errno;
  if (ferror(stdout) || lost) {
    rf_status *st = rf_status_new(RF_DATA_LOSS, "writing to stdout failed%s%s",
                                  err ? ": " : "", err ? strerror(err) : "");
    int failed = tool_report(st);
    if (rc == 0) rc = failed;
  }
  stop_signal_finish(); /* a train run stopped by a signal ends by it */
  return rc;
}
