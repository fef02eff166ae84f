/* ringflow/tensor.h - reference-counted, immutable-once-produced tensors and
 * the pluggable host allocator.
 *
 * Host buffers are 64-byte aligned (those of rf_tensor_new_external, the
 * caller's memory, only to their dtype's size). A tensor is writable only by
 * whoever created it, until it is handed to the library (fed, or returned by a
 * kernel); after that nobody writes to it, so devices that share an address
 * space share it. */
#ifndef RINGFLOW_TENSOR_H
#define RINGFLOW_TENSOR_H

#include "ringflow/dtype.h"
#include "ringflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_TENSOR_ALIGNMENT 64

/* A host allocator: a const table of functions plus its state. Both functions
 * may be called from any thread at once. alloc returns NULL on failure. */
typedef struct rf_allocator {
  void *(*alloc)(void *state, size_t size, size_t alignment);
  void (*free)(void *state, void *ptr, size_t size);
  void *state;
} rf_allocator;

/* The default allocator: caches freed buffers by size class and hands them out
 * again, so steady-state steps touch no fresh memory. Not owned. */
RF_API rf_allocator *rf_default_allocator(void);

/* Bytes the default allocator holds cached but unused, and bytes in use. */
RF_API void rf_default_allocator_stats(size_t *cached, size_t *in_use);

/* Returns the cached buffers of the default allocator to the system. */
RF_API void rf_default_allocator_trim(void);

typedef struct rf_tensor rf_tensor;

/* Makes a tensor of a fully defined shape with uninitialised contents, from
 * `allocator` (NULL: the default). On success *out holds one reference. On
 * error *out is untouched: INVALID_ARGUMENT for NULL shape or out, an
 * allocator whose alloc or free is NULL, an
 * invalid dtype, a shape that is not fully defined or not valid (rank past
 * RF_MAX_RANK, a dim below -1, or nonzero dims multiplying past INT64_MAX,
 * see rf_shape_num_elements); RESOURCE_EXHAUSTED when the bytes cannot be
 * had: the allocator fails, or the elements times the dtype's size pass
 * SIZE_MAX / 2 bytes whatever the allocator (a valid shape, but too large
 * for the dtype: (2^31, 2^31) of float32, 2^64 bytes). */
RF_API rf_status *rf_tensor_new(rf_dtype dtype, const rf_shape *shape,
                                rf_allocator *allocator, rf_tensor **out);

/* Like rf_tensor_new, then copies rf_shape_num_elements * dtype size bytes from
 * `data` (NULL only for 0 elements). Errors: those of rf_tensor_new (naming
 * rf_tensor_new_copy), and INVALID_ARGUMENT for NULL data. */
RF_API rf_status *rf_tensor_new_copy(rf_dtype dtype, const rf_shape *shape,
                                     const void *data, rf_tensor **out);

/* A scalar tensor holding `value` converted to dtype (any numeric dtype, or
 * bool) as rf_tensor_set converts. Errors: INVALID_ARGUMENT for NULL out or
 * an invalid or resource dtype; RESOURCE_EXHAUSTED. *out is untouched on
 * error. */
RF_API rf_status *rf_tensor_new_scalar(rf_dtype dtype, double value,
                                       rf_tensor **out);

/* Called once when the last reference to a tensor of rf_tensor_new_external
 * goes, with the data and arg it was given, from whichever thread releases
 * it last (a session's worker thread included). */
typedef void (*rf_tensor_release_fn)(void *data, void *arg);

