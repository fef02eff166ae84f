/* tests/mpi/test_mpi_collectives.c - the reference collective matrix of
 * tests/test_collectives.c (included below) across the processes of an MPI
 * job (run under mpirun: tests/mpi/mpirun.sh): its device ids 0..7 become
 * "/task:<id % tasks>/cpu:<id / tasks>", so with 2 processes the sets
 * {1,2,0}, {1,0} and 0..7 all span both tasks, and with 4 processes {1,2,0}
 * and {1,0} are subsets of the tasks (their own communicators). Every
 * process builds the same graph from the same seed and feeds its own
 * devices' placeholders. To check every output in every process, each
 * fetched value is broadcast (through ringflow) to an Identity on every
 * task, which is what each process fetches: the test's bit-identity checks
 * then compare bytes computed in different processes (an all-reduce and a
 * reduce + broadcast of the same inputs agree to float tolerance: MPI sums
 * them in different orders). Ranks follow device
 * order: task, then index. All-reduce sum, prod,
 * min, max, avg; reduce; broadcast; all-gather; reduce-scatter; every dtype;
 * random roots; gradients - against float64 references.
 *
 * RF_MPI_TEST_DEVICE=gpu runs the same on GPU devices ("/task:t/gpu:i",
 * through NCCL): every process needs 8/tasks GPUs of its own, e.g. with
 * tests/mpi/gpu_ranks.sh setting CUDA_VISIBLE_DEVICES per rank. */
#include <stdlib.h>
#include <string.h>

#include "mpi_testutil.h"

#define RF_COLLECTIVES_HOOKS
#define RF_COLLECTIVES_AGREE_TO_TOLERANCE
/* devices sort by task, then index */
#define DEVICE_ORDER(id) ((id) % NT * 1000 + (id) / NT)
static void device_name(int id, char *buf);
static void run_session(rf_graph *g, const rf_feed *feeds, int nfeeds,
                        const rf_output *fetches, int n, rf_tensor **outs);
#include "../test_collectives.c"

static bool on_gpu(void) {
  const char *e = getenv("RF_MPI_TEST_DEVICE");
  return e && strcmp(e, "gpu") == 0;
}

static void device_name(int id, char *buf) {
  snprintf(buf, 32, "/task:%d/%s:%d", id % NT, on_gpu() ? "gpu" : "cpu",
           id / NT);
}

/* Whether a node's device is on this task. */
static bool mine(const rf_node *n) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "/task:%d/", T);
  const char *dev = rf_node_device(n);
  return dev && strncmp(dev, prefix, strlen(prefix)) == 0;
}

static void run_session(rf_graph *g, const rf_feed *feeds, int nfeeds,
                        const rf_output *fetches, int n, rf_tensor **outs) {
  rf_feed own[64];
  int nown = 0;
  for (int i = 0; i < nfeeds; i++)
    if (mine(feeds[i].output.node)) own[nown++] = feeds[i];
  rf_output here[64];
  for (int i = 0; i < n; i++) {
    const char *dev = rf_node_device(fetches[i].node);
    if (dev && dev[0]) assert_ok(rf_graph_push_device(g, dev));
    rf_output b = rf_broadcast(g, NULL, fetches[i]);
    if (dev && dev[0]) rf_graph_pop_device(g);
    for (int t = 0; t < NT; t++) {
      char to[32];
      snprintf(to, sizeof to, "/task:%d/%s:0", t, on_gpu() ? "gpu" : "cpu");
      assert_ok(rf_graph_push_device(g, to));
      rf_output y = rf_identity(g, NULL, b);
      rf_graph_pop_device(g);
      if (t == T) here[i] = y;
    }
  }
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = on_gpu() ? 1 : (8 + NT - 1) / NT;
  o.num_gpu_devices = on_gpu() ? (8 + NT - 1) / NT : 0;
  o.collective_timeout_ms = 60000;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_run(s, own, nown, here, n, NULL, 0, outs));
  rf_session_free(s);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {RF_COLLECTIVES_TESTS};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
