/* tests/test_graph_io_values.c - float attr values through graph files: a
 * NaN keeps its sign and payload (OneHot's on/off values and Pad's
 * constant_values reach the outputs' bits, so a graph loaded from its file
 * must run to the same bits), the number forms GRAPH_FORMAT.md lists for
 * hand-written files are read as it says, and what jansson refuses is a JSON
 * error with line and column. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

static double from_bits(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static uint64_t to_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static uint64_t float_attr_bits(const rf_graph *g, const char *node,
                                const char *attr) {
  rf_node *n = rf_graph_find_node(g, node);
  assert_non_null(n);
  double v;
  assert_ok(rf__attrs_get_float(&n->attrs, attr, &v));
  return to_bits(v);
}

static void test_nan_attrs_round_trip(void **state) {
  (void)state;
  const double neg_nan = from_bits(UINT64_C(0xfff8000000000000));
  const double payload = from_bits(UINT64_C(0x7ffc000000000123));
  rf_graph *g = rf_graph_new();
  rf_shape s3 = rf_shape_of(1, (int64_t)3);
  rf_tensor *idx;
  assert_ok(rf_tensor_new(RF_INT32, &s3, NULL, &idx));
  int32_t *ip = rf_tensor_mutable_data(idx);
  ip[0] = 0, ip[1] = 2, ip[2] = 7;
  rf_output i = rf_const(g, "idx", idx);
  rf_tensor_release(idx);
  rf_tensor *x = rf_test_random_tensor(&(uint64_t){1}, RF_FLOAT32, s3, -1, 1);
  rf_output xc = rf_const(g, "x", x);
  rf_tensor_release(x);
  int64_t pads[2] = {1, 2};
  rf_output f[4] = {
      rf_one_hot(g, "oh32", i, 3, neg_nan, payload, -1, RF_FLOAT32),
      rf_one_hot(g, "oh64", i, 3, payload, neg_nan, -1, RF_FLOAT64),
      rf_one_hot(g, "ohbf", i, 3, neg_nan, NAN, -1, RF_BFLOAT16),
      rf_pad(g, "pad", xc, pads, 2, neg_nan)};
  assert_graph_ok(g);

  char *t1;
  assert_ok(rf_graph_to_json(g, &t1));
  assert_non_null(strstr(t1, "\"-nan\""));
  assert_non_null(strstr(t1, "\"nan:0x7ffc000000000123\""));
  assert_non_null(strstr(t1, "\"nan\""));
  rf_graph *g2 = NULL;
  assert_ok(rf_graph_from_json(t1, strlen(t1), &g2));
  char *t2;
  assert_ok(rf_graph_to_json(g2, &t2));
  assert_string_equal(t1, t2);

  static const struct {
    const char *node, *attr;
  } attrs[] = {{"oh32", "on_value"},      {"oh32", "off_value"},
               {"oh64", "on_value"},      {"oh64", "off_value"},
               {"ohbf", "on_value"},      {"ohbf", "off_value"},
               {"pad", "constant_values"}};
  for (size_t k = 0; k < sizeof attrs / sizeof *attrs; k++)
    assert_int_equal(float_attr_bits(g, attrs[k].node, attrs[k].attr),
                     float_attr_bits(g2, attrs[k].node, attrs[k].attr));

  rf_output f2[4];
  for (int k = 0; k < 4; k++)
    f2[k] = (rf_output){rf_graph_find_node(g2, rf_node_name(f[k].node)),
                        f[k].index};
  rf_tensor *r1[4], *r2[4];
  rf_test_run(g, 1, NULL, 0, f, 4, r1);
  rf_test_run(g2, 1, NULL, 0, f2, 4, r2);
  for (int k = 0; k < 4; k++) {
    assert_same_bytes(r2[k], r1[k]);
    rf_tensor_release(r1[k]);
    rf_tensor_release(r2[k]);
  }
  rf_string_free(t1);
  rf_string_free(t2);
  rf_graph_free(g2);
  rf_graph_free(g);
}

/* A file of one Const and a OneHot whose on_value is written `on`. */
static rf_status *load_on_value(const char *on, rf_graph **out) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": ["
           "{\"name\": \"idx\", \"op\": \"Const\", \"attrs\": {"
           "\"dtype\": {\"type\": \"type\", \"value\": \"int32\"}, "
           "\"value\": {\"type\": \"tensor\", \"value\": {\"dtype\": "
           "\"int32\", \"shape\": [1], \"data\": \"AAAAAA==\"}}}}, "
           "{\"name\": \"hot\", \"op\": \"OneHot\", \"inputs\": [\"idx\"], "
           "\"attrs\": {\"T\": {\"type\": \"type\", \"value\": \"float32\"}, "
           "\"TI\": {\"type\": \"type\", \"value\": \"int32\"}, "
           "\"depth\": {\"type\": \"int\", \"value\": 2}, "
           "\"on_value\": {\"type\": \"float\", \"value\": %s}}}]}",
           on);
  return rf_graph_from_json(text, strlen(text), out);
}

