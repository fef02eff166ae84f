/* tests/test_graph_io.c - graphs as JSON files and DOT pictures: round trips
 * (save, load, save again gives the same text; the loaded graph runs to the
 * same bits) over every attr type, tensors of every dtype, variadic inputs,
 * control edges and devices; hostile and malformed files, each an error with
 * a message saying what is wrong (never a crash: this test also runs under
 * ASan), non-canonical output indices and variadic arguments written as one
 * string among them; saves that replace the file atomically (a failed save
 * leaves the old file and no temporary one); allocation failures; DOT
 * clusters and dashed control edges. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graph/graph.h"
#include "ops/op_registry.h"
#include "runtime/families.h"
#include "ringflow/collectives.h"
#include "ringflow/debug.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

static const rf_dtype every_dtype[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                       RF_FLOAT64, RF_INT8,     RF_UINT8,
                                       RF_INT32,   RF_INT64,    RF_BOOL};
#define NUM_DTYPES (int)(sizeof every_dtype / sizeof *every_dtype)

/* An op carrying one attr of every type, with a variadic input. */
static const rf__op_spec all_attrs_op = {
    .name = "TestAllAttrs",
    .inputs = "xs: N * T",
    .outputs = "y: T",
    .attrs =
        "N: int >= 0; T: type; i: int; f: float; b: bool; s: string; "
        "t: type; sh: shape; ten: tensor; li: list(int); "
        "lf: list(float); lb: list(bool); ls: list(string); "
        "lt: list(type); lsh: list(shape); lten: list(tensor)"};

static void register_ops(void) {
  static int done;
  if (done) return;
  done = 1;
  assert_ok(rf__registry_init());
  assert_ok(rf__op_register(&all_attrs_op));
}

/* A tensor of dtype with random values; floats include nan, inf, -inf, -0. */
static rf_tensor *special_tensor(uint64_t *rng, rf_dtype dt, rf_shape s) {
  rf_tensor *t = rf_test_random_tensor(rng, dt, s, -100, 100);
  int64_t n = rf_tensor_num_elements(t);
  if (rf_dtype_is_float(dt) && n >= 4) {
    rf_tensor_set(t, 0, NAN);
    rf_tensor_set(t, 1, INFINITY);
    rf_tensor_set(t, 2, -INFINITY);
    rf_tensor_set(t, 3, -0.0);
  }
  return t;
}

static void set_value(rf_node_builder *b, const char *name, rf__attr_value v) {
  rf__node_builder_attr_value(b, name, &v);
}

/* Adds a TestAllAttrs node over xs with every attr type set. */
static rf_node *all_attrs_node(rf_graph *g, const char *name, rf_output *xs,
                               int n, uint64_t *rng) {
  rf_node_builder *b = rf_node_builder_new(g, "TestAllAttrs", name);
  rf_node_builder_input_list(b, xs, n);
  rf_node_builder_device(b, "cpu:1");
  rf_node_builder_attr_dtype(b, "T", RF_FLOAT32); /* n may be 0 */
  rf_node_builder_attr_int(b, "i", INT64_MIN);
  rf_node_builder_attr_float(b, "f", 0.1 + 1e-17);
  rf_node_builder_attr_bool(b, "b", true);
  rf_node_builder_attr_string(b, "s",
                              "quote \" backslash \\ tab \t uni \xc3\xa9");
  rf_node_builder_attr_dtype(b, "t", RF_BFLOAT16);
  rf_node_builder_attr_shape(
      b, "sh", rf_shape_of(3, (int64_t)-1, (int64_t)0, (int64_t)7));
  rf_tensor *ten =
      special_tensor(rng, RF_FLOAT16, rf_shape_of(2, (int64_t)2, (int64_t)3));
  rf_node_builder_attr_tensor(b, "ten", ten);
  rf_tensor_release(ten);
  int64_t ints[3] = {INT64_MAX, -1, 0};
  rf_node_builder_attr_int_list(b, "li", ints, 3);
  double floats[5] = {NAN, INFINITY, -INFINITY, -0.0, 1.0 / 3};
  rf_node_builder_attr_float_list(b, "lf", floats, 5);
  bool bools[2] = {false, true};
  rf__attr_value v = {.type = RF_ATTR_BOOL_LIST, .n = 2};
  v.u.bools = bools;
  set_value(b, "lb", v);
  char *strings[3] = {"", "a", "\xe2\x82\xac"};
  v = (rf__attr_value){.type = RF_ATTR_STRING_LIST, .n = 3};
  v.u.strings = strings;
  set_value(b, "ls", v);
  rf_dtype types[NUM_DTYPES];
  memcpy(types, every_dtype, sizeof types);
  v = (rf__attr_value){.type = RF_ATTR_TYPE_LIST, .n = NUM_DTYPES};
  v.u.types = types;
  set_value(b, "lt", v);
  rf_shape shapes[3] = {rf_shape_unknown(), rf_shape_scalar(),
                        rf_shape_of(2, (int64_t)4, (int64_t)-1)};
  v = (rf__attr_value){.type = RF_ATTR_SHAPE_LIST, .n = 3};
  v.u.shapes = shapes;
  set_value(b, "lsh", v);
  rf_tensor *tens[NUM_DTYPES];
  for (int d = 0; d < NUM_DTYPES; d++)
    tens[d] =
        special_tensor(rng, every_dtype[d], rf_shape_of(1, (int64_t)d + 4));
  v = (rf__attr_value){.type = RF_ATTR_TENSOR_LIST, .n = NUM_DTYPES};
  v.u.tensors = tens;
  set_value(b, "lten", v);
  for (int d = 0; d < NUM_DTYPES; d++) rf_tensor_release(tens[d]);
  rf_node *out = NULL;
  assert_ok(rf_node_builder_finish(b, &out));
  return out;
}

/* A graph with Consts of every dtype (special values included), the every-
 * attr node over variadic inputs, control edges, devices, and collectives. */
