/* tests/test_cli_options.c - the options of every `ringflow` subcommand, as
 * a user meets them: each numeric option's bad values (trailing junk, empty,
 * inf/nan, out of range, overflow) exit 2 with one line on stderr naming the
 * option, the value and the allowed range, which --help states on the
 * option's line; the values at the ends of each range are accepted; an
 * unknown option is one line pointing to `ringflow CMD --help`; the same
 * --devices strings are accepted and rejected by train, lower and bench;
 * docs/CLI.md holds every --help text exactly. Runs the built binary
 * (RF_TOOL); train never trains here (it stops at --help, or at a missing
 * data directory). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#ifndef RF_TOOL
#error "RF_TOOL (the path of the ringflow binary) must be defined"
#endif
#ifndef RF_SOURCE_DIR
#error "RF_SOURCE_DIR (the source tree, for docs/CLI.md) must be defined"
#endif

/* One run of the binary: its exit code, stdout and stderr. */
typedef struct run {
  int rc;
  char *out, *err;
} run;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t cap = 1 << 12, len = 0, got;
  char *buf = malloc(cap);
  assert_non_null(buf);
  while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (cap - len < 1024) buf = realloc(buf, cap *= 2), assert_non_null(buf);
  }
  buf[len] = 0;
  fclose(f);
  return buf;
}

static char work[64];

/* Runs `ringflow args...` (a NULL-terminated list, passed as they are: no
 * shell, so "" and spaces stay one argument) with stdout to `to` (NULL: a
 * file that r.out then holds). */
static run run_argv_to(const char *const *args, const char *to) {
  char out_path[128], err_path[128];
  snprintf(out_path, sizeof out_path, "%s/out", work);
  snprintf(err_path, sizeof err_path, "%s/err", work);
  const char *argv[16] = {RF_TOOL};
  int n = 1;
  while (args[n - 1]) {
    assert_true(n < 15);
    argv[n] = args[n - 1];
    n++;
  }
  argv[n] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = open(to ? to : out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(127);
    execv(RF_TOOL, (char *const *)argv);
    _exit(127);
  }
  int status;
  assert_true(waitpid(pid, &status, 0) == pid);
  run r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           to ? strdup("") : slurp(out_path), slurp(err_path)};
  return r;
}

static run run_argv(const char *const *args) { return run_argv_to(args, NULL); }

