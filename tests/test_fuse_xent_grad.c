/* tests/test_fuse_xent_grad.c - a sparse softmax cross-entropy and the
 * gradient op of its backprop become one _SparseXentWithGrad node
 * (passes/fuse_xent_grad.c, docs/ARCHITECTURE.md "Passes"), through the
 * public API: the gradient of mean(xent(logits, labels)) for every float
 * dtype, int32 and int64 labels and edge shapes (one class, one row, an
 * empty batch), bit for bit against the unfused kernels
 * (RF_FUSE_XENT_GRAD=0) and near float64 math; the lowered graph holds the
 * fused node; what must not fuse stays (a fetched backprop, a dloss that
 * depends on the loss, two gradients of one backprop); a fed dloss fuses;
 * a bad label is reported naming the user's node; the log line and
 * `ringflow lower`'s line; out of memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_sweep.h"
#include "log_collector.h"
#include "testutil.h"

#include <ringflow/gradients.h>
#include <ringflow/graph_io.h>
#include <ringflow/log.h>

static rf_session_options one_cpu(void) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.num_gpu_devices = 0;
  return o;
}

/* How many nodes of op `op` the lowered graph of g holds. */
static int lowered_count(const rf_graph *g, const char *op) {
  rf_session_options o = one_cpu();
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, &o, &low));
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++)
    if (strcmp(rf_node_op(rf_graph_node(low, i)), op) == 0) n++;
  rf_graph_free(low);
  return n;
}

/* Runs g on one CPU device with the pass on or off. */
static void run(rf_graph *g, const rf_feed *feeds, int nf,
                const rf_output *fetch, int n, rf_tensor **got, bool fuse) {
  if (!fuse) setenv("RF_FUSE_XENT_GRAD", "0", 1);
  rf_test_run(g, 1, feeds, nf, fetch, n, got);
  unsetenv("RF_FUSE_XENT_GRAD");
}

typedef struct built {
  rf_graph *g;
  rf_output x, labels, out[3]; /* mean loss, d logits, per-row loss */
} built;

/* mean(xent(logits, labels)) and its gradient with respect to the logits. */
static built build(rf_dtype dt, rf_dtype lt, int64_t b, int64_t c) {
  built r;
  r.g = rf_graph_new();
  r.x = rf_placeholder(r.g, "logits", dt, rf_shape_of(2, b, c));
  r.labels = rf_placeholder(r.g, "labels", lt, rf_shape_of(1, b));
  r.out[2] = rf_sparse_softmax_cross_entropy(r.g, "xent", r.x, r.labels);
  r.out[0] = rf_mean(r.g, "loss", r.out[2], NULL, -1, false);
  assert_ok(rf_gradients(r.g, &r.out[0], 1, &r.x, 1, NULL, &r.out[1]));
  assert_graph_ok(r.g);
  return r;
}

/* The gradient of the mean loss in float64: (softmax - onehot) / b. */
static double *want_grad(const rf_tensor *x, const rf_tensor *labels, int64_t b,
                         int64_t c) {
  double *xd = rf_test_to_doubles(x);
  double *w = calloc((size_t)(b * c) + 1, sizeof *w);
  for (int64_t r = 0; r < b; r++) {
    const double *xr = xd + r * c;
    double m = xr[0], s = 0;
    for (int64_t j = 1; j < c; j++) m = fmax(m, xr[j]);
    for (int64_t j = 0; j < c; j++) s += exp(xr[j] - m);
    int64_t l = (int64_t)rf_tensor_get(labels, r);
    for (int64_t j = 0; j < c; j++)
      w[r * c + j] = (exp(xr[j] - m) / s - (j == l)) / (double)b;
  }
  free(xd);
  return w;
}

