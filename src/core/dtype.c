/* core/dtype.c - dtype tables (one X-macro) and 16-bit float conversions. */
#include "ringflow/dtype.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtype_info[] = {
#define RF_X(e, name, size) {name, size},
    RF_DTYPE_LIST(RF_X)
#undef RF_X
};
_Static_assert(sizeof(dtype_info) / sizeof(dtype_info[0]) == RF_DTYPE_COUNT,
               "one entry per dtype");

static int valid(rf_dtype d) { return (int)d >= 0 && d < RF_DTYPE_COUNT; }

size_t rf_dtype_size(rf_dtype d) { return valid(d) ? dtype_info[d].size : 0; }

const char *rf_dtype_name(rf_dtype d) {
  return valid(d) ? dtype_info[d].name : "invalid";
}

rf_dtype rf_dtype_from_name(const char *name) {
  if (!name) return RF_DTYPE_INVALID;
  for (int i = 0; i < RF_DTYPE_COUNT; i++)
    if (strcmp(dtype_info[i].name, name) == 0) return (rf_dtype)i;
  return RF_DTYPE_INVALID;
}

bool rf_dtype_is_float(rf_dtype d) {
  return d == RF_FLOAT16 || d == RF_BFLOAT16 || d == RF_FLOAT32 ||
         d == RF_FLOAT64;
}

bool rf_dtype_is_integer(rf_dtype d) {
  return d == RF_INT8 || d == RF_UINT8 || d == RF_INT32 || d == RF_INT64;
}

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float rf_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13)); /* inf/nan */
  if (exp == 0) {                                /* zero or subnormal */
    float v = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
    return sign ? -v : v;
  }
  return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t rf_float_to_half(float f) {
  uint32_t u = f2u(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t au = u & 0x7fffffffu;
  if (au >= 0x7f800000u) /* inf or nan */
    return sign | 0x7c00 | (au > 0x7f800000u ? 0x200 : 0);
  if (au >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504: inf */
  if (au < 0x38800000u) {                      /* below 2^-14: subnormal */
    float v = u2f(au) * 16777216.0f;           /* scale by 2^24, round */
    uint32_t m = (uint32_t)v;
    float r = v - (float)m;
    if (r > 0.5f || (r == 0.5f && (m & 1))) m++;
    return sign | (uint16_t)m;
  }
  uint32_t man = au & 0x7fffff, exp = (au >> 23) - 112;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return sign | (uint16_t)h;
}

float rf_bfloat16_to_float(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t rf_float_to_bfloat16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
