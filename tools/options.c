/* tools/options.c - the option parser of options.h: one loop over argv, one
 * reader per kind of value, and the help lines made from the same table. A
 * reader never prints: it returns the reason a value is refused, and
 * tool_parse reports it with the option, the value and the range. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "tools.h"

#define HELP_WIDTH 79
#define HELP_INDENT 21 /* where an option's description starts */

/* ---- readers: NULL when the value is read, else why not ---- */

/* An optional '-' and decimal digits, nothing else; *neg says which sign. */
static const char *read_magnitude(const char *s, uint64_t *mag, bool *neg) {
  *neg = *s == '-';
  if (*neg) s++;
  if (!isdigit((unsigned char)*s)) return *s ? "not a whole number" : "empty";
  uint64_t v = 0;
  bool over = false;
  for (; isdigit((unsigned char)*s); s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) over = true;
    v = v * 10 + d;
  }
  if (*s) return "not a whole number";
  *mag = v;
  return over ? "out of range" : NULL;
}

static const char *read_int(const tool_opt *o, const char *s, int *out) {
  uint64_t mag;
  bool neg;
  const char *why = read_magnitude(s, &mag, &neg);
  if (why) return why;
  /* the ranges are ints: anything past 2^53 is out of them anyway */
  double v = neg ? -(double)mag : (double)mag;
  if (v < o->min || v > o->max) return "out of range";
  *out = (int)v;
  return NULL;
}

static const char *read_uint64(const char *s, uint64_t *out) {
  uint64_t mag;
  bool neg;
  const char *why = read_magnitude(s, &mag, &neg);
  if (why) return why;
  if (neg && mag) return "out of range";
  *out = mag;
  return NULL;
}

static const char *read_real(const tool_opt *o, const char *s, double *out) {
  if (!*s) return "empty";
  if (isspace((unsigned char)*s)) return "not a number";
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end) return "not a number";
  if (!isfinite(v)) return "not finite";
  /* ERANGE also marks a result below DBL_MIN (a subnormal, or 0 for
   * 1e-400): strtod's value, as the rule says; only inf is out of range
   * (refused above). */
  bool low = o->min_included ? !(v >= o->min) : !(v > o->min);
  if (low || v > o->max) return "out of range";
  *out = v;
  return NULL;
}

/* Digits, an optional fraction, an optional K/M/G and an optional B. The
 * range is checked on the value as a double; whether it is a whole number
 * of bytes, and the bytes, exactly: I.F x 2^(10u) with F's f digits (its
 * trailing zeros dropped) is whole when 5^f divides F and f <= 10u (then
 * F ends in 5: odd, so the 2^f must come from the unit). */
static const char *read_size(const tool_opt *o, const char *s, int64_t *out) {
  if (!*s) return "empty";
  const char *p = s, *frac = NULL;
  size_t nfrac = 0;
  p += strspn(p, "0123456789");
  if (p == s) return "not a size";
  const char *int_end = p;
  if (*p == '.') {
    frac = ++p;
    p += strspn(p, "0123456789");
    if (p == frac) return "not a size";
    nfrac = (size_t)(p - frac);
  }
  int shift = 0;
  const char *units = "KMG",
             *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
  if (u) shift = 10 * (int)(u - units + 1), p++;
  if (*p == 'B' || *p == 'b') p++;
  if (*p) return "not a size";
  double approx = ldexp(strtod(s, NULL), shift);
  if (!(approx >= o->min && approx <= o->max)) return "out of range";
  while (nfrac > 0 && frac[nfrac - 1] == '0') nfrac--;
  if (nfrac > (size_t)shift) return "not a whole number of bytes";
  unsigned __int128 whole = 0, f = 0, five = 1;
  for (const char *d = s; d < int_end; d++) /* < 2^40: approx is in range */
    whole = whole * 10 + (unsigned)(*d - '0');
  for (size_t i = 0; i < nfrac; i++) {
    f = f * 10 + (unsigned)(frac[i] - '0'); /* at most 30 digits */
    five *= 5;
  }
  if (f % five != 0) return "not a whole number of bytes";
  unsigned __int128 bytes =
      (whole << shift) + ((f / five) << (shift - (int)nfrac));
  if (bytes < (unsigned __int128)o->min || bytes > (unsigned __int128)o->max)
    return "out of range";
  *out = (int64_t)bytes;
  return NULL;
}

static const char *read_choice(const tool_opt *o, const char *s, int *out) {
  for (int i = 0; o->choices[i]; i++)
    if (strcmp(s, o->choices[i]) == 0) return *out = i, NULL;
  return "not one of the choices";
}

