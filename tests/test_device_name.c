/* tests/test_device_name.c - device name parsing (every accepted form, any
 * case), canonical printing, equality and malformed names. */
#include <stdio.h>
#include <string.h>

#include "graph/device_name.h"
#include "testutil.h"

typedef struct good {
  const char *in;
  int task;
  rf__device_type type;
  int index;
  const char *canonical;
} good;

static void test_accepted_forms(void **state) {
  const good cases[] = {
      {"cpu", -1, RF_DEVICE_CPU, 0, "cpu:0"},
      {"CPU", -1, RF_DEVICE_CPU, 0, "cpu:0"},
      {"cpu:3", -1, RF_DEVICE_CPU, 3, "cpu:3"},
      {"gpu:0", -1, RF_DEVICE_GPU, 0, "gpu:0"},
      {"Gpu:12", -1, RF_DEVICE_GPU, 12, "gpu:12"},
      {"gpu", -1, RF_DEVICE_GPU, 0, "gpu:0"},
      {"/cpu:1", -1, RF_DEVICE_CPU, 1, "cpu:1"},
      {"/device:GPU:2", -1, RF_DEVICE_GPU, 2, "gpu:2"},
      {"device:cpu:7", -1, RF_DEVICE_CPU, 7, "cpu:7"},
      {"/DEVICE:CPU", -1, RF_DEVICE_CPU, 0, "cpu:0"},
      {"/task:1/gpu:0", 1, RF_DEVICE_GPU, 0, "/task:1/gpu:0"},
      {"/TASK:4/device:CPU:5", 4, RF_DEVICE_CPU, 5, "/task:4/cpu:5"},
      {"gpu:1/task:2", 2, RF_DEVICE_GPU, 1, "/task:2/gpu:1"},
      {"cpu:007", -1, RF_DEVICE_CPU, 7, "cpu:7"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf__device_name d = {99, RF_DEVICE_GPU, 99};
    rf_status *st = rf__device_name_parse(cases[i].in, &d);
    if (st) fprintf(stderr, "case '%s'\n", cases[i].in);
    assert_ok(st);
    assert_int_equal(d.task, cases[i].task);
    assert_int_equal(d.type, cases[i].type);
    assert_int_equal(d.index, cases[i].index);
    char buf[RF_DEVICE_NAME_MAX];
    rf__device_name_format(&d, buf, sizeof buf);
    assert_string_equal(buf, cases[i].canonical);
    /* The canonical form parses back to the same device. */
    rf__device_name back;
    assert_ok(rf__device_name_parse(buf, &back));
    assert_true(rf__device_name_equal(&d, &back));
  }
  assert_ok(rf__device_name_parse("cpu:1", NULL)); /* validation only */
}

static void test_malformed(void **state) {
  const char *bad[] = {"",        "/",        "tpu:0",    "cpu:-1",
                       "cpu:x",   "cpu:",     "cpu:1:2",  "cpux",
                       "cp",      "gpu:1/",   "//cpu:0",  "/task:1",
                       "task:x/cpu:0", "/task:1/task:2/cpu:0",
                       "cpu:0/gpu:0", "device:", "device:tpu:1",
                       " cpu:0",  "cpu:0 ",   "cpu:99999999", "gpu:1.5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rf__device_name d = {5, RF_DEVICE_GPU, 6};
    char want[64];
    snprintf(want, sizeof want, "'%s'", bad[i]);
    rf_status *st = rf__device_name_parse(bad[i], &d);
    if (!st) fprintf(stderr, "accepted '%s'\n", bad[i]);
    assert_status(st, RF_INVALID_ARGUMENT, want);
    /* Untouched on error. */
    assert_int_equal(d.task, 5);
    assert_int_equal(d.index, 6);
  }
  assert_status(rf__device_name_parse(NULL, NULL), RF_INVALID_ARGUMENT, NULL);
}

static void test_equal_and_names(void **state) {
  rf__device_name a = {-1, RF_DEVICE_CPU, 1}, b = a;
  assert_true(rf__device_name_equal(&a, &b));
  b.index = 2;
  assert_false(rf__device_name_equal(&a, &b));
  b = a;
  b.type = RF_DEVICE_GPU;
  assert_false(rf__device_name_equal(&a, &b));
  b = a;
  b.task = 0;
  assert_false(rf__device_name_equal(&a, &b));
  assert_false(rf__device_name_equal(&a, NULL));
  assert_string_equal(rf__device_type_name(RF_DEVICE_CPU), "cpu");
  assert_string_equal(rf__device_type_name(RF_DEVICE_GPU), "gpu");
  assert_string_equal(rf__device_type_name(RF_DEVICE_TYPE_COUNT), "unknown");
  char small[4];
  rf__device_name_format(&a, small, sizeof small);
  assert_string_equal(small, "cpu"); /* truncated, still terminated */
  rf__device_name_format(NULL, small, sizeof small);
  assert_string_equal(small, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepted_forms),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_equal_and_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
