/* tests/test_api_limits.c - limits of the public API seen from a program:
 * a valid shape whose bytes pass SIZE_MAX / 2 is RESOURCE_EXHAUSTED from
 * rf_tensor_new and rf_tensor_new_external(_gpu) alike, for every dtype, at
 * the exact boundary; NULL out and invalid dtypes in rf_tensor_new_scalar
 * and rf_tensor_new_copy are INVALID_ARGUMENT naming the function called;
 * rf_checkpoint_get writes an expected shape's unknown dims as '?' and
 * refuses garbage arguments; a log line cuts a non-ASCII collective name
 * between UTF-8 characters. */
#include <stdint.h>
#include <string.h>

#include "ringflow/checkpoint.h"
#include "ringflow/collectives.h"
#include "ringflow/log.h"
#include "ringflow/session.h"
#include "testutil.h"

static void count_release(void *data, void *arg) {
  (void)data;
  (*(int *)arg)++;
}

/* (2^31, 2^31): 2^62 elements, a valid shape (its count fits int64), whose
 * bytes pass SIZE_MAX / 2 for every dtype wider than a byte. Both
 * constructors once disagreed (RESOURCE_EXHAUSTED and INVALID_ARGUMENT). */
static void test_bytes_past_size_max(void **state) {
  (void)state;
  static double buf[8];
  rf_shape big = rf_shape_of(2, (int64_t)1 << 31, (int64_t)1 << 31);
  assert_int_equal(rf_shape_num_elements(&big), (int64_t)1 << 62);
  for (int d = 0; d < RF_DTYPE_COUNT; d++) {
    rf_dtype dt = (rf_dtype)d;
    rf_tensor *t = (rf_tensor *)buf, *keep = t;
    int calls = 0;
    if (rf_dtype_size(dt) == 1) { /* 2^62 bytes: asked of the allocator */
      assert_status(rf_tensor_new(dt, &big, NULL, &t), RF_RESOURCE_EXHAUSTED,
                    "could not allocate 4611686018427387904 bytes");
      assert_ok(
          rf_tensor_new_external(dt, &big, buf, count_release, &calls, &t));
      assert_int_equal(rf_tensor_nbytes(t), (size_t)1 << 62);
      rf_tensor_release(t);
      assert_int_equal(calls, 1);
      continue;
    }
    assert_status(rf_tensor_new(dt, &big, NULL, &t), RF_RESOURCE_EXHAUSTED,
                  "rf_tensor_new: 4611686018427387904 elements is too many");
    assert_ptr_equal(t, keep);
    if (dt == RF_RESOURCE) continue; /* external: INVALID_ARGUMENT first */
    assert_status(
        rf_tensor_new_external(dt, &big, buf, count_release, &calls, &t),
        RF_RESOURCE_EXHAUSTED,
        "rf_tensor_new_external: 4611686018427387904 elements is too many");
    assert_status(
        rf_tensor_new_external_gpu(dt, &big, 0, buf, count_release, &calls, &t),
        RF_RESOURCE_EXHAUSTED,
        "rf_tensor_new_external_gpu: 4611686018427387904 elements");
    assert_ptr_equal(t, keep);
    assert_int_equal(calls, 0);
  }
  /* The boundary: SIZE_MAX / 2 / 4 float32 elements fit, one more does
   * not, whichever constructor. */
  int64_t most = (int64_t)(SIZE_MAX / 2 / 4);
  rf_shape fits = rf_shape_of(1, most), past = rf_shape_of(1, most + 1);
  rf_tensor *t;
  assert_ok(rf_tensor_new_external(RF_FLOAT32, &fits, buf, NULL, NULL, &t));
  assert_int_equal(rf_tensor_nbytes(t), (size_t)most * 4);
  rf_tensor_release(t);
  assert_status(rf_tensor_new_external(RF_FLOAT32, &past, buf, NULL, NULL, &t),
                RF_RESOURCE_EXHAUSTED, "float32 bytes pass SIZE_MAX / 2");
  assert_status(rf_tensor_new(RF_FLOAT32, &fits, NULL, &t),
                RF_RESOURCE_EXHAUSTED, "could not allocate");
  assert_status(rf_tensor_new(RF_FLOAT32, &past, NULL, &t),
                RF_RESOURCE_EXHAUSTED, "float32 bytes pass SIZE_MAX / 2");
  /* A count past INT64_MAX stays INVALID_ARGUMENT in both. */
  rf_shape wrap = rf_shape_of(2, (int64_t)1 << 62, 2);
  assert_status(rf_tensor_new(RF_INT8, &wrap, NULL, &t), RF_INVALID_ARGUMENT,
                "element count overflows int64");
  assert_status(rf_tensor_new_external(RF_INT8, &wrap, buf, NULL, NULL, &t),
                RF_INVALID_ARGUMENT, "element count overflows int64");
}

