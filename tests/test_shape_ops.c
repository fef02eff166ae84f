/* tests/test_shape_ops.c - Transpose, Concat, Split, Slice, ExpandDims,
 * Squeeze, Pad and Tile run through a session on fresh random inputs of
 * every dtype and random shapes (size-1 dims, empty tensors), each output
 * compared byte for byte with an index-mapping reference written here; the
 * same with placeholders of unknown shape (run-time shapes); and the errors,
 * at build time and at run time, naming the node and op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/graph_io.h"
#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* A random shape of `rank` dims in 0..4, mostly nonzero, often 1. */
static rf_shape random_shape(uint64_t *rng, int rank, bool allow_empty) {
  rf_shape s = rf_shape_scalar();
  s.rank = rank;
  for (int i = 0; i < rank; i++) {
    uint64_t r = rf_test_rand(rng) % 8;
    s.dims[i] = r == 0 && allow_empty ? 0 : r < 3 ? 1 : (int64_t)(r % 4) + 1;
  }
  return s;
}

static void unravel(const rf_shape *s, int64_t i, int64_t *idx) {
  for (int k = s->rank - 1; k >= 0; k--) {
    idx[k] = s->dims[k] ? i % s->dims[k] : 0;
    i = s->dims[k] ? i / s->dims[k] : 0;
  }
}

static int64_t ravel(const rf_shape *s, const int64_t *idx) {
  int64_t i = 0;
  for (int k = 0; k < s->rank; k++) i = i * s->dims[k] + idx[k];
  return i;
}

/* Checks out against in through map(out index) -> (input k, flat index) or
 * k < 0 for the fill element `fill` (one element's bytes). */
typedef int (*map_fn)(const int64_t *oi, const void *arg, const rf_shape *ins,
                      int64_t *flat);

static void check_map(const rf_tensor *out, rf_shape want_shape,
                      rf_tensor *const *ins, int nin, map_fn map,
                      const void *arg, const void *fill, const char *what) {
  rf_shape os = rf_tensor_shape(out);
  if (!rf_shape_equal(&os, &want_shape)) {
    char a[64], b[64];
    rf_shape_format(&os, a, sizeof a);
    rf_shape_format(&want_shape, b, sizeof b);
    fail_msg("%s: shape %s, want %s", what, a, b);
  }
  rf_shape shapes[16];
  for (int k = 0; k < nin; k++) shapes[k] = rf_tensor_shape(ins[k]);
  size_t es = rf_dtype_size(rf_tensor_dtype(out));
  int64_t idx[RF_MAX_RANK];
  for (int64_t i = 0; i < rf_tensor_num_elements(out); i++) {
    unravel(&os, i, idx);
    int64_t flat;
    int k = map(idx, arg, shapes, &flat);
    const void *want =
        k < 0 ? fill
              : (const char *)rf_tensor_data(ins[k]) + flat * (int64_t)es;
    if (memcmp((const char *)rf_tensor_data(out) + i * (int64_t)es, want, es))
      fail_msg("%s (%s): element %lld differs", what,
               rf_dtype_name(rf_tensor_dtype(out)), (long long)i);
  }
}

/* ---- per-op references ---- */

typedef struct op_arg {
  int64_t v[2 * RF_MAX_RANK]; /* perm, begin, paddings, multiples */
  int64_t w[RF_MAX_RANK];     /* size */
  int64_t axis;
  int piece; /* Split: which output */
  int64_t sizes[8];
} op_arg;

static int map_transpose(const int64_t *oi, const void *arg,
                         const rf_shape *ins, int64_t *flat) {
  const op_arg *a = arg;
  int64_t ii[RF_MAX_RANK];
  for (int k = 0; k < ins[0].rank; k++) ii[a->v[k]] = oi[k];
  *flat = ravel(&ins[0], ii);
  return 0;
}

static int map_slice(const int64_t *oi, const void *arg, const rf_shape *ins,
                     int64_t *flat) {
  const op_arg *a = arg;
  int64_t ii[RF_MAX_RANK];
  for (int k = 0; k < ins[0].rank; k++) ii[k] = oi[k] + a->v[k];
  *flat = ravel(&ins[0], ii);
  return 0;
}