/* A tensor over caller-owned memory, without a copy (TF_NewTensor's
 * deallocator): `data` holds rf_shape_num_elements * dtype size bytes,
 * aligned to the dtype's size (64-byte alignment is not needed). The library
 * only reads it, from any thread, and never writes it: a variable assigned
 * such a tensor updates a copy. The caller must not write it either until
 * release(data, arg) is called (release may be NULL), which happens once the
 * tensor, every view of it and every value sharing it are released - a
 * variable may hold it past the run it was fed to. On success *out holds
 * one reference. On error *out is untouched and release is not called:
 * INVALID_ARGUMENT for NULL data (whatever the shape), shape or out,
 * misaligned data, a resource or invalid dtype, or a shape rf_tensor_new
 * refuses as INVALID_ARGUMENT; RESOURCE_EXHAUSTED, as from rf_tensor_new,
 * when the elements times the dtype's size pass SIZE_MAX / 2 bytes (no
 * memory holds them), and when memory runs out.
 *
 *   static void unpin(void *data, void *arg) { free(data); }
 *   float *buf = malloc(12 * sizeof *buf);   (filled by the caller)
 *   rf_shape s = rf_shape_of(2, 3, 4);
 *   rf_tensor *t;
 *   rf_status *st = rf_tensor_new_external(RF_FLOAT32, &s, buf, unpin,
 *                                          NULL, &t);
 *   (feed t; rf_tensor_release(t) frees buf once nothing holds it) */
RF_API rf_status *rf_tensor_new_external(rf_dtype dtype, const rf_shape *shape,
                                         void *data,
                                         rf_tensor_release_fn release,
                                         void *arg, rf_tensor **out);

/* Like rf_tensor_new_external, over CUDA device memory of physical GPU
 * `gpu` (0-based, as cudaSetDevice counts; DLPack's kDLCUDA device_id):
 * `data` is a device pointer, aligned to the dtype's size, never read or
 * written on the host. Such a tensor can be fed only to outputs on GPU
 * devices (a CPU device's placeholder fails the run with INVALID_ARGUMENT
 * "fed a <dtype> device tensor, expected <dtype> in host memory"; nor is it
 * a Const's value or any tensor attr: INVALID_ARGUMENT): the GPU
 * device copies it into its own memory on its stream (device to device,
 * or peer to peer from another GPU), after the work queued on the GPU's
 * legacy default stream before the run - so a producer that has ordered its
 * writes before that stream (DLPack's __dlpack__(stream=1)) or finished
 * them needs no other synchronisation. The library never writes the memory;
 * release comes as for rf_tensor_new_external. rf_tensor_data and
 * rf_tensor_mutable_data return NULL for it. Made without checking that the
 * GPU exists (also in builds without CUDA, where no session can read it).
 * Errors: those of rf_tensor_new_external (naming
 * rf_tensor_new_external_gpu), and INVALID_ARGUMENT for gpu < 0 or past
 * 32767. */
RF_API rf_status *rf_tensor_new_external_gpu(rf_dtype dtype,
                                             const rf_shape *shape, int gpu,
                                             void *data,
                                             rf_tensor_release_fn release,
                                             void *arg, rf_tensor **out);

RF_API rf_tensor *rf_tensor_retain(rf_tensor *t); /* returns t */
RF_API void rf_tensor_release(rf_tensor *t);      /* NULL is ignored */

RF_API rf_dtype rf_tensor_dtype(const rf_tensor *t);
RF_API rf_shape rf_tensor_shape(const rf_tensor *t);
RF_API int64_t rf_tensor_num_elements(const rf_tensor *t);
RF_API size_t rf_tensor_nbytes(const rf_tensor *t);
/* Read-only view of the elements, row-major. */
RF_API const void *rf_tensor_data(const rf_tensor *t);
/* Writable view; only for the creator before the tensor is handed over. */
RF_API void *rf_tensor_mutable_data(rf_tensor *t);

/* Element i converted to double (any numeric or bool dtype). A NULL t, an
 * i outside [0, num_elements), or a tensor in device memory
 * (rf_tensor_new_external_gpu, no host elements): get returns 0 and set
 * does nothing. */
RF_API double rf_tensor_get(const rf_tensor *t, int64_t i);
/* Sets element i from a double (rounding as a C cast; creator only). */
RF_API void rf_tensor_set(rf_tensor *t, int64_t i, double value);

#ifdef __cplusplus
}
#endif
#endif