static void test_every_float_dtype(void **state) {
  (void)state;
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const rf_dtype lts[] = {RF_INT32, RF_INT64};
  static const int64_t shapes[][2] = {{128, 10}, {7, 33},  {1, 1},
                                      {5, 1},    {1, 200}, {0, 4}};
  uint64_t rng = rf_test_rng(41);
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t l = 0; l < 2; l++)
      for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        int64_t b = shapes[k][0], c = shapes[k][1];
        built r = build(dts[d], lts[l], b, c);
        assert_int_equal(lowered_count(r.g, "_SparseXentWithGrad"), 1);
        assert_int_equal(lowered_count(r.g, "_SparseXentGrad"), 0);
        assert_int_equal(
            lowered_count(r.g, "SparseSoftmaxCrossEntropyWithLogits"), 0);
        rf_tensor *xv =
            rf_test_random_tensor(&rng, dts[d], rf_shape_of(2, b, c), -6, 6);
        rf_tensor *lv =
            rf_test_random_tensor(&rng, lts[l], rf_shape_of(1, b), 0, c);
        rf_feed feeds[2] = {{r.x, xv}, {r.labels, lv}};
        rf_tensor *on[3], *off[3];
        run(r.g, feeds, 2, r.out, 3, on, true);
        run(r.g, feeds, 2, r.out, 3, off, false);
        for (int i = 0; i < 3; i++) assert_same_bytes(on[i], off[i]);
        double *w = want_grad(xv, lv, b, c);
        assert_tensor_near(on[1], rf_shape_of(2, b, c), w,
                           rf_test_tolerance(dts[d]));
        free(w);
        for (int i = 0; i < 3; i++) {
          rf_tensor_release(on[i]);
          rf_tensor_release(off[i]);
        }
        rf_tensor_release(xv);
        rf_tensor_release(lv);
        rf_graph_free(r.g);
      }
}

/* A dloss fed by the caller (the gradient of the per-row losses with
 * grad_ys) fuses: it does not depend on the loss. */
static void test_fed_dloss_fuses(void **state) {
  (void)state;
  const int64_t b = 6, c = 5;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "logits", RF_FLOAT64, rf_shape_of(2, b, c));
  rf_output lab = rf_placeholder(g, "labels", RF_INT64, rf_shape_of(1, b));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT64, rf_shape_of(1, b));
  rf_output loss = rf_sparse_softmax_cross_entropy(g, "xent", x, lab);
  rf_output dx;
  assert_ok(rf_gradients(g, &loss, 1, &x, 1, &dy, &dx));
  assert_graph_ok(g);
  assert_int_equal(lowered_count(g, "_SparseXentWithGrad"), 1);
  uint64_t rng = rf_test_rng(42);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, b, c), -3, 3);
  rf_tensor *lv =
      rf_test_random_tensor(&rng, RF_INT64, rf_shape_of(1, b), 0, c);
  rf_tensor *dv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, b), -2, 2);
  rf_feed feeds[3] = {{x, xv}, {lab, lv}, {dy, dv}};
  rf_tensor *on, *off;
  run(g, feeds, 3, &dx, 1, &on, true);
  run(g, feeds, 3, &dx, 1, &off, false);
  assert_same_bytes(on, off);
  double *w = want_grad(xv, lv, b, c); /* (softmax - onehot) / b */
  for (int64_t i = 0; i < b * c; i++)
    w[i] *= (double)b * rf_tensor_get(dv, i / c);
  assert_tensor_near(on, rf_shape_of(2, b, c), w, 1e-12);
  free(w);
  rf_tensor_release(on);
  rf_tensor_release(off);
  rf_tensor_release(xv);
  rf_tensor_release(lv);
  rf_tensor_release(dv);
  rf_graph_free(g);
}

/* What must not fuse: a fetched backprop, a dloss computed from the loss
 * (fusing would make a cycle), two gradients of one backprop. Each result
 * is still right. */