static void run_free(run *r) {
  free(r->out);
  free(r->err);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void show(const char *what, const char *const *args, const run *r) {
  fprintf(stderr, "%s: ringflow", what);
  for (int i = 0; args[i]; i++) fprintf(stderr, " '%s'", args[i]);
  fprintf(stderr, "\n  exit %d\n  stdout: %.400s\n  stderr: %.400s\n", r->rc,
          r->out, r->err);
}

/* The entry of `ringflow cmd --help` (after "options:") that describes
 * --opt, its continuation lines joined, malloc'ed. */
static char *help_entry(const char *cmd, const char *opt) {
  const char *args[] = {cmd, "--help", NULL};
  run r = run_argv(args);
  assert_int_equal(r.rc, 0);
  char key[64];
  snprintf(key, sizeof key, "\n  %s ", opt);
  const char *opts = strstr(r.out, "\noptions:\n");
  assert_non_null(opts);
  const char *at = strstr(opts, key);
  if (!at) show("no help line", args, &r);
  assert_non_null(at);
  at++;
  /* continuation lines start with more than two spaces */
  const char *end = strchr(at, '\n');
  while (end && strncmp(end + 1, "   ", 3) == 0) end = strchr(end + 1, '\n');
  size_t len = end ? (size_t)(end - at) : strlen(at);
  char *line = malloc(len + 1);
  assert_non_null(line);
  memcpy(line, at, len);
  line[len] = 0;
  /* one line of text: fold the continuation's indentation into one space */
  char *w = line;
  for (const char *p = line; *p;) {
    if (*p == '\n') {
      while (*++p == ' ') {
      }
      *w++ = ' ';
    } else {
      *w++ = *p++;
    }
  }
  *w = 0;
  run_free(&r);
  return line;
}

/* A usage error: exit 2, nothing on stdout, one line on stderr holding
 * every string of `want` (NULL-terminated). */
static void expect_usage_error(const char *const *args,
                               const char *const *want) {
  run r = run_argv(args);
  bool ok = r.rc == 2 && !r.out[0] && count_lines(r.err) == 1;
  for (int i = 0; ok && want[i]; i++) ok = strstr(r.err, want[i]) != NULL;
  if (!ok) show("expected one usage error line", args, &r);
  assert_true(ok);
  run_free(&r);
}

/* ---- numbers ---- */

typedef struct value_case {
  const char *cmd, *opt, *value;
} value_case;

/* Every numeric option of every subcommand: values that must be refused. */
static const value_case bad_values[] = {
    {"train", "--epochs", ""},
    {"train", "--epochs", "0"},
    {"train", "--epochs", "-1"},
    {"train", "--epochs", "100001"},
    {"train", "--epochs", "5x"},
    {"train", "--epochs", "x"},
    {"train", "--epochs", " 5"},
    {"train", "--epochs", "2.5"},
    {"train", "--epochs", "99999999999999999999999"},
    {"train", "--batch", ""},
    {"train", "--batch", "0"},
    {"train", "--batch", "-64"},
    {"train", "--batch", "1048577"},
    {"train", "--batch", "64k"},
    {"train", "--batch", "1e3"},
    {"train", "--steps", "0"},
    {"train", "--steps", "1073741825"},
    {"train", "--steps", "10steps"},
    {"train", "--steps", "18446744073709551617"},
    {"train", "--warmup", "-1"},
    {"train", "--warmup", "1073741825"},
    {"train", "--warmup", "ten"},
    {"train", "--lr", "inf"},
    {"train", "--lr", "-inf"},
    {"train", "--lr", "nan"},
    {"train", "--lr", "1e3x"},
    {"train", "--lr", ""},
    {"train", "--lr", "0"},
    {"train", "--lr", "-0.001"},
    {"train", "--lr", "1e999"},
    {"train", "--lr", "abc"},
    {"train", "--lr", "0.001 "},
    {"train", "--seed", "abc"},
    {"train", "--seed", "-1"},
    {"train", "--seed", ""},
    {"train", "--seed", "18446744073709551616"},
    {"train", "--seed", "1.5"},
    {"train", "--seed", "12abc"},
    {"train", "--seed", " 7"},
    {"train", "--sync", "ring"},
    {"train", "--schedule", "linear"},
    {"bench", "--min", ""},
    {"bench", "--min", "3"},
    {"bench", "--min", "9G"},
    {"bench", "--min", "1X"},
    {"bench", "--min", "0.1K"},
    {"bench", "--min", "-4K"},
    {"bench", "--min", "4.5"},
    {"bench", "--min", "99999999999999999999999G"},
    /* not whole, past a double's digits (strtod read them as 1K and 4) */
    {"bench", "--min", "1.00000000000000000001K"},
    {"bench", "--min", "4.00000000000000000000000001"},
    {"bench", "--min", "1.0000000000000000000000000000001G"},
    {"bench", "--max", "8G1"},
    {"bench", "--max", "1T"},
    {"bench", "--max", "inf"},
    {"bench", "--max", "2"},
    {"bench", "--min-time", "0"},
    {"bench", "--min-time", "-1"},
    {"bench", "--min-time", "inf"},
    {"bench", "--min-time", "nan"},
    {"bench", "--min-time", "0.1s"},
    {"bench", "--min-time", ""},
    {"bench", "--min-time", "3601"},
    {"bench", "--threads", "-1"},
    {"bench", "--threads", "257"},
    {"bench", "--threads", "2x"},
    {"bench", "--rounds", "0"},
    {"bench", "--rounds", "16"},
    {"bench", "--rounds", ""},
    {"bench", "--factor", "1"},
    {"bench", "--factor", "17"},
    {"bench", "--factor", "4.0"},
    {"bench", "--per-step", "0"},
    {"bench", "--per-step", "65"},
    {"bench", "--pipeline", "-1"},
    {"bench", "--pipeline", "1001"},
    {"bench", "--pipeline", "20x"},
    {"bench", "--collective", "all_to_all"},
    {"bench", "--backend", "mpi"},
};

/* Values at the ends of each range (and spellings kept from before): each
 * is accepted, which --help (given after it) shows by exiting 0. */
static const value_case good_values[] = {
    {"train", "--epochs", "1"},
    {"train", "--epochs", "100000"},
    {"train", "--batch", "1"},
    {"train", "--batch", "1048576"},
    {"train", "--steps", "1"},
    {"train", "--steps", "1073741824"},
    {"train", "--warmup", "0"},
    {"train", "--warmup", "1073741824"},
    {"train", "--lr", "0.001"},
    {"train", "--lr", "1e-3"},
    {"train", "--lr", "2"},
    {"train", "--seed", "0"},
    {"train", "--seed", "18446744073709551615"},
    {"train", "--sync", "sharded"},
    {"train", "--schedule", "constant"},
    {"bench", "--min", "4"},
    {"bench", "--min", "8G"},
    {"bench", "--min", "1K"},
    {"bench", "--min", "16k"},
    {"bench", "--min", "1.5M"},
    {"bench", "--min", "64KB"},
    {"bench", "--min", "0.0048828125K"}, /* 5 bytes, exactly */
    {"bench", "--min", "1.000000000000000000000000000000000G"},
    {"train", "--lr", "4.9e-324"}, /* a subnormal: strtod's ERANGE */
    {"train", "--lr", "1e-310"},
    {"bench", "--max", "8589934592"},
    {"bench", "--min-time", "0.001"},
    {"bench", "--min-time", "3600"},
    {"bench", "--threads", "0"},
    {"bench", "--threads", "256"},
    {"bench", "--rounds", "1"},
    {"bench", "--rounds", "15"},
    {"bench", "--factor", "2"},
    {"bench", "--factor", "16"},
    {"bench", "--per-step", "1"},
    {"bench", "--per-step", "64"},
    {"bench", "--pipeline", "0"},
    {"bench", "--pipeline", "1000"},
    {"bench", "--collective", "reduce_scatter"},
    {"bench", "--backend", "nccl"},
    {"lower", "--devices", "1"},
    {"lower", "--devices", "64"},
};

/* The range an error line states: the text after "allowed: ". */
static char *allowed_text(const char *err) {
  const char *at = strstr(err, "allowed: ");
  assert_non_null(at);
  at += strlen("allowed: ");
  size_t len = strcspn(at, "\n");
  char *s = malloc(len + 1);
  assert_non_null(s);
  memcpy(s, at, len);
  s[len] = 0;
  return s;
}

/* One bad value, given as "--opt VALUE" and as "--opt=VALUE". */
static void check_bad_value(const value_case *c) {
  char quoted[128], joined[128];
  snprintf(quoted, sizeof quoted, "'%s'", c->value);
  snprintf(joined, sizeof joined, "%s=%s", c->opt, c->value);
  const char *want[] = {c->opt, quoted, "allowed: ", NULL};
  const char *split[] = {c->cmd, c->opt, c->value, NULL};
  const char *eq[] = {c->cmd, joined, NULL};
  expect_usage_error(split, want);
  expect_usage_error(eq, want);
  /* The range in the message is the one --help gives for the option. */
  run r = run_argv(split);
  char *allowed = allowed_text(r.err);
  char *entry = help_entry(c->cmd, c->opt);
  if (!strstr(entry, allowed))
    fprintf(stderr, "'%s' not in the help of %s %s: %s\n", allowed, c->cmd,
            c->opt, entry);
  assert_non_null(strstr(entry, allowed));
  free(allowed);
  free(entry);
  run_free(&r);
}

/* Each range: the values past it refused, the values at its ends taken. */
static void test_number_ranges(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++)
    check_bad_value(&bad_values[i]);
  for (size_t i = 0; i < sizeof good_values / sizeof *good_values; i++) {
    const value_case *c = &good_values[i];
    const char *args[] = {c->cmd, c->opt, c->value, "--help", NULL};
    run r = run_argv(args);
    char usage[64];
    snprintf(usage, sizeof usage, "usage: ringflow %s", c->cmd);
    bool ok = r.rc == 0 && strstr(r.out, usage) && !r.err[0];
    if (!ok) show("expected the value to be accepted", args, &r);
    assert_true(ok);
    run_free(&r);
  }
}

