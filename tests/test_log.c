/* tests/test_log.c - the log sink (ringflow/log.h) seen from a program: a
 * compile and run of a graph with collectives on 4 CPU devices delivers the
 * documented messages at each level (placement decisions and summary,
 * lowering, collective groups at compile and run time, nodes per device, a
 * collective timeout, a failed step), nothing below the chosen level,
 * nothing after the callback is set to NULL or replaced, complete lines, and
 * names cut at 200 characters. Concurrency: test_log_concurrent.c. */
#include <stdio.h>
#include <string.h>

#include "log_collector.h"
#include "ringflow/collectives.h"
#include "runtime_test_ops.h"

static const rf_shape vec5 = {1, {5}};

/* The graph: x0..x3 on cpu:0..3 meet in an all-reduce (grad_sum), a Reduce
 * on cpu:1 (total) and a Broadcast of its result (share) read on every
 * device (use0..use3). follow has no device (its first input is on cpu:2);
 * k, a Const with none, joins its one consumer, scaled (on cpu:2 after
 * follow); v is a variable on
 * cpu:3, set by init_v and read by read_v, neither with a device. */
typedef struct net {
  rf_graph *g;
  rf_output x[4], sum[4], use[4], follow, scaled, read_v;
  rf_node *init_v;
} net;

static void build(net *n) {
  rf_graph *g = n->g = rf_graph_new();
  for (int i = 0; i < 4; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    n->x[i] = rf_placeholder(g, name, RF_FLOAT64, vec5);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "grad_sum", n->x, 4, RF_REDUCE_SUM, n->sum);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output total = rf_reduce(g, "total", n->x, 4, RF_REDUCE_SUM);
  rf_output share = rf_broadcast(g, "share", total);
  rf_graph_pop_device(g);
  for (int i = 0; i < 4; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "use%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    n->use[i] = rf_add(g, name, share, n->sum[i]);
    rf_graph_pop_device(g);
  }
  n->follow = rf_add(g, "follow", n->sum[2], n->sum[2]);
  rf_output k = rf_const_scalar(g, "k", RF_FLOAT64, 2.0);
  n->scaled = rf_mul(g, "scaled", n->follow, k);
  assert_ok(rf_graph_push_device(g, "cpu:3"));
  rf_output v = rf_variable(g, "v", RF_FLOAT64, vec5);
  rf_graph_pop_device(g);
  rf_output zeros = rf_zeros_like(g, "zeros", n->x[0]);
  n->init_v = rf_assign(g, "init_v", v, zeros);
  n->read_v = rf_read_variable(g, "read_v", v);
  assert_graph_ok(g);
}

static rf_session *session(const rf_graph *g, int64_t timeout_ms) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  o.collective_timeout_ms = timeout_ms;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

/* Runs init_v, then every fetch of the net; checks the all-reduce. */
static void run_net(const net *n, rf_session *s, uint64_t *rng) {
  rf_tensor *t[4];
  rf_feed feeds[4];
  double want[5] = {0};
  for (int i = 0; i < 4; i++) {
    t[i] = rf_test_random_tensor(rng, RF_FLOAT64, vec5, -4, 4);
    feeds[i] = (rf_feed){n->x[i], t[i]};
    for (int e = 0; e < 5; e++) want[e] += rf_tensor_get(t[i], e);
  }
  assert_ok(rf_session_run(s, feeds, 4, NULL, 0, &n->init_v, 1, NULL));
  rf_output fetch[7] = {n->use[0], n->use[1], n->use[2], n->use[3],
                        n->scaled, n->read_v, n->sum[0]};
  rf_tensor *out[7];
  assert_ok(rf_session_run(s, feeds, 4, fetch, 7, NULL, 0, out));
  assert_tensor_near(out[6], vec5, want, 1e-12);
  for (int i = 0; i < 7; i++) rf_tensor_release(out[i]);
  for (int i = 0; i < 4; i++) rf_tensor_release(t[i]);
}

/* A session, the two runs, freed. */
static void compile_and_run(uint64_t salt) {
  uint64_t rng = rf_test_rng(salt);
  net n;
  build(&n);
  rf_session *s = session(n.g, 300000);
  run_net(&n, s, &rng);
  rf_session_free(s);
  rf_graph_free(n.g);
}

/* Every message is one line without a trailing newline. */
static void assert_lines(void) {
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n; i++) {
    assert_true(logs.msgs[i][0] != '\0');
    assert_null(strchr(logs.msgs[i], '\n'));
    assert_true(strlen(logs.msgs[i]) < 4096);
  }
  pthread_mutex_unlock(&logs.mu);
}

