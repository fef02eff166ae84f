/* tests/test_math_oom.c - allocation failure in the math ops: every kernel
 * (output, scratch buffers, error messages) and every op function, with the
 * k-th allocation failing for k = 1, 2, ... until the call succeeds. Each
 * failure must be RESOURCE_EXHAUSTED and leave no live allocation behind. */
#include "kernels/kernel.h"
#include "math_ref.h"
#include "ops/math_ops.h"
#include "ringflow/debug.h"
#include "runtime/families.h"
#include "testutil.h"

#define SHAPE(...)                                           \
  rf_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                (int64_t[]){__VA_ARGS__})

/* Live allocations with the default allocator's cache emptied. */
static int64_t live(void) {
  rf_default_allocator_trim();
  return rf_debug_live_allocations();
}

/* Runs node n's kernel with each allocation in turn failing. */
static void kernel_under_faults(rf_output out, rf_tensor **ins) {
  rf_node *n = out.node;
  assert_non_null(n);
  rf_tensor *res = NULL;
  assert_ok(rf__kernel_run_single(n, ins, &res)); /* warm up, and it works */
  rf_tensor_release(res);
  int64_t base = live();
  for (int64_t k = 1;; k++) {
    assert_true(k < 100);
    res = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf__kernel_run_single(n, ins, &res);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      assert_non_null(res);
      rf_tensor_release(res);
      assert_int_equal(live(), base);
      return;
    }
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    assert_null(res);
    assert_int_equal(live(), base);
  }
}

typedef rf_output (*build_fn)(rf_graph *g, rf_output *in);

static rf_output b_add(rf_graph *g, rf_output *in) {
  return rf_add(g, NULL, in[0], in[1]);
}
static rf_output b_div(rf_graph *g, rf_output *in) {
  return rf_div(g, NULL, in[0], in[1]);
}
static rf_output b_equal(rf_graph *g, rf_output *in) {
  return rf_equal(g, NULL, in[0], in[1]);
}
static rf_output b_neg(rf_graph *g, rf_output *in) {
  return rf_neg(g, NULL, in[0]);
}
static rf_output b_add_n(rf_graph *g, rf_output *in) {
  return rf_add_n(g, NULL, in, 3);
}
static rf_output b_matmul(rf_graph *g, rf_output *in) {
  return rf_matmul(g, NULL, in[0], in[1], false, true);
}
static rf_output b_cast(rf_graph *g, rf_output *in) {
  return rf_cast(g, NULL, in[0], RF_BFLOAT16);
}
static rf_output b_sum_to(rf_graph *g, rf_output *in) {
  return rf__sum_to_shape_of(g, NULL, in[0], in[1]);
}
static rf_output b_bcast_to(rf_graph *g, rf_output *in) {
  return rf__broadcast_to_shape_of(g, NULL, in[0], in[1]);
}

typedef struct fault_case {
  build_fn build;
  int nin;
  rf_dtype dt;
  rf_shape shapes[3];
} fault_case;

static void run_case(const fault_case *c, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output in[3];
  rf_tensor *vals[3];
  for (int i = 0; i < c->nin; i++) {
    in[i] = rf_placeholder(g, NULL, c->dt, c->shapes[i]);
    vals[i] = ref_random(rng, c->dt, c->shapes[i], 1, 2); /* no zeros */
    if (rf_dtype_is_integer(c->dt))
      for (int64_t j = 0; j < rf_tensor_num_elements(vals[i]); j++)
        ref_set_int(vals[i], j, 3);
  }
  rf_output out = c->build(g, in);
  assert_graph_ok(g);
  kernel_under_faults(out, vals);
  for (int i = 0; i < c->nin; i++) rf_tensor_release(vals[i]);
  rf_graph_free(g);
}

static void test_kernels_under_allocation_failure(void **state) {
  assert_ok(rf__registry_init());
  uint64_t rng = rf_test_seed();
  const fault_case cases[] = {
      {b_add, 2, RF_FLOAT32, {SHAPE(4, 3), SHAPE(3)}},
      {b_div, 2, RF_INT32, {SHAPE(5), SHAPE(5)}},
      {b_equal, 2, RF_FLOAT16, {SHAPE(4, 1), SHAPE(1, 3)}},
      {b_neg, 1, RF_FLOAT32, {SHAPE(7)}},
      {b_add_n, 3, RF_FLOAT16, {SHAPE(2, 3), SHAPE(2, 3), SHAPE(2, 3)}},
      {b_matmul, 2, RF_FLOAT16, {SHAPE(3, 4), SHAPE(5, 4)}},
      {b_matmul, 2, RF_INT32, {SHAPE(3, 4), SHAPE(5, 4)}},
      {b_matmul, 2, RF_FLOAT32, {SHAPE(3, 4), SHAPE(5, 4)}},
      {b_cast, 1, RF_FLOAT64, {SHAPE(9)}},
      {b_sum_to, 2, RF_FLOAT16, {SHAPE(4, 3), SHAPE(3)}},
      {b_sum_to, 2, RF_INT64, {SHAPE(4, 3), SHAPE(4, 1)}},
      {b_bcast_to, 2, RF_FLOAT32, {SHAPE(3), SHAPE(4, 3)}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], &rng);
}

/* The op functions: the graph keeps RESOURCE_EXHAUSTED and adds nothing. */
static void test_op_functions_under_allocation_failure(void **state) {
  assert_ok(rf__registry_init()); /* its tables live for the process */
  const build_fn fns[] = {b_add,    b_div,  b_equal,  b_neg,     b_add_n,
                          b_matmul, b_cast, b_sum_to, b_bcast_to};
  for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
    int64_t base = live();
    for (int64_t k = 1;; k++) {
      assert_true(k < 200);
      rf_graph *g = rf_graph_new();
      rf_output in[3];
      for (int i = 0; i < 3; i++)
        in[i] = rf_placeholder(g, NULL, RF_FLOAT32, SHAPE(3, 3));
      assert_graph_ok(g);
      int nodes = rf_graph_num_nodes(g);
      rf_debug_fail_allocation_after(k);
      rf_output out = fns[f](g, in);
      rf_debug_fail_allocation_after(0);
      rf_status *st = rf_graph_status(g);
      bool done = st == NULL;
      if (done) {
        assert_non_null(out.node);
      } else {
        assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
        assert_null(out.node);
        assert_int_equal(rf_graph_num_nodes(g), nodes);
      }
      rf_status_free(st);
      rf_graph_free(g);
      assert_int_equal(live(), base);
      if (done) break;
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_under_allocation_failure),
      cmocka_unit_test(test_op_functions_under_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
