/* tests/test_long_names.c - huge user strings in errors. A node, op type,
 * device, collective shared name, attr name or file path of 10 MB must reach
 * the error message cut to RF_STATUS_QUOTE_MAX bytes plus "... (N bytes)",
 * through the public API and through `ringflow lower` on a JSON file; the
 * rest of the message (what went wrong) must survive. Also: rf_status_new's
 * %s arguments, and a whole message carried into another (a kernel's error
 * under its node prefix) is not cut. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringflow/collectives.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

#define HUGE_LEN ((size_t)10 * 1000 * 1000)
#define HUGE_TAIL "... (10000000 bytes)"
/* A capped message: a few quotes of ~220 bytes plus what went wrong. */
#define SHORT_MESSAGE 2000

/* HUGE_LEN copies of c, NUL-terminated (malloc). */
static char *huge(char c) {
  char *s = malloc(HUGE_LEN + 1);
  assert_non_null(s);
  memset(s, c, HUGE_LEN);
  s[HUGE_LEN] = '\0';
  return s;
}

/* st is an error whose message is short, cut where a quote was, and holds
 * `what` (what went wrong); frees st. */
static void expect_capped(rf_status *st, const char *what) {
  const char *m = rf_status_message(st);
  if (!st || strlen(m) > SHORT_MESSAGE || !strstr(m, HUGE_TAIL) ||
      !strstr(m, what))
    fail_msg(
        "want a short message holding '%s' and '%s'; got %s, %zu bytes: "
        "%.300s",
        HUGE_TAIL, what, rf_code_name(rf_status_code(st)), strlen(m), m);
  rf_status_free(st);
}

/* ---- the public API ---- */

static void test_node_name(void **state) {
  (void)state;
  char *name = huge('n');
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, rf_shape_of(1, 2));
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_of(1, 3));
  assert_null(rf_add(g, name, a, b).node);
  expect_capped(rf_graph_status(g), "Incompatible shapes: (2) vs. (3)");
  rf_graph_clear_status(g);
  name[0] = '-'; /* not a valid first character */
  assert_null(rf_identity(g, name, a).node);
  expect_capped(rf_graph_status(g), "is not valid");
  rf_graph_clear_status(g);
  /* A run-time error: the kernel's message goes under its node's prefix. */
  name[0] = 'n';
  rf_output p = rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(1, 2));
  assert_graph_ok(g);
  rf_session *s;
  assert_ok(rf_session_new(g, NULL, &s));
  rf_tensor *out = NULL;
  rf_status *st = rf_session_run(s, NULL, 0, &p, 1, NULL, 0, &out);
  assert_null(out);
  expect_capped(st, "You must feed a value for placeholder");
  rf_session_free(s);
  rf_graph_free(g);
  free(name);
}

static void test_op_type_and_attr_name(void **state) {
  (void)state;
  char *op = huge('O');
  rf_graph *g = rf_graph_new();
  rf_node *n = NULL;
  expect_capped(rf_node_builder_finish(rf_node_builder_new(g, op, "x"), &n),
                "Op type not registered");
  rf_node_builder *b = rf_node_builder_new(g, "NoOp", "y");
  rf_node_builder_attr_int(b, op, 1);
  expect_capped(rf_node_builder_finish(b, &n), "unknown attr");
  assert_null(n);
  rf_graph_free(g);
  free(op);
}

static void test_device(void **state) {
  (void)state;
  char *dev = huge('d');
  rf_graph *g = rf_graph_new();
  expect_capped(rf_graph_push_device(g, dev), "");
  rf_node_builder *b = rf_node_builder_new(g, "NoOp", "x");
  rf_node_builder_device(b, dev);
  rf_node *n = NULL;
  expect_capped(rf_node_builder_finish(b, &n), "node 'x' (NoOp)");
  rf_graph_free(g);
  free(dev);
}

static void test_shared_name(void **state) {
  (void)state;
  char *shared = huge('s');
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  /* One participant of a collective that expects two. */
  rf_output y = rf_all_reduce(g, "ar", x, RF_REDUCE_SUM, 2, shared);
  rf_graph_pop_device(g);
  rf_session *s = rf_test_cpu_session(g, 2);
  rf_tensor *t;
  assert_ok(rf_tensor_new(RF_FLOAT32, &(rf_shape){1, {2}}, NULL, &t));
  rf_feed f = {x, t};
  rf_tensor *out = NULL;
  expect_capped(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out), "participants");
  rf_tensor_release(t);
  rf_session_free(s);
  rf_graph_free(g);
  free(shared);
}

static void test_file_path(void **state) {
  (void)state;
  char *path = huge('p');
  rf_graph *g = NULL;
  expect_capped(rf_graph_load(path, &g), "cannot open");
  assert_null(g);
  free(path);
}