static void test_what_stays(void **state) {
  (void)state;
  const int64_t b = 4, c = 3;
  uint64_t rng = rf_test_rng(43);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, b, c), -3, 3);
  rf_tensor *lv =
      rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(1, b), 0, c);
  double *w = want_grad(xv, lv, b, c); /* (softmax - onehot) / b */

  /* the backprop fetched beside the gradient */
  built r = build(RF_FLOAT64, RF_INT32, b, c);
  rf_output fetch[2] = {r.out[1], {r.out[2].node, 1}};
  rf_feed feeds[2] = {{r.x, xv}, {r.labels, lv}};
  rf_tensor *got[2];
  rf_test_run(r.g, 1, feeds, 2, fetch, 2, got);
  assert_tensor_near(got[0], rf_shape_of(2, b, c), w, 1e-12);
  for (int64_t i = 0; i < b * c; i++) w[i] *= (double)b;
  assert_tensor_near(got[1], rf_shape_of(2, b, c), w, 1e-12);
  rf_tensor_release(got[0]);
  rf_tensor_release(got[1]);
  /* a node of the graph reading the backprop (a fetch is one only in the
   * session's signature, so rf_graph_lower sees this case) */
  assert_int_equal(lowered_count(r.g, "_SparseXentWithGrad"), 1);
  rf_identity(r.g, "bp_copy", fetch[1]);
  assert_graph_ok(r.g);
  assert_int_equal(lowered_count(r.g, "_SparseXentWithGrad"), 0);
  rf_graph_free(r.g);

  /* dloss = the loss itself: d/dx sum(stop(loss) * loss) */
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "logits", RF_FLOAT64, rf_shape_of(2, b, c));
  rf_output lab = rf_placeholder(g, "labels", RF_INT32, rf_shape_of(1, b));
  rf_output loss = rf_sparse_softmax_cross_entropy(g, "xent", x, lab);
  rf_output dx;
  assert_ok(rf_gradients(g, &loss, 1, &x, 1, &loss, &dx));
  assert_graph_ok(g);
  assert_int_equal(lowered_count(g, "_SparseXentWithGrad"), 0);
  rf_feed f2[2] = {{x, xv}, {lab, lv}};
  rf_output both[2] = {dx, loss};
  rf_test_run(g, 1, f2, 2, both, 2, got);
  for (int64_t i = 0; i < b * c; i++) /* w holds softmax - onehot */
    w[i] *= rf_tensor_get(got[1], i / c);
  assert_tensor_near(got[0], rf_shape_of(2, b, c), w, 1e-12);
  rf_tensor_release(got[0]);
  rf_tensor_release(got[1]);

  /* two gradient computations through one cross-entropy: two readers */
  rf_output mean = rf_mean(g, "mean", loss, NULL, -1, false);
  rf_output d2[2];
  assert_ok(rf_gradients(g, &mean, 1, &x, 1, NULL, &d2[0]));
  assert_ok(rf_gradients(g, &mean, 1, &x, 1, NULL, &d2[1]));
  assert_graph_ok(g);
  rf_test_run(g, 1, f2, 2, d2, 2, got);
  double *w2 = want_grad(xv, lv, b, c);
  for (int k = 0; k < 2; k++) {
    assert_tensor_near(got[k], rf_shape_of(2, b, c), w2, 1e-12);
    rf_tensor_release(got[k]);
  }
  free(w2);
  free(w);
  rf_tensor_release(xv);
  rf_tensor_release(lv);
  rf_graph_free(g);
}

/* A label outside [0, c) fails the run with INVALID_ARGUMENT naming the
 * label and the user's node (the fused node's name starts with it). */
static void test_bad_label(void **state) {
  (void)state;
  built r = build(RF_FLOAT32, RF_INT64, 3, 4);
  uint64_t rng = rf_test_rng(44);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 3, 4), -1, 1);
  int64_t labels[3] = {0, 7, 1};
  rf_shape ls = rf_shape_of(1, 3);
  rf_tensor *lv = NULL;
  assert_ok(rf_tensor_new_copy(RF_INT64, &ls, labels, &lv));
  rf_feed feeds[2] = {{r.x, xv}, {r.labels, lv}};
  rf_tensor *got = NULL;
  rf_status *st = rf_test_try_run(r.g, feeds, 2, &r.out[1], 1, &got);
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  const char *msg = rf_status_message(st);
  assert_non_null(strstr(msg, "label value 7 at labels[1]"));
  assert_non_null(strstr(msg, "'xent"));
  assert_null(got);
  rf_status_free(st);
  rf_tensor_release(xv);
  rf_tensor_release(lv);
  rf_graph_free(r.g);
}

