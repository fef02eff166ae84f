/* tools/crash_report.c - a fatal signal in the `ringflow` command prints
 * which signal and a backtrace to stderr before the process dies of it.
 *
 * Why: a crash in a test run leaves nothing but an exit status (a command
 * substitution in a test script does not even print "Segmentation fault"),
 * and a rare one cannot be rerun under a debugger. The library itself never
 * prints; this is the command's own handler. Sanitizer builds keep the
 * sanitizers' handlers, which report more. */
#include "crash_report.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RF_CRASH_REPORT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define RF_CRASH_REPORT 0
#endif
#endif
#ifndef RF_CRASH_REPORT
#define RF_CRASH_REPORT 1
#endif

#if RF_CRASH_REPORT
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static const struct {
  int sig;
  const char *name;
} fatal[] = {{SIGSEGV, "SIGSEGV"},
             {SIGBUS, "SIGBUS"},
             {SIGFPE, "SIGFPE"},
             {SIGILL, "SIGILL"},
             {SIGABRT, "SIGABRT"}};

static void put(const char *s) {
  /* write(2) only: the handler runs in a crashed process */
  ssize_t n = write(STDERR_FILENO, s, strlen(s));
  (void)n;
}

static void on_fatal(int sig) {
  const char *name = "a fatal signal";
  for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
    if (fatal[i].sig == sig) name = fatal[i].name;
  put("ringflow: crashed with ");
  put(name);
  put("; backtrace (addr2line -e BINARY -f -i the +0x offsets):\n");
  void *frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  /* die of the same signal, so the exit status says what happened */
  signal(sig, SIG_DFL);
  raise(sig);
}

void crash_report_install(void) {
  /* backtrace() loads libgcc on its first call: do it now, not in the
   * handler */
  void *frame[1];
  (void)backtrace(frame, 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
    sigaction(fatal[i].sig, &sa, NULL);
}
#else
void crash_report_install(void) {}
#endif