static rf_graph *rich_graph(uint64_t *rng) {
  register_ops();
  rf_graph *g = rf_graph_new();
  rf_output consts[NUM_DTYPES];
  for (int d = 0; d < NUM_DTYPES; d++) {
    char name[32];
    snprintf(name, sizeof name, "c_%s", rf_dtype_name(every_dtype[d]));
    assert_ok(rf_graph_push_device(g, d % 2 ? "cpu:1" : "cpu:0"));
    rf_tensor *t = special_tensor(rng, every_dtype[d],
                                  rf_shape_of(2, (int64_t)3, (int64_t)5));
    consts[d] = rf_const(g, name, t);
    rf_tensor_release(t);
    rf_graph_pop_device(g);
  }
  rf_output f32[3] = {consts[2], rf_identity(g, "id1", consts[2]),
                      rf_identity(g, "id2", consts[2])};
  rf_node *every = all_attrs_node(g, "every", f32, 3, rng);
  rf_node *empty = all_attrs_node(g, "empty_list", NULL, 0, rng);
  assert_ok(rf_graph_add_control_edge(g, every, empty));
  assert_ok(rf_graph_add_control_edge(g, consts[0].node, empty));
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x0 = rf_placeholder(g, "x0", RF_FLOAT64,
                                rf_shape_of(2, (int64_t)-1, (int64_t)4));
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x1 = rf_placeholder(g, "x1", RF_FLOAT64,
                                rf_shape_of(2, (int64_t)-1, (int64_t)4));
  rf_graph_pop_device(g);
  rf_output xs[2] = {x0, x1}, ar[2];
  rf_all_reduce_n(g, "ar", xs, 2, RF_REDUCE_MAX, ar);
  rf_output r = rf_reduce(g, "red", xs, 2, RF_REDUCE_SUM);
  rf_output bc = rf_broadcast(g, "bc", r);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_identity(g, "bc_on_1", bc);
  rf_graph_pop_device(g);
  rf_noop(g, "sink");
  assert_ok(
      rf_graph_add_control_edge(g, ar[1].node, rf_graph_find_node(g, "sink")));
  assert_graph_ok(g);
  return g;
}

static char *to_json(const rf_graph *g) {
  char *s = NULL;
  assert_ok(rf_graph_to_json(g, &s));
  assert_non_null(s);
  return s;
}

static rf_graph *from_json(const char *s) {
  rf_graph *g = NULL;
  assert_ok(rf_graph_from_json(s, strlen(s), &g));
  assert_non_null(g);
  return g;
}

/* Same nodes (by name): op, device, inputs, control inputs, attr count. */
static void assert_same_structure(const rf_graph *a, const rf_graph *b) {
  assert_int_equal(rf_graph_num_nodes(a), rf_graph_num_nodes(b));
  for (int i = 0; i < rf_graph_num_nodes(a); i++) {
    rf_node *x = rf_graph_node(a, i);
    rf_node *y = rf_graph_find_node(b, rf_node_name(x));
    assert_non_null(y);
    assert_string_equal(rf_node_op(x), rf_node_op(y));
    assert_string_equal(rf_node_device(x), rf_node_device(y));
    assert_int_equal(rf_node_num_inputs(x), rf_node_num_inputs(y));
    for (int k = 0; k < rf_node_num_inputs(x); k++) {
      assert_string_equal(rf_node_name(rf_node_input(x, k).node),
                          rf_node_name(rf_node_input(y, k).node));
      assert_int_equal(rf_node_input(x, k).index, rf_node_input(y, k).index);
    }
    assert_int_equal(rf_node_num_control_inputs(x),
                     rf_node_num_control_inputs(y));
    for (int k = 0; k < rf_node_num_control_inputs(x); k++)
      assert_string_equal(rf_node_name(rf_node_control_input(x, k)),
                          rf_node_name(rf_node_control_input(y, k)));
    assert_int_equal(x->attrs.n, y->attrs.n);
    for (int k = 0; k < rf_node_num_outputs(x); k++) {
      rf_shape sx = x->out_shapes[k], sy = y->out_shapes[k];
      assert_true(rf_shape_equal(&sx, &sy));
      assert_int_equal(x->out_dtypes[k], y->out_dtypes[k]);
    }
  }
}

/* ---- round trips ---- */

static void test_round_trip_text_is_stable(void **state) {
  uint64_t rng = rf_test_seed();
  rf_graph *g = rich_graph(&rng);
  char *t1 = to_json(g);
  rf_graph *g2 = from_json(t1);
  char *t2 = to_json(g2);
  assert_string_equal(t1, t2);
  assert_same_structure(g, g2);
  /* Tensor attrs keep every bit, nan and -0 included. */
  for (int d = 0; d < NUM_DTYPES; d++) {
    char name[32];
    snprintf(name, sizeof name, "c_%s", rf_dtype_name(every_dtype[d]));
    rf_tensor *a, *b;
    assert_ok(
        rf__attrs_get_tensor(&rf_graph_find_node(g, name)->attrs, "value", &a));
    assert_ok(rf__attrs_get_tensor(&rf_graph_find_node(g2, name)->attrs,
                                   "value", &b));
    assert_int_equal(rf_tensor_dtype(a), rf_tensor_dtype(b));
    assert_int_equal(rf_tensor_nbytes(a), rf_tensor_nbytes(b));
    assert_memory_equal(rf_tensor_data(a), rf_tensor_data(b),
                        rf_tensor_nbytes(a));
  }
  /* Scalar and list attrs compare equal (nan aside). */
  rf_node *x = rf_graph_find_node(g, "every"),
          *y = rf_graph_find_node(g2, "every");
  static const char *const same[] = {"N",  "T",  "i",  "f",  "b",  "s",  "t",
                                     "sh", "li", "lb", "ls", "lt", "lsh"};
  for (size_t k = 0; k < sizeof same / sizeof *same; k++)
    assert_true(rf__attr_value_equal(rf__attrs_find(&x->attrs, same[k]),
                                     rf__attrs_find(&y->attrs, same[k])));
  const rf__attr_value *lf = rf__attrs_find(&y->attrs, "lf");
  assert_true(isnan(lf->u.floats[0]));
  assert_true(isinf(lf->u.floats[1]) && lf->u.floats[1] > 0);
  assert_true(isinf(lf->u.floats[2]) && lf->u.floats[2] < 0);
  assert_true(lf->u.floats[3] == 0 && signbit(lf->u.floats[3]));
  assert_true(lf->u.floats[4] == 1.0 / 3);
  rf_string_free(t1);
  rf_string_free(t2);
  rf_graph_free(g2);
  rf_graph_free(g);
}

