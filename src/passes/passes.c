/* passes/passes.c - registers the library's graph passes (the family
 * rf__registry_init calls). A pass added to the library adds one line here;
 * placement, pruning and partitioning are fixed compile stages, not passes. */
#include "ops/families.h"
#include "passes/pass_registry.h"

rf_status *rf__register_passes(void) {
  /* None yet: collective lowering registers here (phase POST_PLACEMENT). */
  return NULL;
}
