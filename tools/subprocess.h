/* tools/subprocess.h - running another program (Graphviz's dot, mpirun) without
 * a shell: an argument vector through posix_spawnp, so no character of a path
 * the user gave is ever read as shell syntax. */
#ifndef RF_TOOLS_SUBPROCESS_H
#define RF_TOOLS_SUBPROCESS_H

#include <stddef.h>
#include <sys/types.h>

/* Starts argv[0], looked up in PATH, with argv (NULL-terminated) and envp
 * (NULL: this process's environment). out_fd >= 0: the child's stdout and
 * stderr go to it; -1: they are this process's. Returns 0 with *pid set, or
 * the errno value saying why the program could not start (ENOENT: not
 * installed). */
int tool_spawn(const char *const argv[], char *const envp[], int out_fd,
               pid_t *pid);
/* Waits for pid; returns its wait status (WIFEXITED ...), or -1. */
int tool_wait(pid_t pid);
/* argv as one line a shell would run as the same command (for messages):
 * arguments with characters other than [A-Za-z0-9_./,:=+-] single-quoted.
 * Cut to len - 1 bytes. */
void tool_format_argv(const char *const argv[], char *buf, size_t len);

#endif