static int map_pad(const int64_t *oi, const void *arg, const rf_shape *ins,
                   int64_t *flat) {
  const op_arg *a = arg;
  int64_t ii[RF_MAX_RANK];
  for (int k = 0; k < ins[0].rank; k++) {
    ii[k] = oi[k] - a->v[2 * k];
    if (ii[k] < 0 || ii[k] >= ins[0].dims[k]) return -1;
  }
  *flat = ravel(&ins[0], ii);
  return 0;
}

static int map_tile(const int64_t *oi, const void *arg, const rf_shape *ins,
                    int64_t *flat) {
  int64_t ii[RF_MAX_RANK];
  for (int k = 0; k < ins[0].rank; k++) ii[k] = oi[k] % ins[0].dims[k];
  *flat = ravel(&ins[0], ii);
  return 0;
}

static int map_concat(const int64_t *oi, const void *arg, const rf_shape *ins,
                      int64_t *flat) {
  const op_arg *a = arg;
  int64_t ii[RF_MAX_RANK];
  memcpy(ii, oi, sizeof ii);
  int k = 0;
  while (ii[a->axis] >= ins[k].dims[a->axis])
    ii[a->axis] -= ins[k++].dims[a->axis];
  *flat = ravel(&ins[k], ii);
  return k;
}

static int map_split(const int64_t *oi, const void *arg, const rf_shape *ins,
                     int64_t *flat) {
  const op_arg *a = arg;
  int64_t ii[RF_MAX_RANK];
  memcpy(ii, oi, sizeof ii);
  for (int p = 0; p < a->piece; p++) ii[a->axis] += a->sizes[p];
  *flat = ravel(&ins[0], ii);
  return 0;
}

/* ---- forward values ---- */

static rf_output feed_of(rf_graph *g, rf_tensor *t, bool unknown) {
  return rf_placeholder(g, NULL, rf_tensor_dtype(t),
                        unknown ? rf_shape_unknown() : rf_tensor_shape(t));
}

static void run1(rf_graph *g, rf_feed *feeds, int nf, rf_output y,
                 rf_tensor **out) {
  assert_graph_ok(g);
  rf_test_run(g, 1, feeds, nf, &y, 1, out);
}

static void random_perm(uint64_t *rng, int n, int64_t *perm) {
  for (int i = 0; i < n; i++) perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rf_test_rand(rng) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
}

