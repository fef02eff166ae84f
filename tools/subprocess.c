/* tools/subprocess.c - posix_spawnp with an argument vector and waitpid: the
 * only way the `ringflow` command runs another program (no system, no popen).
 */
#include "subprocess.h"

#include <errno.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int tool_spawn(const char *const argv[], char *const envp[], int out_fd,
               pid_t *pid) {
  posix_spawn_file_actions_t fa;
  int err = posix_spawn_file_actions_init(&fa);
  if (err) return err;
  if (out_fd >= 0) {
    err = posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    if (!err)
      err = posix_spawn_file_actions_adddup2(&fa, out_fd, STDERR_FILENO);
  }
  /* posix_spawnp's argv is char *const[] for historical reasons; it does not
   * write the strings. */
  if (!err)
    err = posix_spawnp(pid, argv[0], &fa, NULL, (char *const *)argv,
                       envp ? envp : environ);
  posix_spawn_file_actions_destroy(&fa);
  return err;
}

int tool_wait(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

static bool plain(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!strchr("_./,:=+-", *s) && !(*s >= 'a' && *s <= 'z') &&
        !(*s >= 'A' && *s <= 'Z') && !(*s >= '0' && *s <= '9'))
      return false;
  return true;
}

/* Appends n bytes of s to buf (used bytes so far), as many as fit before
 * the terminating 0. */
static void append(char *buf, size_t len, size_t *used, const char *s,
                   size_t n) {
  size_t room = len - 1 - *used;
  if (n > room) n = room;
  memcpy(buf + *used, s, n);
  *used += n;
  buf[*used] = 0;
}

void tool_format_argv(const char *const argv[], char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return;
  buf[0] = 0;
  for (int i = 0; argv[i]; i++) {
    if (i) append(buf, len, &used, " ", 1);
    if (plain(argv[i])) {
      append(buf, len, &used, argv[i], strlen(argv[i]));
      continue;
    }
    append(buf, len, &used, "'", 1);
    for (const char *c = argv[i]; *c; c++) {
      if (*c == '\'') /* ' closes, \' is a quote, ' reopens */
        append(buf, len, &used, "'\\''", 4);
      else
        append(buf, len, &used, c, 1);
    }
    append(buf, len, &used, "'", 1);
  }
}
