/* tests/test_empty_products.c - MatMul and BatchMatMul whose result is empty
 * or whose sums are empty, with a dimension past INT_MAX: nothing is
 * multiplied, so BLAS's int range does not apply and the products run
 * (an empty result, or zeros for an empty sum), as for small dims. A
 * product that does multiply past INT_MAX stays UNIMPLEMENTED (not tested:
 * its operands would need 24 GiB). */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define BIG ((int64_t)3 << 31) /* 6442450944, past INT_MAX */

/* Feeds zero-filled tensors of shapes xs and ys to a product node built by
 * `batched` (BatchMatMul) or MatMul, runs it and checks the result's shape
 * and that every element is 0. */
static void check(bool batched, rf_shape xs, rf_shape ys, bool tx, bool ty,
                  rf_shape want) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_placeholder(g, "y", RF_FLOAT32, rf_shape_unknown());
  rf_output z = batched ? rf_batch_matmul(g, "z", x, y, tx, ty)
                        : rf_matmul(g, "z", x, y, tx, ty);
  assert_graph_ok(g);
  rf_tensor *tx_, *ty_;
  assert_ok(rf_tensor_new(RF_FLOAT32, &xs, NULL, &tx_));
  assert_ok(rf_tensor_new(RF_FLOAT32, &ys, NULL, &ty_));
  if (rf_tensor_nbytes(tx_))
    memset(rf_tensor_mutable_data(tx_), 0, rf_tensor_nbytes(tx_));
  if (rf_tensor_nbytes(ty_))
    memset(rf_tensor_mutable_data(ty_), 0, rf_tensor_nbytes(ty_));
  rf_feed feeds[2] = {{x, tx_}, {y, ty_}};
  rf_tensor *out;
  rf_test_run(g, 1, feeds, 2, &z, 1, &out);
  rf_shape got = rf_tensor_shape(out);
  assert_true(rf_shape_equal(&got, &want));
  int64_t n = rf_tensor_num_elements(out);
  double *zeros = calloc((size_t)(n ? n : 1), sizeof *zeros);
  assert_non_null(zeros);
  assert_tensor_near(out, want, zeros, 0);
  free(zeros);
  rf_tensor_release(out);
  rf_tensor_release(tx_);
  rf_tensor_release(ty_);
  rf_graph_free(g);
}

static void test_matmul_empty_result_big_inner_dim(void **state) {
  (void)state;
  /* (0, BIG) x (BIG, 0) -> (0, 0); and transposed. */
  check(false, rf_shape_of(2, 0, BIG), rf_shape_of(2, BIG, 0), false, false,
        rf_shape_of(2, 0, 0));
  check(false, rf_shape_of(2, BIG, 0), rf_shape_of(2, 0, BIG), true, true,
        rf_shape_of(2, 0, 0));
}

static void test_matmul_empty_result_big_outer_dim(void **state) {
  (void)state;
  /* (BIG, 0) x (0, 0) -> (BIG, 0): an empty sum and an empty result. */
  check(false, rf_shape_of(2, BIG, 0), rf_shape_of(2, 0, 0), false, false,
        rf_shape_of(2, BIG, 0));
  /* (2, 0) x (0, 3): small, an empty sum of zeros, as before. */
  check(false, rf_shape_of(2, 2, 0), rf_shape_of(2, 0, 3), false, false,
        rf_shape_of(2, 2, 3));
}

static void test_batch_matmul_empty_result_big_dims(void **state) {
  (void)state;
  check(true, rf_shape_of(3, 2, 0, BIG), rf_shape_of(3, 2, BIG, 0), false,
        false, rf_shape_of(3, 2, 0, 0));
  check(true, rf_shape_of(3, 2, BIG, 0), rf_shape_of(3, 1, 0, 0), false, false,
        rf_shape_of(3, 2, BIG, 0));
  /* An empty batch of matrices past INT_MAX. */
  check(true, rf_shape_of(3, 0, BIG, 1), rf_shape_of(2, 1, 2), false, false,
        rf_shape_of(3, 0, BIG, 2));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_empty_result_big_inner_dim),
      cmocka_unit_test(test_matmul_empty_result_big_outer_dim),
      cmocka_unit_test(test_batch_matmul_empty_result_big_dims),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