/* A missing value, whatever comes after the option. */
static void test_missing_values(void **state) {
  (void)state;
  static const char *const cases[][3] = {
      {"train", "--lr", NULL},          {"train", "--seed", NULL},
      {"train", "--epochs", "--quiet"}, {"train", "--data", NULL},
      {"lower", "--devices", NULL},     {"lower", "--dot", NULL},
      {"bench", "--min", NULL},         {"bench", "--devices", "--quick"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *args[] = {cases[i][0], cases[i][1], cases[i][2], NULL};
    const char *want[] = {cases[i][1], "needs a value", NULL};
    expect_usage_error(args, want);
  }
}

/* An option given twice takes its last value, each value checked as it is
 * read (docs/CLI.md). */
static void test_repeated_option_takes_the_last(void **state) {
  (void)state;
  const char *args[] = {"bench",      "--devices", "3",
                        "--devices",  "2",         "--quick",
                        "--max",      "1K",        "--collective",
                        "all_reduce", "--no-mpi",  "--no-floor",
                        "--csv",      NULL};
  run r = run_argv(args);
  if (r.rc != 0 || !strstr(r.out, "\nall_reduce,2,1024,"))
    show("bench", args, &r);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "\nall_reduce,2,1024,"));
  run_free(&r);
  const char *bad[] = {"train", "--steps", "0", "--steps", "3", "--help", NULL};
  const char *want[] = {"--steps", "'0'", "out of range", NULL};
  expect_usage_error(bad, want);
}