static void check_one_dtype(uint64_t *rng, rf_dtype dt, bool unknown) {
  char what[96];
  for (int rank = 1; rank <= 4; rank++) {
    rf_shape xs = random_shape(rng, rank, true);
    rf_tensor *x = rf_test_random_tensor(rng, dt, xs, -100, 100);
    rf_shape ys;
    op_arg a;
    memset(&a, 0, sizeof a);
    rf_tensor *out;

    /* Transpose */
    rf_graph *g = rf_graph_new();
    rf_output px = feed_of(g, x, unknown);
    rf_feed f = {px, x};
    random_perm(rng, rank, a.v);
    ys = xs;
    for (int k = 0; k < rank; k++) ys.dims[k] = xs.dims[a.v[k]];
    run1(g, &f, 1, rf_transpose(g, NULL, px, a.v, rank), &out);
    snprintf(what, sizeof what, "Transpose rank %d", rank);
    check_map(out, ys, &x, 1, map_transpose, &a, NULL, what);
    rf_tensor_release(out);
    rf_graph_free(g);

    /* Slice: random window, some sizes -1 */
    g = rf_graph_new();
    px = feed_of(g, x, unknown);
    f.output = px;
    ys = xs;
    for (int k = 0; k < rank; k++) {
      a.v[k] = (int64_t)(rf_test_rand(rng) % (uint64_t)(xs.dims[k] + 1));
      ys.dims[k] =
          (int64_t)(rf_test_rand(rng) % (uint64_t)(xs.dims[k] - a.v[k] + 1));
      a.w[k] = rf_test_rand(rng) % 3 == 0 ? -1 : ys.dims[k];
      if (a.w[k] < 0) ys.dims[k] = xs.dims[k] - a.v[k];
    }
    run1(g, &f, 1, rf_slice(g, NULL, px, a.v, a.w, rank), &out);
    snprintf(what, sizeof what, "Slice rank %d", rank);
    check_map(out, ys, &x, 1, map_slice, &a, NULL, what);
    rf_tensor_release(out);
    rf_graph_free(g);

    /* Pad with a constant */
    g = rf_graph_new();
    px = feed_of(g, x, unknown);
    f.output = px;
    ys = xs;
    for (int k = 0; k < 2 * rank; k++)
      a.v[k] = (int64_t)(rf_test_rand(rng) % 3);
    for (int k = 0; k < rank; k++) ys.dims[k] += a.v[2 * k] + a.v[2 * k + 1];
    rf_tensor *fill;
    assert_ok(rf_tensor_new_scalar(dt, 7, &fill));
    run1(g, &f, 1, rf_pad(g, NULL, px, a.v, 2 * rank, 7), &out);
    snprintf(what, sizeof what, "Pad rank %d", rank);
    check_map(out, ys, &x, 1, map_pad, &a, rf_tensor_data(fill), what);
    rf_tensor_release(fill);
    rf_tensor_release(out);
    rf_graph_free(g);

    /* Tile */
    g = rf_graph_new();
    px = feed_of(g, x, unknown);
    f.output = px;
    ys = xs;
    for (int k = 0; k < rank; k++) {
      a.v[k] = (int64_t)(rf_test_rand(rng) % 3) + (k == 0 ? 1 : 0);
      ys.dims[k] *= a.v[k];
    }
    run1(g, &f, 1, rf_tile(g, NULL, px, a.v, rank), &out);
    snprintf(what, sizeof what, "Tile rank %d", rank);
    check_map(out, ys, &x, 1, map_tile, &a, NULL, what);
    rf_tensor_release(out);
    rf_graph_free(g);

    /* Concat of three along a random (negative half the time) axis */
    a.axis = (int64_t)(rf_test_rand(rng) % (uint64_t)rank);
    rf_tensor *parts[3];
    rf_feed pf[3];
    rf_output po[3];
    g = rf_graph_new();
    ys = xs;
    ys.dims[a.axis] = 0;
    for (int i = 0; i < 3; i++) {
      rf_shape ps = xs;
      ps.dims[a.axis] = (int64_t)(rf_test_rand(rng) % 4);
      ys.dims[a.axis] += ps.dims[a.axis];
      parts[i] = rf_test_random_tensor(rng, dt, ps, -100, 100);
      po[i] = feed_of(g, parts[i], unknown);
      pf[i] = (rf_feed){po[i], parts[i]};
    }
    int64_t axis_arg = rf_test_rand(rng) % 2 ? a.axis - rank : a.axis;
    run1(g, pf, 3, rf_concat(g, NULL, po, 3, axis_arg), &out);
    snprintf(what, sizeof what, "Concat rank %d axis %lld", rank,
             (long long)axis_arg);
    check_map(out, ys, parts, 3, map_concat, &a, NULL, what);
    rf_tensor_release(out);
    rf_graph_free(g);

    /* SplitV of the concatenation's sizes back into 3 */
    rf_tensor *whole = NULL;
    {
      /* reuse: split parts[0..2] concatenated = check each piece */
      g = rf_graph_new();
      rf_output c = rf_concat(g, NULL, po, 0, 0); /* invalid: n = 0 */
      assert_null(c.node);
      assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "n >= 1");
      rf_graph_free(g);
    }
    g = rf_graph_new();
    for (int i = 0; i < 3; i++) {
      po[i] = feed_of(g, parts[i], false);
      pf[i].output = po[i];
      a.sizes[i] = rf_tensor_shape(parts[i]).dims[a.axis];
    }
    rf_output cat = rf_concat(g, NULL, po, 3, a.axis);
    rf_output pieces[3];
    int64_t sizes[3] = {a.sizes[0], -1, a.sizes[2]};
    assert_non_null(rf_split_v(g, NULL, cat, sizes, 3, a.axis, pieces));
    assert_graph_ok(g);
    rf_tensor *got[4];
    rf_output fetch[4] = {pieces[0], pieces[1], pieces[2], cat};
    rf_test_run(g, 1, pf, 3, fetch, 4, got);
    whole = got[3];
    for (int i = 0; i < 3; i++) {
      a.piece = i;
      snprintf(what, sizeof what, "Split rank %d piece %d", rank, i);
      check_map(got[i], rf_tensor_shape(parts[i]), &whole, 1, map_split, &a,
                NULL, what);
      rf_tensor_release(got[i]);
    }
    rf_tensor_release(whole);
    rf_graph_free(g);
    for (int i = 0; i < 3; i++) rf_tensor_release(parts[i]);

    /* ExpandDims then Squeeze of that axis: same elements, a view */
    g = rf_graph_new();
    px = feed_of(g, x, unknown);
    f.output = px;
    int64_t ax = (int64_t)(rf_test_rand(rng) % (uint64_t)(rank + 1));
    rf_output e = rf_expand_dims(g, NULL, px, ax - (rank + 1) * (ax % 2));
    rf_output s = rf_squeeze(g, NULL, e, &ax, 1);
    rf_tensor *es[2];
    rf_output ef[2] = {e, s};
    assert_graph_ok(g);
    rf_test_run(g, 1, &f, 1, ef, 2, es);
    rf_shape want = rf_shape_scalar();
    want.rank = rank + 1;
    for (int k = 0, j = 0; k <= rank; k++)
      want.dims[k] = k == ax ? 1 : xs.dims[j++];
    rf_shape got_s = rf_tensor_shape(es[0]);
    assert_true(rf_shape_equal(&got_s, &want));
    got_s = rf_tensor_shape(es[1]);
    assert_true(rf_shape_equal(&got_s, &xs));
    size_t nb = (size_t)rf_tensor_num_elements(x) * rf_dtype_size(dt);
    if (nb) {
      assert_memory_equal(rf_tensor_data(es[0]), rf_tensor_data(x), nb);
      assert_memory_equal(rf_tensor_data(es[1]), rf_tensor_data(x), nb);
    }
    rf_tensor_release(es[0]);
    rf_tensor_release(es[1]);
    rf_graph_free(g);
    rf_tensor_release(x);
  }
}

