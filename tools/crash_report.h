/* tools/crash_report.h - the `ringflow` command's report of a fatal signal
 * (which one, and a backtrace on stderr); see crash_report.c. */
#ifndef RINGFLOW_TOOLS_CRASH_REPORT_H
#define RINGFLOW_TOOLS_CRASH_REPORT_H

/* Installs the handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT.
 * A no-op in sanitizer builds. */
void crash_report_install(void);

#endif