/* ---- unknown options and arguments ---- */

static void test_unknown_options(void **state) {
  (void)state;
  /* command, argument, its value (or NULL), the option named */
  static const char *const cases[][4] = {
      {"train", "--frobnicate", NULL, "--frobnicate"},
      {"train", "-x", NULL, "-x"},
      {"train", "--epoch", "3", "--epoch"}, /* no abbreviations */
      {"lower", "--frobnicate", NULL, "--frobnicate"},
      {"bench", "--frobnicate", NULL, "--frobnicate"},
      {"bench", "--nope=3", NULL, "--nope"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *args[] = {cases[i][0], cases[i][1], cases[i][2], NULL};
    char name[64], help[64];
    snprintf(name, sizeof name, "'%s'", cases[i][3]);
    snprintf(help, sizeof help, "ringflow %s --help", cases[i][0]);
    const char *want[] = {"unknown option", name, help, NULL};
    expect_usage_error(args, want);
  }
  /* a command that takes a file says where one named -x goes */
  const char *dash[] = {"lower", "-g.json", NULL};
  const char *dash_want[] = {
      "unknown option '-g.json'",
      "(a file whose name starts with '-' goes after --)",
      "ringflow lower --help", NULL};
  expect_usage_error(dash, dash_want);
  const char *flag[] = {"train", "--quiet=yes", NULL};
  const char *flag_want[] = {"--quiet", "takes no value", NULL};
  expect_usage_error(flag, flag_want);
  const char *extra[][3] = {{"train", "extra", NULL},
                            {"bench", "extra", NULL},
                            {"lower", NULL, NULL},
                            {"lower", "a.json", "b.json"}};
  for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
    const char *args[] = {extra[i][0], extra[i][1], extra[i][2], NULL};
    char help[64];
    snprintf(help, sizeof help, "ringflow %s --help", extra[i][0]);
    const char *want[] = {help, NULL};
    expect_usage_error(args, want);
  }
  const char *cmd[] = {"frobnicate", NULL};
  const char *cmd_want[] = {"'frobnicate'", "ringflow --help", NULL};
  expect_usage_error(cmd, cmd_want);
  /* No command at all is a usage error like the others: one line. */
  const char *none[] = {NULL};
  const char *none_want[] = {"no command", "ringflow --help", NULL};
  expect_usage_error(none, none_want);
}

/* ---- --devices: one syntax in train, lower and bench ---- */

/* Accepted by all three. CPU lists run (train up to its missing data
 * directory); so do GPU lists where there is a GPU, and elsewhere lower and
 * bench say there is none (exit 1), never a usage error. */
static const char *const good_devices[] = {
    "2",       "1",       "cpu:0-1", "cpu:0,1",   "cpu:0,cpu:1",
    "CPU:0-1", "cpu:0,2", "cpu:1",   "cpu:3-4,0", "cpu:0-1,cpu:3",
    "gpu:0",   "gpu:0-1", "gpu:0,2",
};
/* Refused by all three, each with one line naming --devices and the value. */
static const char *const bad_devices[] = {
    "",          "0",           "65",
    "-1",        "3x",          "cpu",
    "cpu:",      "cpu:x",       "cpu:-1",
    "cpu:64",    "cpu:0-64",    "cpu:3-1",
    "cpu:1-",    "cpu:0,cpu:0", "cpu:0-2,1",
    "tpu:0",     "cpu:0,gpu:0", "/task:1/cpu:0",
    "cpu:0,",    ",cpu:0",      "2,3",
    "cpu:0;1",   "cpu:0, 1",    "gpu:0-1,1",
    "cpu:1-1-2",
};

static char graph_path[96];

/* The command line of cmd with --devices d: the cheapest run that uses the
 * devices. */