static void test_values_every_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  for (int round = 0; round < 3; round++)
    for (int d = 0; d < NDT; d++) check_one_dtype(&rng, all_dtypes[d], false);
}

static void test_values_unknown_shapes(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(2);
  for (int d = 0; d < NDT; d++) check_one_dtype(&rng, all_dtypes[d], true);
}

/* Squeeze with no axes drops every size-1 dim, also when only the run
 * knows them; a rank-0 result works. */
static void test_squeeze_all(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(3);
  for (int unknown = 0; unknown < 2; unknown++) {
    rf_graph *g = rf_graph_new();
    rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32,
                                         rf_shape_of(4, 1, 3, 1, 2), -1, 1);
    rf_tensor *one =
        rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(2, 1, 1), -9, 9);
    rf_output px = feed_of(g, x, unknown), po = feed_of(g, one, unknown);
    rf_output y[2] = {rf_squeeze(g, NULL, px, NULL, 0),
                      rf_squeeze(g, NULL, po, NULL, 0)};
    if (!unknown) {
      rf_shape s = rf_output_shape(y[0]), w = rf_shape_of(2, 3, 2);
      assert_true(rf_shape_equal(&s, &w));
    }
    rf_feed f[2] = {{px, x}, {po, one}};
    rf_tensor *out[2];
    assert_graph_ok(g);
    rf_test_run(g, 1, f, 2, y, 2, out);
    rf_shape s0 = rf_tensor_shape(out[0]), w0 = rf_shape_of(2, 3, 2);
    rf_shape s1 = rf_tensor_shape(out[1]), w1 = rf_shape_scalar();
    assert_true(rf_shape_equal(&s0, &w0));
    assert_true(rf_shape_equal(&s1, &w1));
    assert_memory_equal(rf_tensor_data(out[1]), rf_tensor_data(one), 4);
    for (int i = 0; i < 2; i++) rf_tensor_release(out[i]);
    rf_tensor_release(x);
    rf_tensor_release(one);
    rf_graph_free(g);
  }
}

/* ---- errors ---- */

/* Building op on a (2, 3) float placeholder must fail with sub. */
typedef rf_output (*build1)(rf_graph *g, rf_output x);