static void test_save_and_load_files(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  rf_graph *g = rich_graph(&rng);
  char path[] = "/tmp/rf_graph_io_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_ok(rf_graph_save(g, path));
  rf_graph *g2 = NULL;
  assert_ok(rf_graph_load(path, &g2));
  char *t1 = to_json(g), *t2 = to_json(g2);
  assert_string_equal(t1, t2);
  rf_string_free(t1);
  rf_string_free(t2);
  rf_graph_free(g2);
  unlink(path);
  /* Missing files and unwritable places. */
  rf_graph *sentinel = (rf_graph *)&rng;
  g2 = sentinel;
  assert_status(rf_graph_load(path, &g2), RF_NOT_FOUND, path);
  assert_ptr_equal(g2, sentinel);
  assert_status(rf_graph_load("/", &g2), RF_DATA_LOSS, "reading / failed");
  /* A sparse file past 2 GiB is refused from its size, before any read
   * (it was read into memory up to the limit first). */
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, ((off_t)1 << 31) + 1), 0);
  close(fd);
  assert_status(rf_graph_load(path, &g2), RF_INVALID_ARGUMENT,
                "is larger than 2 GiB (2147483649 bytes)");
  assert_ptr_equal(g2, sentinel);
  unlink(path);
  assert_status(rf_graph_save(g, "/nonexistent-dir/x.json"), RF_NOT_FOUND,
                "/nonexistent-dir/x.json");
  assert_status(rf_graph_save(NULL, path), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_graph_load(NULL, &g2), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

/* ---- atomic saves ---- */

/* Entries of directory d other than . and .. */
static int count_entries(const char *d) {
  DIR *h = opendir(d);
  assert_non_null(h);
  int n = 0;
  for (struct dirent *e; (e = readdir(h));)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(h);
  return n;
}

/* The file's text (NUL-terminated; free with free). */
static char *file_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void assert_file_text(const char *path, const char *want) {
  char *got = file_text(path);
  assert_string_equal(got, want);
  free(got);
}

/* A graph whose JSON is about `bytes` long: one Const of that many bytes. */
static rf_graph *graph_of_size(size_t bytes, float value) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)(bytes / 4 * 3 / 4));
  rf_tensor *t;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &t));
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    rf_tensor_set(t, i, value);
  rf_const(g, "k", t);
  rf_tensor_release(t);
  assert_graph_ok(g);
  return g;
}

/* rf_graph_save replaces the file as a whole (io/safe_file.c, as
 * checkpoints): afterwards the file holds the new graph, or, when the save
 * fails (a write failing half-way, a directory that cannot be written, a
 * path that names a directory), the old one untouched; no temporary file is
 * left either way, and a symlink at the path is replaced, never followed. */
static void test_save_replaces_atomically(void **state) {
  char dir[] = "/tmp/rf_graph_save_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64], other[64], sub[64];
  snprintf(path, sizeof path, "%s/g.json", dir);
  snprintf(other, sizeof other, "%s/target", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  rf_graph *small = graph_of_size(64, 1), *big = graph_of_size(1 << 16, 2);
  char *small_text = to_json(small), *big_text = to_json(big);
  size_t n = strlen(small_text);
  char *want = malloc(n + 2); /* the file is the text and a newline */
  memcpy(want, small_text, n);
  memcpy(want + n, "\n", 2);
  /* a save over an existing file replaces it whole */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "old", 3), 3);
  close(fd);
  assert_ok(rf_graph_save(small, path));
  assert_file_text(path, want);
  assert_int_equal(count_entries(dir), 1);
  /* a write failing half-way (the file size limit standing in for a full
   * disk) leaves the old file and no temporary one */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    rf_status *st = rf_graph_save(big, path);
    int ok = rf_status_code(st) == RF_RESOURCE_EXHAUSTED &&
             strstr(rf_status_message(st), "write failed") &&
             strstr(rf_status_message(st), path);
    if (!ok) fprintf(stderr, "got %s\n", st ? rf_status_message(st) : "OK");
    _exit(ok ? 0 : 1);
  }
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  assert_file_text(path, want);
  assert_int_equal(count_entries(dir), 1);
  struct stat sb; /* the replacement's mode, not the old file's */
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0644);
  /* a directory that cannot be written: the old file stays (root writes
   * anywhere) */
  if (geteuid() != 0) {
    assert_int_equal(chmod(dir, 0500), 0);
    assert_status(rf_graph_save(big, path), RF_PERMISSION_DENIED, path);
    assert_int_equal(chmod(dir, 0700), 0);
    assert_file_text(path, want);
    assert_int_equal(count_entries(dir), 1);
  }
  /* a path naming a directory */
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_status(rf_graph_save(small, sub), RF_INVALID_ARGUMENT,
                "names a directory");
  assert_int_equal(count_entries(sub), 0);
  assert_int_equal(rmdir(sub), 0);
  /* a symlink at the path is replaced; what it pointed to is untouched */
  assert_int_equal(unlink(path), 0);
  fd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(symlink(other, path), 0);
  assert_ok(rf_graph_save(small, path));
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_file_text(path, want);
  assert_file_text(other, "");
  assert_int_equal(count_entries(dir), 2);
  /* the saved file loads */
  rf_graph *back = NULL;
  assert_ok(rf_graph_load(path, &back));
  char *back_text = to_json(back);
  assert_string_equal(back_text, small_text);
  rf_string_free(back_text);
  rf_graph_free(back);
  unlink(path);
  unlink(other);
  assert_int_equal(rmdir(dir), 0);
  free(want);
  rf_string_free(small_text);
  rf_string_free(big_text);
  rf_graph_free(small);
  rf_graph_free(big);
}

