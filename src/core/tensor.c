/* core/tensor.c - reference-counted tensors. The data buffer comes from an
 * rf_allocator and goes back to it when the last reference is released. */
#include "core/tensor.h"

#include <string.h>

#include "core/mem.h"
#include "core/shape.h"
#include "core/status.h"

/* RESOURCE_EXHAUSTED when n elements of dtype take more than SIZE_MAX / 2
 * bytes, for allocated and external tensors alike: the shape is valid (its
 * count fits int64), only its bytes cannot be had. */
static rf_status *check_bytes(const char *fn, int64_t n, rf_dtype dtype) {
  if (n <= (int64_t)(SIZE_MAX / 2 / rf_dtype_size(dtype))) return NULL;
  return rf__error(RF_RESOURCE_EXHAUSTED,
                   "%s: %lld elements is too many: their %s bytes pass "
                   "SIZE_MAX / 2",
                   fn, (long long)n, rf_dtype_name(dtype));
}

/* `fn` names the public caller in messages. */
static rf_status *tensor_new(const char *fn, rf_dtype dtype,
                             const rf_shape *shape, rf_allocator *allocator,
                             int8_t on_gpu, rf_tensor **out) {
  if (!shape || !out)
    return rf__invalid("%s: NULL argument (%s)", fn, !shape ? "shape" : "out");
  if (rf_dtype_size(dtype) == 0)
    return rf__invalid("%s: invalid dtype %d", fn, (int)dtype);
  int64_t n = rf_shape_num_elements(shape); /* -1: unknown or invalid */
  if (n < 0) {
    RF_CHECK(rf__status_prefix(rf__shape_check(shape), "%s", fn));
    char buf[128];
    rf_shape_format(shape, buf, sizeof buf);
    return rf__invalid("%s: shape %s is not fully defined", fn, buf);
  }
  size_t esize = rf_dtype_size(dtype);
  RF_CHECK(check_bytes(fn, n, dtype));
  if (!allocator) allocator = rf_default_allocator();
  if (!allocator->alloc || !allocator->free)
    return rf__invalid("%s: the allocator's %s function is NULL", fn,
                       !allocator->alloc ? "alloc" : "free");
  rf_tensor *t = rf__malloc(sizeof *t);
  RF_CHECK_ALLOC(t);
  size_t nbytes = (size_t)n * esize;
  size_t asize = nbytes < RF_TENSOR_ALIGNMENT ? RF_TENSOR_ALIGNMENT : nbytes;
  void *data = allocator->alloc(allocator->state, asize, RF_TENSOR_ALIGNMENT);
  if (!data) {
    rf__free(t);
    return rf__error(RF_RESOURCE_EXHAUSTED,
                     "%s: could not allocate %zu bytes of %s memory for a %s "
                     "tensor",
                     fn, nbytes, on_gpu ? "device" : "host",
                     rf_dtype_name(dtype));
  }
  atomic_init(&t->refs, 1);
  t->dtype = dtype;
  t->shape = *shape;
  t->num_elements = n;
  t->nbytes = nbytes;
  t->data = data;
  t->allocator = allocator;
  t->base = NULL;
  t->on_gpu = on_gpu;
  t->gpu = -1;
  t->external = 0;
  t->release = NULL;
  t->release_arg = NULL;
  *out = t;
  return NULL;
}

rf_status *rf_tensor_new(rf_dtype dtype, const rf_shape *shape,
                         rf_allocator *allocator, rf_tensor **out) {
  return tensor_new("rf_tensor_new", dtype, shape, allocator, 0, out);
}

/* rf_tensor_new_external (gpu -1) and rf_tensor_new_external_gpu; `fn`
 * names the caller in messages. */
static rf_status *new_external(const char *fn, rf_dtype dtype,
                               const rf_shape *shape, int gpu, void *data,
                               rf_tensor_release_fn release, void *arg,
                               rf_tensor **out) {
  if (!shape || !out || !data)
    return rf__invalid("%s: NULL %s", fn,
                       !data    ? "data"
                       : !shape ? "argument (shape)"
                                : "argument (out)");
  size_t esize = rf_dtype_size(dtype);
  if (esize == 0 || dtype == RF_RESOURCE)
    return esize ? rf__invalid(
                       "%s: dtype resource (%d) holds no data (a variable's "
                       "handle)",
                       fn, (int)dtype)
                 : rf__invalid("%s: invalid dtype %d", fn, (int)dtype);
  int64_t n = rf_shape_num_elements(shape);
  if (n < 0) {
    RF_CHECK(rf__status_prefix(rf__shape_check(shape), "%s", fn));
    char buf[128];
    rf_shape_format(shape, buf, sizeof buf);
    return rf__invalid("%s: shape %s is not fully defined", fn, buf);
  }
  /* Kernels read elements through typed pointers. */
  if ((uintptr_t)data % esize)
    return rf__invalid(
        "%s: data %p is not aligned to "
        "the %zu bytes of a %s",
        fn, data, esize, rf_dtype_name(dtype));
  RF_CHECK(check_bytes(fn, n, dtype));
  rf_tensor *t = rf__malloc(sizeof *t);
  RF_CHECK_ALLOC(t);
  atomic_init(&t->refs, 1);
  t->dtype = dtype;
  t->shape = *shape;
  t->num_elements = n;
  t->nbytes = (size_t)n * esize;
  t->data = data;
  t->allocator = NULL;
  t->base = NULL;
  t->on_gpu = gpu >= 0;
  t->gpu = (int16_t)gpu;
  t->external = 1;
  t->release = release;
  t->release_arg = arg;
  *out = t;
  return NULL;
}

