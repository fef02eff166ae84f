/* bench/gpu_split_gemm.cu - the floor for data parallelism on virtual GPUs
 * of one physical GPU (issue 19, item 4), from cuBLAS alone: the eight
 * float32 products of one training step of the MLP 784-512-256-10 (three
 * forward, five backward), captured as one CUDA graph
 *   - as one chain at global batch B (gpu:0 alone), and
 *   - as D independent chains at batch B / D, each on its own stream and
 *     cuBLAS handle (D virtual devices), with the handles' SM count target
 *     left at the whole GPU or set to its D-th part (cublasSetSmCountTarget,
 *     what ringflow's runtime sets, RF_GPU_SM_SHARE).
 * µs per replay, best of 5 rounds of 200. The ratio "1 / D" is the most
 * samples/s D virtual devices can reach against one device at the same
 * global batch when nothing but these products ran. No ringflow; build by
 * hand (docs/PERFORMANCE.md, "Session 21"):
 *   nvcc -O2 -arch=sm_90 bench/gpu_split_gemm.cu -lcublas -o gpu_split_gemm */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                         \
  do {                                                \
    cudaError_t e_ = (x);                             \
    if (e_ != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                        \
    }                                                 \
  } while (0)
#define CB(x)                                          \
  do {                                                 \
    cublasStatus_t s_ = (x);                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                 \
      printf("%s: %s\n", #x, cublasGetStatusName(s_)); \
      exit(1);                                         \
    }                                                  \
  } while (0)

/* Row-major C[m,n] = op(A)[m,k] op(B)[k,n]. */
static void gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k,
                 const float *a, const float *b, float *c) {
  const float one = 1, zero = 0;
  CB(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, tb ? k : n,
                 a, ta ? m : k, &zero, c, n));
}

/* One replica's tensors at batch `rows`. */
struct Replica {
  float *x, *w1, *w2, *w3, *h1, *h2, *y, *dh2, *dw3, *dh1, *dw2, *dw1;
};

static float *dev(size_t n) {
  float *p;
  CK(cudaMalloc(&p, n * sizeof(float)));
  CK(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

static Replica make(int rows) {
  Replica r;
  r.x = dev((size_t)rows * 784);
  r.w1 = dev(784 * 512);
  r.w2 = dev(512 * 256);
  r.w3 = dev(256 * 10);
  r.h1 = dev((size_t)rows * 512);
  r.h2 = dev((size_t)rows * 256);
  r.y = dev((size_t)rows * 10);
  r.dh2 = dev((size_t)rows * 256);
  r.dw3 = dev(256 * 10);
  r.dh1 = dev((size_t)rows * 512);
  r.dw2 = dev(512 * 256);
  r.dw1 = dev(784 * 512);
  return r;
}

/* The step's products in the order a device runs them. */
static void step(cublasHandle_t h, const Replica &r, int b) {
  gemm(h, false, false, b, 512, 784, r.x, r.w1, r.h1);
  gemm(h, false, false, b, 256, 512, r.h1, r.w2, r.h2);
  gemm(h, false, false, b, 10, 256, r.h2, r.w3, r.y);
  gemm(h, false, true, b, 256, 10, r.y, r.w3, r.dh2);
  gemm(h, true, false, 256, 10, b, r.h2, r.y, r.dw3);
  gemm(h, false, true, b, 512, 256, r.dh2, r.w2, r.dh1);
  gemm(h, true, false, 512, 256, b, r.h1, r.dh2, r.dw2);
  gemm(h, true, false, 784, 512, b, r.x, r.dh1, r.dw1);
}

/* µs per replay of D chains at batch B / D; sm: each handle's target. */
static float run(int global, int d, int sm) {
  int b = global / d;
  cudaStream_t o;
  CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
  std::vector<cudaStream_t> s(d);
  std::vector<cublasHandle_t> h(d);
  std::vector<cudaEvent_t> done(d);
  std::vector<Replica> r(d);
  std::vector<void *> ws(d);
  cudaEvent_t fork;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  for (int i = 0; i < d; i++) {
    CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    CB(cublasCreate(&h[i]));
    CB(cublasSetStream(h[i], s[i]));
    /* A workspace of its own: no memory nodes in the capture. */
    CK(cudaMalloc(&ws[i], 32 << 20));
    CB(cublasSetWorkspace(h[i], ws[i], 32 << 20));
    CB(cublasSetSmCountTarget(h[i], sm));
    r[i] = make(b);
    step(h[i], r[i], b); /* warm the heuristics outside the capture */
  }
  CK(cudaDeviceSynchronize());
  CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, o));
  for (int i = 0; i < d; i++) {
    CK(cudaStreamWaitEvent(s[i], fork, 0));
    step(h[i], r[i], b);
    CK(cudaEventRecord(done[i], s[i]));
    CK(cudaStreamWaitEvent(o, done[i], 0));
  }
  cudaGraph_t g;
  CK(cudaStreamEndCapture(o, &g));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  cudaEvent_t a, e;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&e));
  float best = 1e30f;
  for (int round = 0; round < 5; round++) {
    for (int w = 0; w < 20; w++) CK(cudaGraphLaunch(x, o));
    CK(cudaEventRecord(a, o));
    for (int k = 0; k < 200; k++) CK(cudaGraphLaunch(x, o));
    CK(cudaEventRecord(e, o));
    CK(cudaEventSynchronize(e));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, e));
    if (ms * 5 < best) best = ms * 5; /* µs per replay: ms * 1000 / 200 */
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  for (int i = 0; i < d; i++) {
    Replica &q = r[i];
    for (float *p : {q.x, q.w1, q.w2, q.w3, q.h1, q.h2, q.y, q.dh2, q.dw3,
                     q.dh1, q.dw2, q.dw1})
      CK(cudaFree(p));
    CB(cublasDestroy(h[i]));
    CK(cudaFree(ws[i]));
    CK(cudaStreamDestroy(s[i]));
  }
  CK(cudaStreamDestroy(o));
  return best;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("# %d multiprocessors; us per replay of the step's 8 products\n", sms);
  printf(
      "| global batch | D | batch each | whole GPU | 1/D | D-th part |"
      " 1/D |\n|---|---|---|---|---|---|---|\n");
  for (int global : {1024, 8192}) {
    float one = run(global, 1, 0);
    for (int d : {1, 4, 8}) {
      float whole = d == 1 ? one : run(global, d, 0);
      float part = d == 1 ? one : run(global, d, sms / d);
      printf("| %d | %d | %d | %.1f | %.2f | %.1f | %.2f |\n", global, d,
             global / d, whole, one / whole, part, one / part);
    }
  }
  return 0;
}