/* Node names of any length survive (the writer once cut them at 600 bytes
 * and the reader at 512). */
static void test_long_names(void **state) {
  rf_graph *g = rf_graph_new();
  char name[3001];
  memset(name, 'n', 3000);
  name[3000] = '\0';
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(1, (int64_t)2));
  rf_output y = rf_identity(g, "y", x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_add_control_edge(g, x.node, rf_noop(g, "z")));
  assert_graph_ok(g);
  char *t1 = to_json(g);
  rf_graph *g2 = from_json(t1);
  assert_string_equal(
      rf_node_name(rf_node_input(rf_graph_find_node(g2, "y"), 0).node), name);
  char *t2 = to_json(g2);
  assert_string_equal(t1, t2);
  (void)y;
  rf_string_free(t1);
  rf_string_free(t2);
  rf_graph_free(g2);
  rf_graph_free(g);
}

/* A string attr that is not UTF-8 cannot be JSON: a clear error. */
static void test_non_utf8_string_attr(void **state) {
  register_ops();
  uint64_t rng = rf_test_seed() + 2;
  rf_graph *g = rich_graph(&rng);
  rf_node *n = rf_graph_find_node(g, "every");
  rf__attr_value bad = rf__attr_string_ref("caf\xe9");
  assert_ok(rf__attrs_set(&n->attrs, "s", &bad));
  char *out = NULL;
  assert_status(rf_graph_to_json(g, &out), RF_INVALID_ARGUMENT,
                "attr 's' holds a string that is not valid UTF-8");
  assert_null(out);
  rf_graph_free(g);
}

/* The loaded graph computes the same bits. */
static void test_loaded_graph_runs_the_same(void **state) {
  uint64_t rng = rf_test_seed() + 3;
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)3, (int64_t)4);
  rf_output xs[3], ar[3], c[3];
  for (int i = 0; i < 3; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, name, RF_FLOAT32, s);
    rf_tensor *t = rf_test_random_tensor(&rng, RF_FLOAT32, s, -1, 1);
    snprintf(name, sizeof name, "k%d", i);
    c[i] = rf_const(g, name, t);
    rf_tensor_release(t);
    xs[i] = rf_mul(g, NULL, xs[i], c[i]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", xs, 3, RF_REDUCE_SUM, ar);
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  rf_output r = rf_reduce(g, "r", xs, 3, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "b", rf_tanh(g, "t", r));
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output m = rf_matmul(g, "mm", ar[0], rf_identity(g, "b0", b), false, true);
  rf_output sum = rf_add_n(g, "sum", (rf_output[]){m, m, m}, 3);
  rf_output out = rf_cast(g, "out", sum, RF_FLOAT64);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  char *text = to_json(g);
  rf_graph *g2 = from_json(text);
  rf_string_free(text);
  rf_tensor *in[3];
  rf_feed f1[3], f2[3];
  for (int i = 0; i < 3; i++) {
    in[i] = rf_test_random_tensor(&rng, RF_FLOAT32, s, -2, 2);
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    f1[i] = (rf_feed){{rf_graph_find_node(g, name), 0}, in[i]};
    f2[i] = (rf_feed){{rf_graph_find_node(g2, name), 0}, in[i]};
  }
  rf_output o2 = {rf_graph_find_node(g2, "out"), 0};
  rf_tensor *v1, *v2;
  rf_test_run(g, 3, f1, 3, &out, 1, &v1);
  rf_test_run(g2, 3, f2, 3, &o2, 1, &v2);
  assert_int_equal(rf_tensor_num_elements(v1), 9);
  assert_int_equal(rf_tensor_nbytes(v1), rf_tensor_nbytes(v2));
  assert_memory_equal(rf_tensor_data(v1), rf_tensor_data(v2),
                      rf_tensor_nbytes(v1));
  /* and against a float64 reference of the same math */
  double want[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double acc = 0;
      for (int k = 0; k < 4; k++) {
        double a = 0, rr = 0;
        for (int d = 0; d < 3; d++) {
          char name[16];
          snprintf(name, sizeof name, "k%d", d);
          rf_tensor *kt;
          assert_ok(rf__attrs_get_tensor(&rf_graph_find_node(g, name)->attrs,
                                         "value", &kt));
          a += rf_tensor_get(in[d], i * 4 + k) * rf_tensor_get(kt, i * 4 + k);
          rr += rf_tensor_get(in[d], j * 4 + k) * rf_tensor_get(kt, j * 4 + k);
        }
        acc += a * tanh(rr);
      }
      want[i * 3 + j] = 3 * acc;
    }
  assert_tensor_near(v1, rf_shape_of(2, (int64_t)3, (int64_t)3), want, 1e-4);
  rf_tensor_release(v1);
  rf_tensor_release(v2);
  for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
  rf_graph_free(g2);
  rf_graph_free(g);
}

/* A lowered graph (internal participant ops, '_' annotations dropped) saves
 * and loads too. */
static void test_lowered_graph_round_trips(void **state) {
  uint64_t rng = rf_test_seed() + 4;
  rf_graph *g = rich_graph(&rng);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_graph *lg = NULL;
  assert_ok(rf_graph_lower(g, &o, &lg));
  char *t1 = to_json(lg);
  assert_null(strstr(t1, "\"_devices\""));
  assert_non_null(strstr(t1, "\"_ReduceRecv\""));
  rf_graph *g2 = from_json(t1);
  char *t2 = to_json(g2);
  assert_string_equal(t1, t2);
  rf_string_free(t1);
  rf_string_free(t2);
  rf_graph_free(g2);
  rf_graph_free(lg);
  rf_graph_free(g);
}

/* ---- hostile and malformed files ---- */

typedef struct bad_case {
  const char *json;
  rf_code code;
  const char *message;
} bad_case;

