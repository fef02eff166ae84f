/* tests/test_attrs.c - attribute values and sets: sorted order, replacement,
 * deep copies of every kind, tensor references, equality, formatting, typed
 * reads and allocation failures. */
#include <stdio.h>
#include <string.h>

#include "core/tensor.h"
#include "graph/attrs.h"
#include "ringflow/debug.h"
#include "testutil.h"

static rf_tensor *vec(const float *v, int n) {
  rf_shape s = rf_shape_of(1, n);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &t));
  return t;
}

static int refs(rf_tensor *t) { return atomic_load(&t->refs); }

static void test_sorted_set_and_replace(void **state) {
  rf__attrs a = {NULL, 0, 0};
  uint64_t rng = rf_test_seed();
  /* Random insertion order, sorted result. */
  const char *names[] = {"m", "b", "z", "a", "q", "c", "y", "k"};
  int order[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int i = 7; i > 0; i--) {
    int j = (int)(rf_test_rand(&rng) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < 8; i++) {
    rf__attr_value v = rf__attr_int(order[i]);
    assert_ok(rf__attrs_set(&a, names[order[i]], &v));
  }
  assert_int_equal(a.n, 8);
  for (int i = 1; i < a.n; i++)
    assert_true(strcmp(a.items[i - 1].name, a.items[i].name) < 0);
  for (int i = 0; i < 8; i++) {
    int64_t got;
    assert_ok(rf__attrs_get_int(&a, names[i], &got));
    assert_int_equal(got, i);
  }
  /* Replacing keeps one entry, may change the type. */
  rf__attr_value s = rf__attr_string_ref("hello");
  assert_ok(rf__attrs_set(&a, "q", &s));
  assert_int_equal(a.n, 8);
  const char *str;
  assert_ok(rf__attrs_get_string(&a, "q", &str));
  assert_string_equal(str, "hello");
  assert_null(rf__attrs_find(&a, "nope"));
  assert_null(rf__attrs_find(NULL, "a"));
  assert_status(rf__attrs_set(&a, NULL, &s), RF_INVALID_ARGUMENT, NULL);
  rf__attrs_clear(&a);
  assert_int_equal(a.n, 0);
  assert_null(rf__attrs_find(&a, "a"));
  rf__attrs_clear(&a); /* twice is fine */
}

static void test_typed_reads(void **state) {
  rf__attrs a = {NULL, 0, 0};
  int64_t ints[3] = {4, -5, 6};
  float data[2] = {1.5f, -2};
  rf_tensor *t = vec(data, 2);
  rf__attr_value vals[] = {
      rf__attr_int(-7),           rf__attr_float(0.25),
      rf__attr_bool(true),        rf__attr_string_ref("s"),
      rf__attr_type_value(RF_INT8), rf__attr_shape(rf_shape_of(2, 3, -1)),
      rf__attr_tensor_ref(t),     rf__attr_int_list_ref(ints, 3)};
  const char *names[] = {"i", "f", "b", "s", "t", "sh", "ten", "il"};
  for (int k = 0; k < 8; k++) assert_ok(rf__attrs_set(&a, names[k], &vals[k]));
  assert_int_equal(refs(t), 2);
  int64_t i;
  double f;
  bool b;
  const char *s;
  rf_dtype ty;
  rf_shape sh;
  rf_tensor *tt;
  const int64_t *il;
  int n;
  assert_ok(rf__attrs_get_int(&a, "i", &i));
  assert_int_equal(i, -7);
  assert_ok(rf__attrs_get_float(&a, "f", &f));
  assert_true(f == 0.25);
  assert_ok(rf__attrs_get_bool(&a, "b", &b));
  assert_true(b);
  assert_ok(rf__attrs_get_string(&a, "s", &s));
  assert_string_equal(s, "s");
  assert_ok(rf__attrs_get_type(&a, "t", &ty));
  assert_int_equal(ty, RF_INT8);
  assert_ok(rf__attrs_get_shape(&a, "sh", &sh));
  rf_shape want = rf_shape_of(2, 3, -1);
  assert_true(rf_shape_equal(&sh, &want));
  assert_ok(rf__attrs_get_tensor(&a, "ten", &tt));
  assert_ptr_equal(tt, t);
  assert_int_equal(refs(t), 2); /* not retained by the read */
  assert_ok(rf__attrs_get_int_list(&a, "il", &il, &n));
  assert_int_equal(n, 3);
  assert_int_equal(il[1], -5);
  assert_ptr_not_equal(il, ints); /* a copy */
  assert_status(rf__attrs_get_int(&a, "none", &i), RF_NOT_FOUND, "'none'");
  assert_status(rf__attrs_get_int(&a, "f", &i), RF_INVALID_ARGUMENT,
                "attr 'f' is of type float, not int");
  assert_status(rf__attrs_get_float(&a, "i", &f), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_bool(&a, "s", &b), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_string(&a, "b", &s), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_type(&a, "sh", &ty), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_shape(&a, "t", &sh), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_tensor(&a, "il", &tt), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__attrs_get_int_list(&a, "ten", &il, &n), RF_INVALID_ARGUMENT,
                NULL);
  assert_status(rf__attrs_get_int(&a, NULL, &i), RF_INVALID_ARGUMENT, NULL);
  rf__attrs_clear(&a);
  assert_int_equal(refs(t), 1);
  rf_tensor_release(t);
}

/* One value of every list kind (owning); released with clear. */
static void make_lists(rf__attr_value *out, rf_tensor *t1, rf_tensor *t2) {
  int64_t ints[] = {1, 2, 3};
  double floats[] = {0.5, -1};
  bool bools[] = {true, false, true};
  char *strings[] = {"x", "yy"};
  rf_dtype types[] = {RF_FLOAT16, RF_BOOL};
  rf_shape shapes[] = {rf_shape_of(1, 2), rf_shape_unknown()};
  rf_tensor *tensors[] = {t1, t2};
  rf__attr_value v[7] = {
      {.type = RF_ATTR_INT_LIST, .n = 3, .u.ints = ints},
      {.type = RF_ATTR_FLOAT_LIST, .n = 2, .u.floats = floats},
      {.type = RF_ATTR_BOOL_LIST, .n = 3, .u.bools = bools},
      {.type = RF_ATTR_STRING_LIST, .n = 2, .u.strings = strings},
      {.type = RF_ATTR_TYPE_LIST, .n = 2, .u.types = types},
      {.type = RF_ATTR_SHAPE_LIST, .n = 2, .u.shapes = shapes},
      {.type = RF_ATTR_TENSOR_LIST, .n = 2, .u.tensors = tensors}};
  for (int k = 0; k < 7; k++) assert_ok(rf__attr_value_copy(&v[k], &out[k]));
}

static void test_lists_copy_equal_format(void **state) {
  float d1[2] = {1, 2}, d2[2] = {1, 3};
  rf_tensor *t1 = vec(d1, 2), *t2 = vec(d2, 2);
  rf__attr_value a[7], b[7];
  make_lists(a, t1, t2);
  make_lists(b, t1, t2);
  assert_int_equal(refs(t1), 3);
  for (int k = 0; k < 7; k++) {
    assert_true(rf__attr_value_equal(&a[k], &b[k]));
    for (int j = 0; j < 7; j++)
      if (j != k) assert_false(rf__attr_value_equal(&a[k], &b[j]));
  }
  /* Deep: the copy's strings are its own. */
  assert_ptr_not_equal(a[3].u.strings[0], b[3].u.strings[0]);
  b[3].u.strings[1][0] = 'z';
  assert_false(rf__attr_value_equal(&a[3], &b[3]));
  b[0].u.ints[2] = 9;
  assert_false(rf__attr_value_equal(&a[0], &b[0]));
  b[1].n = 1;
  assert_false(rf__attr_value_equal(&a[1], &b[1]));
  /* Tensors compare by value. */
  rf_tensor *t3 = vec(d1, 2);
  rf__attr_value x = rf__attr_tensor_ref(t1), y = rf__attr_tensor_ref(t3),
                 z = rf__attr_tensor_ref(t2);
  assert_true(rf__attr_value_equal(&x, &y));
  assert_false(rf__attr_value_equal(&x, &z));
  const char *want[] = {"[1, 2, 3]",        "[0.5, -1]",
                        "[true, false, true]", "[x, yy]",
                        "[float16, bool]",  "[(2), <unknown>]",
                        "[float32(2) [1, 2], float32(2) [1, 3]]"};
  char buf[128];
  for (int k = 0; k < 7; k++) {
    rf__attr_value_format(&a[k], buf, sizeof buf);
    assert_string_equal(buf, want[k]);
  }
  rf__attr_value sc[] = {rf__attr_int(-3), rf__attr_float(1.5),
                         rf__attr_bool(false), rf__attr_string_ref("txt"),
                         rf__attr_type_value(RF_BFLOAT16),
                         rf__attr_shape(rf_shape_of(2, 2, -1))};
  const char *want_sc[] = {"-3", "1.5", "false", "txt", "bfloat16", "(2, ?)"};
  for (int k = 0; k < 6; k++) {
    rf__attr_value_format(&sc[k], buf, sizeof buf);
    assert_string_equal(buf, want_sc[k]);
  }
  char tiny[5];
  rf__attr_value_format(&a[0], tiny, sizeof tiny);
  assert_string_equal(tiny, "[1, ");
  for (int k = 0; k < 7; k++) {
    rf__attr_value_clear(&a[k]);
    rf__attr_value_clear(&b[k]);
  }
  assert_int_equal(refs(t1), 1);
  rf_tensor_release(t1);
  rf_tensor_release(t2);
  rf_tensor_release(t3);
}

static void test_attrs_copy(void **state) {
  float d[1] = {4};
  rf_tensor *t = vec(d, 1);
  rf__attrs a = {NULL, 0, 0}, c;
  rf__attr_value lists[7];
  make_lists(lists, t, t);
  const char *names[] = {"l0", "l1", "l2", "l3", "l4", "l5", "l6"};
  for (int k = 0; k < 7; k++) assert_ok(rf__attrs_set(&a, names[k], &lists[k]));
  rf__attr_value s = rf__attr_string_ref("str");
  assert_ok(rf__attrs_set(&a, "s", &s));
  assert_ok(rf__attrs_copy(&a, &c));
  assert_int_equal(c.n, a.n);
  for (int k = 0; k < a.n; k++) {
    assert_string_equal(a.items[k].name, c.items[k].name);
    assert_ptr_not_equal(a.items[k].name, c.items[k].name);
    assert_true(rf__attr_value_equal(&a.items[k].value, &c.items[k].value));
  }
  rf__attrs_clear(&a);
  const rf__attr_value *v = rf__attrs_find(&c, "l3");
  assert_string_equal(v->u.strings[1], "yy");
  rf__attrs_clear(&c);
  for (int k = 0; k < 7; k++) rf__attr_value_clear(&lists[k]);
  assert_int_equal(refs(t), 1);
  rf_tensor_release(t);
  rf__attrs empty = {NULL, 0, 0};
  assert_ok(rf__attrs_copy(&empty, &c));
  assert_int_equal(c.n, 0);
  assert_status(rf__attrs_copy(NULL, &c), RF_INVALID_ARGUMENT, NULL);
}

/* Every allocation of set and copy fails in turn: RESOURCE_EXHAUSTED, nothing
 * leaked, the set unchanged. */
static void test_allocation_failures(void **state) {
  float d[1] = {4};
  rf_tensor *t = vec(d, 1);
  rf__attr_value lists[7];
  make_lists(lists, t, t);
  int failures = 0;
  for (int k = 1;; k++) {
    int64_t live = rf_debug_live_allocations();
    rf__attrs a = {NULL, 0, 0}, c = {NULL, 0, 0};
    rf_debug_fail_allocation_after(k);
    rf_status *st = NULL;
    for (int j = 0; j < 7 && !st; j++) {
      char name[8];
      snprintf(name, sizeof name, "l%d", 6 - j);
      st = rf__attrs_set(&a, name, &lists[j]);
      if (st) assert_int_equal(a.n, j);
    }
    if (!st) st = rf__attrs_copy(&a, &c);
    rf_debug_fail_allocation_after(0);
    rf__attrs_clear(&a);
    rf__attrs_clear(&c);
    assert_int_equal(rf_debug_live_allocations(), live);
    if (!st) break;
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    failures++;
  }
  assert_true(failures > 10);
  for (int k = 0; k < 7; k++) rf__attr_value_clear(&lists[k]);
  assert_int_equal(refs(t), 1);
  rf_tensor_release(t);
}

static void test_type_names(void **state) {
  assert_string_equal(rf__attr_type_name(RF_ATTR_INT), "int");
  assert_string_equal(rf__attr_type_name(RF_ATTR_SHAPE_LIST), "list(shape)");
  assert_string_equal(rf__attr_type_name(RF_ATTR_TYPE_COUNT), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sorted_set_and_replace),
      cmocka_unit_test(test_typed_reads),
      cmocka_unit_test(test_lists_copy_equal_format),
      cmocka_unit_test(test_attrs_copy),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_type_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
