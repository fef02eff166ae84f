/* tests/test_graph_dump.c - graph dumps (rf_session_options.dump_graph_dir,
 * RF_DUMP_GRAPH_DIR): a compile writes its graph before and after every phase
 * as JSON that rf_graph_from_json loads back and DOT, under deterministic,
 * ordered names; the lowered graph holds the participants on their assigned
 * devices, the partitioned one the sends and receives; two compiles never
 * share a name; the option overrides the environment ("" turns dumps off);
 * rf_graph_lower dumps its phases; a directory that cannot be made or
 * written fails the compile with an error naming it, and the session works
 * once that is fixed. */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringflow/collectives.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

static const rf_shape vec4 = {1, {4}};

static const char *const phases[] = {
    "prune",       "pre_placement", "placement", "post_placement",
    "host_memory", "task_split",    "partition", "post_partition"};
#define NUM_PHASES 8

/* A fresh directory under the system's temporary one. */
static void temp_dir(char *buf, size_t len) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, len, "%s/rf_dump_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(buf));
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
      remove_tree(path);
    else
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The names in dir, sorted; returns how many (at most max). */
static int list_dir(const char *dir, char names[][128], int max) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max)
    if (e->d_name[0] != '.') snprintf(names[n++], 128, "%.127s", e->d_name);
  closedir(d);
  qsort(names, (size_t)n, 128, (int (*)(const void *, const void *))strcmp);
  return n;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fprintf(stderr, "cannot open %s\n", path);
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
  s[len] = '\0';
  fclose(f);
  return s;
}

/* Loads dir/name (JSON) back into a graph. */
static rf_graph *load(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *text = read_file(path);
  rf_graph *g = NULL;
  assert_ok(rf_graph_from_json(text, strlen(text), &g));
  free(text);
  return g;
}

/* Nodes of op in g, and how many of them are on device. */
static int count_op(const rf_graph *g, const char *op, const char *device,
                    int *on_device) {
  int n = 0, d = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *v = rf_graph_node(g, i);
    if (strcmp(rf_node_op(v), op) != 0) continue;
    n++;
    d += device && strcmp(rf_node_device(v), device) == 0;
  }
  if (on_device) *on_device = d;
  return n;
}

/* x0..x2 on cpu:0..2: an all-reduce (grads), a Reduce on cpu:1 (total) and
 * its Broadcast (share) read on every device. */
typedef struct net {
  rf_graph *g;
  rf_output x[3], use[3];
} net;

static void build(net *n) {
  rf_graph *g = n->g = rf_graph_new();
  rf_output sum[3];
  for (int i = 0; i < 3; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    n->x[i] = rf_placeholder(g, name, RF_FLOAT32, vec4);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "grads", n->x, 3, RF_REDUCE_SUM, sum);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output total = rf_reduce(g, "total", n->x, 3, RF_REDUCE_SUM);
  rf_output share = rf_broadcast(g, "share", total);
  rf_graph_pop_device(g);
  for (int i = 0; i < 3; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "use%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    n->use[i] = rf_add(g, name, share, sum[i]);
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
}

/* A session of n's graph on 3 devices dumping to dir (NULL: the
 * environment decides). */
static rf_session *session(const net *n, const char *dir) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.dump_graph_dir = dir;
  rf_session *s = NULL;
  assert_ok(rf_session_new(n->g, &o, &s));
  return s;
}

/* Runs fetches of n (k of them) with fresh feeds; returns the run's status. */
static rf_status *run(const net *n, rf_session *s, int k) {
  uint64_t rng = rf_test_rng(7);
  rf_tensor *t[3], *out[3];
  rf_feed feeds[3];
  for (int i = 0; i < 3; i++) {
    t[i] = rf_test_random_tensor(&rng, RF_FLOAT32, vec4, -1, 1);
    feeds[i] = (rf_feed){n->x[i], t[i]};
  }
  rf_status *st = rf_session_run(s, feeds, 3, n->use, k, NULL, 0, out);
  for (int i = 0; !st && i < k; i++) rf_tensor_release(out[i]);
  for (int i = 0; i < 3; i++) rf_tensor_release(t[i]);
  return st;
}

/* Well-formed DOT: "digraph", then braces that balance outside quoted
 * strings, closing at the end. */