#define HDR "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": "
/* A float32 Placeholder node of the given shape attr value. */
#define PH_SHAPED(name, shape)                                           \
  "{\"name\": \"" name                                                   \
  "\", \"op\": \"Placeholder\", \"attrs\": {\"dtype\": "                 \
  "{\"type\": \"type\", \"value\": \"float32\"}, \"shape\": {\"type\": " \
  "\"shape\", \"value\": " shape "}}}"
#define PH(name) PH_SHAPED(name, "[2]")
/* A file of one node whose one attr is {"type": type, "value": value}. */
#define ATTR1(node, op, attr, type, value)                                \
  HDR "[{\"name\": \"" node "\", \"op\": \"" op "\", \"attrs\": {\"" attr \
      "\": {\"type\": \"" type "\", \"value\": " value "}}}]}"
#define CONST(dtype, shape, data)                                           \
  HDR "[{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"dtype\": "       \
      "{\"type\": \"type\", \"value\": \"" dtype                            \
      "\"}, \"value\": {\"type\": "                                         \
      "\"tensor\", \"value\": {\"dtype\": \"" dtype "\", \"shape\": " shape \
      ", \"data\": \"" data "\"}}}}]}"

static const bad_case bad_cases[] = {
    /* not JSON, or not ours */
    {"", RF_INVALID_ARGUMENT, "JSON error at line"},
    {"hello", RF_INVALID_ARGUMENT, "JSON error at line 1"},
    {"{\"format\": \"ringflow-graph\", ", RF_INVALID_ARGUMENT, "JSON error"},
    {"[1, 2, 3]", RF_INVALID_ARGUMENT, "not a ringflow graph file"},
    {"{\"format\": \"onnx\", \"version\": 1, \"nodes\": []}",
     RF_INVALID_ARGUMENT, "not a ringflow graph file"},
    {"{\"format\": \"ringflow-graph\", \"version\": 2, \"nodes\": []}",
     RF_INVALID_ARGUMENT,
     "graph file version 2; this ringflow reads version 1"},
    {"{\"format\": \"ringflow-graph\", \"version\": \"1\", \"nodes\": []}",
     RF_INVALID_ARGUMENT, "not a ringflow graph file"},
    {"{\"format\": \"ringflow-graph\", \"version\": 1}", RF_INVALID_ARGUMENT,
     "not a ringflow graph file"},
    {"{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": {}}",
     RF_INVALID_ARGUMENT, "not a ringflow graph file"},
    {"{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": [], \"x\": "
     "1}",
     RF_INVALID_ARGUMENT,
     "not a ringflow graph file: unknown top-level field 'x' (the top level "
     "has exactly format, version and nodes)"},
    {"{\"format\": \"ringflow-graph\", \"format\": \"x\", \"version\": 1, "
     "\"nodes\": []}",
     RF_INVALID_ARGUMENT, "duplicate object key"},
    /* nodes */
    {HDR "[3]}", RF_INVALID_ARGUMENT, "node 0: a node must be an object"},
    {HDR "[{\"op\": \"NoOp\"}]}", RF_INVALID_ARGUMENT,
     "node 0: a node needs a name and an op"},
    {HDR "[{\"name\": \"a\"}]}", RF_INVALID_ARGUMENT,
     "node 0 'a': a node needs a name and an op"},
    {HDR "[{\"name\": 7, \"op\": \"NoOp\"}]}", RF_INVALID_ARGUMENT,
     "field 'name' must be a string"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"inptus\": []}]}",
     RF_INVALID_ARGUMENT, "unknown field 'inptus'"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoSuchOp\"}]}", RF_NOT_FOUND,
     "node 0 'a': unknown op 'NoSuchOp'"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"device\": 3}]}",
     RF_INVALID_ARGUMENT, "field 'device' must be a string"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"device\": \"tpu:x\"}]}",
     RF_INVALID_ARGUMENT, "tpu:x"},
    {HDR "[{\"name\": \"a b\", \"op\": \"NoOp\"}]}", RF_INVALID_ARGUMENT,
     "node 'a b' (NoOp): the name is not valid"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\"}, {\"name\": \"a\", \"op\": "
         "\"NoOp\"}]}",
     RF_ALREADY_EXISTS, "node 'a' (NoOp): the name is already used"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"inputs\": {}}]}",
     RF_INVALID_ARGUMENT, "field 'inputs' must be an array"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"attrs\": []}]}",
     RF_INVALID_ARGUMENT, "field 'attrs' must be an object"},
    /* edges */
    {HDR "[{\"name\": \"y\", \"op\": \"Identity\", \"inputs\": [\"x:0\"]}, " PH(
         "x") "]}",
     RF_INVALID_ARGUMENT, "node 0 'y': input 'x:0' names no earlier node"},
    {HDR "[{\"name\": \"y\", \"op\": \"Identity\", \"inputs\": [\"y:0\"]}]}",
     RF_INVALID_ARGUMENT, "input 'y:0' names no earlier node"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[\"x:1\"]}]}",
     RF_INVALID_ARGUMENT, "input 'x:1': node 'x' has 1 outputs"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[\"x:99999999999999999999\"]}]}",
     RF_INVALID_ARGUMENT, "output index out of range"},
/* output indices only as the writer writes them */
#define IDX(input) \
  HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": " \
                  "[\"" input "\"]}]}"
#define BAD_INDEX "the output index must be decimal digits without sign"
    {IDX("x:00"), RF_INVALID_ARGUMENT, "node 1 'y': input 'x:00': " BAD_INDEX},
    {IDX("x:01"), RF_INVALID_ARGUMENT, "input 'x:01': " BAD_INDEX},
    {IDX("x:+0"), RF_INVALID_ARGUMENT, "input 'x:+0': " BAD_INDEX},
    {IDX("x:-0"), RF_INVALID_ARGUMENT, "input 'x:-0': " BAD_INDEX},
    {IDX("x: 0"), RF_INVALID_ARGUMENT, "input 'x: 0': " BAD_INDEX},
    {IDX("x:0 "), RF_INVALID_ARGUMENT, "input 'x:0 ': " BAD_INDEX},
    {IDX("x:"), RF_INVALID_ARGUMENT, "input 'x:': " BAD_INDEX},
    {IDX("x:0x0"), RF_INVALID_ARGUMENT, "input 'x:0x0': " BAD_INDEX},
    {IDX("x:0:0"), RF_INVALID_ARGUMENT, "input 'x:0:0' names no earlier node"},
    {IDX("x:0000000001"), RF_INVALID_ARGUMENT, BAD_INDEX},
    /* a variadic argument is a list, any other one string */
    {HDR "[" PH("x") ", {\"name\": \"s\", \"op\": \"AddN\", \"inputs\": "
                     "[\"x\"]}]}",
     RF_INVALID_ARGUMENT,
     "node 1 's': input 0 'inputs' of AddN is variadic (N * T): it expects a "
     "list [\"node:index\", ...], got a string"},
    {HDR "[" PH("x") ", {\"name\": \"c\", \"op\": \"Concat\", \"inputs\": "
                     "[\"x:0\"], \"attrs\": {\"axis\": {\"type\": \"int\", "
                     "\"value\": 0}}}]}",
     RF_INVALID_ARGUMENT, "input 0 'values' of Concat is variadic"},
    {HDR "[" PH("x") ", {\"name\": \"r\", \"op\": \"Reduce\", \"inputs\": "
                     "[\"x\"]}]}",
     RF_INVALID_ARGUMENT, "input 0 'input' of Reduce is variadic (num_devices"},
    {HDR "[" PH("x") ", {\"name\": \"s\", \"op\": \"AddN\", \"inputs\": "
                     "[5]}]}",
     RF_INVALID_ARGUMENT, "expects a list [\"node:index\", ...], got a JSON"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[[\"x\", \"x\"]]}]}",
     RF_INVALID_ARGUMENT,
     "node 1 'y': input 0 'input' of Identity takes one tensor, got a list"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[[]]}]}",
     RF_INVALID_ARGUMENT, "takes one tensor, got a list"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[5]}]}",
     RF_INVALID_ARGUMENT, "an input must be a string"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[\"x\", \"x\"]}]}",
     RF_INVALID_ARGUMENT, "expected 1 inputs"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\", \"inputs\": "
                     "[[\"x\"]]}]}",
     RF_INVALID_ARGUMENT, "takes one tensor, got a list"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"Identity\"}]}",
     RF_INVALID_ARGUMENT, "expected 1 inputs"},
    {HDR "[" PH("x") ", {\"name\": \"y\", \"op\": \"NoOp\", "
                     "\"control_inputs\": [\"z\"]}]}",
     RF_INVALID_ARGUMENT, "control input 0 must name an earlier node"},
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"control_inputs\": [1]}]}",
     RF_INVALID_ARGUMENT, "control input 0 must name an earlier node"},
    /* a two-node cycle: each names the other */
    {HDR "[{\"name\": \"a\", \"op\": \"NoOp\", \"control_inputs\": [\"b\"]}, "
         "{\"name\": \"b\", \"op\": \"NoOp\", \"control_inputs\": [\"a\"]}]}",
     RF_INVALID_ARGUMENT, "node 0 'a': control input 0 must name an earlier"},
    {HDR "[" PH("x") ", {\"name\": \"s\", \"op\": \"AddN\", \"inputs\": "
                     "[[\"x\", \"k\"]]}]}",
     RF_INVALID_ARGUMENT, "input 'k' names no earlier node"},
    /* attrs */
    {ATTR1("x", "Placeholder", "dtype", "int", "3"), RF_INVALID_ARGUMENT,
     "dtype"},
    {ATTR1("x", "Placeholder", "dtype", "type", "\"float128\""),
     RF_INVALID_ARGUMENT,
     "graph file, node 0 'x', attr 'dtype': expected a dtype"},
    {HDR "[{\"name\": \"x\", \"op\": \"Placeholder\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\"}}}]}",
     RF_INVALID_ARGUMENT, "attr 'dtype': an attr must be {\"type\": string"},
    {ATTR1("x", "Placeholder", "dtype", "complex", "1"), RF_INVALID_ARGUMENT,
     "attr 'dtype': unknown attr type 'complex'"},
    {HDR "[{\"name\": \"x\", \"op\": \"Placeholder\", \"attrs\": {\"dtype\": "
         "3}}]}",
     RF_INVALID_ARGUMENT, "attr 'dtype': an attr must be"},
    {HDR "[{\"name\": \"x\", \"op\": \"Placeholder\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\", \"value\": \"float32\"}, \"bogus\": {\"type\": "
         "\"int\", \"value\": 1}}}]}",
     RF_INVALID_ARGUMENT, "bogus"},
    {HDR "[" PH_SHAPED("x", "[1,2,3,4,5,6,7,8,9]") "]}", RF_INVALID_ARGUMENT,
     "at most 8 ints"},
    {HDR "[" PH_SHAPED("x", "[-2]") "]}", RF_INVALID_ARGUMENT,
     "shape dim 0 is not an integer >= -1"},
    {HDR "[" PH_SHAPED("x", "[1.5]") "]}", RF_INVALID_ARGUMENT,
     "shape dim 0 is not an integer"},
    {ATTR1("s", "Sum", "axes", "list(int)", "3"), RF_INVALID_ARGUMENT,
     "must be an array"},
    {ATTR1("s", "Sum", "axes", "list(int)", "[1, \"2\"]"), RF_INVALID_ARGUMENT,
     "expected an integer"},
    {ATTR1("s", "NoOp", "x", "float", "\"NaN!\""), RF_INVALID_ARGUMENT,
     "expected a number"},
    {ATTR1("s", "NoOp", "x", "bool", "1"), RF_INVALID_ARGUMENT,
     "expected true or false"},
    {ATTR1("s", "NoOp", "x", "string", "null"), RF_INVALID_ARGUMENT,
     "expected a string"},
    {ATTR1("s", "NoOp", "_devices", "string", "\"cpu:0\""), RF_INVALID_ARGUMENT,
     "_devices"},
    /* tensors */
    {CONST("float32", "[2]", "AAAAAAAAAA=="), RF_INVALID_ARGUMENT,
     "tensor data is base64 of 7 bytes, not of exactly 8"},
    {CONST("float32", "[2]", "AAAAAAAAAAAAAAAA"), RF_INVALID_ARGUMENT,
     "tensor data is base64 of 12 bytes, not of exactly 8"},
    {CONST("float32", "[2]", "AAAA"), RF_INVALID_ARGUMENT,
     "cannot hold 2 float32 elements"},
    {CONST("float32", "[2]", "AAAA!AAAAAA="), RF_INVALID_ARGUMENT,
     "tensor data is not base64: character 4 is '!'"},
    {CONST("float32", "[2]", "AAAAAA=AAAA="), RF_INVALID_ARGUMENT,
     "tensor data is not base64: character 6 is '='"},
    {CONST("float32", "[2]", "!!notbase64"), RF_INVALID_ARGUMENT,
     "tensor data is not base64: character 0 is '!'"},
    /* unpadded: 11 characters that would hold the 8 bytes */
    {CONST("float32", "[2]", "AACAPwAAAEA"), RF_INVALID_ARGUMENT,
     "11 characters, not a multiple of 4 (the '=' padding missing?)"},
    {CONST("float32", "[2]", "AAAAAAA"), RF_INVALID_ARGUMENT, "cannot hold"},
    {CONST("int8", "[2]", "AA=="), RF_INVALID_ARGUMENT,
     "base64 of 1 bytes, not of exactly 2"},
    {CONST("float32", "[1000000000000, 1000000000000]", "AAAA"),
     RF_INVALID_ARGUMENT, "element count overflows int64"},
    {CONST("float32", "[9223372036854775807, 2]", "AAAA"), RF_INVALID_ARGUMENT,
     "element count overflows int64"},
    {CONST("float32", "[1000000000, 1000000000]", "AAAA"), RF_INVALID_ARGUMENT,
     "cannot hold 1000000000000000000 float32"},
    {CONST("float32", "[-1]", ""), RF_INVALID_ARGUMENT,
     "shape must be fully defined"},
    {CONST("float32", "null", ""), RF_INVALID_ARGUMENT,
     "shape must be fully defined"},
    {CONST("resource", "[1]", "AAAAAAAAAAA="), RF_INVALID_ARGUMENT,
     "unknown tensor dtype 'resource'"},
    {CONST("bool", "[3]", "AAEC"), RF_INVALID_ARGUMENT,
     "bool tensor element 2 is 2, not 0 or 1"},
    {HDR "[{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\", \"value\": \"int32\"}, \"value\": {\"type\": "
         "\"tensor\", \"value\": {\"dtype\": \"float32\", \"shape\": [1], "
         "\"data\": \"AAAAAA==\"}}}}]}",
     RF_INVALID_ARGUMENT, "'k'"},
    {HDR "[{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"value\": "
         "{\"type\": \"tensor\", \"value\": {\"dtype\": \"float32\", "
         "\"shape\": [1]}}}}]}",
     RF_INVALID_ARGUMENT, "a tensor is {\"dtype\": string"},
    {HDR "[{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"value\": "
         "{\"type\": \"list(tensor)\", \"value\": [{\"dtype\": \"int8\", "
         "\"shape\": [1], \"data\": \"AA==\"}, 3]}}}]}",
     RF_INVALID_ARGUMENT, "a tensor is"},
    /* collectives checked like code */
    {HDR "[{\"name\": \"k\", \"op\": \"Const\", \"attrs\": {\"dtype\": "
         "{\"type\": \"type\", \"value\": \"int32\"}, \"value\": {\"type\": "
         "\"tensor\", \"value\": {\"dtype\": \"int32\", \"shape\": [1], "
         "\"data\": \"+////w==\"}}}}, {\"name\": \"r\", \"op\": "
         "\"_BroadcastRecv\", \"inputs\": [\"k\"], \"attrs\": {\"T\": "
         "{\"type\": \"type\", \"value\": \"float32\"}, \"num_devices\": "
         "{\"type\": \"int\", \"value\": 2}, \"shared_name\": {\"type\": "
         "\"string\", \"value\": \"s\"}}}]}",
     RF_INVALID_ARGUMENT, "the shape input holds a negative dim -5"},
    {HDR "[" PH("x") ", {\"name\": \"r\", \"op\": \"Reduce\", \"inputs\": "
                     "[[\"x\"]], \"attrs\": {\"reduction\": {\"type\": "
                     "\"string\", \"value\": \"median\"}}}]}",
     RF_INVALID_ARGUMENT, "median"},
};

