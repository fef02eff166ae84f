/* kernels/gelu_math.h - GELU, its first and its second derivative, exact
 * (erf) and tanh-approximated, in double: the one definition the CPU and
 * GPU kernels (kernels/cpu/gelu.c, kernels/cuda/gelu.cu) share, so both
 * devices compute the same formulas (each rounds once to the dtype). */
#ifndef RF_KERNELS_GELU_MATH_H
#define RF_KERNELS_GELU_MATH_H

#include <math.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define RF_GELU_FN static inline __host__ __device__
#else
#define RF_GELU_FN static inline
#endif

#define RF_GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define RF_GELU_A 0.044715
#define RF_GELU_PHI 0.3989422804014327 /* 1 / sqrt(2 pi) */

/* which: 0 gelu(x), 1 gelu'(x), 2 gelu''(x). */
RF_GELU_FN double rf__gelu(double x, bool approx, int which) {
  /* Far out the density (pdf; s = 1 - tanh^2) is 0 and the terms it
   * multiplies vanish: they are skipped, as computing them would give NaN
   * (0 * inf) where x * x or du * du overflow (|x| past ~1e154; ~1e103 for
   * the tanh form's second derivative). Same values everywhere else. */
  if (!approx) {
    double cdf = 0.5 * (1.0 + erf(x * 0.7071067811865476));
    double pdf = RF_GELU_PHI * exp(-0.5 * x * x);
    if (which == 0) return x * cdf;
    if (pdf == 0) return which == 1 ? cdf : -0.0;
    return which == 1 ? cdf + x * pdf : pdf * (2.0 - x * x);
  }
  double u = RF_GELU_C * (x + RF_GELU_A * x * x * x);
  double du = RF_GELU_C * (1.0 + 3.0 * RF_GELU_A * x * x);
  double t = tanh(u), s = 1.0 - t * t;
  if (which == 0) return 0.5 * x * (1.0 + t);
  if (s == 0) return which == 1 ? 0.5 * (1.0 + t) : 0.0;
  if (which == 1) return 0.5 * (1.0 + t) + 0.5 * x * s * du;
  double ddu = 6.0 * RF_GELU_A * RF_GELU_C * x;
  return s * du + 0.5 * x * s * (ddu - 2.0 * t * du * du);
}

#endif