rf_status *rf_tensor_new_external(rf_dtype dtype, const rf_shape *shape,
                                  void *data, rf_tensor_release_fn release,
                                  void *arg, rf_tensor **out) {
  return new_external("rf_tensor_new_external", dtype, shape, -1, data, release,
                      arg, out);
}

rf_status *rf_tensor_new_external_gpu(rf_dtype dtype, const rf_shape *shape,
                                      int gpu, void *data,
                                      rf_tensor_release_fn release, void *arg,
                                      rf_tensor **out) {
  if (gpu < 0 || gpu > INT16_MAX)
    return rf__invalid("rf_tensor_new_external_gpu: GPU %d is not a GPU", gpu);
  return new_external("rf_tensor_new_external_gpu", dtype, shape, gpu, data,
                      release, arg, out);
}

rf_status *rf__tensor_new_device(rf_dtype dtype, const rf_shape *shape,
                                 rf_allocator *allocator, rf_tensor **out) {
  if (!allocator) return rf__invalid("rf__tensor_new_device: NULL allocator");
  return tensor_new("rf_tensor_new", dtype, shape, allocator, 1, out);
}

rf_status *rf__tensor_new_view(rf_tensor *t, const rf_shape *shape,
                               rf_tensor **out) {
  if (!t || !shape || !out)
    return rf__invalid("rf__tensor_new_view: NULL argument");
  if (!rf_shape_is_fully_defined(shape) ||
      rf_shape_num_elements(shape) != t->num_elements)
    return rf__invalid("rf__tensor_new_view: shape does not hold %lld elements",
                       (long long)t->num_elements);
  return rf__tensor_new_slice(t, 0, shape, out);
}

rf_status *rf__tensor_new_slice(rf_tensor *t, int64_t offset,
                                const rf_shape *shape, rf_tensor **out) {
  if (!t || !shape || !out)
    return rf__invalid("rf__tensor_new_slice: NULL argument");
  int64_t n =
      rf_shape_is_fully_defined(shape) ? rf_shape_num_elements(shape) : -1;
  size_t esize = rf_dtype_size(t->dtype);
  if (n < 0 || offset < 0 || offset > t->num_elements ||
      n > t->num_elements - offset ||
      ((size_t)offset * esize) % RF_TENSOR_ALIGNMENT != 0)
    return rf__invalid(
        "rf__tensor_new_slice: %lld elements at offset %lld do not fit an "
        "aligned slice of %lld",
        (long long)n, (long long)offset, (long long)t->num_elements);
  rf_tensor *v = rf__malloc(sizeof *v);
  RF_CHECK_ALLOC(v);
  atomic_init(&v->refs, 1);
  v->dtype = t->dtype;
  v->shape = *shape;
  v->num_elements = n;
  v->nbytes = (size_t)n * esize;
  v->data = (char *)t->data + (size_t)offset * esize;
  v->allocator = t->allocator;
  /* Views of views point at the owner, so chains stay one link long. */
  v->on_gpu = t->on_gpu;
  v->gpu = t->gpu;
  v->external = 0; /* the base gives the memory back */
  v->release = NULL;
  v->release_arg = NULL;
  v->base = rf_tensor_retain(t->base ? t->base : t);
  *out = v;
  return NULL;
}

rf_status *rf_tensor_new_copy(rf_dtype dtype, const rf_shape *shape,
                              const void *data, rf_tensor **out) {
  if (!out) return rf__invalid("rf_tensor_new_copy: NULL argument (out)");
  if (!data && shape && rf_shape_num_elements(shape) > 0)
    return rf__invalid("rf_tensor_new_copy: NULL data");
  rf_tensor *t;
  RF_CHECK(tensor_new("rf_tensor_new_copy", dtype, shape, NULL, 0, &t));
  if (t->nbytes) memcpy(t->data, data, t->nbytes);
  *out = t;
  return NULL;
}

