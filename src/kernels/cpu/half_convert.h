/* kernels/cpu/half_convert.h - inline float16 / bfloat16 -> float conversions
 * for kernel inner loops, where a call to rf_half_to_float per element costs
 * more than the arithmetic. They give exactly the bits rf_half_to_float and
 * rf_bfloat16_to_float give (NaN payloads included; tested over all 65536
 * inputs in tests/test_reduction_ops.c). */
#ifndef RF_KERNELS_CPU_HALF_CONVERT_H
#define RF_KERNELS_CPU_HALF_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline float rf__bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float rf__bfloat16_to_float_inline(uint16_t b) {
  return rf__bits_to_float((uint32_t)b << 16);
}

/* Moves exponent and mantissa into place and rebiases; subnormals are
 * renormalised by one float subtraction of 2^-14. Written with selects, not
 * branches, so loops over it vectorise. */
static inline float rf__half_to_float_inline(uint16_t h) {
  const uint32_t exp_mask = 0x7c00u << 13;
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
  uint32_t exp = o & exp_mask;
  o += (uint32_t)(127 - 15) << 23;
  o += exp == exp_mask ? (uint32_t)(128 - 16) << 23 : 0; /* inf / nan */
  float sub = rf__bits_to_float(o + (1u << 23)) - 6.103515625e-05f;
  uint32_t subu;
  memcpy(&subu, &sub, sizeof subu);
  o = exp == 0 ? subu : o; /* zero / subnormal */
  return rf__bits_to_float(o | ((uint32_t)h & 0x8000u) << 16);
}

#endif