static void test_debug_and_info_from_compile_and_run(void **state) {
  (void)state;
  logs_start(RF_LOG_DEBUG);
  compile_and_run(1);
  /* placement decisions, one per node and rule */
  assert_logged(RF_LOG_DEBUG, "place: ", "node '_arg/x2_0' (_Arg) on cpu:2",
                ": requested");
  assert_logged(RF_LOG_DEBUG, "node 'follow' (Add) on cpu:2",
                "its first input 'grad_sum_2' is there", NULL);
  assert_logged(RF_LOG_DEBUG, "node 'k' (Const) on cpu:2",
                "its consumers 'scaled' is there", NULL);
  assert_logged(RF_LOG_DEBUG, "node 'init_v' (Assign) on cpu:3",
                "its variable 'v' is there", NULL);
  assert_logged(RF_LOG_DEBUG, "node 'read_v' (ReadVariable) on cpu:3",
                "its variable 'v'", NULL);
  assert_logged(RF_LOG_INFO, "place: compile ", " requested, ",
                "on the default device cpu:0");
  /* lowering: which participant went to which device */
  assert_logged(RF_LOG_DEBUG, "lower: collective 'total' gets _ReduceRecv",
                "on cpu:1", NULL);
  for (int d = 0; d < 4; d++) {
    char on[16];
    snprintf(on, sizeof on, "on cpu:%d", d);
    if (d != 1) {
      assert_logged(RF_LOG_DEBUG, "lower: collective 'total' gets _ReduceSend",
                    on, NULL);
      assert_logged(RF_LOG_DEBUG,
                    "lower: collective 'share' gets _BroadcastRecv", on, NULL);
    }
  }
  assert_logged(RF_LOG_DEBUG, "lower: collective 'share' gets _BroadcastSend",
                "on cpu:1", NULL);
  /* the groups, at compile time and when they form at run time */
  assert_logged(RF_LOG_DEBUG, "collective: 'grad_sum' (AllReduce)",
                "4 participants on cpu:0,cpu:1,cpu:2,cpu:3", NULL);
  assert_logged(RF_LOG_DEBUG, "collective: 'total' (Reduce)", "4 participants",
                NULL);
  assert_logged(RF_LOG_DEBUG, "collective: group 'grad_sum' step ",
                "formed: all_reduce sum float64 on cpu:0, cpu:1, cpu:2, cpu:3",
                NULL);
  assert_logged(RF_LOG_DEBUG, "collective: group 'share' step ",
                "formed: broadcast float64", NULL);
  assert_logged(RF_LOG_DEBUG, "collective: group 'total' step ",
                "formed: reduce sum float64", NULL);
  /* every phase of both compiles, and the passes */
  const char *phases[] = {"pre_placement", "placement",  "post_placement",
                          "host_memory",   "task_split", "partition",
                          "post_partition"};
  for (int i = 0; i < 7; i++) {
    char what[64];
    snprintf(what, sizeof what, ": phase %s: ", phases[i]);
    assert_int_equal(logs_count(RF_LOG_DEBUG, "compile ", what, NULL), 2);
  }
  assert_logged(RF_LOG_DEBUG, "compile ", "pass 'lower_collectives'", NULL);
  /* the session and each compile's nodes per device */
  assert_logged(RF_LOG_INFO, "session: devices cpu:0..cpu:3", NULL, NULL);
  assert_int_equal(
      logs_count(RF_LOG_INFO, "compile ", " nodes on 4 devices: cpu:0 ", NULL),
      1);
  assert_logged(RF_LOG_INFO, "compile ", " nodes on ", "cpu:3 ");
  /* a run that works warns of nothing */
  int counts[4];
  logs_by_level(counts);
  assert_int_equal(counts[RF_LOG_WARN], 0);
  assert_int_equal(counts[RF_LOG_ERROR], 0);
  assert_lines();
}

/* The timeout graph: a 3-device all-reduce whose cpu:2 participant waits
 * for a 600 ms nap, beyond the session's 100 ms collective timeout. */
static void run_timeout(void) {
  rt_register();
  uint64_t rng = rf_test_rng(2);
  rf_graph *g = rf_graph_new();
  rf_output xs[3], ys[3];
  for (int i = 0; i < 3; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, name, RF_FLOAT64, vec5);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "slowpoke", xs, 3, RF_REDUCE_SUM, ys);
  rf_output nap = rt_nap_node(g, "nap", "cpu:2", xs[2], 600);
  assert_ok(rf_graph_add_control_edge(g, nap.node, ys[2].node));
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.collective_timeout_ms = 100;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *t[3];
  rf_feed feeds[3];
  for (int i = 0; i < 3; i++) {
    t[i] = rf_test_random_tensor(&rng, RF_FLOAT64, vec5, -1, 1);
    feeds[i] = (rf_feed){xs[i], t[i]};
  }
  const char *want[] = {"collective 'slowpoke'", "timed out after 100 ms"};
  rf_test_expect_run_error(s, feeds, 3, ys, 3, RF_DEADLINE_EXCEEDED, want, 2);
  for (int i = 0; i < 3; i++) rf_tensor_release(t[i]);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_timeout_warns_and_failed_step_is_an_error(void **state) {
  (void)state;
  logs_start(RF_LOG_DEBUG);
  run_timeout();
  assert_logged(RF_LOG_WARN, "collective 'slowpoke' (step ",
                "timed out after 100 ms waiting for cpu:2", NULL);
  assert_logged(RF_LOG_ERROR, "run: step ",
                " failed: ", "collective 'slowpoke'");
  assert_lines();
}

