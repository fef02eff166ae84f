/* tools/stop_signal.h - SIGINT and SIGTERM stopping `ringflow train` between
 * steps; see stop_signal.c. */
#ifndef RINGFLOW_TOOLS_STOP_SIGNAL_H
#define RINGFLOW_TOOLS_STOP_SIGNAL_H

/* From now on SIGINT and SIGTERM only mark a stop request (a second one of
 * the same signal ends the process at once). */
void stop_signal_install(void);
/* The signal that asked to stop, or 0. */
int stop_signal_requested(void);
/* Ends the process by the signal that asked to stop, if one did (the
 * caller has flushed its output); returns otherwise. */
void stop_signal_finish(void);

#endif
