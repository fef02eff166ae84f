/* ops/collective_comm.c - rf_all_reduce_set_comm_dtype: the per-collective
 * wire dtype, an attr the bucketing pass reads at compile time
 * (passes/bucket_collectives.c). */
#include <string.h>

#include "graph/graph.h"
#include "ops/op_registry.h"
#include "ringflow/collectives.h"

rf_status *rf_all_reduce_set_comm_dtype(rf_node *node, rf_dtype dtype) {
  if (!node) return rf__invalid("rf_all_reduce_set_comm_dtype: NULL node");
  if (strcmp(node->op->name, "AllReduce") != 0)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (%s) on %s is not an "
        "AllReduce",
        node->name, node->op->name, node->requested_device);
  const char *name = dtype == RF_DTYPE_INVALID ? "auto" : rf_dtype_name(dtype);
  if (dtype != RF_DTYPE_INVALID && dtype != RF_FLOAT32 &&
      dtype != RF_BFLOAT16 && dtype != RF_FLOAT16)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (AllReduce) on %s: the wire "
        "dtype must be float32, bfloat16 or float16, got %s",
        node->name, node->requested_device, name);
  /* float32 only says "no narrowing", which holds for any dtype (as the
   * bucketing pass reads the attr). */
  if ((dtype == RF_BFLOAT16 || dtype == RF_FLOAT16) &&
      node->out_dtypes[0] != RF_FLOAT32)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (AllReduce) on %s reduces "
        "%s: only float32 all-reduces narrow to a comm dtype",
        node->name, node->requested_device, rf_dtype_name(node->out_dtypes[0]));
  rf__attr_value v = rf__attr_string_ref(name);
  return rf__attrs_set(&node->attrs, "comm_dtype", &v);
}
