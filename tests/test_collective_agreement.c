/* tests/test_collective_agreement.c - every disagreement between the
 * participants of a collective is reported naming the field, both values,
 * both nodes and both devices:
 *  - at compile time (the group check after lowering), for the collective,
 *    num_devices, T and reduction, through rf_graph_lower and through a
 *    session's first run;
 *  - at run time in the collective manager, for the collective, num_devices,
 *    dtype, reduction, device type and shape (participants joined directly:
 *    the compile check lets none of the first five through a session), and
 *    for shapes known only at run time through a session.
 * (Across processes the coordinator's messages: tests/mpi/test_mpi_faults.c.)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "ringflow/collectives.h"
#include "coll_result.h"
#include "testutil.h"

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

/* Asserts st (freed) is INVALID_ARGUMENT naming the field, both values,
 * both nodes and both devices. */
static void expect_names(rf_status *st, const char *field, const char *va,
                         const char *vb, const char *na, const char *nb,
                         const char *da, const char *db) {
  assert_non_null(st);
  const char *m = rf_status_message(st);
  char want[256];
  snprintf(want, sizeof want,
           "participants disagree on %s: %s on %s (node '%s'", field, va, da,
           na);
  assert_contains(m, want);
  snprintf(want, sizeof want, "but %s on %s (node '%s'", vb, db, nb);
  assert_contains(m, want);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  rf_status_free(st);
}

/* ---- compile time ---- */

static rf_output ph(rf_graph *g, const char *dev, rf_dtype dt, rf_shape s) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x = rf_placeholder(g, NULL, dt, s);
  rf_graph_pop_device(g);
  return x;
}

enum { F_COLLECTIVE, F_NUM_DEVICES, F_T, F_REDUCTION, F_COUNT };

/* Participants 'pa' on cpu:0 and 'pb' on cpu:1 of group "grp" that differ
 * in one field; *fetch is pa's output. */
static rf_graph *disagreeing(int field, rf_output *fetch) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)2, (int64_t)3);
  rf_output a = ph(g, "cpu:0", RF_FLOAT32, s);
  rf_output b = ph(g, "cpu:1", field == F_T ? RF_FLOAT64 : RF_FLOAT32, s);
  *fetch = rf_all_reduce(g, "pa", a, RF_REDUCE_SUM, 2, "grp");
  switch (field) {
    case F_COLLECTIVE: rf_all_gather(g, "pb", b, 2, "grp"); break;
    case F_NUM_DEVICES:
      rf_all_reduce(g, "pb", b, RF_REDUCE_SUM, 3, "grp");
      break;
    case F_T: rf_all_reduce(g, "pb", b, RF_REDUCE_SUM, 2, "grp"); break;
    case F_REDUCTION: rf_all_reduce(g, "pb", b, RF_REDUCE_MAX, 2, "grp"); break;
  }
  assert_graph_ok(g);
  return g;
}