/* rf_tensor_new_scalar wrote through a NULL out (a crash); its and
 * rf_tensor_new_copy's errors named rf_tensor_new. */
static void test_scalar_and_copy_arguments(void **state) {
  (void)state;
  assert_status(rf_tensor_new_scalar(RF_FLOAT32, 1, NULL), RF_INVALID_ARGUMENT,
                "rf_tensor_new_scalar: NULL argument");
  rf_tensor *t = NULL;
  assert_status(rf_tensor_new_scalar(RF_DTYPE_INVALID, 1, &t),
                RF_INVALID_ARGUMENT, "rf_tensor_new_scalar: invalid dtype -1");
  assert_null(t);
  rf_shape s = rf_shape_of(1, 2);
  const float v[2] = {1, 2};
  assert_status(rf_tensor_new_copy(RF_FLOAT32, &s, v, NULL),
                RF_INVALID_ARGUMENT, "rf_tensor_new_copy: NULL argument (out)");
  /* an allocator without its functions is refused, not called */
  rf_allocator none = {NULL, NULL, NULL};
  assert_status(rf_tensor_new(RF_FLOAT32, &s, &none, &t), RF_INVALID_ARGUMENT,
                "rf_tensor_new: the allocator's alloc function is NULL");
  /* which argument, and a resource dtype said in words */
  assert_status(rf_tensor_new(RF_FLOAT32, NULL, NULL, &t), RF_INVALID_ARGUMENT,
                "rf_tensor_new: NULL argument (shape)");
  float one = 1;
  assert_status(rf_tensor_new_external(RF_RESOURCE, &s, &one, NULL, NULL, &t),
                RF_INVALID_ARGUMENT,
                "rf_tensor_new_external: dtype resource (9) holds no data");
  assert_status(rf_tensor_new_copy((rf_dtype)99, &s, v, &t),
                RF_INVALID_ARGUMENT, "rf_tensor_new_copy: invalid dtype 99");
  rf_shape big = rf_shape_of(2, (int64_t)1 << 31, (int64_t)1 << 31);
  assert_status(rf_tensor_new_copy(RF_FLOAT32, &big, v, &t),
                RF_RESOURCE_EXHAUSTED, "rf_tensor_new_copy: ");
  assert_null(t);
  assert_ok(rf_tensor_new_scalar(RF_BOOL, 2, &t));
  assert_float_equal(rf_tensor_get(t, 0), 1, 0);
  rf_tensor_release(t);
}

/* An expected shape's unknown dim was written -1 ("[-1,3]"); it is '?', as
 * rf_shape_format writes it. A dtype that is none, and unknown check bits,
 * were taken silently. */
