/* tests/test_shape_overflow.c - hostile shapes: dims whose products pass
 * INT64_MAX, ranks past RF_MAX_RANK, negative dims. Every op family's shape
 * function, the JSON loader, placeholders, variables, tensors and the run-time
 * paths (broadcasting kernels, all-gather) must answer INVALID_ARGUMENT - never
 * a signed overflow (this test also runs under UBSan) or a wrapped shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

#define P ((int64_t)1 << 62) /* fits int64; twice it does not */
#define P_STR "4611686018427387904"

/* The graph's recorded error is INVALID_ARGUMENT and mentions `sub`. */
static void expect_graph_error(rf_graph *g, const char *sub) {
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, sub);
}

static rf_output ph(rf_graph *g, const char *name, rf_shape s) {
  return rf_placeholder(g, name, RF_FLOAT32, s);
}

/* ---- the C API ---- */

static void test_placeholder_and_variable(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = ph(g, "x", rf_shape_of(2, P, 4));
  assert_null(x.node);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  /* Unknown dims do not hide what the known ones multiply to. */
  assert_null(ph(g, "y", rf_shape_of(3, P, -1, 2)).node);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  /* A zero dim makes no element, but strides still multiply the others. */
  assert_null(ph(g, "z", rf_shape_of(3, 0, P, 4)).node);
  expect_graph_error(g, "multiply past INT64_MAX");
  rf_graph_clear_status(g);
  assert_null(rf_variable(g, "v", RF_FLOAT32, rf_shape_of(2, 4, P)).node);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  /* The largest shapes that fit still build. */
  assert_non_null(ph(g, "ok", rf_shape_of(2, P, 1)).node);
  assert_non_null(ph(g, "ok0", rf_shape_of(3, P, 0, 1)).node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

/* rf_shape is a public struct: one filled in by hand may hold anything. */
static void test_hand_made_shapes(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_shape wide = rf_shape_scalar();
  wide.rank = 1000;
  assert_null(ph(g, "r", wide).node);
  expect_graph_error(g, "rank 1000");
  rf_graph_clear_status(g);
  rf_shape neg = rf_shape_of(2, 3, 3);
  neg.dims[1] = -7;
  assert_null(ph(g, "n", neg).node);
  expect_graph_error(g, "-7");
  rf_graph_clear_status(g);
  /* The shape helpers read no further than RF_MAX_RANK dims. */
  char buf[64];
  rf_shape_format(&wide, buf, sizeof buf);
  assert_string_equal(buf, "<rank 1000>");
  assert_false(rf_shape_is_fully_defined(&wide));
  assert_int_equal(rf_shape_num_elements(&wide), -1);
  assert_int_equal(rf_shape_num_elements(&neg), -1);
  rf_shape big = rf_shape_of(2, P, 4);
  assert_int_equal(rf_shape_num_elements(&big), -1);
  rf_tensor *t = NULL;
  assert_status(rf_tensor_new(RF_INT8, &wide, NULL, &t), RF_INVALID_ARGUMENT,
                "rank 1000");
  assert_status(rf_tensor_new(RF_INT8, &big, NULL, &t), RF_INVALID_ARGUMENT,
                "overflows int64");
  rf_shape zero = rf_shape_of(3, 0, P, 4);
  assert_status(rf_tensor_new(RF_INT8, &zero, NULL, &t), RF_INVALID_ARGUMENT,
                "multiply past INT64_MAX");
  assert_null(t);
  rf_graph_free(g);
}

/* The all-gather of the issue: two inputs of 2^62 rows. */
static void test_all_gather(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output in[2], out[2] = {{NULL, 0}, {NULL, 0}};
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    in[d] = ph(g, NULL, rf_shape_of(1, P));
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_all_gather_n(g, "gather", in, 2, out);
  assert_null(out[0].node);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  /* One participant of a gather over 4 devices, unknown second dim. */
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = ph(g, "x", rf_shape_of(2, P / 2, -1)); /* 4 x 2^61 */
  assert_null(rf_all_gather(g, "one", x, 4, "one").node);
  rf_graph_pop_device(g);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  /* Half as many rows gathered twice fit. */
  rf_output h[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    h[d] = ph(g, NULL, rf_shape_of(1, P / 2));
    rf_graph_pop_device(g);
  }
  rf_all_gather_n(g, "fits", h, 2, out);
  assert_graph_ok(g);
  assert_int_equal(rf_output_shape(out[0]).dims[0], P);
  rf_graph_free(g);
}

/* Shape functions that combine dims of several inputs: each input fits,
 * their combination does not. */
static void test_combined_shapes(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output tall = ph(g, "tall", rf_shape_of(2, P, 1));
  rf_output wide = ph(g, "wide", rf_shape_of(2, 1, 4));
  rf_output tall_q = ph(g, "tall_q", rf_shape_of(2, P, -1));
  rf_output q_wide = ph(g, "q_wide", rf_shape_of(2, -1, 4));
  rf_output bias = ph(g, "bias", rf_shape_of(1, 4));
  rf_output labels = rf_placeholder(g, "labels", RF_INT32, rf_shape_of(1, P));
  assert_graph_ok(g);
  struct {
    const char *what;
    rf_output out;
  } cases[7];
  int n = 0;
#define CASE(expr)                      \
  do {                                  \
    cases[n].what = #expr;              \
    cases[n++].out = (expr);            \
    expect_graph_error(g, "overflows"); \
    rf_graph_clear_status(g);           \
  } while (0)
  CASE(rf_add(g, NULL, tall, wide)); /* broadcast */
  CASE(rf_mul(g, NULL, tall, wide));
  CASE(rf_matmul(g, NULL, tall, wide, false, false));        /* (m, n) */
  CASE(rf_bias_add(g, NULL, tall_q, bias));                  /* merge */
  CASE(rf_add_n(g, NULL, (rf_output[]){tall_q, q_wide}, 2)); /* merge */
  CASE(rf_sparse_softmax_cross_entropy(g, NULL, q_wide, labels));
  CASE(rf_equal(g, NULL, tall, wide));
#undef CASE
  for (int i = 0; i < n; i++) {
    if (cases[i].out.node) fail_msg("%s built a node", cases[i].what);
  }
  /* Reduce merges its inputs' shapes, one per device. */
  rf_output r[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    r[d] = ph(g, NULL, d ? rf_shape_of(2, -1, 4) : rf_shape_of(2, P, -1));
    rf_graph_pop_device(g);
  }
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  assert_null(rf_reduce(g, "red", r, 2, RF_REDUCE_SUM).node);
  rf_graph_pop_device(g);
  expect_graph_error(g, "overflows");
  rf_graph_free(g);
}

/* Reshape and Fill read dims from constants; they rejected huge shapes
 * before and must keep doing so through the same check. */
static void test_reshape_and_fill(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = ph(g, "x", rf_shape_of(1, -1));
  assert_null(rf_reshape_to(g, NULL, x, 2, (int64_t[]){P, 4}).node);
  expect_graph_error(g, "overflows int64");
  rf_graph_clear_status(g);
  rf_tensor *dims;
  assert_ok(rf_tensor_new_copy(RF_INT64, &(rf_shape){1, {3}},
                               (int64_t[]){P, 2, 2}, &dims));
  rf_output d = rf_const(g, "d", dims);
  rf_tensor_release(dims);
  rf_output v = rf_const_scalar(g, "v", RF_FLOAT32, 1);
  assert_null(rf_fill(g, NULL, d, v).node);
  expect_graph_error(g, "overflows int64");
  rf_graph_free(g);
}

/* ---- run time: shapes only known when fed ---- */

static rf_tensor *empty_tensor(rf_shape s) {
  rf_tensor *t;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &t));
  return t;
}