static void devices_args(const char *cmd, const char *d, const char **args) {
  int n = 0;
  args[n++] = cmd;
  args[n++] = "--devices";
  args[n++] = d;
  if (strcmp(cmd, "train") == 0) {
    /* divisible by every count here; no data: exit 1 after parsing */
    args[n++] = "--batch=840";
    args[n++] = "--steps=1";
    args[n++] = "--data=/nonexistent-ringflow-data";
  } else if (strcmp(cmd, "lower") == 0) {
    args[n++] = graph_path;
  } else {
    args[n++] = "--csv";
    args[n++] = "--no-mpi";
    args[n++] = "--no-floor";
    if (strncmp(d, "gpu", 3) == 0) args[n++] = "--no-executor";
    args[n++] = "--collective=all_reduce";
    args[n++] = "--min=1K";
    args[n++] = "--max=1K";
    args[n++] = "--min-time=0.001";
  }
  args[n] = NULL;
}

static const char *const commands[] = {"train", "lower", "bench"};

static void test_devices_accepted_alike(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof good_devices / sizeof *good_devices; i++) {
    bool gpu = strncmp(good_devices[i], "gpu", 3) == 0;
    for (int c = 0; c < 3; c++) {
      const char *args[16];
      devices_args(commands[c], good_devices[i], args);
      run r = run_argv(args);
      bool train = c == 0;
      bool ok = !strstr(r.err, "--devices");
      if (train) /* stops at its data */
        ok = ok && r.rc == 1 && strstr(r.err, "nonexistent");
      else if (gpu)
        ok = ok && (r.rc == 0 || (r.rc == 1 && strstr(r.err, "no GPU")));
      else
        ok = ok && r.rc == 0;
      if (!ok) show("expected --devices to be accepted", args, &r);
      assert_true(ok);
      run_free(&r);
    }
  }
}

static void test_devices_rejected_alike(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_devices / sizeof *bad_devices; i++) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", bad_devices[i]);
    const char *want[] = {"--devices", quoted, "allowed: ", NULL};
    char *first = NULL;
    for (int c = 0; c < 3; c++) {
      const char *args[16];
      devices_args(commands[c], bad_devices[i], args);
      expect_usage_error(args, want);
      /* the same reason and range in all three */
      run r = run_argv(args);
      const char *why = strstr(r.err, "--devices");
      if (!first)
        first = strdup(why);
      else
        assert_string_equal(why, first);
      run_free(&r);
    }
    free(first);
  }
  /* The range is the one every --help gives for --devices. */
  const char *args[] = {"train", "--devices", "0", NULL};
  run r = run_argv(args);
  char *allowed = allowed_text(r.err);
  for (int c = 0; c < 3; c++) {
    char *entry = help_entry(commands[c], "--devices");
    if (!strstr(entry, allowed))
      fprintf(stderr, "'%s' not in: %s\n", allowed, entry);
    assert_non_null(strstr(entry, allowed));
    free(entry);
  }
  free(allowed);
  run_free(&r);
}

/* ---- the docs ---- */

/* docs/CLI.md quotes each --help after "$ ringflow ... --help". */
static void test_docs_quote_help(void **state) {
  (void)state;
  char *doc = slurp(RF_SOURCE_DIR "/docs/CLI.md");
  const char *cmds[] = {NULL, "train", "lower", "bench"};
  for (int i = 0; i < 4; i++) {
    const char *args[] = {cmds[i] ? cmds[i] : "--help",
                          cmds[i] ? "--help" : NULL, NULL};
    run r = run_argv(args);
    assert_int_equal(r.rc, 0);
    char key[64];
    snprintf(key, sizeof key, "$ ringflow%s%s --help\n", cmds[i] ? " " : "",
             cmds[i] ? cmds[i] : "");
    const char *at = strstr(doc, key);
    if (!at) fprintf(stderr, "docs/CLI.md has no '%s'\n", key);
    assert_non_null(at);
    at += strlen(key);
    const char *end = strstr(at, "```");
    assert_non_null(end);
    size_t len = (size_t)(end - at);
    if (len != strlen(r.out) || memcmp(at, r.out, len) != 0)
      fprintf(stderr, "docs/CLI.md differs from `%s`:\n%s\n", key, r.out);
    assert_int_equal(len, strlen(r.out));
    assert_memory_equal(at, r.out, len);
    run_free(&r);
  }
  free(doc);
}

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/rf_cli_options_XXXXXX");
  if (!mkdtemp(work)) return -1;
  snprintf(graph_path, sizeof graph_path, "%s/one.json", work);
  FILE *f = fopen(graph_path, "w");
  if (!f) return -1;
  fputs(
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": [{\"name\": "
      "\"a\", \"op\": \"Placeholder\", \"inputs\": [], \"control_inputs\": [], "
      "\"attrs\": {\"dtype\": {\"type\": \"type\", \"value\": \"float32\"}, "
      "\"shape\": {\"type\": \"shape\", \"value\": [2]}}}]}\n",
      f);
  return fclose(f);
}

