/* core/format.c - see format.h. Walks the format once: literal text is copied,
 * each conversion is printed alone by snprintf (with '*' widths made explicit),
 * and %s goes through quote(), which caps it. The compiler checks callers'
 * formats (format attributes), so arguments match their conversions. */
#include "core/format.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <wchar.h>

#include "core/mem.h"
#include "ringflow/status.h"

typedef struct text {
  char *p;
  size_t len, cap;
  bool oom;
} text;

static bool reserve(text *t, size_t more) {
  if (t->oom) return false;
  if (t->len + more + 1 <= t->cap) return true;
  size_t cap = t->cap ? t->cap : 128;
  while (cap < t->len + more + 1) cap *= 2;
  char *p = rf__realloc(t->p, cap);
  if (!p) {
    t->oom = true;
    return false;
  }
  t->p = p;
  t->cap = cap;
  return true;
}

static void put(text *t, const char *s, size_t n) {
  if (!reserve(t, n)) return;
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
}

static void pad(text *t, size_t n) {
  while (n-- > 0) put(t, " ", 1);
}

/* Appends the next argument, of `type`, printed by spec (a complete printf
 * spec for one value). */
#define PUT_ONE(t, spec, type, ap)                             \
  do {                                                         \
    type v_ = va_arg(*(ap), type);                             \
    int n_ = snprintf(NULL, 0, (spec), v_);                    \
    if (n_ > 0 && reserve((t), (size_t)n_)) {                  \
      snprintf((t)->p + (t)->len, (size_t)n_ + 1, (spec), v_); \
      (t)->len += (size_t)n_;                                  \
    }                                                          \
  } while (0)

/* %s: at most prec bytes (prec < 0: all), capped, padded to width. */
static void quote(text *t, const char *s, int prec, int width, bool left) {
  if (!s) s = "(null)";
  size_t n = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s), keep = n;
  char tail[48] = "";
  if (n > RF_STATUS_QUOTE_MAX) {
    keep = RF_STATUS_QUOTE_MAX;
    while (keep > 0 && ((unsigned char)s[keep] & 0xc0) == 0x80) keep--;
    snprintf(tail, sizeof tail, "... (%zu bytes)", n);
  }
  size_t shown = keep + strlen(tail);
  size_t fill = width > 0 && (size_t)width > shown ? (size_t)width - shown : 0;
  if (!left) pad(t, fill);
  put(t, s, keep);
  put(t, tail, strlen(tail));
  if (left) pad(t, fill);
}

/* A parsed conversion: spec holds it with '*' replaced by numbers. */
typedef struct conv {
  char spec[48];
  char length[3];  /* "", "hh", "h", "l", "ll", "j", "z", "t", "L" */
  char type;       /* the conversion character */
  int width, prec; /* -1: none */
  bool left;
} conv;

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* v * 10 + d, saturating well below INT_MAX (a width no message needs). */
static int digit(int v, char d) { return v >= 100000 ? v : v * 10 + (d - '0'); }

/* Parses the conversion after '%' at *pp, consuming '*' arguments from ap;
 * false for a malformed one. */
static bool parse(const char **pp, va_list *ap, conv *c) {
  const char *p = *pp;
  char flags[8] = "";
  size_t nf = 0;
  memset(c, 0, sizeof *c);
  c->width = c->prec = -1;
  while (*p && strchr("-+ #0", *p) && nf + 1 < sizeof flags) {
    c->left |= *p == '-';
    flags[nf++] = *p++;
  }
  if (*p == '*') {
    c->width = va_arg(*ap, int);
    if (c->width < 0) {
      c->left = true;
      c->width = c->width == INT_MIN ? 0 : -c->width;
    }
    p++;
  } else {
    for (; is_digit(*p); p++) c->width = digit(c->width < 0 ? 0 : c->width, *p);
  }
  if (*p == '.') {
    p++;
    if (*p == '*') {
      c->prec = va_arg(*ap, int); /* negative: as if omitted */
      p++;
    } else {
      for (c->prec = 0; is_digit(*p); p++) c->prec = digit(c->prec, *p);
    }
  }
  size_t nl = 0;
  while (*p && strchr("hljztL", *p) && nl < 2) c->length[nl++] = *p++;
  if (!*p) return false;
  c->type = *p++;
  *pp = p;
  int used = snprintf(c->spec, sizeof c->spec, "%%%s%s", flags,
                      c->left && !strchr(flags, '-') ? "-" : "");
  if (c->width >= 0)
    used +=
        snprintf(c->spec + used, sizeof c->spec - (size_t)used, "%d", c->width);
  if (c->prec >= 0)
    used +=
        snprintf(c->spec + used, sizeof c->spec - (size_t)used, ".%d", c->prec);
  snprintf(c->spec + used, sizeof c->spec - (size_t)used, "%s%c", c->length,
           c->type);
  return true;
}

