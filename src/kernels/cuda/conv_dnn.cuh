/* kernels/cuda/conv_dnn.cuh - Conv2D and its two gradients through cuDNN 9
 * (conv_dnn.cu), for kernels/cuda/conv.cu. Builds with cuDNN only
 * (RF_HAVE_CUDNN). */
#ifndef RF_KERNELS_CUDA_CONV_DNN_CUH
#define RF_KERNELS_CUDA_CONV_DNN_CUH

#include "kernels/cuda/gpu_common.cuh"

extern "C" {
#include "ops/conv_geometry.h"
}

namespace rf_gpu {

enum class ConvKind { kForward, kBackwardData, kBackwardFilter };

/* Whether cuDNN can compute g in dtype: float32, float16 or bfloat16, with
 * TensorFlow's padding symmetric (SAME with an even total, or VALID) on both
 * axes; cuDNN takes one padding per axis, for both sides. */
bool dnn_conv_fits(const rf__conv_geom &g, rf_dtype dtype);

/* One convolution of geometry g on the device's stream (filter HWIO or,
 * with g.ohwi, OHWI, as the ops define them; an HWIO filter costs a
 * transpose kernel per call):
 *   kForward:        a = x, b = filter, out = y
 *   kBackwardData:   a = filter, b = dy, out = dx
 *   kBackwardFilter: a = x, b = dy, out = dfilter
 * float16 and bfloat16 accumulate in float32; float32 uses TF32 tensor
 * cores only where the session allows it (rf_session_options.allow_tf32),
 * as MatMul. The algorithm of each (GPU, kind, dtype, TF32 or not,
 * geometry) is chosen once by
 * cudnnFind*Ex (after a warm-up search) and cached while any GPU runtime
 * lives: the fastest deterministic algorithm unless
 * one that is not (atomics: the last bits may differ from run to run) is
 * more than 1.1x faster. So is a float32 convolution's layout
 * (RF_CUDNN_LAYOUT, default auto): cuDNN on the NHWC tensors themselves,
 * or on NCHW copies (transposed in and out around the call, filter KCRS)
 * when its NCHW algorithm plus those transposes, timed, is faster; float16
 * and bfloat16 always run NHWC.
 *
 * bias (kForward only; fused non-null): out = relu(conv + bias), bias of
 * g.oc elements, in one cudnnConvolutionBiasActivationForward with the
 * algorithm the forward search chose (_FusedConv2DBiasRelu). *fused says
 * whether cuDNN took it; false (NOT_SUPPORTED) with no error: nothing was
 * written, and the caller runs the unfused kernels. */
rf_status *dnn_conv(rf__kernel_ctx *ctx, ConvKind kind, const rf__conv_geom &g,
                    rf_dtype dtype, const void *a, const void *b, void *out,
                    const void *bias = nullptr, bool *fused = nullptr);

}  // namespace rf_gpu

#endif
