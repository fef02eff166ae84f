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

void tool_format_argv(const char *const argv[], char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; argv[i] && used + 1 < len; i++) {
    if (i) buf[used++] = ' ';
    if (plain(argv[i])) {
      used += (size_t)snprintf(buf + used, len - used, "%s", argv[i]);
      continue;
    }
    buf[used++] = '\'';
    for (const char *c = argv[i]; *c && used + 5 < len; c++) {
      if (*c == '\'') { /* ' closes, \' is a quote, ' reopens */
        memcpy(buf + used, "'\\''", 4);
        used += 4;
      } else {
        buf[used++] = *c;
      }
    }
    if (used + 1 < len) buf[used++] = '\'';
    buf[used] = 0;
  }
  if (used >= len) buf[len - 1] = 0;
}