static void test_checkpoint_get_expected_shape(void **state) {
  (void)state;
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_new(&c));
  rf_shape s = rf_shape_of(2, 2, 3);
  rf_tensor *w, *out = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &w));
  memset(rf_tensor_mutable_data(w), 0, rf_tensor_nbytes(w));
  assert_ok(rf_checkpoint_add(c, "w", w));
  rf_tensor_release(w);
  rf_shape unknown_dim = rf_shape_of(2, -1, 3);
  assert_status(rf_checkpoint_get(c, "w", RF_FLOAT32, &unknown_dim, 0, &out),
                RF_INVALID_ARGUMENT,
                "checkpoint tensor 'w' is float32 [2,3]; expected float32 "
                "[?,3]");
  rf_shape by_hand;
  memset(&by_hand, 0, sizeof by_hand);
  by_hand.rank = 3;
  by_hand.dims[0] = 2;
  by_hand.dims[1] = -7;
  by_hand.dims[2] = RF_UNKNOWN_DIM;
  assert_status(rf_checkpoint_get(c, "w", RF_DTYPE_INVALID, &by_hand, 0, &out),
                RF_INVALID_ARGUMENT, "expected any dtype [2,?,?]");
  assert_status(rf_checkpoint_get(c, "w", (rf_dtype)42, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "rf_checkpoint_get: dtype 42 is not");
  assert_status(rf_checkpoint_get(c, "w", RF_FLOAT32, NULL, 0x10, &out),
                RF_INVALID_ARGUMENT, "checks 0x10 hold unknown bits");
  assert_null(out);
  assert_ok(rf_checkpoint_get(c, "w", RF_FLOAT32, &s,
                              RF_CHECKPOINT_FINITE | RF_CHECKPOINT_NONNEGATIVE,
                              &out));
  assert_non_null(out);
  rf_checkpoint_free(c);
}

/* Whether s is UTF-8 throughout. */
static bool utf8(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int more = *p < 0x80                 ? 0
               : *p >= 0xc2 && *p < 0xe0 ? 1
               : *p >= 0xe0 && *p < 0xf0 ? 2
               : *p >= 0xf0 && *p < 0xf5 ? 3
                                         : -1;
    if (more < 0) return false;
    for (p++; more > 0; more--, p++)
      if ((*p & 0xc0) != 0x80) return false;
  }
  return true;
}

typedef struct seen {
  int lines, bad, cut;
} seen;

static const char *shared_name; /* 'x' then 1000 bytes of 'é' */

static void collect(rf_log_level level, const char *msg, void *user) {
  (void)level;
  seen *s = user;
  s->lines++;
  s->bad += !utf8(msg);
  /* 'x' and 99 whole 'é' (199 bytes): the 200th byte began a character
   * that did not fit, and "%.200s" cut it in half. */
  const char *at = strstr(msg, "'x\xc3\xa9");
  if (at && !strncmp(at + 1, shared_name, 199) && at[200] == '\'') s->cut++;
}

/* A collective's shared_name of 'x' then 'é' (2 bytes) x 500: its debug
 * lines printed 200 bytes of it, the last one half of an 'é', so the
 * messages were not UTF-8. */
static void test_log_cuts_between_characters(void **state) {
  (void)state;
  char name[1002];
  name[0] = 'x';
  for (int i = 1; i < 1001; i += 2) memcpy(name + i, "\xc3\xa9", 2);
  name[1001] = '\0';
  shared_name = name;
  rf_graph *g = rf_graph_new();
  rf_output x[2], y[2];
  for (int i = 0; i < 2; i++) {
    assert_ok(rf_graph_push_device(g, i ? "cpu:1" : "cpu:0"));
    x[i] = rf_placeholder(g, i ? "x1" : "x0", RF_FLOAT32, rf_shape_of(1, 2));
    rf_graph_pop_device(g);
    y[i] = rf_all_reduce(g, i ? "ar1" : "ar0", x[i], RF_REDUCE_SUM, 2, name);
  }
  assert_ok(rf_graph_status(g));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *t, *out[2] = {NULL, NULL};
  rf_shape two = rf_shape_of(1, 2);
  const float v[2] = {1, 2};
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &two, v, &t));
  rf_feed feeds[2] = {{x[0], t}, {x[1], t}};
  seen got = {0, 0, 0};
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, collect, &got));
  rf_status *st = rf_session_run(s, feeds, 2, y, 2, NULL, 0, out);
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, NULL, NULL));
  assert_ok(st);
  assert_float_equal(rf_tensor_get(out[1], 1), 4, 0);
  assert_true(got.lines > 0);
  assert_true(got.cut > 0);
  assert_int_equal(got.bad, 0);
  for (int i = 0; i < 2; i++) rf_tensor_release(out[i]);
  rf_tensor_release(t);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_past_size_max),
      cmocka_unit_test(test_scalar_and_copy_arguments),
      cmocka_unit_test(test_checkpoint_get_expected_shape),
      cmocka_unit_test(test_log_cuts_between_characters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