/* Reads s into o's out. */
static const char *read_value(const tool_opt *o, const char *s, char *why,
                              size_t why_len) {
  switch (o->kind) {
    case TOOL_OPT_INT: return read_int(o, s, o->out);
    case TOOL_OPT_UINT64: return read_uint64(s, o->out);
    case TOOL_OPT_REAL: return read_real(o, s, o->out);
    case TOOL_OPT_SIZE: return read_size(o, s, o->out);
    case TOOL_OPT_CHOICE: return read_choice(o, s, o->out);
    case TOOL_OPT_DEVICES:
      return tool_devices_parse(s, o->out, why, why_len) ? why : NULL;
    case TOOL_OPT_STRING: /* a path: "" names no file */
      if (!*s) return "an empty path";
      *(const char **)o->out = s;
      return NULL;
    case TOOL_OPT_FLAG: break;
  }
  return "takes no value";
}

/* ---- ranges and help ---- */

void tool_format_size(int64_t bytes, char *buf, size_t len) {
  static const char units[] = "KMG";
  int k = 0;
  while (k < 3 && bytes && bytes % ((int64_t)1 << (10 * (k + 1))) == 0) k++;
  if (k)
    snprintf(buf, len, "%" PRId64 "%c", bytes >> (10 * k), units[k - 1]);
  else
    snprintf(buf, len, "%" PRId64, bytes);
}

void tool_opt_allowed(const tool_opt *o, char *buf, size_t len) {
  char a[32], b[32];
  buf[0] = 0;
  switch (o->kind) {
    case TOOL_OPT_INT: snprintf(buf, len, "%.0f..%.0f", o->min, o->max); break;
    case TOOL_OPT_UINT64: snprintf(buf, len, "0..%" PRIu64, UINT64_MAX); break;
    case TOOL_OPT_REAL:
      if (isinf(o->max))
        snprintf(buf, len, "a finite number %s %g",
                 o->min_included ? ">=" : ">", o->min);
      else
        snprintf(buf, len, "a number %s %g and <= %g",
                 o->min_included ? ">=" : ">", o->min, o->max);
      break;
    case TOOL_OPT_SIZE:
      tool_format_size((int64_t)o->min, a, sizeof a);
      tool_format_size((int64_t)o->max, b, sizeof b);
      snprintf(buf, len, "%s..%s", a, b);
      break;
    case TOOL_OPT_CHOICE:
      for (int i = 0; o->choices[i]; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s",
                 i == 0              ? ""
                 : o->choices[i + 1] ? ", "
                                     : " or ",
                 o->choices[i]);
      }
      break;
    case TOOL_OPT_DEVICES:
      snprintf(buf, len, "%s", TOOL_DEVICES_ALLOWED);
      break;
    case TOOL_OPT_STRING:
    case TOOL_OPT_FLAG: break;
  }
}

/* Prints text from column `col` on, wrapped at spaces to HELP_WIDTH, each
 * further line indented to HELP_INDENT; ends the line. */
static void print_wrapped(const char *text, int col) {
  const char *p = text;
  while (*p) {
    int room = HELP_WIDTH - col;
    size_t len = strlen(p);
    if ((int)len > room) { /* break at the last space that fits */
      int cut = room;
      while (cut > 0 && p[cut] != ' ') cut--;
      if (cut == 0) cut = (int)strcspn(p, " "); /* a word longer than a line */
      len = (size_t)cut;
    }
    printf("%.*s\n", (int)len, p);
    p += len;
    while (*p == ' ') p++;
    if (*p) printf("%*s", HELP_INDENT, "");
    col = HELP_INDENT;
  }
}

void tool_print_help(const tool_cmd *cmd) {
  fputs(cmd->synopsis, stdout);
  for (int i = 0; i < cmd->nopts; i++) {
    const tool_opt *o = &cmd->opts[i];
    char head[64], allowed[160], text[1024];
    snprintf(head, sizeof head, "  --%s%s%s", o->name, o->arg ? " " : "",
             o->arg ? o->arg : "");
    tool_opt_allowed(o, allowed, sizeof allowed);
    if (allowed[0])
      snprintf(text, sizeof text, "%s; %s: %s", o->help, o->arg, allowed);
    else
      snprintf(text, sizeof text, "%s", o->help);
    int col = (int)strlen(head);
    if (col < HELP_INDENT - 1) {
      printf("%-*s", HELP_INDENT, head);
      col = HELP_INDENT;
    } else {
      printf("%s\n%*s", head, HELP_INDENT, "");
      col = HELP_INDENT;
    }
    print_wrapped(text, col);
  }
  printf("  --help             this help\n");
  if (cmd->footer) fputs(cmd->footer, stdout);
  printf(
      "exit status: 0 done, 1 an error while running, 2 a usage error (one "
      "line on\nstderr naming the option or argument)\n");
}

