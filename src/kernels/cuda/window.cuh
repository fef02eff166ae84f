/* kernels/cuda/window.cuh - index arithmetic the convolution and pooling
 * kernels (conv.cu, pool.cu) share: a flat index split into its 4-d
 * coordinates, and a window clipped to the input. Templated on the index
 * type I (int32_t where every offset fits: a 64-bit division costs tens of
 * instructions) and on the geometry type (rf__conv_geom, or pool.cu's
 * narrower copy with the same field names). */
#ifndef RF_KERNELS_CUDA_WINDOW_CUH
#define RF_KERNELS_CUDA_WINDOW_CUH

namespace rf_gpu {

/* e = ((a * d1 + b) * d2 + c) * d3 + k of a row-major (d0, d1, d2, d3)
 * array -> (a, b, c, k). */
template <typename I>
__device__ __forceinline__ void split4(I e, I d1, I d2, I d3, I *a, I *b, I *c,
                                       I *k) {
  *k = e % d3;
  I r = e / d3;
  *c = r % d2;
  r /= d2;
  *b = r % d1;
  *a = r / d1;
}

/* Output (oh, ow)'s pooling window [h0, h1) x [w0, w1), clipped to the
 * input (empty when it lies wholly in the padding). */
template <typename Geo, typename I>
__device__ __forceinline__ void window(const Geo &g, I oh, I ow, I *h0, I *h1,
                                       I *w0, I *w1) {
  I hs = oh * (I)g.sh - (I)g.pt, ws = ow * (I)g.sw - (I)g.pl;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + (I)g.kh < (I)g.h ? hs + (I)g.kh : (I)g.h;
  *w1 = ws + (I)g.kw < (I)g.w ? ws + (I)g.kw : (I)g.w;
}

}  // namespace rf_gpu

#endif