static void test_hostile_files(void **state) {
  assert_ok(rf__registry_init());
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    const bad_case *c = &bad_cases[i];
    rf_graph *sentinel = (rf_graph *)c, *g = sentinel;
    rf_status *st = rf_graph_from_json(c->json, strlen(c->json), &g);
    if (!st || rf_status_code(st) != c->code ||
        !strstr(rf_status_message(st), c->message))
      fprintf(stderr, "case %zu: %s\n  got %s: %s\n", i, c->json,
              st ? rf_code_name(rf_status_code(st)) : "OK",
              st ? rf_status_message(st) : "");
    assert_ptr_equal(g, sentinel);
    if (getenv("RF_SHOW"))
      fprintf(stderr, "%zu: %s\n", i, rf_status_message(st));
    assert_status(st, c->code, c->message);
  }
}

/* A malformed input of a long node name is quoted cut at
 * RF_STATUS_QUOTE_MAX bytes, like every name in a message. */
static void test_bad_input_is_quoted_capped(void **state) {
  assert_ok(rf__registry_init());
  size_t len = 3000;
  char *name = malloc(len + 1);
  memset(name, 'n', len);
  name[len] = '\0';
#define LONG_FMT \
  HDR "[" PH_SHAPED("%s", "[2]") ", {\"name\": \"y\", \"op\": \"Identity\", " \
                                  "\"inputs\": [\"%s:007\"]}]}"
  size_t cap = sizeof LONG_FMT + 2 * len;
  char *json = malloc(cap);
  snprintf(json, cap, LONG_FMT, name, name);
  rf_graph *g = NULL;
  rf_status *st = rf_graph_from_json(json, strlen(json), &g);
  assert_non_null(st);
  assert_null(g);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  const char *msg = rf_status_message(st);
  assert_non_null(strstr(msg, "node 1 'y': input 'nnn"));
  assert_non_null(strstr(msg, "n... (3004 bytes)': the output index"));
  assert_true(strlen(msg) < 600);
  rf_status_free(st);
  free(json);
  free(name);
}

