/* bench/graph_copy_nodes.cu - what a small host<->device copy costs in a
 * replayed CUDA graph as a memcpy node against a copy kernel reading and
 * writing mapped pinned memory (docs/PERFORMANCE.md, "Session 20"; the
 * reason device/gpu/small_copy.cu exists). No ringflow; build by hand:
 *   nvcc -O2 -arch=sm_90 bench/graph_copy_nodes.cu -o graph_copy_nodes */
#include <cstdio>
#include <cuda_runtime.h>
#include <chrono>
#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e) {                                         \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                      \
    }                                                \
  } while (0)
__global__ void step(float *x) {
  x[threadIdx.x] = x[threadIdx.x] * 0.999f + 1.0f;
}
__global__ void copy_k(const int *src, int *dst, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
int main() {
  const int K = 20, N = 128;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x;
  CK(cudaMalloc(&x, 4096));
  int *hin, *hout, *din, *dout;
  CK(cudaHostAlloc(&hin, 4096, cudaHostAllocMapped));
  CK(cudaHostAlloc(&hout, 4096, cudaHostAllocMapped));
  CK(cudaMalloc(&din, 4096));
  CK(cudaMalloc(&dout, 4096));
  int *hin_d, *hout_d;
  CK(cudaHostGetDevicePointer(&hin_d, hin, 0));
  CK(cudaHostGetDevicePointer(&hout_d, hout, 0));
  for (int mode = 0; mode < 3; mode++) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (mode == 1) {
      CK(cudaMemcpyAsync(din, hin, N * 4, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(din + N, hin + N, 4, cudaMemcpyHostToDevice, s));
    }
    if (mode == 2) {
      copy_k<<<1, 128, 0, s>>>(hin_d, din, N + 1);
    }
    for (int k = 0; k < K; k++) step<<<1, 128, 0, s>>>(x);
    if (mode == 1)
      CK(cudaMemcpyAsync(hout, dout, 4, cudaMemcpyDeviceToHost, s));
    if (mode == 2) copy_k<<<1, 32, 0, s>>>(dout, hout_d, 1);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      CK(cudaStreamSynchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 1000; i++) {
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
      }
      double us = std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - t0)
                      .count() /
                  1000;
      if (us < best) best = us;
    }
    printf("mode %s: %.2f us per replay (launch + sync)\n",
           mode == 0   ? "kernels only"
           : mode == 1 ? "2 H2D + 1 D2H memcpy nodes"
                       : "1 H2D + 1 D2H copy kernels",
           best);
  }
  return 0;
}
