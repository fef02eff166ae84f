/* bench/graph_branches.cu - whether independent branches of one CUDA graph
 * run side by side on one GPU, as the chains of virtual GPU devices in a
 * captured step do (docs/PERFORMANCE.md, "Session 21"): C chains of L = 25
 * kernels of G blocks x 256 threads (`it` dependent FMAs a thread), each
 * chain on its own forked stream, captured into one graph; µs per replay,
 * and the same C chains enqueued on one stream ("serial"). No ringflow;
 * build by hand:
 *   nvcc -O2 -arch=sm_90 bench/graph_branches.cu -o graph_branches */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define CK(x)                                         \
  do {                                                \
    cudaError_t e_ = (x);                             \
    if (e_ != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                        \
    }                                                 \
  } while (0)
__global__ void work(float *p, int it) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = p[i];
  for (int k = 0; k < it; k++) v = v * 0.999f + 0.001f;
  p[i] = v;
}
static float run(int C, int L, int G, int it, float *buf, bool serial) {
  cudaStream_t o;
  CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
  std::vector<cudaStream_t> s(C);
  std::vector<cudaEvent_t> e(C + 1);
  for (auto &x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  for (auto &x : e) CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(e[C], o));
  for (int c = 0; c < C; c++) {
    cudaStream_t t = serial ? o : s[c];
    if (!serial) CK(cudaStreamWaitEvent(t, e[C], 0));
    for (int l = 0; l < L; l++)
      work<<<G, 256, 0, t>>>(buf + (size_t)c * G * 256, it);
    if (!serial) {
      CK(cudaEventRecord(e[c], t));
      CK(cudaStreamWaitEvent(o, e[c], 0));
    }
  }
  cudaGraph_t g;
  CK(cudaStreamEndCapture(o, &g));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 20; w++) CK(cudaGraphLaunch(x, o));
  CK(cudaEventRecord(a, o));
  const int R = 200;
  for (int r = 0; r < R; r++) CK(cudaGraphLaunch(x, o));
  CK(cudaEventRecord(b, o));
  CK(cudaEventSynchronize(b));
  float ms;
  CK(cudaEventElapsedTime(&ms, a, b));
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  for (auto &y : s) cudaStreamDestroy(y);
  cudaStreamDestroy(o);
  return ms * 1000 / R;
}
int main() {
  float *buf;
  CK(cudaMalloc(&buf, (size_t)8 * 1056 * 256 * 4 * 4));
  CK(cudaMemset(buf, 0, (size_t)8 * 1056 * 256 * 4 * 4));
  const int L = 25;
  printf("L=%d kernels a chain; us per replay (and per chain-kernel)\n", L);
  int grids[] = {1, 8, 33, 132, 264, 1056};
  int its[] = {1, 200, 1000};
  for (int it : its)
    for (int G : grids) {
      printf("it %4d grid %4d:", it, G);
      for (int C : {1, 2, 4, 8}) {
        float t = run(C, L, G, it, buf, false);
        printf("  C%d %7.1f", C, t);
      }
      printf("  | serial C4 %7.1f\n", run(4, L, G, it, buf, true));
    }
  return 0;
}