static void test_run_time(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  /* Add of (P, 1, 0) and (1, 4, 0): no element, but (P, 4, 0)'s strides
   * overflow. */
  rf_output a = ph(g, "a", rf_shape_of(3, -1, -1, 0));
  rf_output b = ph(g, "b", rf_shape_of(3, -1, -1, 0));
  rf_output sum = rf_add(g, "sum", a, b);
  /* All-gather of (P, 0) on two devices: 2^63 rows. */
  rf_output in[2], out[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "cpu:1" : "cpu:0"));
    in[d] = ph(g, NULL, rf_shape_of(2, -1, 0));
    rf_graph_pop_device(g);
  }
  rf_all_gather_n(g, "gather", in, 2, out);
  rf_session *s = rf_test_cpu_session(g, 2);
  rf_tensor *ta = empty_tensor(rf_shape_of(3, P, 1, 0));
  rf_tensor *tb = empty_tensor(rf_shape_of(3, 1, 4, 0));
  rf_feed feeds[2] = {{a, ta}, {b, tb}};
  const char *sum_subs[] = {"'sum'", "multiply past INT64_MAX"};
  rf_test_expect_run_error(s, feeds, 2, &sum, 1, RF_INVALID_ARGUMENT, sum_subs,
                           2);
  rf_tensor *tg = empty_tensor(rf_shape_of(2, P, 0));
  rf_feed gfeeds[2] = {{in[0], tg}, {in[1], tg}};
  const char *gather_subs[] = {"gather", "overflows"};
  rf_test_expect_run_error(s, gfeeds, 2, out, 2, RF_INVALID_ARGUMENT,
                           gather_subs, 2);
  /* Half as many rows gather fine. */
  rf_tensor *th = empty_tensor(rf_shape_of(2, P / 2, 0));
  rf_feed hfeeds[2] = {{in[0], th}, {in[1], th}};
  rf_tensor *res[2] = {NULL, NULL};
  assert_ok(rf_session_run(s, hfeeds, 2, out, 2, NULL, 0, res));
  assert_int_equal(rf_tensor_shape(res[0]).dims[0], P);
  rf_tensor_release(res[0]);
  rf_tensor_release(res[1]);
  rf_tensor_release(ta);
  rf_tensor_release(tb);
  rf_tensor_release(tg);
  rf_tensor_release(th);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- JSON files ---- */

