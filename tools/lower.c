/* tools/lower.c - `ringflow lower GRAPH.json`: prints a graph before and after
 * placement and the POST_PLACEMENT passes (collective lowering), and with
 * --dot DIR writes both as DOT (and SVG when Graphviz's `dot` is installed). */
#include <stdbool.h>
#include <string.h>

#include "devices.h"
#include "options.h"
#include "ringflow/graph_io.h"
#include "tools.h"

static void print_graph(const rf_graph *g, const char *title) {
  printf("== %s (%d nodes)\n", title, rf_graph_num_nodes(g));
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *n = rf_graph_node(g, i);
    printf("  %s = %s(", rf_node_name(n), rf_node_op(n));
    for (int k = 0; k < rf_node_num_inputs(n); k++) {
      rf_output in = rf_node_input(n, k);
      printf("%s%s:%d", k ? ", " : "", rf_node_name(in.node), in.index);
    }
    printf(")");
    for (int k = 0; k < rf_node_num_control_inputs(n); k++)
      printf(" ^%s", rf_node_name(rf_node_control_input(n, k)));
    if (rf_node_device(n)[0]) printf("  @%s", rf_node_device(n));
    printf("\n");
  }
}

/* Ops whose kernel forwards a tensor instead of allocating its output
 * (docs/COLLECTIVES.md "Copies"): such an input of a bucket cannot be
 * written in place by its producer, so _BucketPack copies it. */
static bool forwards(const char *op) {
  static const char *const ops[] = {"Placeholder", "Const", "Identity",
                                    "Reshape", "_Recv"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (strcmp(op, ops[i]) == 0) return true;
  return false;
}

/* One line per bucket participant: what it fused and which copies it
 * costs (runtime/executor_homes.c: producers that allocate their output
 * write into the bucket; forwarded inputs are copied in; none out). */
static void print_buckets(const rf_graph *g, int64_t bucket_bytes) {
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *n = rf_graph_node(g, i);
    if (strcmp(rf_node_op(n), "_BucketPack") != 0) continue;
    int64_t k = 0, total = 0;
    rf_dtype t = RF_FLOAT32;
    rf_status_free(rf_node_attr_int(n, "N", &k));
    rf_status_free(rf_node_attr_int(n, "total", &total));
    rf_status_free(rf_node_attr_dtype(n, "T", &t));
    int copied = 0;
    for (int j = 0; j < rf_node_num_inputs(n); j++)
      copied += forwards(rf_node_op(rf_node_input(n, j).node));
    printf(
        "bucket %s: %lld all-reduces, %lld bytes of %s: producers write "
        "into the bucket, _BucketPack copies in only inputs a kernel "
        "forwards (here %d of %d",
        rf_node_device(n), (long long)k,
        (long long)total * (long long)rf_dtype_size(t), rf_dtype_name(t),
        copied, rf_node_num_inputs(n));
    for (int j = 0, m = 0; j < rf_node_num_inputs(n); j++) {
      const rf_node *p = rf_node_input(n, j).node;
      if (forwards(rf_node_op(p)))
        printf("%s%s", m++ ? ", " : ": ", rf_node_name(p));
    }
    /* The size the pass filled it to (passes/bucket_collectives.c). */
    int64_t limit = 0;
    rf_status_free(rf_node_attr_int(n, "limit", &limit));
    bool gpu = strstr(rf_node_device(n), "gpu:") != NULL;
    printf(
        "), zero-copy views out (_BucketUnpack); buckets of up to %lld "
        "bytes (%s)\n",
        (long long)limit,
        bucket_bytes != RF_BUCKET_BYTES_AUTO ? "--bucket-bytes"
        : gpu                                ? "the default on GPU devices"
        : limit == RF_DEFAULT_BUCKET_BYTES_CPU_JOB
            ? "the default on CPU devices of several processes"
            : "the default on CPU devices");
  }
}

