/* kernels/cuda/kernel_stream.c - a GPU kernel's way to its stream: taking it
 * counts an enqueue begun on the device (device/gpu/order.h), so a
 * collective never leaves out a wait for work a kernel put there. */
#include "device/device.h"
#include "device/gpu/order.h"
#include "kernels/kernel.h"

void *rf__gpu_kernel_stream(rf__kernel_ctx *ctx) {
  if (!ctx->stream_taken) {
    ctx->stream_taken = true;
    rf__gpu_enqueue_begin(ctx->device->order);
  }
  return ctx->device->stream;
}