/* At each threshold, the timeout run (which logs at every level) delivers
 * exactly the levels at and above it. */
static void test_nothing_below_the_level(void **state) {
  (void)state;
  for (int level = RF_LOG_DEBUG; level <= RF_LOG_ERROR; level++) {
    logs_start((rf_log_level)level);
    run_timeout();
    int counts[4];
    logs_by_level(counts);
    for (int l = RF_LOG_DEBUG; l <= RF_LOG_ERROR; l++) {
      if (l < level) assert_int_equal(counts[l], 0);
      if (l >= level) assert_true(counts[l] > 0);
    }
  }
}

static int calls_a, calls_b;
static void count_a(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)msg;
  assert_ptr_equal(user, &calls_a);
  calls_a++;
}
static void count_b(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)msg;
  assert_ptr_equal(user, &calls_b);
  calls_b++;
}

/* NULL turns logging off; a new callback replaces the old one; a bad level
 * is refused and changes nothing. */
static void test_null_stops_delivery(void **state) {
  (void)state;
  calls_a = calls_b = 0;
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, count_a, &calls_a));
  compile_and_run(3);
  int a = calls_a;
  assert_true(a > 0);
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, NULL, &calls_a));
  compile_and_run(4);
  assert_int_equal(calls_a, a);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, count_b, &calls_b));
  assert_status(rf_set_log_callback((rf_log_level)7, count_a, &calls_a),
                RF_INVALID_ARGUMENT, "level 7");
  assert_status(rf_set_log_callback((rf_log_level)-1, NULL, NULL),
                RF_INVALID_ARGUMENT, NULL);
  compile_and_run(5);
  assert_int_equal(calls_a, a);
  assert_true(calls_b > 0);
  assert_string_equal(rf_log_level_name(RF_LOG_WARN), "warn");
  assert_string_equal(rf_log_level_name((rf_log_level)9), "unknown");
}

/* A 1000-character node name appears cut at 200 characters. */
static void test_long_names_are_cut(void **state) {
  (void)state;
  char name[1001];
  memset(name, 'n', 1000);
  name[1000] = '\0';
  rf_graph *g = rf_graph_new();
  rf_output xs[2], ys[2];
  for (int i = 0; i < 2; i++) {
    assert_ok(rf_graph_push_device(g, i ? "cpu:1" : "cpu:0"));
    name[0] = (char)('a' + i); /* distinct names */
    xs[i] = rf_placeholder(g, name, RF_FLOAT64, vec5);
    rf_graph_pop_device(g);
  }
  name[0] = 'n';
  rf_all_reduce_n(g, name, xs, 2, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  logs_start(RF_LOG_DEBUG);
  rf_tensor *out[2];
  rf_session *s = rf_test_cpu_session(g, 2);
  uint64_t rng = rf_test_rng(6);
  rf_tensor *t[2];
  rf_feed feeds[2];
  for (int i = 0; i < 2; i++) {
    t[i] = rf_test_random_tensor(&rng, RF_FLOAT64, vec5, -1, 1);
    feeds[i] = (rf_feed){xs[i], t[i]};
  }
  assert_ok(rf_session_run(s, feeds, 2, ys, 2, NULL, 0, out));
  char run[202];
  memset(run, 'n', 201);
  run[201] = '\0';
  assert_logged(RF_LOG_DEBUG, "collective: group 'nnnnnnnnnn", NULL, NULL);
  assert_logged(RF_LOG_DEBUG, "place: ", "(_Arg) on cpu:1", NULL);
  assert_int_equal(logs_count(-1, run, NULL, NULL), 0);
  assert_lines();
  for (int i = 0; i < 2; i++) {
    rf_tensor_release(out[i]);
    rf_tensor_release(t[i]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* The example of ringflow/log.h, as written there. */
static void to_stderr(rf_log_level level, const char *msg, void *user) {
  fprintf(stderr, "ringflow %s: %s\n", rf_log_level_name(level), msg);
}

static void test_header_example(void **state) {
  (void)state;
  rf_set_log_callback(RF_LOG_INFO, to_stderr, NULL); /* (NULL fn: off) */
  compile_and_run(8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_debug_and_info_from_compile_and_run,
                                logs_stop),
      cmocka_unit_test_teardown(test_timeout_warns_and_failed_step_is_an_error,
                                logs_stop),
      cmocka_unit_test_teardown(test_nothing_below_the_level, logs_stop),
      cmocka_unit_test_teardown(test_null_stops_delivery, logs_stop),
      cmocka_unit_test_teardown(test_long_names_are_cut, logs_stop),
      cmocka_unit_test_teardown(test_header_example, logs_stop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
