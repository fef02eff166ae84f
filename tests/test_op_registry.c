/* tests/test_op_registry.c - op spec parsing: args, attr types, allowed sets,
 * minimums, defaults of every kind, malformed specs, duplicates and
 * allocation failures while registering. */
#include <stdio.h>
#include <string.h>

#include "ops/op_registry.h"
#include "ringflow/debug.h"
#include "testutil.h"

static const rf__attr_def *attr(const rf__op_def *op, const char *name) {
  const rf__attr_def *d = rf__op_find_attr(op, name);
  assert_non_null(d);
  return d;
}

static void test_full_spec(void **state) {
  rf__op_spec spec = {
      .name = "RegFull",
      .inputs = "a: T, idx: int32, vals: N * T",
      .outputs = "out: T, n: int64, parts: N * U",
      .attrs = "T: type in {@float, int32}; U: type in {@all} = bool;"
               " N: int >= 1; alpha: float = -2.5; on: bool = true;"
               " mode: string in {sum, 'prod', \"max\"} = prod;"
               " label: string = \"hello world\"; bare: string = word;"
               " s: shape = ?; s2: shape = [2, ?, 3]; s0: shape = [];"
               " v: tensor",
      .flags = RF_OP_STATEFUL};
  assert_ok(rf__op_register(&spec));
  rf__op_spec lists = {
      .name = "RegLists",
      .attrs = " ks: list(int) >= 1 = [1, -2, 3]; ke: list(int) = [];"
               " fs: list(float) = [0.5, 1e3]; bs: list(bool) = [true, false];"
               " ss: list(string) = [a, 'b c']; ts: list(type) = [int8, "
               "float64]; shs: list(shape) = [[1, 2], ?]"};
  assert_ok(rf__op_register(&lists));
  const rf__op_def *op = rf__op_find("RegFull");
  assert_non_null(op);
  assert_string_equal(op->name, "RegFull");
  assert_int_equal(op->flags, RF_OP_STATEFUL);
  assert_int_equal(op->num_inputs, 3);
  assert_int_equal(op->num_outputs, 3);
  assert_string_equal(op->inputs[0].name, "a");
  assert_string_equal(op->inputs[0].type_attr, "T");
  assert_int_equal(op->inputs[0].fixed_type, RF_DTYPE_INVALID);
  assert_string_equal(op->inputs[1].type_attr, "");
  assert_int_equal(op->inputs[1].fixed_type, RF_INT32);
  assert_string_equal(op->inputs[2].number_attr, "N");
  assert_string_equal(op->inputs[2].type_attr, "T");
  assert_int_equal(op->outputs[1].fixed_type, RF_INT64);
  assert_string_equal(op->outputs[2].number_attr, "N");
  assert_string_equal(op->outputs[2].type_attr, "U");

  const rf__attr_def *d = attr(op, "T");
  assert_int_equal(d->type, RF_ATTR_TYPE);
  assert_false(d->has_default);
  assert_int_equal(d->num_allowed_types, 5);
  const rf_dtype want_t[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64,
                             RF_INT32};
  for (int k = 0; k < 5; k++) assert_int_equal(d->allowed_types[k], want_t[k]);
  d = attr(op, "U");
  assert_int_equal(d->num_allowed_types, 9);
  assert_int_equal(d->default_value.u.type, RF_BOOL);
  d = attr(op, "N");
  assert_true(d->has_minimum);
  assert_int_equal(d->minimum, 1);
  assert_false(d->has_default);
  d = attr(op, "alpha");
  assert_true(d->has_default && d->default_value.u.f == -2.5);
  assert_true(attr(op, "on")->default_value.u.b);
  d = attr(op, "mode");
  assert_int_equal(d->num_allowed_strings, 3);
  assert_string_equal(d->allowed_strings[1], "prod");
  assert_string_equal(d->allowed_strings[2], "max");
  assert_string_equal(d->default_value.u.s, "prod");
  assert_string_equal(attr(op, "label")->default_value.u.s, "hello world");
  assert_string_equal(attr(op, "bare")->default_value.u.s, "word");
  assert_int_equal(attr(op, "s")->default_value.u.shape.rank, RF_UNKNOWN_RANK);
  rf_shape s2 = attr(op, "s2")->default_value.u.shape;
  rf_shape want_s2 = rf_shape_of(3, 2, -1, 3);
  assert_true(rf_shape_equal(&s2, &want_s2));
  assert_int_equal(attr(op, "s0")->default_value.u.shape.rank, 0);
  d = attr(op, "v");
  assert_int_equal(d->type, RF_ATTR_TENSOR);
  assert_false(d->has_default);
  op = rf__op_find("RegLists");
  d = attr(op, "ks");
  assert_int_equal(d->type, RF_ATTR_INT_LIST);
  assert_int_equal(d->default_value.n, 3);
  assert_int_equal(d->default_value.u.ints[1], -2);
  assert_true(d->has_minimum);
  assert_int_equal(attr(op, "ke")->default_value.n, 0);
  d = attr(op, "fs");
  assert_true(d->default_value.n == 2 && d->default_value.u.floats[1] == 1000.0);
  d = attr(op, "bs");
  assert_true(d->default_value.u.bools[0] && !d->default_value.u.bools[1]);
  d = attr(op, "ss");
  assert_string_equal(d->default_value.u.strings[1], "b c");
  d = attr(op, "ts");
  assert_int_equal(d->default_value.u.types[1], RF_FLOAT64);
  d = attr(op, "shs");
  assert_int_equal(d->default_value.n, 2);
  assert_int_equal(d->default_value.u.shapes[0].dims[1], 2);
  assert_int_equal(d->default_value.u.shapes[1].rank, RF_UNKNOWN_RANK);
  assert_null(rf__op_find_attr(op, "nope"));
  assert_null(rf__op_find_attr(NULL, "T"));
  assert_null(rf__op_find(NULL));
  assert_null(rf__op_find("NoSuchOp"));

  /* Groups. */
  rf__op_spec g = {.name = "RegGroups",
                   .attrs = "A: type in {@int}; B: type in {@numeric, bool}; "
                            "C: list(type) in {@float}"};
  assert_ok(rf__op_register(&g));
  op = rf__op_find("RegGroups");
  assert_int_equal(attr(op, "A")->num_allowed_types, 4);
  assert_int_equal(attr(op, "A")->allowed_types[3], RF_INT64);
  assert_int_equal(attr(op, "B")->num_allowed_types, 9);
  assert_int_equal(attr(op, "C")->num_allowed_types, 4);
}

