/* ops/collective_comm.c - rf_all_reduce_set_comm_dtype: the per-collective
 * wire dtype, an attr the bucketing pass reads at compile time
 * (passes/bucket_collectives.c). */
#include <string.h>

#include "graph/graph.h"
#include "ops/op_registry.h"
#include "ringflow/collectives.h"

rf_status *rf_all_reduce_set_comm_dtype(rf_node *node, rf_dtype dtype) {
  if (!node) return rf__invalid("rf_all_reduce_set_comm_dtype: NULL node");
  /* " on <device>" only where the node asks for one */
  const char *dev = node->requested_device;
  const char *on = dev[0] ? " on " : "";
  if (strcmp(node->op->name, "AllReduce") != 0)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (%s)%s%s is not an "
        "AllReduce",
        node->name, node->op->name, on, dev);
  const char *name = dtype == RF_DTYPE_INVALID ? "auto" : rf_dtype_name(dtype);
  if (dtype != RF_DTYPE_INVALID && dtype != RF_FLOAT32 &&
      dtype != RF_BFLOAT16 && dtype != RF_FLOAT16)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (AllReduce)%s%s: the wire "
        "dtype must be float32, bfloat16 or float16, got %s",
        node->name, on, dev, name);
  /* float32 never narrows, so any all-reduce takes it (as the compile pass
   * and graph files do); only a narrowing one needs a float32 all-reduce. */
  bool narrows = dtype == RF_BFLOAT16 || dtype == RF_FLOAT16;
  if (narrows && node->out_dtypes[0] != RF_FLOAT32)
    return rf__invalid(
        "rf_all_reduce_set_comm_dtype: node '%s' (AllReduce)%s%s reduces "
        "%s: only float32 all-reduces take a narrowing comm dtype",
        node->name, on, dev, rf_dtype_name(node->out_dtypes[0]));
  rf__attr_value v = rf__attr_string_ref(name);
  return rf__attrs_set(&node->attrs, "comm_dtype", &v);
}