rf_status *rf_tensor_new_scalar(rf_dtype dtype, double value, rf_tensor **out) {
  if (!out) return rf__invalid("rf_tensor_new_scalar: NULL argument (out)");
  if (dtype == RF_RESOURCE)
    return rf__invalid("rf_tensor_new_scalar: resource is not a numeric dtype");
  rf_shape s = rf_shape_scalar();
  rf_tensor *t;
  RF_CHECK(tensor_new("rf_tensor_new_scalar", dtype, &s, NULL, 0, &t));
  rf_tensor_set(t, 0, value);
  *out = t;
  return NULL;
}

rf_tensor *rf_tensor_retain(rf_tensor *t) {
  if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}

void rf_tensor_release(rf_tensor *t) {
  if (!t) return;
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  if (t->base) { /* a view: the buffer belongs to base */
    rf_tensor_release(t->base);
    rf__free(t);
    return;
  }
  if (t->external) {
    if (t->release) t->release(t->data, t->release_arg);
    rf__free(t);
    return;
  }
  size_t asize =
      t->nbytes < RF_TENSOR_ALIGNMENT ? RF_TENSOR_ALIGNMENT : t->nbytes;
  t->allocator->free(t->allocator->state, t->data, asize);
  rf__free(t);
}

rf_dtype rf_tensor_dtype(const rf_tensor *t) {
  return t ? t->dtype : RF_DTYPE_INVALID;
}

rf_shape rf_tensor_shape(const rf_tensor *t) {
  return t ? t->shape : rf_shape_unknown();
}

int64_t rf_tensor_num_elements(const rf_tensor *t) {
  return t ? t->num_elements : -1;
}

size_t rf_tensor_nbytes(const rf_tensor *t) { return t ? t->nbytes : 0; }
/* The public accessors never hand out device memory (users only ever hold
 * host tensors; this guards against a runtime bug reaching them). */
const void *rf_tensor_data(const rf_tensor *t) {
  return t && !t->on_gpu ? t->data : NULL;
}
void *rf_tensor_mutable_data(rf_tensor *t) {
  return t && !t->on_gpu ? t->data : NULL;
}

double rf_tensor_get(const rf_tensor *t, int64_t i) {
  if (!t || t->on_gpu || i < 0 || i >= t->num_elements) return 0.0;
  const void *d = t->data;
  switch (t->dtype) {
    case RF_FLOAT16: return rf_half_to_float(((const uint16_t *)d)[i]);
    case RF_BFLOAT16: return rf_bfloat16_to_float(((const uint16_t *)d)[i]);
    case RF_FLOAT32: return ((const float *)d)[i];
    case RF_FLOAT64: return ((const double *)d)[i];
    case RF_INT8: return ((const int8_t *)d)[i];
    case RF_UINT8: return ((const uint8_t *)d)[i];
    case RF_INT32: return ((const int32_t *)d)[i];
    case RF_INT64: return (double)((const int64_t *)d)[i];
    case RF_BOOL: return ((const uint8_t *)d)[i] ? 1.0 : 0.0;
    default: return 0.0;
  }
}

/* Converts without undefined behaviour for out-of-range values. */
static int64_t clamp_i64(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v < lo) return (int64_t)lo;
  if (v > hi) return (int64_t)hi;
  return (int64_t)v;
}

void rf_tensor_set(rf_tensor *t, int64_t i, double v) {
  if (!t || t->on_gpu || i < 0 || i >= t->num_elements) return;
  void *d = t->data;
  switch (t->dtype) {
    case RF_FLOAT16: ((uint16_t *)d)[i] = rf_float_to_half((float)v); break;
    case RF_BFLOAT16:
      ((uint16_t *)d)[i] = rf_float_to_bfloat16((float)v);
      break;
    case RF_FLOAT32: ((float *)d)[i] = (float)v; break;
    case RF_FLOAT64: ((double *)d)[i] = v; break;
    case RF_INT8: ((int8_t *)d)[i] = (int8_t)clamp_i64(v, -128, 127); break;
    case RF_UINT8: ((uint8_t *)d)[i] = (uint8_t)clamp_i64(v, 0, 255); break;
    case RF_INT32:
      ((int32_t *)d)[i] = (int32_t)clamp_i64(v, -2147483648.0, 2147483647.0);
      break;
    case RF_INT64:
      ((int64_t *)d)[i] =
          clamp_i64(v, -9.2233720368547758e18, 9.2233720368547748e18);
      break;
    case RF_BOOL: ((uint8_t *)d)[i] = v != 0.0; break;
    default: break;
  }
}