#define HDR "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": ["
#define ATTR_T(t) "\"T\": {\"type\": \"type\", \"value\": \"" t "\"}"
#define PH(name, dev, shape)                                             \
  "{\"name\": \"" name "\", \"op\": \"Placeholder\", \"device\": \"" dev \
  "\", \"attrs\": {\"dtype\": {\"type\": \"type\", \"value\": "          \
  "\"float32\"}, \"shape\": {\"type\": \"shape\", \"value\": " shape "}}}"
#define BIN(name, op, a, b)                                                   \
  "{\"name\": \"" name "\", \"op\": \"" op "\", \"inputs\": [\"" a "\", \"" b \
  "\"]}"

static const struct {
  const char *json, *sub;
} json_cases[] = {
    /* placeholders and variables */
    {HDR PH("x", "", "[" P_STR ", 4]") "]}", "overflows int64"},
    {HDR PH("x", "", "[0, " P_STR ", 4]") "]}", "multiply past INT64_MAX"},
    {HDR "{\"name\": \"v\", \"op\": \"Variable\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\", \"value\": \"float32\"}, \"shape\": {\"type\": "
         "\"shape\", \"value\": [" P_STR ", -1, 2]}}}]}",
     "overflows int64"},
    /* the all-gather of the issue */
    {HDR PH("a", "cpu:0", "[" P_STR "]") "," PH(
         "b", "cpu:1",
         "[" P_STR
         "]") ", {\"name\": \"g0\", \"op\": \"AllGather\", \"device\": "
              "\"cpu:0\", "
              "\"inputs\": [\"a\"], \"attrs\": {\"num_devices\": {\"type\": "
              "\"int\", \"value\": 2}, \"shared_name\": {\"type\": \"string\", "
              "\"value\": \"g\"}}}]}",
     "overflows int64"},
    /* broadcasting math, matmul, merges, nn */
    {HDR PH("a", "", "[" P_STR ", 1]") "," PH("b", "", "[1, 4]") "," BIN(
         "s", "Add", "a", "b") "]}",
     "overflows int64"},
    {HDR PH("a", "", "[" P_STR ", 1]") "," PH("b", "", "[1, 4]") "," BIN(
         "s", "MatMul", "a", "b") "]}",
     "overflows int64"},
    {HDR PH("a", "", "[" P_STR ", -1]") "," PH("b", "", "[4]") "," BIN(
         "s", "BiasAdd", "a", "b") "]}",
     "overflows int64"},
    {HDR PH("a", "", "[" P_STR ", -1]") "," PH(
         "b", "", "[-1, 4]") ", {\"name\": \"s\", \"op\": \"AddN\", "
                             "\"inputs\": [[\"a\", \"b\"]]}]}",
     "overflows int64"},
    /* Reduce merges the shapes of its inputs */
    {HDR PH("a", "cpu:0", "[" P_STR ", -1]") "," PH(
         "b", "cpu:1",
         "[-1, 4]") ", {\"name\": \"r\", \"op\": \"Reduce\", \"device\": "
                    "\"cpu:0\", "
                    "\"inputs\": [[\"a\", \"b\"]], \"attrs\": {\"reduction\": "
                    "{\"type\": \"string\", \"value\": \"sum\"}}}]}",
     "overflows int64"},
    /* Reshape to a Const shape [2^62, 4] (int64, little-endian) */
    {HDR PH(
         "x", "",
         "[-1]") ", {\"name\": \"k\", \"op\": \"Const\", \"attrs\": "
                 "{\"dtype\": "
                 "{\"type\": \"type\", \"value\": \"int64\"}, \"value\": "
                 "{\"type\": "
                 "\"tensor\", \"value\": {\"dtype\": \"int64\", \"shape\": "
                 "[2], "
                 "\"data\": \"AAAAAAAAAEAEAAAAAAAAAA==\"}}}}, {\"name\": "
                 "\"r\", "
                 "\"op\": \"Reshape\", \"inputs\": [\"x\", \"k\"], \"attrs\": "
                 "{\"Tshape\": {\"type\": \"type\", \"value\": \"int64\"}}}]}",
     "overflows int64"},
    /* tensors: a Const's own shape */
    {HDR "{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\", \"value\": \"int8\"}, \"value\": {\"type\": "
         "\"tensor\", \"value\": {\"dtype\": \"int8\", \"shape\": [0, " P_STR
         ", 4], \"data\": \"\"}}}}]}",
     "multiply past INT64_MAX"},
};

static void test_json(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof json_cases / sizeof *json_cases; i++) {
    rf_graph *g = NULL;
    rf_status *st =
        rf_graph_from_json(json_cases[i].json, strlen(json_cases[i].json), &g);
    if (rf_status_code(st) != RF_INVALID_ARGUMENT ||
        !strstr(rf_status_message(st), json_cases[i].sub))
      fail_msg("case %zu: got %s '%s', want INVALID_ARGUMENT '%s'", i,
               rf_code_name(rf_status_code(st)), rf_status_message(st),
               json_cases[i].sub);
    rf_status_free(st);
    assert_null(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_placeholder_and_variable),
      cmocka_unit_test(test_hand_made_shapes),
      cmocka_unit_test(test_all_gather),
      cmocka_unit_test(test_combined_shapes),
      cmocka_unit_test(test_reshape_and_fill),
      cmocka_unit_test(test_run_time),
      cmocka_unit_test(test_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