/* Options that a context makes meaningless are refused, not ignored:
 * bench's across-process options in one process, a bucket size where no
 * all-reduce fuses; lower takes train's --conv-epilogues. */
static void test_options_out_of_context(void **state) {
  (void)state;
  const char *rounds[] = {"bench", "--rounds", "3", NULL};
  const char *rounds_want[] = {"--rounds", "only across processes", NULL};
  expect_usage_error(rounds, rounds_want);
  const char *tiny[] = {"bench",
                        "--collective",
                        "reduce_scatter",
                        "--devices",
                        "2",
                        "--min",
                        "4",
                        "--max",
                        "4",
                        NULL};
  const char *tiny_want[] = {"--collective reduce_scatter",
                             "the largest size (4: --min x 4^k up to --max 4)",
                             "must be at least 8 bytes", NULL};
  expect_usage_error(tiny, tiny_want);
  static const char *const bench_only[][2] = {{"--epochs", "1"},
                                              {"--schedule", "constant"}};
  for (int i = 0; i < 2; i++) {
    const char *args[] = {"train", "--bench", bench_only[i][0],
                          bench_only[i][1], NULL};
    const char *want[] = {
        "--bench times --steps steps at a constant --lr: "
        "no --epochs or --schedule",
        NULL};
    expect_usage_error(args, want);
  }
  const char *gloo[] = {"bench", "--no-gloo", NULL};
  const char *gloo_want[] = {"--no-gloo", "only across processes", NULL};
  expect_usage_error(gloo, gloo_want);
  static const char *const syncs[] = {"sharded", "reduce-broadcast"};
  for (int i = 0; i < 2; i++) {
    const char *bucket[] = {"train",  "--bucket-mb", "2",
                            "--sync", syncs[i],      NULL};
    const char *bucket_want[] = {"--bucket-mb 2 needs --sync allreduce", NULL};
    expect_usage_error(bucket, bucket_want);
  }
  const char *epi[] = {"lower", graph_path, "--conv-epilogues", "all", NULL};
  run r = run_argv(epi);
  if (r.rc != 0) show("expected lower --conv-epilogues all to run", epi, &r);
  assert_int_equal(r.rc, 0);
  run_free(&r);
  const char *bad[] = {"lower", graph_path, "--conv-epilogues", "some", NULL};
  const char *bad_want[] = {"--conv-epilogues", "'some'", NULL};
  expect_usage_error(bad, bad_want);
}

/* A checkpoint at the largest step a checkpoint holds loads, but a run
 * that would save past it is refused before it trains (it trained, then
 * failed at the save: the run's training lost). */
static void test_load_at_the_last_step(void **state) {
  (void)state;
  char a[128], b[128], c[128];
  snprintf(a, sizeof a, "%s/a.ckpt", work);
  snprintf(b, sizeof b, "%s/b.ckpt", work);
  snprintf(c, sizeof c, "%s/c.ckpt", work);
  const char *save[] = {"train",   "--steps", "1", "--devices", "2",
                        "--quiet", "--save",  a,   NULL};
  run r = run_argv(save);
  assert_int_equal(r.rc, 0);
  run_free(&r);
  rf_checkpoint *ck;
  assert_ok(rf_checkpoint_load(a, &ck));
  assert_ok(rf_checkpoint_set_step(ck, RF_CHECKPOINT_STEP_MAX));
  assert_ok(rf_checkpoint_save(ck, b));
  rf_checkpoint_free(ck);
  const char *resave[] = {"train",  "--steps", "1",      "--devices",
                          "2",      "--quiet", "--load", b,
                          "--save", c,         NULL};
  r = run_argv(resave);
  if (r.rc != 1) show("expected exit 1", resave, &r);
  assert_int_equal(r.rc, 1);
  assert_non_null(strstr(r.err, "passes the largest step a checkpoint holds"));
  assert_null(strstr(r.out, "epoch 1")); /* refused before training */
  assert_int_equal(access(c, F_OK), -1);
  run_free(&r);
  const char *load[] = {"train",   "--steps", "1", "--devices", "2",
                        "--quiet", "--load",  b,   NULL};
  r = run_argv(load);
  assert_int_equal(r.rc, 0);
  run_free(&r);
}