static void expect_build_error(build1 build, const char *op, const char *sub) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output y = build(g, x);
  assert_null(y.node);
  rf_status *st = rf_graph_status(g);
  assert_non_null(st);
  const char *msg = rf_status_message(st);
  if (!strstr(msg, op) || !strstr(msg, sub) || !strstr(msg, "'bad'"))
    fail_msg("message \"%s\" lacks %s / %s / 'bad'", msg, op, sub);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  rf_status_free(st);
  rf_graph_free(g);
}

static rf_output bad_perm(rf_graph *g, rf_output x) {
  return rf_transpose(g, "bad", x, (int64_t[]){0, 0}, 2);
}
static rf_output bad_perm_len(rf_graph *g, rf_output x) {
  return rf_transpose(g, "bad", x, (int64_t[]){1, 0, 2}, 3);
}
static rf_output bad_concat(rf_graph *g, rf_output x) {
  rf_output y = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, 3, 3));
  return rf_concat(g, "bad", (rf_output[]){x, y}, 2, 1);
}
static rf_output bad_axis(rf_graph *g, rf_output x) {
  return rf_concat(g, "bad", &x, 1, 2);
}
static rf_output bad_split(rf_graph *g, rf_output x) {
  rf_output o[2];
  rf_node *n = rf_split_v(g, "bad", x, (int64_t[]){1, 1}, 2, 1, o);
  assert_null(n);
  return o[0];
}
static rf_output bad_split_even(rf_graph *g, rf_output x) {
  rf_output o[2];
  rf_split(g, "bad", x, 2, 1, o);
  return o[1];
}
static rf_output bad_slice(rf_graph *g, rf_output x) {
  return rf_slice(g, "bad", x, (int64_t[]){1, 2}, (int64_t[]){1, 2}, 2);
}
static rf_output bad_expand(rf_graph *g, rf_output x) {
  return rf_expand_dims(g, "bad", x, 3);
}
static rf_output bad_squeeze(rf_graph *g, rf_output x) {
  return rf_squeeze(g, "bad", x, (int64_t[]){1}, 1);
}
static rf_output bad_pad(rf_graph *g, rf_output x) {
  return rf_pad(g, "bad", x, (int64_t[]){0, -1, 0, 0}, 4, 0);
}
static rf_output bad_pad_len(rf_graph *g, rf_output x) {
  return rf_pad(g, "bad", x, (int64_t[]){0, 1, 0}, 3, 0);
}
static rf_output bad_tile_overflow(rf_graph *g, rf_output x) {
  return rf_tile(g, "bad", x, (int64_t[]){INT64_MAX / 2, 2}, 2);
}
static rf_output bad_tile_neg(rf_graph *g, rf_output x) {
  return rf_tile(g, "bad", x, (int64_t[]){1, -1}, 2);
}
static rf_output bad_pad_overflow(rf_graph *g, rf_output x) {
  return rf_pad(g, "bad", x, (int64_t[]){0, 0, INT64_MAX - 1, 0}, 4, 0);
}

static void test_build_errors(void **state) {
  (void)state;
  expect_build_error(bad_perm, "(Transpose)", "not a permutation");
  expect_build_error(bad_perm_len, "(Transpose)", "perm has 3 entries");
  expect_build_error(bad_concat, "(Concat)", "dimension 0");
  expect_build_error(bad_axis, "(Concat)", "axis 2 is out of range");
  expect_build_error(bad_split, "(Split)", "add up to 2 but dimension 1 is 3");
  expect_build_error(bad_split_even, "(Split)", "does not split evenly");
  expect_build_error(bad_slice, "(Slice)", "outside [0, 3)");
  expect_build_error(bad_expand, "(ExpandDims)", "axis 3 is out of range");
  expect_build_error(bad_squeeze, "(Squeeze)", "dimension 1 of size 3");
  expect_build_error(bad_pad, "(Pad)", "must be >= 0");
  expect_build_error(bad_pad_len, "(Pad)", "two (before, after)");
  expect_build_error(bad_tile_overflow, "(Tile)", "overflows int64");
  expect_build_error(bad_tile_neg, "(Tile)", "must be >= 0");
  expect_build_error(bad_pad_overflow, "(Pad)", "past INT64_MAX");
}

