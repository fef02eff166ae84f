/* ops/collective_attrs.c - the reduction names of collective_attrs.h. */
#include "ops/collective_attrs.h"

#include <string.h>

static const char *const reduction_names[] = {
#define RF_X(e, s) [e] = s,
    RF_REDUCTION_LIST(RF_X)
#undef RF_X
};
_Static_assert(sizeof reduction_names / sizeof *reduction_names ==
                   (size_t)RF__REDUCE_COUNT,
               "one name per reduction");

const char *rf__reduction_name(rf_reduction r) {
  return (int)r >= 0 && r < RF__REDUCE_COUNT ? reduction_names[r] : "invalid";
}

rf_reduction rf__reduction_from_name(const char *name) {
  for (int i = 0; name && i < (int)RF__REDUCE_COUNT; i++)
    if (strcmp(reduction_names[i], name) == 0) return (rf_reduction)i;
  return RF__REDUCE_COUNT;
}