/* One line per multi-tensor optimizer update and grouped AssignMuls
 * (passes/group_updates.c). */
static void print_update_groups(const rf_graph *g) {
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *n = rf_graph_node(g, i);
    const char *op = rf_node_op(n);
    bool mul = strcmp(op, "_MultiAssignMul") == 0;
    if (strncmp(op, "_MultiApply", 11) != 0 && !mul) continue;
    int64_t k = 0;
    rf_dtype t = RF_FLOAT32;
    rf_status_free(rf_node_attr_int(n, "N", &k));
    rf_status_free(rf_node_attr_dtype(n, mul ? "dtype" : "T", &t));
    printf("updates %s: %lld %s updates of %s as one %s\n", rf_node_device(n),
           (long long)k, mul ? "AssignMul" : op + strlen("_MultiApply"),
           rf_dtype_name(t), op);
  }
}

/* One line per MatMul, Conv2D or MaxPoolGrad with its epilogue
 * (passes/fuse_epilogues.c) and per cross-entropy with its gradient
 * (passes/fuse_xent_grad.c). */
static void print_epilogues(const rf_graph *g) {
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *n = rf_graph_node(g, i);
    const char *op = rf_node_op(n);
    if (strcmp(op, "_SparseXentWithGrad") == 0) {
      printf(
          "epilogue %s: SparseSoftmaxCrossEntropyWithLogits + "
          "_SparseXentGrad as one %s '%s'\n",
          rf_node_device(n), op, rf_node_name(n));
      continue;
    }
    if (strcmp(op, "_FusedConv2DBiasRelu") == 0 ||
        strcmp(op, "_MaxPoolGradRelu") == 0) {
      bool conv = op[1] == 'F';
      printf("epilogue %s: %s as one %s '%s'\n", rf_node_device(n),
             conv ? "Conv2D + BiasAdd + Relu" : "MaxPoolGrad + _ReluGrad", op,
             rf_node_name(n));
      continue;
    }
    if (strncmp(op, "_FusedMatMul", 12) != 0) continue;
    const char *what = strcmp(op, "_FusedMatMulBiasRelu") == 0
                           ? "BiasAdd + Relu"
                       : strcmp(op, "_FusedMatMulBias") == 0 ? "BiasAdd"
                                                             : "_BiasAddGrad";
    printf("epilogue %s: MatMul + %s as one %s '%s'\n", rf_node_device(n), what,
           op, rf_node_name(n));
  }
}