/* Shapes only the run knows: the kernel refuses with the node, op and
 * device, and no output. */
static void test_run_errors(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(4);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_placeholder(g, "y", RF_FLOAT32, rf_shape_unknown());
  rf_output outs[4];
  outs[0] = rf_slice(g, "sl", x, (int64_t[]){0, 2}, (int64_t[]){1, 2}, 2);
  outs[1] = rf_concat(g, "cat", (rf_output[]){x, y}, 2, 0);
  outs[2] = rf_squeeze(g, "sq", x, NULL, 0);
  rf_output parts[2];
  rf_split(g, "sp", x, 2, 1, parts);
  outs[3] = parts[0];
  assert_graph_ok(g);
  rf_tensor *tx =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 2, 3), -1, 1);
  rf_tensor *ty =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 2, 4), -1, 1);
  rf_feed f[2] = {{x, tx}, {y, ty}};
  rf_session *s = rf_test_cpu_session(g, 1);
  static const char *subs[4][3] = {
      {"node 'sl' (Slice) on cpu:0", "outside [0, 3)", ""},
      {"node 'cat' (Concat) on cpu:0", "input 1 has 4 in dimension 1", ""},
      {"", "", ""},
      {"node 'sp' (Split) on cpu:0", "does not split evenly", ""}};
  for (int i = 0; i < 4; i++) {
    if (i == 2) { /* (2, 3) has no size-1 dim: a plain copy of the shape */
      rf_tensor *out = NULL;
      assert_ok(rf_session_run(s, f, 2, &outs[2], 1, NULL, 0, &out));
      rf_shape got = rf_tensor_shape(out), want = rf_tensor_shape(tx);
      assert_true(rf_shape_equal(&got, &want));
      rf_tensor_release(out);
      continue;
    }
    rf_test_expect_run_error(s, f, 2, &outs[i], 1, RF_INVALID_ARGUMENT, subs[i],
                             2);
  }
  rf_session_free(s);
  rf_tensor_release(tx);
  rf_tensor_release(ty);
  rf_graph_free(g);
}

/* A shape op's kernel under allocation failures: RESOURCE_EXHAUSTED, no
 * output, no leak. */
static void test_kernel_faults(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(5);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 3, 4));
  rf_output c = rf_concat(g, "c", (rf_output[]){x, x, x}, 3, 1);
  rf_output t = rf_tile(g, "t", x, (int64_t[]){2, 1}, 2);
  assert_graph_ok(g);
  rf_tensor *tx =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 3, 4), -1, 1);
  rf_tensor *in3[3] = {tx, tx, tx};
  rf_test_kernel_under_faults(c.node, in3);
  rf_test_kernel_under_faults(t.node, in3);
  rf_tensor_release(tx);
  rf_graph_free(g);
}

/* Every shape op and the gradient ops rf_gradients adds for them survive a
 * JSON round trip (the loader checks and re-infers them) and compute the
 * same values after it. */
