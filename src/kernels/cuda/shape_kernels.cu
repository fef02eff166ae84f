/* kernels/cuda/shape_kernels.cu - GPU kernels of the shape ops: the plans of
 * kernels/shape_prepare.h (an optional fill, then strided copies by element
 * size, one thread per element, the plan passed by value), views for
 * ExpandDims and Squeeze, and _TileGrad summing dy over the tiles in a
 * fixed order (float for float16/bfloat16/float32, double for float64,
 * wrapping unsigned arithmetic for integers), so results are
 * deterministic. Nothing here waits for the GPU. */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/shape_prepare.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

/* ---- strided copy ---- */

template <typename U>
__global__ void copy_kernel(rf__copy_plan p, const U *src, U *dst) {
  RF_GPU_LOOP(i, p.count) {
    int64_t s = p.src_offset, d = p.dst_offset, rest = i;
    for (int k = p.rank - 1; k >= 0; k--) {
      int64_t j = rest % p.dims[k];
      rest /= p.dims[k];
      s += j * p.src_strides[k];
      d += j * p.dst_strides[k];
    }
    dst[d] = src[s];
  }
}

rf_status *run_plan(rf__kernel_ctx *ctx, const rf__copy_plan &p,
                    const void *src, void *dst, size_t esize) {
  return visit_bits(esize, [&](auto tag) {
    using U = typename decltype(tag)::type;
    copy_kernel<U><<<grid(ctx, p.count), kThreads, 0, stream(ctx)>>>(
        p, (const U *)src, (U *)dst);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *run_job(rf__kernel_ctx *ctx, const rf__shape_job &job) {
  rf_dtype dt = ctx->inputs[0]->dtype;
  size_t es = rf_dtype_size(dt);
  for (int i = 0; i < job.num_outputs; i++) {
    rf_tensor *out;
    RF_CHECK(alloc_output(ctx, i, dt, &job.out_shapes[i], &out));
    if (job.fill)
      RF_CHECK(fill_bits(ctx, out->data, es, out->num_elements, job.fill_bits));
  }
  for (int k = 0; k < job.num_plans; k++) {
    const rf__copy_plan &p = job.plans[k];
    RF_CHECK(run_plan(ctx, p, ctx->inputs[p.src_input]->data,
                      ctx->outputs[p.dst_output]->data, es));
  }
  return NULL;
}

rf_status *shape_op_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__shape_job job;
  RF_CHECK(rf__shape_job_prepare(ctx, &job));
  rf_status *st;
  if (job.view_of >= 0) {
    st = rf__kernel_error_at(
        ctx, rf__tensor_new_view(ctx->inputs[job.view_of], &job.out_shapes[0],
                                 &ctx->outputs[0]));
  } else {
    st = run_job(ctx, job);
    if (st) rf__kernel_drop_outputs(ctx);
  }
  rf__shape_job_free(&job);
  return st;
}

/* ---- _TileGrad ---- */

struct TileGradArgs {
  int rank;
  int64_t n, tiles;
  int64_t x_dims[RF_MAX_RANK], m[RF_MAX_RANK], dy_strides[RF_MAX_RANK];
};

template <typename T>
using acc_t = typename std::conditional<is_float_v<T>, typename Num<T>::C,
                                        typename Unsigned<T>::type>::type;

template <typename T>
__global__ void tile_grad_kernel(TileGradArgs a, const T *dy, T *dx) {
  RF_GPU_LOOP(j, a.n) {
    int64_t base = 0, rest = j;
    for (int k = a.rank - 1; k >= 0; k--) {
      base += (rest % a.x_dims[k]) * a.dy_strides[k];
      rest /= a.x_dims[k];
    }
    acc_t<T> sum = 0;
    for (int64_t t = 0; t < a.tiles; t++) {
      int64_t off = base, tr = t;
      for (int k = a.rank - 1; k >= 0; k--) {
        off += (tr % a.m[k]) * a.x_dims[k] * a.dy_strides[k];
        tr /= a.m[k];
      }
      if constexpr (is_float_v<T>)
        sum += Num<T>::load(dy[off]);
      else
        sum += (acc_t<T>)dy[off];
    }
    if constexpr (is_float_v<T>)
      dx[j] = Num<T>::store(sum);
    else
      dx[j] = (T)sum;
  }
}

rf_status *tile_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *dy = ctx->inputs[0];
  rf_shape shape;
  const int64_t *m;
  TileGradArgs a = {};
  RF_CHECK(rf__tile_grad_prepare(ctx, &shape, &m, &a.rank));
  rf_tensor *dx;
  RF_CHECK(alloc_output(ctx, 0, dy->dtype, &shape, &dx));
  a.n = dx->num_elements;
  if (a.n == 0) return NULL;
  a.tiles = 1;
  for (int k = 0; k < a.rank; k++) {
    a.x_dims[k] = shape.dims[k];
    a.m[k] = m[k];
    a.tiles *= m[k]; /* <= dy's element count */
  }
  rf__contiguous_strides(&dy->shape, a.dy_strides);
  return visit_numeric(dy->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    tile_grad_kernel<T><<<grid(ctx, a.n), kThreads, 0, stream(ctx)>>>(
        a, (const T *)dy->data, (T *)dx->data);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

const rf__kernel_def defs[] = {RF_SHAPE_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_shape_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