/* ---- the parser ---- */

int tool_usage_error(const tool_cmd *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tool_fail("%s: %s; see ringflow %s --help", cmd->name, msg, cmd->name);
}

/* s quoted for a message, cut at 200 bytes. */
static const char *quoted(const char *s, char *buf, size_t len) {
  size_t n = strlen(s);
  if (n <= 200)
    snprintf(buf, len, "'%s'", s);
  else
    snprintf(buf, len, "'%.200s...' (%zu bytes)", s, n);
  return buf;
}

static int bad_value(const tool_cmd *cmd, const tool_opt *o, const char *value,
                     const char *why) {
  char allowed[160], q[256];
  tool_opt_allowed(o, allowed, sizeof allowed);
  if (!allowed[0]) /* a path: no range to state */
    return tool_usage_error(cmd, "--%s %s: %s", o->name,
                            quoted(value, q, sizeof q), why);
  return tool_fail("%s: --%s %s: %s; allowed: %s", cmd->name, o->name,
                   quoted(value, q, sizeof q), why, allowed);
}

static const tool_opt *find(const tool_cmd *cmd, const char *name, size_t len) {
  for (int i = 0; i < cmd->nopts; i++)
    if (strlen(cmd->opts[i].name) == len &&
        strncmp(cmd->opts[i].name, name, len) == 0)
      return &cmd->opts[i];
  return NULL;
}

/* One option at argv[*i] (advanced past its value). */
static int parse_one(const tool_cmd *cmd, int argc, char **argv, int *i,
                     int max_pos) {
  const char *arg = argv[*i], *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  char q[256];
  if (arg[1] != '-') /* options are --name; say how to pass such a path */
    return tool_usage_error(cmd, "unknown option %s%s",
                            quoted(arg, q, sizeof q),
                            max_pos ? " (a file whose name starts with '-' "
                                      "goes after --)"
                                    : "");
  if (len == 4 && strncmp(name, "help", 4) == 0) {
    if (eq) return tool_usage_error(cmd, "--help takes no value");
    tool_print_help(cmd);
    return TOOL_HELP_SHOWN;
  }
  const tool_opt *o = find(cmd, name, len);
  if (!o) {
    char opt[256];
    snprintf(opt, sizeof opt, "--%.*s", (int)(len < 200 ? len : 200), name);
    return tool_usage_error(cmd, "unknown option '%s'", opt);
  }
  if (o->given) *o->given = true;
  if (o->kind == TOOL_OPT_FLAG) {
    if (eq)
      return tool_usage_error(cmd, "--%s takes no value (got %s)", o->name,
                              quoted(arg, q, sizeof q));
    *(bool *)o->out = true;
    return 0;
  }
  const char *value = eq ? eq + 1 : NULL;
  /* "--lr --epochs 3": the next option is not --lr's value */
  if (!value && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0)
    value = argv[++*i];
  if (!value) {
    char allowed[160];
    tool_opt_allowed(o, allowed, sizeof allowed);
    if (allowed[0])
      return tool_fail("%s: --%s needs a value; allowed: %s", cmd->name,
                       o->name, allowed);
    return tool_usage_error(cmd, "--%s needs a value (%s)", o->name, o->arg);
  }
  char why[160];
  const char *bad = read_value(o, value, why, sizeof why);
  return bad ? bad_value(cmd, o, value, bad) : 0;
}

int tool_parse(const tool_cmd *cmd, int argc, char **argv, char **pos,
               int max_pos, int *npos) {
  bool options_end = false;
  char q[256];
  *npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!options_end && strcmp(arg, "--") == 0) {
      options_end = true;
    } else if (!options_end && arg[0] == '-' && arg[1]) {
      int rc = parse_one(cmd, argc, argv, &i, max_pos);
      if (rc) return rc;
    } else if (*npos < max_pos) {
      pos[(*npos)++] = argv[i];
    } else {
      return tool_usage_error(cmd, "unexpected argument %s",
                              quoted(arg, q, sizeof q));
    }
  }
  return 0;
}