static void test_json_round_trip(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(6);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(3, 2, 3, 1));
  rf_output p[2];
  rf_split_v(g, "sp", x, (int64_t[]){1, 2}, 2, 1, p);
  rf_output t = rf_transpose(g, "tr", p[1], (int64_t[]){2, 0, 1}, 3);
  rf_output parts[2] = {rf_squeeze(g, "sq", t, NULL, 0),
                        rf_slice(g, "sl", rf_squeeze(g, NULL, p[0], NULL, 0),
                                 (int64_t[]){0}, (int64_t[]){-1}, 1)};
  parts[1] = rf_expand_dims(g, "ex", parts[1], 0);
  parts[1] = rf_tile(g, "ti", parts[1], (int64_t[]){2, 1}, 2);
  parts[1] = rf_pad(g, "pa", parts[1], (int64_t[]){0, 0, 0, 1}, 4, 2.5);
  rf_output cat = rf_concat(g, "cat", (rf_output[]){parts[0], parts[1]}, 2, -1);
  rf_output y = rf_sum(g, "y", rf_mul(g, NULL, cat, cat), NULL, -1, false);
  rf_output dx;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_graph_ok(g);
  char *json = NULL;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *g2 = NULL;
  assert_ok(rf_graph_from_json(json, strlen(json), &g2));
  rf_string_free(json);
  rf_tensor *tx =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(3, 2, 3, 1), -1, 1);
  rf_tensor *a[2], *b[2];
  rf_output f1[2] = {cat, dx};
  rf_feed feed = {x, tx};
  rf_test_run(g, 1, &feed, 1, f1, 2, a);
  rf_output f2[2] = {{rf_graph_find_node(g2, "cat"), 0},
                     {rf_graph_find_node(g2, rf_node_name(dx.node)), dx.index}};
  rf_feed feed2 = {{rf_graph_find_node(g2, "x"), 0}, tx};
  rf_test_run(g2, 1, &feed2, 1, f2, 2, b);
  for (int i = 0; i < 2; i++) {
    rf_shape sa = rf_tensor_shape(a[i]), sb = rf_tensor_shape(b[i]);
    assert_true(rf_shape_equal(&sa, &sb));
    assert_memory_equal(rf_tensor_data(a[i]), rf_tensor_data(b[i]),
                        (size_t)rf_tensor_num_elements(a[i]) * 8);
    rf_tensor_release(a[i]);
    rf_tensor_release(b[i]);
  }
  rf_tensor_release(tx);
  rf_graph_free(g2);
  rf_graph_free(g);
}

/* num_split past the outputs one attr may give (2^20 - 1): refused by the
 * builder and the graph reader, on a known and an unknown dim (it was cut to
 * 0 outputs: a node without outputs, and a division by 0 in the shape
 * function). */
static void test_split_count_limit(void **state) {
  (void)state;
  const int64_t dims[2] = {4, -1};
  for (int k = 0; k < 2; k++) {
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, dims[k]));
    int n = 1 << 20;
    rf_output *o = malloc(sizeof *o * (size_t)n);
    assert_non_null(o);
    assert_null(rf_split(g, "b", x, n, 0, o));
    assert_null(o[0].node);
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                  "node 'b' (Split): attr 'num_split' is 1048576: at most "
                  "1048575 outputs");
    free(o);
    rf_graph_free(g);
  }
  static const char json[] =
      "{\"format\":\"ringflow-graph\",\"version\":1,\"nodes\":["
      "{\"name\":\"x\",\"op\":\"Placeholder\",\"attrs\":{\"dtype\":{\"type\":"
      "\"type\",\"value\":\"float32\"},\"shape\":{\"type\":\"shape\","
      "\"value\":[4]}}},"
      "{\"name\":\"b\",\"op\":\"Split\",\"inputs\":[\"x:0\"],\"attrs\":{"
      "\"num_split\":{\"type\":\"int\",\"value\":4294967298},\"axis\":{"
      "\"type\":\"int\",\"value\":0}}}]}";
  rf_graph *h = NULL;
  rf_status *st = rf_graph_from_json(json, strlen(json), &h);
  assert_null(h);
  assert_status(st, RF_INVALID_ARGUMENT, "attr 'num_split' is 4294967298");
}

/* A new axis (ExpandDims, OneHot) out of range is named against the
 * input's rank: it was "axis 3 is out of range for rank 3" of a rank-2
 * input. */
static void test_new_axis_names_the_input_rank(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    rf_graph *g = rf_graph_new();
    rf_output x =
        rf_placeholder(g, "x", k ? RF_INT32 : RF_FLOAT32, rf_shape_of(2, 2, 3));
    rf_output y = k ? rf_one_hot(g, "e", x, 4, 1.0, 0.0, 3, RF_FLOAT32)
                    : rf_expand_dims(g, "e", x, -4);
    assert_null(y.node);
    char want[160];
    snprintf(want, sizeof want,
             "node 'e' (%s): axis %d is out of range for a new axis of a "
             "rank-2 input (must be in [-3, 2])",
             k ? "OneHot" : "ExpandDims", k ? 3 : -4);
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, want);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_count_limit),
      cmocka_unit_test(test_new_axis_names_the_input_rank),
      cmocka_unit_test(test_values_every_dtype),
      cmocka_unit_test(test_values_unknown_shapes),
      cmocka_unit_test(test_squeeze_all),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_kernel_faults),
      cmocka_unit_test(test_json_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
