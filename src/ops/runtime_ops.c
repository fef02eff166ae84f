/* ops/runtime_ops.c - the internal ops a session adds while compiling: _Arg
 * (a fed value), _Retval (a fetched value), _Send/_Recv (a tensor crossing
 * devices through the step's rendezvous) and _Token (the empty tensor a
 * crossing control edge sends). Users never build these. */
#include "ops/op_families.h"
#include "ops/op_registry.h"

static rf_status *recv_shape(rf__shape_ctx *c) {
  rf_shape s;
  RF_CHECK(rf__attrs_get_shape(&c->node->attrs, "shape", &s));
  c->output_shapes[0] = s;
  return NULL;
}

static rf_status *token_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = rf_shape_of(1, (int64_t)0);
  return NULL;
}

static const unsigned internal = RF_OP_STATEFUL | RF_OP_NO_GRADIENT;

static const rf__op_spec runtime_ops[] = {
    {.name = "_Arg",
     .outputs = "output: T",
     .attrs = "T: type; index: int >= 0",
     .flags = internal},
    {.name = "_Retval",
     .inputs = "input: T",
     .attrs = "T: type; index: int >= 0",
     .flags = internal},
    {.name = "_Send",
     .inputs = "tensor: T",
     .attrs = "T: type; key: string",
     .flags = internal},
    {.name = "_Recv",
     .outputs = "tensor: T",
     /* host_memory: the value feeds a host-memory input of a GPU kernel, so
      * the receiving GPU device hands over host memory (no device copy). */
     .attrs = "T: type; key: string; shape: shape; host_memory: bool = false",
     .shape = recv_shape,
     .flags = internal},
    {.name = "_Token",
     .outputs = "token: float32",
     .shape = token_shape,
     .flags = RF_OP_NO_GRADIENT},
};

rf_status *rf__register_runtime_ops(void) {
  for (size_t i = 0; i < sizeof runtime_ops / sizeof runtime_ops[0]; i++)
    RF_CHECK(rf__op_register(&runtime_ops[i]));
  return NULL;
}
