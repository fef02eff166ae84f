/* ringflow/collectives.h - collectives as graph ops, with gradients.
 *
 * An all-reduce (all-gather, reduce-scatter) is one node per participating
 * device; the nodes of one collective share a shared_name and num_devices, and
 * meet at run time under (shared_name, step id). Reduce and Broadcast are ONE
 * node each; after placement the lowering pass rewrites them into per-device
 * participants (_ReduceSend/_ReduceRecv, _BroadcastSend/_BroadcastRecv).
 * Every input of a collective must have a device ("Device assignment required
 * for collective ops").
 *
 *   rf_output in[2] = {x_on_cpu0, x_on_cpu1}, sum[2];
 *   rf_all_reduce_n(g, "grads", in, 2, RF_REDUCE_SUM, sum);
 *   // sum[i] lives on in[i]'s device and holds in[0] + in[1]
 *
 * Gradients (float dtypes; an integer all-reduce has none, "No gradient
 * defined for AllReduce of int32", while the other four's rules below give
 * integer gradients of integer inputs): all-reduce sum -> all-reduce sum of
 * the incoming gradients, shared_name "X#grad<k>" for collective X, k one more
 * than any k already in the graph's shared names: every rf_gradients call gets
 * collectives of its own, the same in every process building the same
 * graph); avg -> all-reduce avg; max/min -> the summed gradient to the
 * participant holding the extremum (ties: lowest device index; a float32
 * one finds it again with a float32 all-reduce "X#grad<k>#extremum", since
 * over a bfloat16 or float16 wire its output equals no input); prod -> summed
 * gradient times the product of the other inputs (all-gathered and
 * multiplied: exact at zeros, and again differentiable). Reduce sum ->
 * broadcast of the gradient to every input; reduce avg -> broadcast of the
 * gradient divided by the number of inputs; reduce prod/min/max and
 * reduce-scatter other than sum have none (rf_gradients fails with
 * INVALID_ARGUMENT "No gradient defined for ..."); broadcast -> reduce sum of
 * the gradients of every consumer (summed per device first); all-gather and
 * reduce-scatter(sum) are each other's transpose. docs/COLLECTIVES.md has the
 * details.
 *
 * '#' is reserved for those names: a shared_name holding it is refused
 * (INVALID_ARGUMENT, recorded in the graph). */
#ifndef RINGFLOW_COLLECTIVES_H
#define RINGFLOW_COLLECTIVES_H

#include "ringflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rf_reduction {
  RF_REDUCE_SUM,
  RF_REDUCE_PROD,
  RF_REDUCE_MIN,
  RF_REDUCE_MAX,
  RF_REDUCE_AVG, /* sum / num_devices; integers: the wrapped sum (in the
                   dtype), then divided, truncating: int8 {100, 100, 100}
                   averages to 14 (300 wraps to 44) */
} rf_reduction;

/* One all-reduce participant on input's device. shared_name NULL: the node's
 * name (then every participant must be given the same explicit name scheme;
 * prefer rf_all_reduce_n); "" is INVALID_ARGUMENT ("shared_name is
 * empty"). */
RF_API rf_output rf_all_reduce(rf_graph *g, const char *name, rf_output input,
                               rf_reduction reduction, int num_devices,
                               const char *shared_name);
