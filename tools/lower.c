/* tools/lower.c - `ringflow lower GRAPH.json`: prints a graph before and after
 * placement and the POST_PLACEMENT passes (collective lowering), and with
 * --dot DIR writes both as DOT (and SVG when Graphviz's `dot` is installed). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

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

int cmd_lower(int argc, char **argv) {
  static const struct option longs[] = {{"dot", required_argument, 0, 'd'},
                                        {"devices", required_argument, 0, 'n'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *dot_dir = NULL;
  int ndev = 8, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    if (c == 'd')
      dot_dir = optarg;
    else if (c == 'n' && !parse_int(optarg, 1, 64, &ndev))
      continue;
    else {
      fprintf(c == 'h' ? stdout : stderr,
              "usage: ringflow lower GRAPH.json [--devices N] [--dot DIR]\n"
              "  prints the graph, then the graph after placement on N virtual "
              "CPU devices (default 8) and collective lowering\n"
              "  RF_LOG=debug prints why each node went where and what each "
              "collective\n"
              "  became to stderr; RF_DUMP_GRAPH_DIR=DIR writes the graph "
              "before and after\n"
              "  each phase as JSON and DOT\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (optind + 1 != argc)
    return tool_fail("lower: give exactly one graph file");
  rf_graph *g, *lowered;
  RF_TOOL_TRY(rf_graph_load(argv[optind], &g));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  rf_status *st = rf_graph_lower(g, &o, &lowered);
  if (st) {
    rf_graph_free(g);
    return tool_report(st);
  }
  print_graph(g, "before lowering");
  print_graph(lowered, "after placement and lowering");
  if (dot_dir) {
    st = tool_write_dot(g, dot_dir, "before");
    if (!st) st = tool_write_dot(lowered, dot_dir, "after");
  }
  rf_graph_free(g);
  rf_graph_free(lowered);
  return st ? tool_report(st) : 0;
}