static void assert_on_value_bits(const char *on, uint64_t want) {
  rf_graph *g = NULL;
  assert_ok(load_on_value(on, &g));
  assert_int_equal(float_attr_bits(g, "hot", "on_value"), want);
  rf_graph_free(g);
}

static void test_hand_written_floats(void **state) {
  (void)state;
  assert_on_value_bits("\"nan\"", UINT64_C(0x7ff8000000000000));
  assert_on_value_bits("\"-nan\"", UINT64_C(0xfff8000000000000));
  assert_on_value_bits("\"nan:0x7FF0000000000001\"",
                       UINT64_C(0x7ff0000000000001));
  assert_on_value_bits("\"nan:0xfff4000000000000\"",
                       UINT64_C(0xfff4000000000000));
  assert_on_value_bits("\"inf\"", UINT64_C(0x7ff0000000000000));
  assert_on_value_bits("\"-inf\"", UINT64_C(0xfff0000000000000));
  assert_on_value_bits("-0.0", UINT64_C(0x8000000000000000));
  assert_on_value_bits("-0e0", UINT64_C(0x8000000000000000));
  assert_on_value_bits("-0", 0); /* an integer: int64 0, then +0.0 */
  assert_on_value_bits("1e3", to_bits(1000.0));
  assert_on_value_bits("4.9406564584124654e-324", 1);
  assert_on_value_bits("1e-400", 0);
  assert_on_value_bits("9223372036854775807", to_bits(0x1p63));
  /* Not a NaN's bits, not 16 digits, other spellings: refused, naming the
   * node and the attr. */
  static const char *const bad[] = {"\"nan:0x7ff0000000000000\"",
                                    "\"nan:0x0000000000000001\"",
                                    "\"nan:0x7ff800000000001\"",
                                    "\"nan:0x7ff80000000000001\"",
                                    "\"nan:7ff8000000000001\"",
                                    "\"nan:0x7ff800000000000g\"",
                                    "\"NaN\"",
                                    "\"-NAN\"",
                                    "\"Infinity\"",
                                    "\"+inf\"",
                                    "true",
                                    "null"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    rf_graph *g = NULL;
    assert_status(load_on_value(bad[k], &g), RF_INVALID_ARGUMENT,
                  "graph file, node 1 'hot', attr 'on_value': expected a "
                  "number");
    assert_null(g);
  }
  /* JSON numbers jansson cannot hold are JSON errors (line and column). */
  static const char *const json_bad[] = {"1e400", "-1e400",
                                         "10000000000000000000"};
  for (size_t k = 0; k < sizeof json_bad / sizeof *json_bad; k++) {
    rf_graph *g = NULL;
    assert_status(load_on_value(json_bad[k], &g), RF_INVALID_ARGUMENT,
                  "graph file: JSON error at line 1, column");
    assert_null(g);
  }
}

/* What jansson refuses is a JSON error with line and column, naming no node
 * (GRAPH_FORMAT.md lists these). */
static void test_json_level_errors(void **state) {
  (void)state;
  static const char *const bad[] = {
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": []} x",
      "\xef\xbb\xbf{\"format\": \"ringflow-graph\", \"version\": 1, "
      "\"nodes\": []}",
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": "
      "[{\"name\": \"a\\u0000b\", \"op\": \"NoOp\"}]}",
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": "
      "[{\"name\": \"a\xff\", \"op\": \"NoOp\"}]}",
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": "
      "[{\"name\": \"a\", \"op\": \"NoOp\", \"name\": \"b\"}]}",
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    rf_graph *g = NULL;
    assert_status(rf_graph_from_json(bad[k], strlen(bad[k]), &g),
                  RF_INVALID_ARGUMENT, "graph file: JSON error at line 1");
    assert_null(g);
  }
  /* 3000 nested arrays: past jansson's depth of 2048. */
  char *deep = test_malloc(7000);
  int n = snprintf(deep, 7000,
                   "{\"format\": \"ringflow-graph\", "
                   "\"version\": 1, \"nodes\": ");
  for (int k = 0; k < 3000; k++) deep[n + k] = '[';
  for (int k = 0; k < 3000; k++) deep[n + 3000 + k] = ']';
  strcpy(deep + n + 6000, "}");
  rf_graph *g = NULL;
  assert_status(rf_graph_from_json(deep, strlen(deep), &g), RF_INVALID_ARGUMENT,
                "maximum parsing depth");
  assert_null(g);
  test_free(deep);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nan_attrs_round_trip),
      cmocka_unit_test(test_hand_written_floats),
      cmocka_unit_test(test_json_level_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
