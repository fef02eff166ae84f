/* tests/cxx_shape_ref.c - rf_shape_of through the C macro on every case of
 * cxx_shape_cases.h: the reference test_cxx_api.cc compares its C++ form
 * with. */
#include "cxx_shape_cases.h"

#define RF_X(...) rf_shape_of(__VA_ARGS__),

int rf_test_c_shape_count(void) {
  const rf_shape all[] = {RF_SHAPE_CASES(RF_X)};
  return (int)(sizeof all / sizeof all[0]);
}

rf_shape rf_test_c_shape(int i) {
  const rf_shape all[] = {RF_SHAPE_CASES(RF_X)};
  return all[i];
}