/* The log names the fusion; RF_FUSE_XENT_GRAD=0 leaves the two ops. */
static void test_log_and_off(void **state) {
  (void)state;
  built r = build(RF_FLOAT32, RF_INT32, 8, 10);
  uint64_t rng = rf_test_rng(45);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 8, 10), -2, 2);
  rf_tensor *lv =
      rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(1, 8), 0, 10);
  rf_feed feeds[2] = {{r.x, xv}, {r.labels, lv}};
  rf_tensor *got;
  logs_start(RF_LOG_INFO);
  run(r.g, feeds, 2, &r.out[1], 1, &got, true);
  assert_int_equal(
      logs_count(RF_LOG_INFO, "SparseSoftmaxCrossEntropyWithLogits 'xent'",
                 "as one _SparseXentWithGrad", NULL),
      1);
  rf_tensor_release(got);
  logs_start(RF_LOG_INFO);
  run(r.g, feeds, 2, &r.out[1], 1, &got, false);
  assert_int_equal(logs_count(-1, "_SparseXentWithGrad", NULL, NULL), 0);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
  setenv("RF_FUSE_XENT_GRAD", "0", 1);
  assert_int_equal(lowered_count(r.g, "_SparseXentWithGrad"), 0);
  assert_int_equal(lowered_count(r.g, "_SparseXentGrad"), 1);
  unsetenv("RF_FUSE_XENT_GRAD");
  rf_tensor_release(got);
  rf_tensor_release(xv);
  rf_tensor_release(lv);
  rf_graph_free(r.g);
}

#ifdef RF_TOOL
/* `ringflow lower` prints one line for the fused node, none with
 * RF_FUSE_XENT_GRAD=0. */
static void test_lower_tool(void **state) {
  (void)state;
  built r = build(RF_FLOAT32, RF_INT64, 8, 10);
  char path[] = "/tmp/rf_xent_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_ok(rf_graph_save(r.g, path));
  const char *want =
      "epilogue cpu:0: SparseSoftmaxCrossEntropyWithLogits + _SparseXentGrad "
      "as one _SparseXentWithGrad 'xent/_SparseXentWithGrad'";
  for (int off = 0; off < 2; off++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s lower --devices 1 '%s' 2>&1",
             off ? "RF_FUSE_XENT_GRAD=0" : "", RF_TOOL, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[1 << 16];
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = '\0';
    assert_int_equal(pclose(p), 0);
    if (off)
      assert_null(strstr(out, "_SparseXentWithGrad"));
    else
      assert_non_null(strstr(out, want));
  }
  unlink(path);
  rf_graph_free(r.g);
}
#endif

/* Out of memory anywhere in compiling (the pass's scratch and node
 * included) and running: RESOURCE_EXHAUSTED, nothing leaked, and the
 * right gradient when the attempt succeeds. */
typedef struct oom_case {
  built r;
  rf_tensor *xv, *lv, *want;
} oom_case;

static rf_status *oom_attempt(void *arg) {
  oom_case *c = arg;
  rf_session_options o = one_cpu();
  rf_session *s = NULL;
  rf_status *st = rf_session_new(c->r.g, &o, &s);
  rf_tensor *got = NULL;
  rf_feed feeds[2] = {{c->r.x, c->xv}, {c->r.labels, c->lv}};
  if (!st) st = rf_session_run(s, feeds, 2, &c->r.out[1], 1, NULL, 0, &got);
  if (!st) assert_same_bytes(got, c->want);
  rf_tensor_release(got);
  rf_session_free(s);
  return st;
}

static void test_out_of_memory(void **state) {
  (void)state;
  oom_case c;
  c.r = build(RF_FLOAT32, RF_INT32, 5, 4);
  uint64_t rng = rf_test_rng(46);
  c.xv = rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 5, 4), -1, 1);
  c.lv = rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(1, 5), 0, 4);
  rf_feed feeds[2] = {{c.r.x, c.xv}, {c.r.labels, c.lv}};
  run(c.r.g, feeds, 2, &c.r.out[1], 1, &c.want, false);
  assert_ok(oom_attempt(&c)); /* warm-up: registries filled */
  fs_plan p = {.what = "fused cross-entropy gradient",
               .attempt = oom_attempt,
               .arg = &c,
               .first_n = 300,
               .max_attempts = 200,
               .check_leaks = true};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 50);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 50);
  rf_tensor_release(c.want);
  rf_tensor_release(c.xv);
  rf_tensor_release(c.lv);
  rf_graph_free(c.r.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_float_dtype),
      cmocka_unit_test(test_fed_dloss_fuses),
      cmocka_unit_test(test_what_stays),
      cmocka_unit_test(test_bad_label),
      cmocka_unit_test(test_log_and_off),
#ifdef RF_TOOL
      cmocka_unit_test(test_lower_tool),
#endif
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
