/* tests/cxx_shape_cases.h - argument lists for rf_shape_of, shared by the C
 * reference (cxx_shape_ref.c, the C macro) and the C++ test (test_cxx_api.cc,
 * the C++ form), so both languages are called with the same tokens. */
#ifndef RF_TESTS_CXX_SHAPE_CASES_H
#define RF_TESTS_CXX_SHAPE_CASES_H

#include "ringflow/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(rank, dims...): valid shapes, unknown dims, negative dims (unknown),
 * dims past 32 bits, ranks out of range (unknown rank), extra dims
 * (ignored), unsigned and 64-bit arguments. */
#define RF_SHAPE_CASES(X)         \
  X(2, 3, -1)                     \
  X(0)                            \
  X(1, 0)                         \
  X(3, 1, -7, 2)                  \
  X(1, 1099511627776)             \
  X(2, -1, 4294967295)            \
  X(8, 1, 2, 3, 4, 5, 6, 7, 8)    \
  X(9, 1, 2, 3, 4, 5, 6, 7, 8, 9) \
  X(-1)                           \
  X(4294967298, 1, 2)             \
  X(2, 4, 5, 6)                   \
  X(2, (size_t)5, 6u)             \
  X(1, (int64_t)INT64_MAX)        \
  X(1, (uint64_t)18446744073709551615u)

/* The C macro's result for case i (in RF_SHAPE_CASES order). */
rf_shape rf_test_c_shape(int i);
int rf_test_c_shape_count(void);

#ifdef __cplusplus
}
#endif
#endif
