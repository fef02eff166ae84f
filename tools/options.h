/* tools/options.h - the one option parser of every `ringflow` subcommand. A
 * command is a table of options, each with its kind and range; both the
 * parsing and the option lines of --help come from it, so --help states
 * exactly what is accepted. Options are --name VALUE or --name=VALUE (full
 * names only), in any order among the positional arguments; "--" ends them.
 * Numbers are read whole: no sign where none is allowed, no empty value, no
 * trailing text, no overflow, no inf or nan, and within the option's range.
 * Any error is one line on stderr naming the option and the value, and the
 * command's exit code 2. --help prints the help to stdout when it is
 * reached (options before it are checked first). */
#ifndef RF_TOOLS_OPTIONS_H
#define RF_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tool_opt_kind {
  TOOL_OPT_FLAG,    /* bool: takes no value */
  TOOL_OPT_INT,     /* int: a decimal integer in [min, max] */
  TOOL_OPT_UINT64,  /* uint64_t: a decimal integer in 0..2^64-1 */
  TOOL_OPT_REAL,    /* double: a finite number > min (or >= min) and <= max */
  TOOL_OPT_SIZE,    /* int64_t: bytes, as 512, 64K, 1.5M or 8GB (K, M, G:
                       x1024), a whole number in [min, max] */
  TOOL_OPT_STRING,  /* const char *: a path, any text but "" */
  TOOL_OPT_CHOICE,  /* int: the index of the value in choices */
  TOOL_OPT_DEVICES, /* tool_devices (devices.h) */
} tool_opt_kind;

typedef struct tool_opt {
  const char *name; /* "lr" for --lr */
  tool_opt_kind kind;
  void *out;         /* where the value goes; the kind says its type */
  const char *arg;   /* the value's name in --help: "N", "X", "FILE" */
  const char *help;  /* what it does (and its default); "\n" breaks lines */
  double min, max;   /* INT, SIZE, REAL (REAL: min excluded unless
                        min_included; max may be INFINITY) */
  bool min_included; /* REAL: min itself is allowed (a weight decay of 0) */
  const char *const *choices; /* CHOICE: NULL-terminated */
  bool *given;                /* optional: set true when it is given */
} tool_opt;

/* Table entries, one macro a kind. The out pointer must have the kind's
 * type (the conditional makes the compiler check it); a trailing
 * `.given = &flag` may follow. */
#define TOOL_TYPED(type, p) (1 ? (p) : (type *)0)
#define TOOL_FLAG(n, p, h, ...)                                              \
  {                                                                          \
    .name = n, .kind = TOOL_OPT_FLAG, .out = TOOL_TYPED(bool, p), .help = h, \
    __VA_ARGS__                                                              \
  }
#define TOOL_INT(n, p, a, h, lo, hi, ...)                                 \
  {                                                                       \
    .name = n, .kind = TOOL_OPT_INT, .out = TOOL_TYPED(int, p), .arg = a, \
    .help = h, .min = lo, .max = hi, __VA_ARGS__                          \
  }
#define TOOL_UINT64(n, p, a, h, ...)                                    \
  {                                                                     \
    .name = n, .kind = TOOL_OPT_UINT64, .out = TOOL_TYPED(uint64_t, p), \
    .arg = a, .help = h, __VA_ARGS__                                    \
  }
#define TOOL_REAL(n, p, a, h, lo, hi, ...)                                    \
  {                                                                           \
    .name = n, .kind = TOOL_OPT_REAL, .out = TOOL_TYPED(double, p), .arg = a, \
    .help = h, .min = lo, .max = hi, __VA_ARGS__                              \
  }
#define TOOL_SIZE(n, p, a, h, lo, hi, ...)                                     \
  {                                                                            \
    .name = n, .kind = TOOL_OPT_SIZE, .out = TOOL_TYPED(int64_t, p), .arg = a, \
    .help = h, .min = lo, .max = hi, __VA_ARGS__                               \
  }
#define TOOL_STRING(n, p, a, h, ...)                                        \
  {                                                                         \
    .name = n, .kind = TOOL_OPT_STRING, .out = TOOL_TYPED(const char *, p), \
    .arg = a, .help = h, __VA_ARGS__                                        \
  }
#define TOOL_CHOICE(n, p, a, h, list, ...)                                   \
  {                                                                          \
    .name = n, .kind = TOOL_OPT_CHOICE, .out = TOOL_TYPED(int, p), .arg = a, \
    .help = h, .choices = list, __VA_ARGS__                                  \
  }
#define TOOL_DEVICES(n, p, h, ...)                                       \
  {                                                                      \
    .name = n, .kind = TOOL_OPT_DEVICES,                                 \
    .out = TOOL_TYPED(struct tool_devices, p), .arg = "LIST", .help = h, \
    __VA_ARGS__                                                          \
  }

typedef struct tool_cmd {
  const char *name;     /* "train" */
  const char *synopsis; /* the help's first lines: usage and what it does */
  const char *footer;   /* after the options (or NULL) */
  const tool_opt *opts;
  int nopts;
} tool_cmd;

/* tool_parse's answer when it printed --help: the command exits 0. */
#define TOOL_HELP_SHOWN (-1)

/* Parses argv[1..argc) (argv[0] is the command's name) into the options'
 * outs; positional arguments go to pos[0..*npos), at most max_pos of them.
 * Returns 0, TOOL_HELP_SHOWN, or 2 with the error reported. */
int tool_parse(const tool_cmd *cmd, int argc, char **argv, char **pos,
               int max_pos, int *npos);

/* Reports a usage error of cmd in one line ("ringflow: CMD: ...; see
 * ringflow CMD --help"); returns 2. */
int tool_usage_error(const tool_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* What a value of o may be, as the help and the messages say it
 * ("1..100000", "a finite number > 0"). */
void tool_opt_allowed(const tool_opt *o, char *buf, size_t len);

/* Prints cmd's help (synopsis, one entry per option with its range, footer)
 * to stdout. */
void tool_print_help(const tool_cmd *cmd);

/* Formats bytes with the largest K/M/G suffix that divides it exactly. */
void tool_format_size(int64_t bytes, char *buf, size_t len);

#endif