int cmd_lower(int argc, char **argv) {
  const char *dot_dir = NULL;
  int64_t bucket_bytes = RF_DEFAULT_BUCKET_BYTES;
  int comm = 0, group = 0, epilogues = RF_MATMUL_EPILOGUES_AUTO,
      conv_epilogues = RF_CONV_EPILOGUES_GPU;
  static const char *const group_choices[] = {"on", "off", NULL};
  /* In RF_MATMUL_EPILOGUES_* order. */
  static const char *const epilogue_choices[] = {"off", "gpu", "all", "auto",
                                                 NULL};
  /* In RF_CONV_EPILOGUES_* order. */
  static const char *const conv_choices[] = {"off", "gpu", "all", NULL};
  static const char *const comm_choices[] = {"fp32", "bf16", "fp16", NULL};
  static const char *const comm_dtypes[] = {"float32", "bfloat16", "float16"};
  tool_devices devices;
  char why[64];
  tool_devices_parse("8", &devices, why, sizeof why);
  const tool_opt opts[] = {
      TOOL_DEVICES("devices", &devices,
                   "the session's devices: of their type, every device up to "
                   "the highest index listed (default 8: cpu:0-7; a session "
                   "always has cpu:0)"),
      TOOL_STRING("dot", &dot_dir, "DIR",
                  "also write both graphs as DIR/before.dot and "
                  "DIR/after.dot (and SVG with Graphviz)"),
      TOOL_SIZE("bucket-bytes", &bucket_bytes, "N",
                "fuse independent all-reduces into buckets of up to N bytes "
                "on every device kind (0: none; default: 1M on CPU devices, "
                "4M on CPU devices of several processes (mpirun), 25M on "
                "GPU devices)",
                0, (double)(INT64_C(1) << 40)),
      TOOL_CHOICE("comm-dtype", &comm, "T",
                  "the wire dtype of float32 all-reduces (default fp32)",
                  comm_choices),
      TOOL_CHOICE("group-updates", &group, "S",
                  "group the optimizer updates of each device into "
                  "multi-tensor updates (default on)",
                  group_choices),
      TOOL_CHOICE("matmul-epilogues", &epilogues, "S",
                  "fuse MatMul with its BiasAdd, Relu or bias gradient: "
                  "float32 products on GPU devices (auto, the default), "
                  "nowhere (off), every dtype's on GPU devices (gpu) or on "
                  "every device (all)",
                  epilogue_choices),
      TOOL_CHOICE("conv-epilogues", &conv_epilogues, "S",
                  "fuse Conv2D with its BiasAdd and Relu, and MaxPoolGrad "
                  "with the Relu's gradient, nowhere (off), on GPU devices "
                  "(gpu, the default) or on every device (all), as ringflow "
                  "train --conv-epilogues does",
                  conv_choices),
  };
  const tool_cmd cmd = {
      "lower",
      "usage: ringflow lower GRAPH.json [options]\n"
      "  prints the graph in GRAPH.json, then the graph after placement on\n"
      "  --devices, MatMul and Conv2D epilogues, bucketing, update grouping\n"
      "  and collective lowering, then one line per bucket, per multi-tensor\n"
      "  update, per MatMul, Conv2D or MaxPoolGrad with its epilogue and per\n"
      "  cross-entropy fused with its gradient (RF_FUSE_XENT_GRAD=0: not).\n"
      "  RF_LOG=debug prints why each node went where and what each\n"
      "  collective became to stderr;\n"
      "  RF_DUMP_GRAPH_DIR=DIR writes the graph before and after each\n"
      "  phase as JSON and DOT\n"
      "options:\n",
      NULL, opts, (int)(sizeof opts / sizeof *opts)};
  char *pos[1];
  int npos, rc = tool_parse(&cmd, argc, argv, pos, 1, &npos);
  if (rc) return rc == TOOL_HELP_SHOWN ? 0 : rc;
  if (npos != 1) return tool_usage_error(&cmd, "no graph file given");
  if (!pos[0][0]) /* as an empty path option is */
    return tool_usage_error(&cmd, "GRAPH.json '': an empty path");
  rf_graph *g, *lowered;
  if (dot_dir) RF_TOOL_TRY(tool_make_dir(dot_dir));
  RF_TOOL_TRY(rf_graph_load(pos[0], &g));
  rf_session_options o;
  rf_session_options_init(&o);
  tool_devices_session(&devices, &o);
  o.collective_bucket_bytes = bucket_bytes;
  o.collective_comm_dtype = comm_dtypes[comm];
  o.group_optimizer_updates = group == 0;
  o.matmul_epilogues = epilogues;
  o.conv_epilogues = conv_epilogues;
  rf_status *st = rf_graph_lower(g, &o, &lowered);
  if (st) {
    rf_graph_free(g);
    return tool_report(st);
  }
  print_graph(g, "before lowering");
  print_graph(lowered, "after placement and lowering");
  print_buckets(lowered, bucket_bytes);
  print_update_groups(lowered);
  print_epilogues(lowered);
  if (dot_dir) {
    st = tool_write_dot(g, dot_dir, "before", true);
    if (!st) st = tool_write_dot(lowered, dot_dir, "after", true);
  }
  rf_graph_free(g);
  rf_graph_free(lowered);
  return st ? tool_report(st) : 0;
}