/* Deep nesting, huge lists, NUL bytes, random bytes: errors, no crash. */
static void test_pathological_inputs(void **state) {
  assert_ok(rf__registry_init());
  size_t n = 200000;
  char *deep = malloc(2 * n + 1);
  memset(deep, '[', n);
  memset(deep + n, ']', n);
  deep[2 * n] = '\0';
  rf_graph *g = NULL;
  assert_status(rf_graph_from_json(deep, 2 * n, &g), RF_INVALID_ARGUMENT,
                "JSON error");
  free(deep);
  /* NUL inside the text */
  const char nul[] = HDR "[{\"name\": \"a\0b\", \"op\": \"NoOp\"}]}";
  assert_status(rf_graph_from_json(nul, sizeof nul - 1, &g),
                RF_INVALID_ARGUMENT, "JSON error");
  /* Random bytes and random truncations of a real file. */
  uint64_t rng = rf_test_seed() + 5;
  rf_graph *rich = rich_graph(&rng);
  char *text = to_json(rich);
  size_t len = strlen(text);
  for (int k = 0; k < 300; k++) {
    char *mut = malloc(len + 1);
    memcpy(mut, text, len + 1);
    size_t cut = len;
    if (k % 3 == 0) cut = rf_test_rand(&rng) % len;
    for (int m = 0; m < 4 && k % 3; m++)
      mut[rf_test_rand(&rng) % len] = (char)(rf_test_rand(&rng) & 0xff);
    rf_graph *out = NULL;
    rf_status *st = rf_graph_from_json(mut, cut, &out);
    if (st) assert_null(out);
    rf_status_free(st);
    rf_graph_free(out);
    free(mut);
  }
  rf_string_free(text);
  rf_graph_free(rich);
}

