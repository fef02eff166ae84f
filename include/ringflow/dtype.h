/* ringflow/dtype.h - element types and shapes.
 *
 * A shape has rank 0..RF_MAX_RANK; RF_UNKNOWN_RANK and RF_UNKNOWN_DIM mark what
 * is not known while a graph is built. Tensors always have fully defined
 * shapes. */
#ifndef RINGFLOW_DTYPE_H
#define RINGFLOW_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringflow/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(enum, name, size in bytes) */
#define RF_DTYPE_LIST(X)        \
  X(RF_FLOAT16, "float16", 2)   \
  X(RF_BFLOAT16, "bfloat16", 2) \
  X(RF_FLOAT32, "float32", 4)   \
  X(RF_FLOAT64, "float64", 8)   \
  X(RF_INT8, "int8", 1)         \
  X(RF_UINT8, "uint8", 1)       \
  X(RF_INT32, "int32", 4)       \
  X(RF_INT64, "int64", 8)       \
  X(RF_BOOL, "bool", 1)         \
  X(RF_RESOURCE, "resource", 8)

typedef enum rf_dtype {
  RF_DTYPE_INVALID = -1,
#define RF_X(e, name, size) e,
  RF_DTYPE_LIST(RF_X)
#undef RF_X
      RF_DTYPE_COUNT
} rf_dtype;

/* Bytes per element; 0 for an invalid dtype. */
RF_API size_t rf_dtype_size(rf_dtype dtype);
/* "float32" etc.; "invalid" for an invalid dtype. */
RF_API const char *rf_dtype_name(rf_dtype dtype);
/* The dtype named `name`, or RF_DTYPE_INVALID. */
RF_API rf_dtype rf_dtype_from_name(const char *name);
RF_API bool rf_dtype_is_float(rf_dtype dtype);
RF_API bool rf_dtype_is_integer(rf_dtype dtype);

/* Conversions for the two 16-bit float formats (round to nearest even). */
RF_API float rf_half_to_float(uint16_t h);
RF_API uint16_t rf_float_to_half(float f);
RF_API float rf_bfloat16_to_float(uint16_t b);
RF_API uint16_t rf_float_to_bfloat16(float f);

#define RF_MAX_RANK 8
#define RF_UNKNOWN_RANK (-1)
#define RF_UNKNOWN_DIM (-1)

/* A plain value type: copy it freely. */
typedef struct rf_shape {
  int rank; /* 0..RF_MAX_RANK, or RF_UNKNOWN_RANK */
  int64_t dims[RF_MAX_RANK];
} rf_shape;

/* Builds a shape from `rank` dims (RF_UNKNOWN_DIM allowed). A rank outside
 * 0..RF_MAX_RANK gives a shape of unknown rank. */
RF_API rf_shape rf_shape_make(int rank, const int64_t *dims);
RF_API rf_shape rf_shape_unknown(void);
RF_API rf_shape rf_shape_scalar(void);
/* Convenience: rf_shape_of(2, 3, 4) is the shape (3, 4): the rank, then that
 * many dims; RF_UNKNOWN_DIM (-1), or any negative dim, marks an unknown dim,
 * a rank outside 0..RF_MAX_RANK gives a shape of unknown rank, and dims past
 * the rank are ignored. Every argument is converted to int64_t: in C by a
 * macro (the variadic function reads int64_t, so plain int literals passed
 * to it directly would be undefined behaviour, and -1 came out as
 * 4294967295), in C++ by a function template (below) that gives the same
 * shapes. In C the call must give at least `rank` dims; in C++ dims not
 * given are unknown: rf_shape_of(3, 4, 5) is (4, 5, ?). */
#ifndef __cplusplus
RF_API rf_shape rf_shape_of(int rank, ...);
#endif
/* The rank followed by the dims, as one array (what the macro passes). */
RF_API rf_shape rf_shape_from_array(const int64_t *rank_then_dims);
#ifndef __cplusplus
#define rf_shape_of(...) rf_shape_from_array((const int64_t[]){__VA_ARGS__})
#endif
RF_API bool rf_shape_is_fully_defined(const rf_shape *shape);
/* Elements of a fully defined shape; -1 otherwise, and -1 for a shape no
 * tensor may have: its nonzero dims multiply past INT64_MAX (zeros are left
 * out, so that every stride of a tensor fits in int64: (0, 2^62, 4) is
 * refused too). Every shape the library builds, loads or infers is held to
 * the same rule; breaking it is an INVALID_ARGUMENT error. */
RF_API int64_t rf_shape_num_elements(const rf_shape *shape);
RF_API bool rf_shape_equal(const rf_shape *a, const rf_shape *b);
/* Writes "(3, ?, 4)" or "<unknown>" into buf (always NUL-terminated). */
RF_API void rf_shape_format(const rf_shape *shape, char *buf, size_t len);

#ifdef __cplusplus
}

#if __cplusplus >= 201103L
/* rf_shape_of for C++: the array the C macro builds (the rank, then every
 * dim as int64_t), padded with unknown dims so that a rank above the number
 * of dims given reads none past it. extern "C++": programs may include C
 * headers inside extern "C" { }. */
extern "C++" {
template <typename... Dims>
inline rf_shape rf_shape_of(int64_t rank, Dims... dims) {
  int64_t a[1 + sizeof...(Dims) + RF_MAX_RANK] = {
      rank, static_cast<int64_t>(dims)...};
  for (size_t i = 1 + sizeof...(Dims); i < sizeof a / sizeof a[0]; i++)
    a[i] = RF_UNKNOWN_DIM;
  return rf_shape_from_array(a);
}
}
#endif
#endif
#endif
