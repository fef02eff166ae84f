/* ops/ops_init.c - fills the op table once, on first use. The table is
 * read-only afterwards, so lookups need no lock. The list is explicit: a
 * static library would drop self-registering object files that nothing
 * references. */
#include "core/once.h"
#include "ops/op_families.h"

static const rf__init_fn families[] = {
    rf__register_array_ops,      rf__register_state_ops,
    rf__register_math_ops,       rf__register_nn_ops,
    rf__register_reduction_ops,  rf__register_runtime_ops,
    rf__register_collective_ops, rf__register_conv_ops,
    rf__register_shape_ops,      rf__register_index_ops,
    rf__register_linalg_ops,     rf__register_gelu_ops,
    rf__register_dropout_ops,    rf__register_layer_norm_ops,
    rf__register_batch_norm_ops,
};

rf_status *rf__ops_init(void) {
  static rf__once once = RF_ONCE_INIT;
  return rf__once_run(&once, families, sizeof families / sizeof families[0]);
}
