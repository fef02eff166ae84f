/* kernels/cpu/half.h - float16/bfloat16 conversions inlined into the CPU
 * kernels' loops, so they vectorise (the public rf_half_to_float etc. are
 * out-of-line calls). Same results as those: exact widening; narrowing
 * rounds to nearest even, keeps the sign, overflows to inf, NaN stays NaN.
 * The float16 versions follow F. Giesen's branch-light conversions. */
#ifndef RF_KERNELS_CPU_HALF_H
#define RF_KERNELS_CPU_HALF_H

#include <stdint.h>
#include <string.h>

#include "ringflow/dtype.h"

static inline uint32_t rf__f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float rf__u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float rf__h2f(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t u = (uint32_t)(h & 0x7fff) << 13; /* exponent and mantissa */
  uint32_t exp = u & shifted_exp;
  u += (127 - 15) << 23; /* rebias */
  float f;
  if (exp == shifted_exp) { /* inf or NaN: exponent all ones */
    f = rf__u2f(u + ((128 - 16) << 23));
  } else if (exp == 0) { /* zero or subnormal: renormalise through a float */
    f = rf__u2f(u + (1u << 23)) - rf__u2f(113u << 23);
  } else {
    f = rf__u2f(u);
  }
  return rf__u2f(rf__f2u(f) | (uint32_t)(h & 0x8000) << 16);
}

static inline uint16_t rf__f2h(float x) {
  uint32_t u = rf__f2u(x), sign = u & 0x80000000u;
  u ^= sign;
  uint16_t h;
  if (u >= (127u + 16) << 23) { /* >= 65536, inf or NaN */
    h = u > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (u < 113u << 23) { /* below 2^-14: subnormal; the float add
                                   rounds to nearest even at 2^-24 */
    const float magic = rf__u2f(((127 - 15) + (23 - 10) + 1) << 23);
    h = (uint16_t)(rf__f2u(rf__u2f(u) + magic) - rf__f2u(magic));
  } else {
    uint32_t odd = (u >> 13) & 1;
    u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
    h = (uint16_t)(u >> 13); /* carries into the exponent, up to inf */
  }
  return (uint16_t)(h | sign >> 16);
}

static inline float rf__bf2f(uint16_t b) { return rf__u2f((uint32_t)b << 16); }

static inline uint16_t rf__f2bf(float x) {
  uint32_t u = rf__f2u(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Element i of a float tensor of dtype dt (float16, bfloat16, float32 or
 * float64) as a double, and back with one rounding: for kernels that compute
 * every float dtype in double one element at a time. */
static inline double rf__float_load(rf_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case RF_FLOAT16: return rf__h2f(((const uint16_t *)p)[i]);
    case RF_BFLOAT16: return rf__bf2f(((const uint16_t *)p)[i]);
    case RF_FLOAT32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
  }
}

static inline void rf__float_store(rf_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
    case RF_FLOAT16: ((uint16_t *)p)[i] = rf__f2h((float)v); break;
    case RF_BFLOAT16: ((uint16_t *)p)[i] = rf__f2bf((float)v); break;
    case RF_FLOAT32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
  }
}

#endif
