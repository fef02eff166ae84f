/* ops/conv_geometry.c - see conv_geometry.h. Pure functions over attrs and
 * sizes; nothing here allocates except the error statuses. */
#include "ops/conv_geometry.h"

#include <string.h>

#include "core/status.h"

/* A 4-int attr (batch, h, w, c) with entries >= 1 and 1 at batch and c. */
static rf_status *read4(const rf__attrs *a, const char *name, int64_t *h,
                        int64_t *w) {
  const int64_t *v;
  int n;
  RF_CHECK(rf__attrs_get_int_list(a, name, &v, &n));
  if (n != 4)
    return rf__invalid("attr '%s' must have 4 entries (NHWC), got %d", name, n);
  for (int i = 0; i < 4; i++)
    if (v[i] < 1)
      return rf__invalid("attr '%s' must be >= 1 everywhere, got %lld at %d",
                         name, (long long)v[i], i);
  if (v[0] != 1 || v[3] != 1)
    return rf__invalid(
        "attr '%s' must be 1 over the batch and channel axes, got [%lld, "
        "%lld, %lld, %lld]",
        name, (long long)v[0], (long long)v[1], (long long)v[2],
        (long long)v[3]);
  *h = v[1];
  *w = v[2];
  return NULL;
}

rf_status *rf__window_attrs_read(const rf__attrs *a, bool pool,
                                 rf__window_attrs *out) {
  rf__window_attrs r = {1, 1, 1, 1, 1, 1, false, false};
  RF_CHECK(read4(a, "strides", &r.sh, &r.sw));
  if (pool)
    RF_CHECK(read4(a, "ksize", &r.kh, &r.kw));
  else if (rf__attrs_find(a, "dilations"))
    RF_CHECK(read4(a, "dilations", &r.dh, &r.dw));
  const char *pad, *fmt = "NHWC";
  RF_CHECK(rf__attrs_get_string(a, "padding", &pad));
  if (strcmp(pad, "SAME") != 0 && strcmp(pad, "VALID") != 0)
    return rf__invalid("attr 'padding' must be SAME or VALID, got '%s'", pad);
  r.same = pad[0] == 'S';
  if (rf__attrs_find(a, "data_format"))
    RF_CHECK(rf__attrs_get_string(a, "data_format", &fmt));
  if (strcmp(fmt, "NHWC") != 0)
    return rf__invalid("attr 'data_format' must be NHWC, got '%s'", fmt);
  if (!pool && rf__attrs_find(a, "filter_format")) {
    RF_CHECK(rf__attrs_get_string(a, "filter_format", &fmt));
    if (strcmp(fmt, "HWIO") != 0 && strcmp(fmt, "OHWI") != 0)
      return rf__invalid("attr 'filter_format' must be HWIO or OHWI, got '%s'",
                         fmt);
    r.ohwi = fmt[0] == 'O';
  }
  *out = r;
  return NULL;
}

rf__filter_axes rf__filter_axes_of(bool ohwi) {
  return ohwi ? (rf__filter_axes){1, 2, 3, 0} : (rf__filter_axes){0, 1, 2, 3};
}

void rf__filter_dims(const rf__conv_geom *g, int64_t out[4]) {
  rf__filter_axes ax = rf__filter_axes_of(g->ohwi != 0);
  out[ax.kh] = g->kh;
  out[ax.kw] = g->kw;
  out[ax.c] = g->c;
  out[ax.oc] = g->oc;
}

rf_status *rf__window_dim(int64_t in, int64_t k, int64_t s, int64_t d,
                          bool same, int64_t *out, int64_t *pad_before) {
  int64_t eff;
  if (__builtin_mul_overflow(k - 1, d, &eff) || eff == INT64_MAX)
    return rf__invalid("dilated window (%lld - 1) * %lld + 1 overflows",
                       (long long)k, (long long)d);
  eff += 1;
  *pad_before = 0;
  if (in < 0) {
    *out = -1;
    return NULL;
  }
  if (same) {
    if (eff > INT64_MAX - in)
      return rf__invalid("dilated window %lld over input %lld overflows",
                         (long long)eff, (long long)in);
    int64_t o = in / s + (in % s != 0);
    /* (o - 1) s < in, so this cannot overflow after the check above */
    int64_t need = o > 0 ? (o - 1) * s + eff - in : 0;
    *out = o;
    *pad_before = need > 0 ? need / 2 : 0;
    return NULL;
  }
  if (in == 0) {
    *out = 0;
    return NULL;
  }
  if (eff > in)
    return rf__invalid(
        "the window (%lld%s) is larger than the input (%lld) with VALID "
        "padding",
        (long long)eff, d > 1 ? " with dilation" : "", (long long)in);
  *out = (in - eff) / s + 1;
  return NULL;
}

rf_status *rf__conv_geom_make(const rf__window_attrs *wa, const int64_t in[4],
                              int64_t oc, rf__conv_geom *g) {
  rf__conv_geom r = {.n = in[0],
                     .h = in[1],
                     .w = in[2],
                     .c = in[3],
                     .kh = wa->kh,
                     .kw = wa->kw,
                     .oc = oc,
                     .sh = wa->sh,
                     .sw = wa->sw,
                     .dh = wa->dh,
                     .dw = wa->dw,
                     .ohwi = wa->ohwi};
  RF_CHECK(rf__window_dim(r.h, r.kh, r.sh, r.dh, wa->same, &r.oh, &r.pt));
  RF_CHECK(rf__window_dim(r.w, r.kw, r.sw, r.dw, wa->same, &r.ow, &r.pl));
  int64_t t;
  if (__builtin_mul_overflow(r.n, r.oh, &t) ||
      __builtin_mul_overflow(t, r.ow, &t) || __builtin_mul_overflow(t, oc, &t))
    return rf__invalid(
        "the output (%lld, %lld, %lld, %lld) has more than 2^63 - 1 elements",
        (long long)r.n, (long long)r.oh, (long long)r.ow, (long long)oc);
  *g = r;
  return NULL;
}