/* All n participants at once: outputs[i] on the device of inputs[i], shared
 * name derived from `name` (participants <name>_0 ... <name>_<n-1>); when NULL,
 * generated: "AllReduce", "AllReduce_1", ... (likewise "AllGather",
 * "ReduceScatter"), the first that is no node's name nor a collective's
 * shared_name and whose participant names are all free (so after a first
 * unnamed all-reduce of 3 inputs, whose participants are AllReduce_0..2, the
 * next is "AllReduce_3"): every unnamed call is a collective of its own. A
 * name that is empty ("AllReduce: a collective's name must not be empty") or
 * holds '#' ("AllReduce 'a#b': the name is not valid: it holds '#', which
 * is reserved ...")
 * is INVALID_ARGUMENT, naming the collective, not a participant. A name
 * that is already another collective's (a shared_name in the graph, or a
 * Reduce or Broadcast node's name, which lowering makes its pieces' shared
 * name) is ALREADY_EXISTS ("collective 'g' (AllReduce): the name is already
 * another collective's: node 'g' (Reduce)"); so are rf_reduce's and
 * rf_broadcast's names that are ("node 'g' (Reduce): the name is already
 * another collective's: node 'g_0' (AllReduce)"), and their generated
 * names ("Reduce", "Reduce_1", ...; "Broadcast", ...) skip them. The
 * inputs must share one dtype (else INVALID_ARGUMENT naming both inputs, their
 * dtypes and devices; likewise for rf_all_gather_n, rf_reduce_scatter_n and
 * rf_reduce), must not have shapes known to differ (both ranks known and
 * different, or a dim known in both and different: INVALID_ARGUMENT "AllReduce
 * 'NAME': inputs disagree on shape: input 0 (node 'a') is (2, 3) on cpu:0 but
 * input 1 (node 'b') is (3, 2) on cpu:1"; likewise for the other three; shapes
 * known only at run time are checked by the run), and must go on n different
 * devices (inputs[i]'s, or the device scope's when one is pushed:
 * INVALID_ARGUMENT "... participants 0 (input node 'a') and 1 (input node 'b')
 * would both be on cpu:1"; not rf_reduce's, whose inputs the lowering checks).
 * On error nothing is added, outputs is untouched and the graph keeps the
 * error. */
RF_API void rf_all_reduce_n(rf_graph *g, const char *name,
                            const rf_output *inputs, int n,
                            rf_reduction reduction, rf_output *outputs);

/* One node reducing n inputs (on n different devices) to one output on the
 * node's device (the device scope, else the first input's device). One input
 * must be on that device: else INVALID_ARGUMENT here ("No input tensor uses
 * the same device as the Reduce op: node 'r' is on cpu:0, its inputs on
 * cpu:1, cpu:2"), or when the session compiles for a device changed later
 * (or one whose task only the job decides: "cpu:0" against "/task:1/cpu:0"). */
RF_API rf_output rf_reduce(rf_graph *g, const char *name,
                           const rf_output *inputs, int n,
                           rf_reduction reduction);

/* One node: its output may feed nodes on any devices, each consuming device
 * receiving the value. Placed on the input's device unless scoped. */
RF_API rf_output rf_broadcast(rf_graph *g, const char *name, rf_output input);

/* Participants of an all-gather: inputs of equal shape (d0, ...) -> every
 * participant gets (n*d0, ...), rank order = device order. */
RF_API void rf_all_gather_n(rf_graph *g, const char *name,
                            const rf_output *inputs, int n, rf_output *outputs);
/* Participants of a reduce-scatter: inputs (n*d0, ...) -> the participant
 * of rank r gets rows [r*d0, (r+1)*d0) of the reduction, rank order =
 * device order (not the order of inputs: outputs[i] holds the rows of the
 * rank of inputs[i]'s device). */
RF_API void rf_reduce_scatter_n(rf_graph *g, const char *name,
                                const rf_output *inputs, int n,
                                rf_reduction reduction, rf_output *outputs);

/* The wire dtype of one all-reduce participant (its "comm_dtype" attr;
 * set it on every participant of the collective alike): RF_BFLOAT16 or
 * RF_FLOAT16 cast a float32 all-reduce's input to that dtype for the
 * collective and its result back to float32; RF_FLOAT32 keeps full
 * precision whatever rf_session_options.collective_comm_dtype says (any
 * all-reduce takes it: it narrows nothing);
 * RF_DTYPE_INVALID ("auto", the default) follows that option. Returns
 * NULL, or INVALID_ARGUMENT naming the node (not an AllReduce, another
 * dtype, or a narrowing dtype for a non-float32 all-reduce) and leaves the
 * node unchanged. docs/COLLECTIVES.md, "Reduced-precision communication". */
RF_API rf_status *rf_all_reduce_set_comm_dtype(rf_node *node, rf_dtype dtype);

/* Single participants, for graphs built per device. */
RF_API rf_output rf_all_gather(rf_graph *g, const char *name, rf_output input,
                               int num_devices, const char *shared_name);
RF_API rf_output rf_reduce_scatter(rf_graph *g, const char *name,
                                   rf_output input, rf_reduction reduction,
                                   int num_devices, const char *shared_name);

#ifdef __cplusplus
}
#endif
#endif