static void test_empty_parts_and_duplicates(void **state) {
  rf__op_spec a = {.name = "RegEmpty"};
  assert_ok(rf__op_register(&a));
  rf__op_spec b = {.name = "RegEmpty2", .inputs = "", .outputs = " ",
                   .attrs = " ; "};
  assert_ok(rf__op_register(&b));
  const rf__op_def *op = rf__op_find("RegEmpty2");
  assert_int_equal(op->num_inputs + op->num_outputs + op->num_attrs, 0);
  assert_status(rf__op_register(&a), RF_ALREADY_EXISTS, "'RegEmpty'");
  rf__op_spec noname = {.name = ""};
  assert_status(rf__op_register(&noname), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__op_register(NULL), RF_INVALID_ARGUMENT, NULL);
  char longname[100];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  rf__op_spec lng = {.name = longname};
  assert_status(rf__op_register(&lng), RF_INVALID_ARGUMENT, "too long");
}

typedef struct bad_spec {
  const char *inputs, *outputs, *attrs;
  const char *quoted; /* the part the message must quote */
} bad_spec;

static void test_malformed_specs(void **state) {
  const bad_spec bad[] = {
      {"x: Q", NULL, NULL, "'x: Q'"},
      {"x: T", NULL, "T: int", "'x: T'"},
      {"x: N * T", NULL, "T: type", "'x: N * T'"},
      {"x: M * T", NULL, "T: type; M: type", "'x: M * T'"},
      {NULL, "y: float33", NULL, "'y: float33'"},
      {"x", NULL, NULL, "'x'"},
      {"1x: int32", NULL, NULL, "'1x: int32'"},
      {"a: int32, a: float32", NULL, NULL, "'a: float32'"},
      {NULL, NULL, "T: tipe", "'T: tipe'"},
      {NULL, NULL, "T type", "'T type'"},
      {NULL, NULL, "2T: type", "'2T: type'"},
      {NULL, NULL, "T: type in {float33}", "'float33'"},
      {NULL, NULL, "T: type in {@floats}", "'@floats'"},
      {NULL, NULL, "T: type in {}", "'{}'"},
      {NULL, NULL, "T: type in {float32", "T: type in {float32"},
      {NULL, NULL, "T: type in float32", "'T: type in float32'"},
      {NULL, NULL, "T: type in {@float} = int32", "'T: type in {@float} = int32'"},
      {NULL, NULL, "k: int = abc", "'k: int = abc'"},
      {NULL, NULL, "k: int = 1.5", "'k: int = 1.5'"},
      {NULL, NULL, "k: int >= 2 = 1", "'k: int >= 2 = 1'"},
      {NULL, NULL, "k: int >= x", "'k: int >= x'"},
      {NULL, NULL, "k: float >= 1", "'k: float >= 1'"},
      {NULL, NULL, "k: int in {1, 2}", "'{1, 2}'"},
      {NULL, NULL, "k: int junk", "'k: int junk'"},
      {NULL, NULL, "k: int; k: float", "'k: float'"},
      {NULL, NULL, "b: bool = yes", "'b: bool = yes'"},
      {NULL, NULL, "f: float = fast", "'f: float = fast'"},
      {NULL, NULL, "m: string in {a, b} = c", "'m: string in {a, b} = c'"},
      {NULL, NULL, "m: string = 'open", "'m: string = 'open'"},
      {NULL, NULL, "s: shape = [2, x]", "'s: shape = [2, x]'"},
      {NULL, NULL, "s: shape = [2, -3]", "'s: shape = [2, -3]'"},
      {NULL, NULL, "s: shape = 5", "'s: shape = 5'"},
      {NULL, NULL, "l: list(int) = [1, x]", "'l: list(int) = [1, x]'"},
      {NULL, NULL, "l: list(int) = 1", "'l: list(int) = 1'"},
      {NULL, NULL, "t: tensor = 1", "'t: tensor = 1'"},
      {NULL, NULL, "t: type = float33", "'t: type = float33'"},
      {NULL, NULL, "l: list(wat)", "'l: list(wat)'"},
      {NULL, NULL,
       "a0: int; a1: int; a2: int; a3: int; a4: int; a5: int; a6: int; "
       "a7: int; a8: int; a9: int; b0: int; b1: int; b2: int; b3: int; "
       "b4: int; b5: int; b6: int",
       "too many attrs in 'b6: int'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "RegBad%zu", i);
    rf__op_spec s = {.name = name, .inputs = bad[i].inputs,
                     .outputs = bad[i].outputs, .attrs = bad[i].attrs};
    rf_status *st = rf__op_register(&s);
    if (!st || !strstr(rf_status_message(st), bad[i].quoted))
      fprintf(stderr, "spec %zu: got %s\n", i, rf_status_message(st));
    assert_status(st, RF_INVALID_ARGUMENT, bad[i].quoted);
    assert_null(rf__op_find(name)); /* nothing was added */
  }
}

static void test_registration_allocation_failures(void **state) {
  int failures = 0;
  for (int k = 1;; k++) {
    char name[32];
    snprintf(name, sizeof name, "RegOom%d", k);
    rf__op_spec s = {.name = name, .inputs = "x: N * T", .outputs = "y: T",
                     .attrs = "T: type; N: int >= 1; mode: string = fast; "
                              "ks: list(int) = [1, 2]; "
                              "ss: list(string) = [a, b]"};
    int64_t live = rf_debug_live_allocations();
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf__op_register(&s);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      assert_non_null(rf__op_find(name));
      break;
    }
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(rf__op_find(name));
    assert_int_equal(rf_debug_live_allocations(), live);
    failures++;
  }
  assert_true(failures >= 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_spec),
      cmocka_unit_test(test_empty_parts_and_duplicates),
      cmocka_unit_test(test_malformed_specs),
      cmocka_unit_test(test_registration_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