static void assert_dot(const char *text) {
  assert_int_equal(strncmp(text, "digraph ", 8), 0);
  int depth = 0, opened = 0;
  bool quoted = false;
  for (const char *p = text; *p; p++) {
    if (quoted) {
      if (*p == '\\' && p[1])
        p++;
      else if (*p == '"')
        quoted = false;
      continue;
    }
    if (*p == '"') quoted = true;
    if (*p == '{') depth++, opened++;
    if (*p == '}') {
      assert_true(depth > 0);
      if (--depth == 0) assert_int_equal(strspn(p + 1, " \n"), strlen(p + 1));
    }
  }
  assert_false(quoted);
  assert_int_equal(depth, 0);
  assert_true(opened > 0);
}

/* names[first..first+4*phases) are one compile's files, in order:
 * <seq>_<nn>_<phase>_after.dot, _after.json, _before.dot, _before.json. */
static void check_compile_files(const char *dir, char names[][128], int first,
                                int nphases, int nn0) {
  char seq[16];
  snprintf(seq, sizeof seq, "%.6s", names[first]);
  assert_int_equal(strspn(seq, "0123456789"), 6);
  for (int p = 0; p < nphases; p++) {
    const char *when[] = {"after.dot", "after.json", "before.dot",
                          "before.json"};
    for (int k = 0; k < 4; k++) {
      char want[128];
      snprintf(want, sizeof want, "%s_%02d_%s_%s", seq, nn0 + p,
               phases[nn0 + p], when[k]);
      assert_string_equal(names[first + 4 * p + k], want);
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, want);
      char *text = read_file(path);
      if (k % 2 == 0) {
        assert_dot(text);
      } else {
        rf_graph *g = NULL;
        assert_ok(rf_graph_from_json(text, strlen(text), &g));
        rf_graph_free(g);
      }
      free(text);
    }
  }
}

static void test_every_phase_is_dumped(void **state) {
  (void)state;
  char root[256], dir[512];
  temp_dir(root, sizeof root);
  snprintf(dir, sizeof dir, "%s/a/b", root); /* made by the compile */
  net n;
  build(&n);
  rf_session *s = session(&n, dir);
  assert_ok(run(&n, s, 3));
  static char names[128][128];
  int k = list_dir(dir, names, 128);
  assert_int_equal(k, 4 * NUM_PHASES);
  check_compile_files(dir, names, 0, NUM_PHASES, 0);
  char seq[8];
  snprintf(seq, sizeof seq, "%.6s", names[0]);
  char name[128];
  /* Before lowering: the Reduce and Broadcast, on their devices. */
  snprintf(name, sizeof name, "%s_03_post_placement_before.json", seq);
  rf_graph *g = load(dir, name);
  int on;
  assert_int_equal(count_op(g, "Reduce", "cpu:1", &on), 1);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_ReduceSend", NULL, NULL), 0);
  rf_graph_free(g);
  /* After lowering: the participants, each on its assigned device. */
  snprintf(name, sizeof name, "%s_03_post_placement_after.json", seq);
  g = load(dir, name);
  assert_int_equal(count_op(g, "Reduce", NULL, NULL), 0);
  assert_int_equal(count_op(g, "_ReduceRecv", "cpu:1", &on), 1);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_ReduceSend", "cpu:0", &on), 2);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_ReduceSend", "cpu:2", &on), 2);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_BroadcastSend", "cpu:1", &on), 1);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_BroadcastRecv", "cpu:0", &on), 2);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "AllReduce", "cpu:2", &on), 3);
  assert_int_equal(on, 1);
  assert_int_equal(count_op(g, "_Send", NULL, NULL), 0);
  rf_graph_free(g);
  snprintf(name, sizeof name, "%s_06_partition_after.json", seq);
  g = load(dir, name);
  assert_true(count_op(g, "_Send", NULL, NULL) > 0);
  assert_int_equal(count_op(g, "_Send", NULL, NULL),
                   count_op(g, "_Recv", NULL, NULL));
  rf_graph_free(g);
  /* The lowered DOT shows the participants too. */
  char path[4096];
  snprintf(path, sizeof path, "%s/%s_03_post_placement_after.dot", dir, seq);
  char *dot = read_file(path);
  assert_non_null(strstr(dot, "_ReduceSend"));
  assert_non_null(strstr(dot, "label=\"cpu:2\""));
  free(dot);
  /* A second signature compiles again: new names, nothing overwritten. A
   * cached signature writes nothing. */
  assert_ok(run(&n, s, 3));
  assert_int_equal(list_dir(dir, names, 128), 4 * NUM_PHASES);
  assert_ok(run(&n, s, 2));
  k = list_dir(dir, names, 128);
  assert_int_equal(k, 8 * NUM_PHASES);
  check_compile_files(dir, names, 4 * NUM_PHASES, NUM_PHASES, 0);
  assert_true(strncmp(names[0], names[4 * NUM_PHASES], 6) < 0);
  rf_session_free(s);
  rf_graph_free(n.g);
  remove_tree(root);
}

