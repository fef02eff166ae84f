// bench/cuda_graph_floor.cu - the floor of a replayed training step on one
// GPU (issue 19): a CUDA graph of one 512-byte host-to-device copy, N
// dependent one-block kernels and one 4-byte device-to-host copy, launched
// and synchronised in a loop, as `ringflow train` replays a captured step
// and fetches its loss. Prints the best of 5 rounds of 2,000 launches per N
// (docs/PERFORMANCE.md, "Session 17"). CUDA builds: bench_cuda_graph_floor.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

__global__ void bump(float *p) {
  if (threadIdx.x == 0) p[0] += 1.0f;
}

static bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

int main() {
  cudaStream_t s;
  float *d = nullptr, *h = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !ok(cudaMalloc(&d, 4096), "cudaMalloc") ||
      !ok(cudaMallocHost(&h, 4096), "cudaMallocHost"))
    return 1;
  for (int n : {0, 1, 10, 20, 30, 40, 60}) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemcpyAsync(d + 256, h + 256, 512, cudaMemcpyHostToDevice, s);
    for (int i = 0; i < n; i++) bump<<<1, 32, 0, s>>>(d);
    cudaMemcpyAsync(h, d, 4, cudaMemcpyDeviceToHost, s);
    if (!ok(cudaStreamEndCapture(s, &g), "capture") ||
        !ok(cudaGraphInstantiate(&e, g, 0), "instantiate"))
      return 1;
    for (int i = 0; i < 200; i++) {
      cudaGraphLaunch(e, s);
      cudaStreamSynchronize(s);
    }
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; i++) {
        cudaGraphLaunch(e, s);
        cudaStreamSynchronize(s);
      }
      auto t1 = std::chrono::steady_clock::now();
      double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
      if (us / 2000 < best) best = us / 2000;
    }
    if (!ok(cudaGetLastError(), "launch")) return 1;
    std::printf(
        "floor: %d kernels: %.2f us per launch+sync (best of 5 x 2000)\n", n,
        best);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
  }
  cudaFreeHost(h);
  cudaFree(d);
  cudaStreamDestroy(s);
  return 0;
}
