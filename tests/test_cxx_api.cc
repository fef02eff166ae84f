// tests/test_cxx_api.cc - ringflow from C++ (-std=c++11, warnings as errors):
// every public header in one C++ program, rf_shape_of's C++ form against the
// C macro on the same arguments (cxx_shape_ref.c), and a graph with an
// all-reduce and its gradients built and run through a session on two
// devices, compared with a float64 reference.
#include <cstdarg>
#include <cstddef>
#include <csetjmp>
#include <cstdint>
// cmocka needs the three above first; 1.1 declares its functions without
// C++ guards.
extern "C" {
#include <cmocka.h>
}

#include <cstring>
#include <vector>

#include "cxx_shape_cases.h"
#include "ringflow_all_headers.h"  // every include/ringflow/*.h (generated)

#define assert_ok(st) check_ok((st), __LINE__)

static void check_ok(rf_status *st, int line) {
  if (!st) return;
  print_error("line %d: %s: %s\n", line, rf_code_name(rf_status_code(st)),
              rf_status_message(st));
  rf_status_free(st);
  fail();
}

static void assert_shape(const rf_shape &got, int rank,
                         const std::vector<int64_t> &dims) {
  assert_int_equal(got.rank, rank);
  for (size_t i = 0; i < dims.size(); i++)
    assert_int_equal(got.dims[i], dims[i]);
}

// The header's own example: -1 is an unknown dim, as in C (C++ used to read
// the int -1 as the int64_t 4294967295).
static void test_shape_of_unknown_dim(void **) {
  assert_shape(rf_shape_of(2, 3, -1), 2, {3, RF_UNKNOWN_DIM});
  assert_shape(rf_shape_of(2, 4, 3), 2, {4, 3});
  assert_shape(rf_shape_of(1, int64_t(1) << 40), 1, {int64_t(1) << 40});
  assert_shape(rf_shape_of(0), 0, {});
  assert_int_equal(rf_shape_of(9, 1, 2, 3, 4, 5, 6, 7, 8, 9).rank,
                   RF_UNKNOWN_RANK);
  assert_int_equal(rf_shape_of(-1).rank, RF_UNKNOWN_RANK);
  std::vector<float> v(5);
  assert_shape(rf_shape_of(2, v.size(), -1), 2, {5, -1});
}

// Every case of cxx_shape_cases.h gives the shape the C macro gives.
static void test_shape_of_matches_c(void **) {
#define RF_X(...) rf_shape_of(__VA_ARGS__),
  const rf_shape cxx[] = {RF_SHAPE_CASES(RF_X)};
#undef RF_X
  const int n = static_cast<int>(sizeof cxx / sizeof cxx[0]);
  assert_int_equal(n, rf_test_c_shape_count());
  for (int i = 0; i < n; i++) {
    rf_shape c = rf_test_c_shape(i);
    char want[128], got[128];
    rf_shape_format(&c, want, sizeof want);
    rf_shape_format(&cxx[i], got, sizeof got);
    print_message("case %d: C %s, C++ %s\n", i, want, got);
    assert_true(rf_shape_equal(&c, &cxx[i]));
  }
}

// A rank above the number of dims given: C reads past its array (undefined);
// C++ leaves the missing dims unknown.
static void test_shape_of_missing_dims(void **) {
  assert_shape(rf_shape_of(3, 4, 5), 3, {4, 5, RF_UNKNOWN_DIM});
  assert_shape(rf_shape_of(2), 2, {RF_UNKNOWN_DIM, RF_UNKNOWN_DIM});
}

static rf_tensor *vector_of(const std::vector<double> &v) {
  rf_shape s = rf_shape_of(1, v.size());
  rf_tensor *t = nullptr;
  assert_ok(rf_tensor_new(RF_FLOAT64, &s, nullptr, &t));
  for (size_t i = 0; i < v.size(); i++)
    rf_tensor_set(t, static_cast<int64_t>(i), v[i]);
  return t;
}

static void assert_values(const rf_tensor *t, const std::vector<double> &want) {
  assert_int_equal(rf_tensor_num_elements(t), want.size());
  for (size_t i = 0; i < want.size(); i++)
    assert_true(rf_tensor_get(t, static_cast<int64_t>(i)) == want[i]);
}

// y[d] = x[d] * x[d] on cpu:d, s = all_reduce_sum(y), loss = sum(s[0]) +
// sum(s[1]): s[d] = x0^2 + x1^2 and d loss / d x[d] = 2 * 2 x[d] (the
// gradient of the sum reaches both participants). The placeholders have an
// unknown length, rf_shape_of(1, -1), and are fed 3 elements.
static void test_graph_through_session(void **) {
  rf_graph *g = rf_graph_new();
  assert_non_null(g);
  rf_output x[2], y[2], s[2], loss[2], dx[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    x[d] = rf_placeholder(g, nullptr, RF_FLOAT64, rf_shape_of(1, -1));
    y[d] = rf_mul(g, nullptr, x[d], x[d]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "cxx_sum", y, 2, RF_REDUCE_SUM, s);
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    loss[d] = rf_sum(g, nullptr, s[d], nullptr, -1, false);
    rf_graph_pop_device(g);
  }
  assert_ok(rf_graph_status(g));
  rf_shape xs = rf_output_shape(x[0]);
  assert_shape(xs, 1, {RF_UNKNOWN_DIM});
  assert_ok(rf_gradients(g, loss, 2, x, 2, nullptr, dx));

  // The graph survives a JSON round trip (graph_io.h).
  char *json = nullptr;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *copy = nullptr;
  assert_ok(rf_graph_from_json(json, std::strlen(json), &copy));
  assert_int_equal(rf_graph_num_nodes(copy), rf_graph_num_nodes(g));
  rf_string_free(json);
  rf_graph_free(copy);

  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_session *sess = nullptr;
  assert_ok(rf_session_new(g, &o, &sess));
  const std::vector<double> x0 = {1, -2, 0.5}, x1 = {3, 4, -0.25};
  rf_tensor *xv[2] = {vector_of(x0), vector_of(x1)};
  const rf_feed feeds[2] = {{x[0], xv[0]}, {x[1], xv[1]}};
  const rf_output fetches[4] = {s[0], s[1], dx[0], dx[1]};
  rf_tensor *out[4] = {};
  assert_ok(rf_session_run(sess, feeds, 2, fetches, 4, nullptr, 0, out));
  std::vector<double> sum(3), g0(3), g1(3);
  for (size_t i = 0; i < 3; i++) {
    sum[i] = x0[i] * x0[i] + x1[i] * x1[i];
    g0[i] = 4 * x0[i];
    g1[i] = 4 * x1[i];
  }
  assert_values(out[0], sum);
  assert_values(out[1], sum);
  assert_values(out[2], g0);
  assert_values(out[3], g1);
  for (rf_tensor *t : out) rf_tensor_release(t);
  for (rf_tensor *t : xv) rf_tensor_release(t);
  rf_session_free(sess);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_of_unknown_dim),
      cmocka_unit_test(test_shape_of_matches_c),
      cmocka_unit_test(test_shape_of_missing_dims),
      cmocka_unit_test(test_graph_through_session),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