/* RF_DUMP_GRAPH_DIR when the option is NULL; the option wins otherwise; ""
 * means none. */
static void test_environment_and_option(void **state) {
  (void)state;
  char env_dir[256], opt_dir[256];
  temp_dir(env_dir, sizeof env_dir);
  temp_dir(opt_dir, sizeof opt_dir);
  static char names[128][128];
  net n;
  build(&n);
  assert_int_equal(setenv("RF_DUMP_GRAPH_DIR", env_dir, 1), 0);
  rf_session *s = session(&n, NULL);
  assert_ok(run(&n, s, 3));
  rf_session_free(s);
  assert_int_equal(list_dir(env_dir, names, 128), 4 * NUM_PHASES);
  s = session(&n, opt_dir);
  assert_ok(run(&n, s, 3));
  rf_session_free(s);
  assert_int_equal(list_dir(env_dir, names, 128), 4 * NUM_PHASES);
  assert_int_equal(list_dir(opt_dir, names, 128), 4 * NUM_PHASES);
  s = session(&n, "");
  assert_ok(run(&n, s, 3));
  rf_session_free(s);
  assert_int_equal(unsetenv("RF_DUMP_GRAPH_DIR"), 0);
  s = session(&n, NULL);
  assert_ok(run(&n, s, 3));
  rf_session_free(s);
  assert_int_equal(list_dir(env_dir, names, 128), 4 * NUM_PHASES);
  assert_int_equal(list_dir(opt_dir, names, 128), 4 * NUM_PHASES);
  rf_graph_free(n.g);
  remove_tree(env_dir);
  remove_tree(opt_dir);
}

/* rf_graph_lower runs (and dumps) the phases up to host_memory. */
static void test_graph_lower_dumps(void **state) {
  (void)state;
  char dir[256];
  temp_dir(dir, sizeof dir);
  net n;
  build(&n);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.dump_graph_dir = dir;
  rf_graph *lowered;
  assert_ok(rf_graph_lower(n.g, &o, &lowered));
  rf_graph_free(lowered);
  static char names[128][128];
  assert_int_equal(list_dir(dir, names, 128), 4 * 4);
  check_compile_files(dir, names, 0, 4, 1);
  rf_graph_free(n.g);
  remove_tree(dir);
}

/* A directory that cannot be made is the compile's error, naming it; the
 * session is fine once the environment is fixed. */
static void test_unwritable_directory_fails_the_compile(void **state) {
  (void)state;
  char dir[256], file[512], below[600];
  temp_dir(dir, sizeof dir);
  snprintf(file, sizeof file, "%s/a_file", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(below, sizeof below, "%s/sub", file);
  net n;
  build(&n);
  rf_session *s = session(&n, file);
  rf_status *st = run(&n, s, 3);
  assert_non_null(strstr(rf_status_message(st), file));
  assert_status(st, RF_FAILED_PRECONDITION,
                "rf_session_options.dump_graph_dir");
  rf_session_free(s);
  assert_int_equal(setenv("RF_DUMP_GRAPH_DIR", below, 1), 0);
  s = session(&n, NULL);
  st = run(&n, s, 3);
  assert_non_null(strstr(rf_status_message(st), below));
  assert_status(st, RF_NOT_FOUND, "RF_DUMP_GRAPH_DIR");
  rf_graph *lowered = NULL;
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  assert_status(rf_graph_lower(n.g, &o, &lowered), RF_NOT_FOUND,
                "RF_DUMP_GRAPH_DIR");
  assert_null(lowered);
  assert_int_equal(unsetenv("RF_DUMP_GRAPH_DIR"), 0);
  assert_ok(run(&n, s, 3));
  rf_session_free(s);
  /* A directory without write permission (root may write anyway). */
  if (geteuid() != 0) {
    char ro[512];
    snprintf(ro, sizeof ro, "%s/read_only", dir);
    assert_int_equal(mkdir(ro, 0500), 0);
    s = session(&n, ro);
    st = run(&n, s, 3);
    assert_non_null(strstr(rf_status_message(st), ro));
    assert_status(st, RF_PERMISSION_DENIED, "cannot write");
    rf_session_free(s);
    chmod(ro, 0700);
  }
  rf_graph_free(n.g);
  remove_tree(dir);
}

int main(void) {
  unsetenv("RF_DUMP_GRAPH_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_phase_is_dumped),
      cmocka_unit_test(test_environment_and_option),
      cmocka_unit_test(test_graph_lower_dumps),
      cmocka_unit_test(test_unwritable_directory_fails_the_compile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
