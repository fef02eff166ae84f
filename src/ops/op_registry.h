/* ops/op_registry.h - the op table: each op's signature, attributes, shape
 * function and gradient, registered once at start-up from a short text spec in
 * TensorFlow's REGISTER_OP style:
 *
 *   static const rf__op_spec matmul = {
 *       .name = "MatMul",
 *       .inputs = "a: T, b: T",
 *       .outputs = "product: T",
 *       .attrs = "T: type in {@float, int32, int64}; "
 *                "transpose_a: bool = false; transpose_b: bool = false",
 *       .shape = matmul_shape, .grad = matmul_grad};
 *   RF_CHECK(rf__op_register(&matmul));
 *
 * Argument specs: "name: T" (dtype from type attr T), "name: int32" (fixed),
 * "name: N * T" (variadic: N inputs of type T, N an int attr). Attr specs,
 * separated by ';': "NAME: TYPE [in {...}] [>= K] [= DEFAULT]" where TYPE is an
 * attr type name from graph/attrs.h. Type sets may use groups @float (float16,
 * bfloat16, float32, float64), @int (int8, uint8, int32, int64), @numeric
 * (both), @all (numeric and bool). String attrs may list allowed values:
 * "reduction: string in {sum, prod, min, max} = sum". The registry is filled
 * once (rf__ops_init, ops/op_families.h) and read-only afterwards, so lookups
 * take no lock.
 */
#ifndef RF_OPS_OP_REGISTRY_H
#define RF_OPS_OP_REGISTRY_H

#include <stdbool.h>

#include "graph/graph.h"

#define RF_MAX_OP_ARGS 16
#define RF_MAX_OP_ATTRS 16
#define RF_MAX_ALLOWED 16
#define RF_ARG_NAME_MAX 32

/* ---- shape inference ---- */
typedef struct rf__shape_ctx {
  const rf_node *node; /* attrs readable; edges not yet attached */
  int num_inputs;      /* flattened */
  const rf_dtype *input_dtypes;
  const rf_shape *input_shapes;
  /* The value of input k when it comes straight from a Const node, else NULL
   * (lets Reshape and Fill infer shapes from constant shape inputs). */
  rf_tensor *const *input_values;
  int num_outputs;
  rf_shape *output_shapes; /* preset to unknown; the function refines them */
} rf__shape_ctx;

/* Returns INVALID_ARGUMENT for inputs whose shapes cannot work (message says
 * which inputs and shapes; the builder prefixes the node and op). */
typedef rf_status *(*rf__shape_fn)(rf__shape_ctx *c);

/* ---- gradients ---- */
typedef struct rf__grad_ctx {
  rf_graph *g;
  rf_node *op; /* the forward node */
  /* Per output: the summed incoming gradient; invalid ({NULL,0}) when none
   * flows into that output (treat as zero). NULL for RF_OP_GRAD_UNSUMMED ops.
   */
  const rf_output *dy;
  /* Per output, for RF_OP_GRAD_UNSUMMED ops: the contributions, un-summed. */
  const rf_output *const *dy_parts;
  const int *num_dy_parts;
  /* Per flattened input: set by the function; left invalid means "no
   * gradient flows to this input". */
  rf_output *dx;
  /* This rf_gradients call's number in the graph, for the names of the
   * collectives it makes (ops/collective_names.h). */
  int64_t construction;
  /* A collective participant into which no gradient flowed: dy holds the
   * zeros it takes part in its peers' gradient collectives with. */
  bool dy_is_filler;
} rf__grad_ctx;

/* Builds gradient nodes in c->g (the builder has already pushed the forward
 * op's device as the device scope). Errors: return a status, or record one in
 * the graph through the op functions (the builder checks both). */
typedef rf_status *(*rf__grad_fn)(rf__grad_ctx *c);

enum {
  RF_OP_STATEFUL = 1u << 0,      /* has side effects or state: never pruned
                                    as duplicate, never constant-folded */
  RF_OP_GRAD_UNSUMMED = 1u << 1, /* grad fn wants dy_parts, not dy */
  RF_OP_NO_GRADIENT = 1u << 2,   /* not differentiable: gradients stop here
                                    (Shape, ArgMax, Equal...) without error */
  RF_OP_GROUPED = 1u << 3,       /* a collective participant: its outputs depend
                                    on the inputs of every node with the same
                                    "shared_name" attr, though no edge says so;
                                    gradients treat the group as one */
};

/* Reserved in the shared_name of RF_OP_GROUPED ops for the collectives
 * rf_gradients makes ("ar#grad1", ops/collective_names.h): the node builder
 * refuses it in names users give, so those never meet a gradient's. */
#define RF_RESERVED_NAME_CHAR '#'

/* A _Retval's attrs (runtime/compile.c): the node and op the caller
 * fetched, which lowering may replace as the _Retval's input; errors about
 * the fetch name them. */
#define RF_FETCH_NODE_ATTR "_fetch_node"
#define RF_FETCH_OP_ATTR "_fetch_op"
/* An _Arg's attrs: the node and op whose output it feeds (it stands for
 * them in the graph being compiled); errors about its edges name them. */
#define RF_FEED_NODE_ATTR "_feed_node"
#define RF_FEED_OP_ATTR "_feed_op"

typedef struct rf__op_spec {
  const char *name;
  const char *inputs;  /* may be NULL or "" */
  const char *outputs; /* may be NULL or "" */
  const char *attrs;   /* may be NULL or "" */
  rf__shape_fn shape;  /* NULL: outputs of unknown shape */
  rf__grad_fn grad;    /* NULL: "No gradient defined for op X" */
  unsigned flags;
} rf__op_spec;

typedef struct rf__arg_def {
  char name[RF_ARG_NAME_MAX];
  rf_dtype fixed_type;               /* or RF_DTYPE_INVALID */
  char type_attr[RF_ARG_NAME_MAX];   /* "" when fixed */
  char number_attr[RF_ARG_NAME_MAX]; /* "" unless variadic */
} rf__arg_def;

typedef struct rf__attr_def {
  char name[RF_ARG_NAME_MAX];
  rf__attr_type type;
  bool has_default;
  rf__attr_value default_value;
  int num_allowed_types; /* 0: any */
  rf_dtype allowed_types[RF_DTYPE_COUNT];
  int num_allowed_strings; /* 0: any */
  char allowed_strings[RF_MAX_ALLOWED][RF_ARG_NAME_MAX];
  bool has_minimum;
  int64_t minimum;
} rf__attr_def;

typedef struct rf__op_def {
  char name[64];
  int num_inputs, num_outputs, num_attrs;
  rf__arg_def inputs[RF_MAX_OP_ARGS];
  rf__arg_def outputs[RF_MAX_OP_ARGS];
  rf__attr_def attrs[RF_MAX_OP_ATTRS];
  rf__shape_fn shape;
  rf__grad_fn grad;
  unsigned flags;
  UT_hash_handle hh;
} rf__op_def;

/* Parses spec and adds the op. INVALID_ARGUMENT for a malformed spec (message
 * quotes the bad part), ALREADY_EXISTS for a duplicate name. */
rf_status *rf__op_register(const rf__op_spec *spec);
/* The op named `name`, or NULL. */
const rf__op_def *rf__op_find(const char *name);
/* The attr def named `name` in op, or NULL. */
const rf__attr_def *rf__op_find_attr(const rf__op_def *op, const char *name);

#endif