static void test_compile_time_names_both_sides(void **state) {
  static const char *const fields[F_COUNT] = {"the collective", "num_devices",
                                              "T", "reduction"};
  static const char *const va[F_COUNT] = {"AllReduce", "2", "float32", "sum"};
  static const char *const vb[F_COUNT] = {"AllGather", "3", "float64", "max"};
  for (int f = 0; f < F_COUNT; f++) {
    rf_output y;
    rf_graph *g = disagreeing(f, &y);
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 2;
    rf_graph *lg = NULL;
    rf_status *st = rf_graph_lower(g, &o, &lg);
    assert_null(lg);
    if (st) assert_contains(rf_status_message(st), "collective 'grp'");
    expect_names(st, fields[f], va[f], vb[f], "pa", "pb", "cpu:0", "cpu:1");
    /* The same through a session, before anything runs. */
    rf_session *s;
    assert_ok(rf_session_new(g, &o, &s));
    rf_tensor *out = NULL;
    st = rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out);
    assert_null(out);
    expect_names(st, fields[f], va[f], vb[f], "pa", "pb", "cpu:0", "cpu:1");
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* ---- run time: the collective manager ---- */

/* What a participant's done delivered (tests/coll_result.h). */
typedef rf_test_coll_result result;

static rf__device devs[3];

static void setup_devices(void) {
  for (int i = 0; i < 3; i++) {
    memset(&devs[i], 0, sizeof devs[i]);
    devs[i].index = i;
    devs[i].name.type = i == 2 ? RF_DEVICE_GPU : RF_DEVICE_CPU;
    devs[i].name.index = i == 2 ? 0 : i;
    devs[i].name.task = -1;
    snprintf(devs[i].canonical, sizeof devs[i].canonical, "%s",
             i == 2 ? "gpu:0"
             : i    ? "cpu:1"
                    : "cpu:0");
    devs[i].allocator = rf_default_allocator();
  }
}

enum {
  R_COLLECTIVE,
  R_NUM_DEVICES,
  R_DTYPE,
  R_REDUCTION,
  R_DEVICE_TYPE,
  R_SHAPE,
  R_RECEIVER_SHAPE,
  R_COUNT
};

static void test_run_time_names_both_sides(void **state) {
  static const char *const fields[R_COUNT] = {
      "the collective", "num_devices", "dtype", "reduction",
      "device type",    "shape",       "shape"};
  static const char *const va[R_COUNT] = {"all_reduce", "2",   "float32", "sum",
                                          "cpu",        "(4)", "(4)"};
  static const char *const vb[R_COUNT] = {
      "reduce_scatter", "3", "float64", "max", "gpu", "(5)", "(7)"};
  setup_devices();
  for (int f = 0; f < R_COUNT; f++) {
    rf__collective_manager *m;
    assert_ok(rf__collective_manager_new(NULL, &m));
    rf_shape s = rf_shape_of(1, (int64_t)4), s2 = rf_shape_of(1, (int64_t)5);
    rf_tensor *a, *b;
    assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
    rf_dtype dt2 = f == R_DTYPE ? RF_FLOAT64 : RF_FLOAT32;
    assert_ok(rf_tensor_new(dt2, f == R_SHAPE ? &s2 : &s, NULL, &b));
    bool bcast = f == R_RECEIVER_SHAPE;
    rf__collective_kind k0 = bcast ? RF_COLL_BROADCAST : RF_COLL_ALL_REDUCE;
    result r[2];
    memset(r, 0, sizeof r);
    rf__coll_participant p0 = {.kind = k0,
                               .reduction = RF_REDUCE_SUM,
                               .dtype = RF_FLOAT32,
                               .num_devices = 2,
                               .is_root = bcast,
                               .device = &devs[0],
                               .node = "na",
                               .input = a,
                               .shape = s,
                               .done = rf_test_coll_done,
                               .arg = &r[0]};
    rf__coll_participant p1 = p0;
    p1.kind = f == R_COLLECTIVE ? RF_COLL_REDUCE_SCATTER : k0;
    p1.reduction = f == R_REDUCTION ? RF_REDUCE_MAX : RF_REDUCE_SUM;
    p1.dtype = dt2;
    p1.num_devices = f == R_NUM_DEVICES ? 3 : 2;
    p1.is_root = false;
    p1.device = &devs[f == R_DEVICE_TYPE ? 2 : 1];
    p1.node = "nb";
    p1.input = bcast ? NULL : b;
    p1.shape = bcast ? rf_shape_of(1, (int64_t)7) : rf_tensor_shape(b);
    p1.arg = &r[1];
    assert_ok(rf__collective_join(m, "grp", 3, 0, &p0));
    assert_ok(rf__collective_join(m, "grp", 3, 0, &p1));
    const char *db = f == R_DEVICE_TYPE ? "gpu:0" : "cpu:1";
    for (int i = 0; i < 2; i++) {
      assert_int_equal(atomic_load(&r[i].fired), 1);
      assert_null(r[i].out);
      assert_contains(rf_status_message(r[i].st), "collective 'grp' (step 3)");
      expect_names(r[i].st, fields[f], va[f], vb[f], "na", "nb", "cpu:0", db);
    }
    rf__collective_end_step(m, 3);
    rf_tensor_release(a);
    rf_tensor_release(b);
    rf__collective_manager_free(m);
  }
}

/* Shapes known only at run time: through a session, naming the nodes the
 * user built and their devices. */
static void test_run_time_shapes_through_a_session(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape any = rf_shape_of(1, (int64_t)-1);
  rf_output xs[2] = {ph(g, "cpu:0", RF_FLOAT32, any),
                     ph(g, "cpu:1", RF_FLOAT32, any)},
            ys[2];
  rf_all_reduce_n(g, "sh", xs, 2, RF_REDUCE_SUM, ys);
  rf_session *s = rf_test_cpu_session(g, 2);
  rf_shape s4 = rf_shape_of(1, (int64_t)4), s6 = rf_shape_of(1, (int64_t)6);
  rf_tensor *a, *b, *out[2] = {NULL, NULL};
  assert_ok(rf_tensor_new(RF_FLOAT32, &s4, NULL, &a));
  assert_ok(rf_tensor_new(RF_FLOAT32, &s6, NULL, &b));
  rf_feed feeds[2] = {{xs[0], a}, {xs[1], b}};
  rf_status *st = rf_session_run(s, feeds, 2, ys, 2, NULL, 0, out);
  expect_names(st, "shape", "(4)", "(6)", "sh_0", "sh_1", "cpu:0", "cpu:1");
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_time_names_both_sides),
      cmocka_unit_test(test_run_time_names_both_sides),
      cmocka_unit_test(test_run_time_shapes_through_a_session),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