/* ---- allocation failures ---- */

static void test_allocation_failures(void **state) {
  uint64_t rng = rf_test_seed() + 6;
  rf_graph *g = rich_graph(&rng);
  char *text = to_json(g);
  int failures = 0;
  for (int what = 0; what < 3; what++)
    for (int k = 1;; k++) {
      int64_t live = rf_debug_live_allocations();
      rf_debug_fail_allocation_after(k);
      char *s = NULL;
      rf_graph *g2 = NULL;
      rf_status *st = what == 0   ? rf_graph_to_json(g, &s)
                      : what == 1 ? rf_graph_from_json(text, strlen(text), &g2)
                                  : rf_graph_to_dot(g, &s);
      rf_debug_fail_allocation_after(0);
      rf_string_free(s);
      rf_graph_free(g2);
      assert_int_equal(rf_debug_live_allocations(), live);
      if (!st) break;
      if (rf_status_code(st) != RF_RESOURCE_EXHAUSTED)
        fprintf(stderr, "what=%d k=%d: %s\n", what, k, rf_status_message(st));
      assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
      rf_status_free(st);
      failures++;
    }
  assert_true(failures > 30);
  rf_string_free(text);
  rf_graph_free(g);
}

/* ---- DOT ---- */

static void test_dot_export(void **state) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x0 = rf_placeholder(g, "x0", RF_FLOAT32,
                                rf_shape_of(2, (int64_t)2, (int64_t)3));
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x1 = rf_placeholder(g, "x1", RF_FLOAT32,
                                rf_shape_of(2, (int64_t)2, (int64_t)3));
  rf_graph_pop_device(g);
  rf_output xs[2] = {x0, x1}, ys[2];
  rf_all_reduce_n(g, "ar", xs, 2, RF_REDUCE_SUM, ys);
  rf_node *after = rf_noop(g, "after"); /* no device: outside clusters */
  assert_ok(rf_graph_add_control_edge(g, ys[1].node, after));
  assert_graph_ok(g);
  char *dot = NULL;
  assert_ok(rf_graph_to_dot(g, &dot));
  assert_non_null(strstr(dot, "digraph"));
  assert_non_null(strstr(dot, "subgraph cluster_0 {\n    label=\"cpu:0\""));
  assert_non_null(strstr(dot, "subgraph cluster_1 {\n    label=\"cpu:1\""));
  assert_null(strstr(dot, "cluster_2"));
  assert_non_null(strstr(dot, "label=\"ar_1\\nAllReduce\""));
  char edge[64];
  snprintf(edge, sizeof edge, "n%d -> n%d [style=dashed", ys[1].node->id,
           after->id);
  assert_non_null(strstr(dot, edge));
  snprintf(edge, sizeof edge, "n%d -> n%d [label=\"float32(2, 3)\"]",
           x0.node->id, ys[0].node->id);
  assert_non_null(strstr(dot, edge));
  /* Graphviz accepts it, when installed. */
  if (system("command -v dot >/dev/null 2>&1") == 0) {
    char path[] = "/tmp/rf_dot_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, dot, strlen(dot)), (ssize_t)strlen(dot));
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null", path);
    assert_int_equal(system(cmd), 0);
    unlink(path);
  }
  rf_string_free(dot);
  assert_status(rf_graph_to_dot(NULL, &dot), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_text_is_stable),
      cmocka_unit_test(test_save_and_load_files),
      cmocka_unit_test(test_save_replaces_atomically),
      cmocka_unit_test(test_long_names),
      cmocka_unit_test(test_non_utf8_string_attr),
      cmocka_unit_test(test_loaded_graph_runs_the_same),
      cmocka_unit_test(test_lowered_graph_round_trips),
      cmocka_unit_test(test_hostile_files),
      cmocka_unit_test(test_bad_input_is_quoted_capped),
      cmocka_unit_test(test_pathological_inputs),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_dot_export),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