static bool len_is(const conv *c, const char *l) {
  return strcmp(c->length, l) == 0;
}

static void put_signed(text *t, const conv *c, va_list *ap) {
  if (len_is(c, "l"))
    PUT_ONE(t, c->spec, long, ap);
  else if (len_is(c, "ll"))
    PUT_ONE(t, c->spec, long long, ap);
  else if (len_is(c, "j"))
    PUT_ONE(t, c->spec, intmax_t, ap);
  else if (len_is(c, "z"))
    PUT_ONE(t, c->spec, ssize_t, ap);
  else if (len_is(c, "t"))
    PUT_ONE(t, c->spec, ptrdiff_t, ap);
  else
    PUT_ONE(t, c->spec, int, ap); /* "", "h", "hh": promoted */
}

static void put_unsigned(text *t, const conv *c, va_list *ap) {
  if (len_is(c, "l"))
    PUT_ONE(t, c->spec, unsigned long, ap);
  else if (len_is(c, "ll"))
    PUT_ONE(t, c->spec, unsigned long long, ap);
  else if (len_is(c, "j"))
    PUT_ONE(t, c->spec, uintmax_t, ap);
  else if (len_is(c, "z"))
    PUT_ONE(t, c->spec, size_t, ap);
  else if (len_is(c, "t"))
    PUT_ONE(t, c->spec, ptrdiff_t, ap);
  else
    PUT_ONE(t, c->spec, unsigned int, ap);
}

/* %ls: the wide string in the locale's multibyte encoding (snprintf's),
 * then capped as %s is; one the locale cannot encode is named so. */
static bool put_wide(text *t, const conv *c, va_list *ap) {
  const wchar_t *ws = va_arg(*ap, const wchar_t *);
  if (!ws) {
    quote(t, NULL, c->prec, c->width, c->left);
    return true;
  }
  char spec[24];
  if (c->prec >= 0)
    snprintf(spec, sizeof spec, "%%.%dls", c->prec);
  else
    snprintf(spec, sizeof spec, "%%ls");
  int n = snprintf(NULL, 0, spec, ws);
  if (n < 0) {
    quote(t, "(a wide string this locale cannot encode)", -1, c->width,
          c->left);
    return true;
  }
  char *mb = rf__malloc((size_t)n + 1);
  if (!mb) {
    t->oom = true;
    return true;
  }
  snprintf(mb, (size_t)n + 1, spec, ws);
  quote(t, mb, -1, c->width, c->left);
  rf__free(mb);
  return true;
}

/* One conversion; false when the format cannot be followed further. */
static bool put_conv(text *t, const conv *c, va_list *ap) {
  switch (c->type) {
    case '%': put(t, "%", 1); return true;
    case 'd':
    case 'i': put_signed(t, c, ap); return true;
    case 'u':
    case 'o':
    case 'x':
    case 'X': put_unsigned(t, c, ap); return true;
    case 'c':
      if (len_is(c, "l")) {
        PUT_ONE(t, c->spec, wint_t, ap); /* nothing when not representable */
        return true;
      }
      PUT_ONE(t, c->spec, int, ap);
      return true;
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
    case 'a':
    case 'A':
      if (len_is(c, "L"))
        PUT_ONE(t, c->spec, long double, ap);
      else
        PUT_ONE(t, c->spec, double, ap);
      return true;
    case 'p': PUT_ONE(t, c->spec, void *, ap); return true;
    case 's':
      if (len_is(c, "l")) return put_wide(t, c, ap);
      if (c->length[0]) return false;
      quote(t, va_arg(*ap, const char *), c->prec, c->width, c->left);
      return true;
    case 'n': (void)va_arg(*ap, void *); return true;
    default: return false;
  }
}

char *rf__vformat(const char *fmt, va_list ap_in) {
  text t = {0};
  va_list ap;
  va_copy(ap, ap_in);
  if (reserve(&t, 0)) t.p[0] = '\0'; /* an empty format puts nothing */
  for (const char *p = fmt ? fmt : ""; *p && !t.oom;) {
    const char *pct = strchr(p, '%');
    if (!pct) {
      put(&t, p, strlen(p));
      break;
    }
    put(&t, p, (size_t)(pct - p));
    const char *q = pct + 1;
    conv c;
    if (!parse(&q, &ap, &c) || !put_conv(&t, &c, &ap)) {
      put(&t, pct, strlen(pct)); /* the rest, as written */
      break;
    }
    p = q;
  }
  va_end(ap);
  if (t.oom) {
    rf__free(t.p);
    return NULL;
  }
  return t.p;
}

char *rf__format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rf__vformat(fmt, ap);
  va_end(ap);
  return s;
}