/* --trace into a missing directory is refused before training (it failed
 * at step 10, and under mpirun the other processes waited out the
 * timeout). */
static void test_trace_path_checked_first(void **state) {
  (void)state;
  const char *args[] = {"train",   "--trace", "/nonexistent-dir/t.json",
                        "--steps", "20",      "--quiet",
                        NULL};
  run r = run_argv(args);
  if (r.rc != 1) show("expected exit 1", args, &r);
  assert_int_equal(r.rc, 1);
  assert_non_null(strstr(r.err,
                         "--trace: cannot write the trace to "
                         "/nonexistent-dir/t.json"));
  assert_null(strstr(r.out, "epoch"));
  run_free(&r);
}

/* A path past PATH_MAX: INVALID_ARGUMENT "File name too long" whichever
 * option takes it (it was UNKNOWN, PERMISSION_DENIED or NOT_FOUND). */
static void test_paths_too_long(void **state) {
  (void)state;
  enum { LEN = 5000 };
  char *dir = malloc(LEN + 1), *file = malloc(LEN + 16);
  assert_non_null(dir);
  assert_non_null(file);
  memset(dir, 'd', LEN);
  dir[0] = '/';
  for (int i = 200; i < LEN; i += 200) dir[i] = '/';
  dir[LEN] = '\0';
  snprintf(file, LEN + 16, "%s/g.json", dir);
  const char *cases[][6] = {
      {"train", "--steps", "1", "--trace", file, NULL},
      {"train", "--steps", "1", "--graph-dir", dir, NULL},
      {"train", "--steps", "1", "--data", dir, NULL},
      {"lower", file, NULL},
      {"lower", graph_path, "--dot", dir, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    run r = run_argv(cases[i]);
    if (r.rc != 1 || !strstr(r.err, "error (INVALID_ARGUMENT)") ||
        !strstr(r.err, "File name too long"))
      show("expected INVALID_ARGUMENT: File name too long", cases[i], &r);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.err, "error (INVALID_ARGUMENT)"));
    assert_non_null(strstr(r.err, "File name too long"));
    run_free(&r);
  }
  free(dir);
  free(file);
}

/* An empty path names no file: a usage error, never a late failure (an
 * empty --trace failed after training began, as "NULL argument"; an empty
 * --data read "/train-images-idx3-ubyte.gz"). */