/* rf_status_new caps its %s arguments, and only those. */
static void test_status_new(void **state) {
  (void)state;
  char *s = huge('x');
  rf_status *st = rf_status_new(RF_INTERNAL, "[%s] %d %5.2f %lld %zu %c %%", s,
                                -3, 1.5, (long long)1 << 40, (size_t)7, 'q');
  char want[512];
  snprintf(want, sizeof want, "[%.*s%s] -3  1.50 1099511627776 7 q %%",
           RF_STATUS_QUOTE_MAX, s, HUGE_TAIL);
  assert_string_equal(rf_status_message(st), want);
  rf_status_free(st);
  /* Exactly the cap: not cut. Precision and width still apply. */
  s[RF_STATUS_QUOTE_MAX] = '\0';
  st = rf_status_new(RF_INTERNAL, "%s|%.3s|%6s|%-4s|", s, "abcdef", "ab", "c");
  snprintf(want, sizeof want, "%s|abc|    ab|c   |", s);
  assert_string_equal(rf_status_message(st), want);
  rf_status_free(st);
  /* A cut never splits a UTF-8 character: 'a' then two-byte characters put
   * one across the cap. */
  char *u = malloc(1001);
  assert_non_null(u);
  u[0] = 'a';
  for (int i = 1; i + 1 < 1000; i += 2) memcpy(u + i, "\xc3\xa9", 2);
  u[999] = 'z';
  u[1000] = '\0';
  st = rf_status_new(RF_INTERNAL, "%s", u);
  const char *m = rf_status_message(st);
  assert_int_equal(strstr(m, "... (1000 bytes)") - m, RF_STATUS_QUOTE_MAX - 1);
  rf_status_free(st);
  free(u);
  free(s);
}

/* ---- `ringflow lower` on JSON files ---- */

#ifdef RF_TOOL
/* Runs `ringflow lower PATH`; returns its exit code, *out stdout+stderr. */
static int run_lower(const char *path, char **out) {
  char *cmd = malloc(strlen(path) + 256);
  assert_non_null(cmd);
  sprintf(cmd, "%s lower --devices 2 '%s' 2>&1", RF_TOOL, path);
  FILE *p = popen(cmd, "r");
  free(cmd);
  assert_non_null(p);
  size_t cap = 1 << 16, len = 0, got;
  char *buf = malloc(cap);
  assert_non_null(buf);
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 1024) {
      buf = realloc(buf, cap *= 2);
      assert_non_null(buf);
    }
  }
  buf[len] = '\0';
  int status = pclose(p);
  *out = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A graph file: a placeholder on cpu:0 then `node`, a JSON object text in
 * which "@H@" stands for the huge string. */
static void lower_file(const char *node, const char *what) {
  char *h = huge('h');
  const char *head =
      "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": ["
      "{\"name\": \"x\", \"op\": \"Placeholder\", \"device\": \"cpu:0\", "
      "\"attrs\": {\"dtype\": {\"type\": \"type\", \"value\": \"float32\"}, "
      "\"shape\": {\"type\": \"shape\", \"value\": [2]}}}, ";
  char path[] = "/tmp/rf_long_names_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  const char *at = strstr(node, "@H@");
  assert_non_null(at);
  fputs(head, f);
  fwrite(node, 1, (size_t)(at - node), f);
  fputs(h, f);
  fputs(at + 3, f);
  fputs("]}\n", f);
  assert_int_equal(fclose(f), 0);
  char *out;
  int rc = run_lower(path, &out);
  unlink(path);
  if (rc == 0 || strlen(out) > SHORT_MESSAGE || !strstr(out, HUGE_TAIL) ||
      !strstr(out, what))
    fail_msg(
        "ringflow lower: exit %d, %zu bytes of output, want a short "
        "error holding '%s': %.400s",
        rc, strlen(out), what, out);
  free(out);
  free(h);
}

static void test_lower_cli(void **state) {
  (void)state;
  /* node name */
  lower_file(
      "{\"name\": \"@H@\", \"op\": \"Add\", \"inputs\": [\"x\", "
      "\"nowhere\"]}",
      "names no earlier node");
  /* op type */
  lower_file("{\"name\": \"y\", \"op\": \"@H@\"}", "unknown op");
  /* device */
  lower_file("{\"name\": \"y\", \"op\": \"NoOp\", \"device\": \"@H@\"}",
             "node 'y' (NoOp)");
  /* attr name */
  lower_file(
      "{\"name\": \"y\", \"op\": \"NoOp\", \"attrs\": {\"@H@\": "
      "{\"type\": \"int\", \"value\": 1}}}",
      "unknown attr");
  /* collective shared name: one participant of two */
  lower_file(
      "{\"name\": \"y\", \"op\": \"AllReduce\", \"device\": \"cpu:0\", "
      "\"inputs\": [\"x\"], \"attrs\": {\"reduction\": {\"type\": "
      "\"string\", \"value\": \"sum\"}, \"num_devices\": {\"type\": "
      "\"int\", \"value\": 2}, \"shared_name\": {\"type\": \"string\", "
      "\"value\": \"@H@\"}}}",
      "participants");
  /* file path: as long as one argument may be (MAX_ARG_STRLEN is 128 KiB) */
  char path[100001];
  memset(path, 'q', sizeof path - 1);
  path[sizeof path - 1] = '\0';
  char *out;
  int rc = run_lower(path, &out);
  if (rc == 0 || strlen(out) > SHORT_MESSAGE ||
      !strstr(out, "... (100000 bytes)"))
    fail_msg("ringflow lower of a 100 kB path: exit %d, %zu bytes: %.400s", rc,
             strlen(out), out);
  free(out);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_name),
      cmocka_unit_test(test_op_type_and_attr_name),
      cmocka_unit_test(test_device),
      cmocka_unit_test(test_shared_name),
      cmocka_unit_test(test_file_path),
      cmocka_unit_test(test_status_new),
#ifdef RF_TOOL
      cmocka_unit_test(test_lower_cli),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
