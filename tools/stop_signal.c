/* tools/stop_signal.c - Ctrl-C or a scheduler's kill (SIGINT, SIGTERM)
 * during `ringflow train` stops it between steps instead of wherever it
 * is: the step and a checkpoint being written finish (no temporary file is
 * left behind), stdout is flushed (a log redirected to a file was lost
 * whole: stdio's buffer died with the process), a line on stderr says
 * where it stopped, and then the process ends by that signal, so a shell
 * or scheduler still sees it killed (exit status 128 + the signal). */
#include "stop_signal.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* lock-free, so safe in a handler; atomic, since the signal may land on
 * any of the library's threads while the training loop reads it */
static atomic_int requested;

static void on_stop(int sig) { atomic_store(&requested, sig); }

void stop_signal_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  /* the library's threads may be in a read or a wait: not interrupted */
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  /* A second SIGTERM is the same request: coreutils' timeout sends one to
   * the process and one to its group, which would kill it before its
   * line and log are out. A second SIGINT (Ctrl-C again) ends it at once. */
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_flags |= SA_RESETHAND;
  sigaction(SIGINT, &sa, NULL);
}

int stop_signal_requested(void) { return atomic_load(&requested); }

void stop_signal_finish(void) {
  int sig = atomic_load(&requested);
  if (!sig) return;
  signal(sig, SIG_DFL);
  raise(sig);
}