static void test_empty_paths(void **state) {
  (void)state;
  static const char *const cases[][3] = {
      {"train", "--trace", "--steps=1"},   {"train", "--save", "--steps=1"},
      {"train", "--load", "--steps=1"},    {"train", "--data", "--steps=1"},
      {"train", "--graph-dir", "--quiet"}, {"lower", "--dot", NULL},
      {"bench", "--mpi-baseline", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *const *c = cases[i];
    bool lower = strcmp(c[0], "lower") == 0;
    const char *args[] = {c[0], c[1], "", lower ? graph_path : c[2], NULL};
    const char *want[] = {c[1], "'': an empty path", NULL};
    expect_usage_error(args, want);
  }
  /* lower's positional graph file likewise (it was NOT_FOUND, exit 1) */
  const char *args[] = {"lower", "", NULL};
  const char *want[] = {"GRAPH.json '': an empty path", NULL};
  expect_usage_error(args, want);
}

/* Output that cannot be written (a full disk: /dev/full) is an error, exit
 * 1 saying so, never exit 0 with the output lost. */
static void test_lost_output(void **state) {
  (void)state;
  if (access("/dev/full", W_OK) != 0) {
    fprintf(stderr, "no /dev/full: skipped\n");
    return;
  }
  /* train flushes its lines as it goes: the errno of that flush is named */
  const char *cases[][5] = {{"--help", NULL},
                            {"version", NULL},
                            {"train", "--help", NULL},
                            {"lower", graph_path, NULL},
                            {"train", "--steps", "2", "--epochs", "1"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *args[6] = {0};
    memcpy(args, cases[i], sizeof cases[i]);
    run r = run_argv_to(args, "/dev/full");
    bool ok = r.rc == 1 && strstr(r.err,
                                  "writing to stdout failed: No space left on "
                                  "device");
    if (!ok) show("expected exit 1 for output lost", cases[i], &r);
    assert_true(ok);
    run_free(&r);
  }
  /* a usage error keeps its status */
  const char *bad[] = {"train", "--frobnicate", NULL};
  run r = run_argv_to(bad, "/dev/full");
  assert_int_equal(r.rc, 2);
  run_free(&r);
}

/* A directory option naming a file fails before the command's work: lower
 * printed both graphs first; train loaded its data first. */
static void test_directory_option_is_a_file(void **state) {
  (void)state;
  const char *dot[] = {"lower", graph_path, "--dot", graph_path, NULL};
  run r = run_argv(dot);
  bool ok = r.rc == 1 && !r.out[0] && strstr(r.err, "is not a directory");
  if (!ok) show("expected --dot FILE to fail first", dot, &r);
  assert_true(ok);
  run_free(&r);
  const char *graphs[] = {"train",     "--graph-dir",
                          graph_path,  "--data=/nonexistent-ringflow-data",
                          "--steps=1", NULL};
  r = run_argv(graphs);
  ok = r.rc == 1 && strstr(r.err, "is not a directory");
  if (!ok) show("expected --graph-dir FILE to fail first", graphs, &r);
  assert_true(ok);
  run_free(&r);
}

/* --save naming a FIFO (or a device: /dev/null) is refused before training;
 * it was renamed over after training, so `--save /dev/null` as root
 * replaced /dev/null with a checkpoint. */
static void test_save_to_a_fifo(void **state) {
  (void)state;
  char fifo[128];
  snprintf(fifo, sizeof fifo, "%s/fifo", work);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  const char *args[] = {"train",   "--steps", "1",  "--devices", "1",
                        "--quiet", "--save",  fifo, NULL};
  run r = run_argv(args);
  bool ok = r.rc == 1 && strstr(r.err, "not a regular file") &&
            !strstr(r.out, "epoch");
  if (!ok) show("expected --save FIFO to be refused first", args, &r);
  assert_true(ok);
  run_free(&r);
  struct stat sb;
  assert_int_equal(lstat(fifo, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  unlink(fifo);
}

/* Devices listed out of index order: every collective of bench checks its
 * result against ranks in device order (collectives.h); it expected them in
 * the list's order, and all_gather and reduce_scatter failed with an
 * INTERNAL "gave 1 ... expected 0". */
static void test_bench_devices_out_of_order(void **state) {
  (void)state;
  static const char *const lists[] = {"cpu:1,0", "cpu:3-4,0", "cpu:2,0,3,1"};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    const char *args[] = {"bench",    "--devices",        lists[i],
                          "--csv",    "--no-mpi",         "--no-floor",
                          "--min=64", "--max=256",        "--factor=4",
                          "--quick",  "--min-time=0.001", NULL};
    run r = run_argv(args);
    bool ok = r.rc == 0 && strstr(r.out, "reduce_scatter,") &&
              strstr(r.out, "all_gather,");
    if (!ok) show("expected bench to run", args, &r);
    assert_true(ok);
    run_free(&r);
  }
}

/* `ringflow version` and `ringflow --help` take no argument (they ignored
 * any); `version --help` prints the help. */
static void test_command_arguments(void **state) {
  (void)state;
  const char *version[] = {"version", "extra", NULL};
  const char *version_want[] = {"version", "'extra'", "ringflow --help", NULL};
  expect_usage_error(version, version_want);
  const char *help[] = {"--help", "train", NULL};
  const char *help_want[] = {"--help", "'train'", NULL};
  expect_usage_error(help, help_want);
  const char *version_help[] = {"version", "--help", NULL};
  run r = run_argv(version_help);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "usage: ringflow COMMAND"));
  run_free(&r);
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_number_ranges),
      cmocka_unit_test(test_missing_values),
      cmocka_unit_test(test_repeated_option_takes_the_last),
      cmocka_unit_test(test_unknown_options),
      cmocka_unit_test(test_devices_accepted_alike),
      cmocka_unit_test(test_devices_rejected_alike),
      cmocka_unit_test(test_docs_quote_help),
      cmocka_unit_test(test_options_out_of_context),
      cmocka_unit_test(test_load_at_the_last_step),
      cmocka_unit_test(test_trace_path_checked_first),
      cmocka_unit_test(test_empty_paths),
      cmocka_unit_test(test_paths_too_long),
      cmocka_unit_test(test_lost_output),
      cmocka_unit_test(test_directory_option_is_a_file),
      cmocka_unit_test(test_command_arguments),
      cmocka_unit_test(test_save_to_a_fifo),
      cmocka_unit_test(test_bench_devices_out_of_order),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
