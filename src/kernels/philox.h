/* kernels/philox.h - Philox4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; the generator of TensorFlow's stateless ops
 * and cuRAND), one definition for the CPU and GPU kernels: a pure function
 * of (key, counter), so any element's random number is computed where it is
 * needed, in any order, on any device, with the same result. */
#ifndef RF_KERNELS_PHILOX_H
#define RF_KERNELS_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define RF_PHILOX_FN static inline __host__ __device__
#else
#define RF_PHILOX_FN static inline
#endif

/* ctr[0..3] is replaced by the 4 random words for (key, ctr). */
RF_PHILOX_FN void rf__philox4x32(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0];
    uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr[2];
    uint32_t h0 = (uint32_t)(p0 >> 32), l0 = (uint32_t)p0;
    uint32_t h1 = (uint32_t)(p1 >> 32), l1 = (uint32_t)p1;
    uint32_t c0 = h1 ^ ctr[1] ^ k0, c2 = h0 ^ ctr[3] ^ k1;
    ctr[0] = c0, ctr[1] = l1, ctr[2] = c2, ctr[3] = l0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
}

/* Dropout's keep decision for element i: the Philox key is the seed (low,
 * high 32 bits), the counter (i / 4 low, i / 4 high, step low 32 bits,
 * step bits 32..55 | device << 24); word i % 4 of the result, its top 24
 * bits as u in [0, 1): kept when u >= rate. */
RF_PHILOX_FN int rf__dropout_keep(uint64_t seed, int64_t step, int device,
                                  int64_t i, double rate) {
  uint64_t group = (uint64_t)i >> 2, st = (uint64_t)step;
  uint32_t ctr[4] = {
      (uint32_t)group, (uint32_t)(group >> 32), (uint32_t)st,
      (uint32_t)((st >> 32) & 0xFFFFFFu) | ((uint32_t)device << 24)};
  rf__philox4x32(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
  double u = (double)(ctr[i & 3] >> 8) * (1.0 / 16777216.0);
  return u >= rate;
}

#endif
