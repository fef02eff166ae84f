/* tests/test_gpu_shape_ops.c - the GPU kernels of the shape ops against the
 * CPU kernels (tests/gpu_compare.h): Transpose, Concat, Split, Slice,
 * ExpandDims, Squeeze, Pad, Tile for every dtype, and the gradient ops
 * _TileGrad (every numeric dtype), _PadTo, _SliceTo, _SplitLike, on random
 * inputs with size-1 dims and empty tensors; results must agree exactly
 * (copies) or within the dtype's tolerance (_TileGrad's sums). Skips without
 * a GPU; RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in. */
#include "gpu_compare.h"

enum {
  TRANSPOSE,
  CONCAT,
  SPLIT,
  SLICE,
  EXPAND_SQUEEZE,
  PAD,
  TILE,
  TILE_GRAD,
  PAD_TO,
  SLICE_TO,
  SPLIT_LIKE
};

/* Small enough for a case's argument (GC_ARG bytes): ranks up to 4. */
typedef struct op_arg {
  int op, n;
  int32_t a[8], b[4];
} op_arg;

static rf_output internal(rf_graph *g, const char *op, const rf_output *in,
                          int nin, const char *attr, const int64_t *v, int n,
                          int64_t axis, rf_node **node) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  rf_node_builder_input(b, in[0]);
  if (nin == 3)
    rf_node_builder_input_list(b, in + 1, 2);
  else
    rf_node_builder_input(b, in[1]);
  if (attr)
    rf_node_builder_attr_int_list(b, attr, v, n);
  else
    rf_node_builder_attr_int(b, "axis", axis);
  assert_ok(rf_node_builder_finish(b, node));
  return (rf_output){*node, 0};
}

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const op_arg *arg = varg;
  struct {
    int op, n;
    int64_t a[8], b[4];
  } w = {arg->op, arg->n, {0}, {0}}, *a = &w;
  for (int i = 0; i < 8; i++) w.a[i] = arg->a[i];
  for (int i = 0; i < 4; i++) w.b[i] = arg->b[i];
  rf_node *node;
  switch (a->op) {
    case TRANSPOSE: out[0] = rf_transpose(g, NULL, in[0], a->a, a->n); return 1;
    case CONCAT: out[0] = rf_concat(g, NULL, in, 3, a->a[0]); return 1;
    case SPLIT: rf_split_v(g, NULL, in[0], a->a, 3, a->b[0], out); return 3;
    case SLICE: out[0] = rf_slice(g, NULL, in[0], a->a, a->b, a->n); return 1;
    case EXPAND_SQUEEZE:
      out[0] = rf_expand_dims(g, NULL, in[0], a->a[0]);
      out[1] = rf_squeeze(g, NULL, out[0], NULL, 0);
      return 2;
    case PAD: out[0] = rf_pad(g, NULL, in[0], a->a, 2 * a->n, -3); return 1;
    case TILE: out[0] = rf_tile(g, NULL, in[0], a->a, a->n); return 1;
    case TILE_GRAD:
      out[0] =
          internal(g, "_TileGrad", in, 2, "multiples", a->a, a->n, 0, &node);
      return 1;
    case PAD_TO:
      out[0] = internal(g, "_PadTo", in, 2, "begin", a->a, a->n, 0, &node);
      return 1;
    case SLICE_TO:
      out[0] = internal(g, "_SliceTo", in, 2, "begin", a->a, a->n, 0, &node);
      return 1;
    default:
      internal(g, "_SplitLike", in, 3, NULL, NULL, 0, a->b[0], &node);
      out[0] = (rf_output){node, 0};
      out[1] = (rf_output){node, 1};
      return 2;
  }
}

static rf_shape rand_shape(uint64_t *rng, int rank) {
  rf_shape s = rf_shape_scalar();
  s.rank = rank;
  for (int i = 0; i < rank; i++) {
    uint64_t r = rf_test_rand(rng) % 10;
    s.dims[i] = r == 0 ? 0 : r < 3 ? 1 : (int64_t)r + 2;
  }
  return s;
}

static void add(gc_set *s, const char *what, rf_dtype dt, const op_arg *a,
                double tol, int nin, rf_tensor **in) {
  char label[96];
  snprintf(label, sizeof label, "%s %s", what, rf_dtype_name(dt));
  gc_add(s, label, build, a, sizeof *a, tol, nin, in);
}

static void add_cases(gc_set *s, uint64_t *rng, rf_dtype dt, int rank) {
  rf_shape xs = rand_shape(rng, rank);
  op_arg a = {.n = rank};
  rf_tensor *in[3];
#define X() gc_random(rng, dt, xs, -4, 4)
  a.op = TRANSPOSE;
  for (int i = 0; i < rank; i++) a.a[i] = rank - 1 - i;
  if (rank > 2) /* a rotation: no dim stays */
    for (int i = 0; i < rank; i++) a.a[i] = (i + 1) % rank;
  in[0] = X();
  add(s, "Transpose", dt, &a, 0, 1, in);

  a.op = CONCAT;
  a.a[0] = (int64_t)(rf_test_rand(rng) % (uint64_t)rank);
  for (int k = 0; k < 3; k++) {
    rf_shape ps = xs;
    ps.dims[a.a[0]] = (int64_t)(rf_test_rand(rng) % 5);
    in[k] = gc_random(rng, dt, ps, -4, 4);
  }
  add(s, "Concat", dt, &a, 0, 3, in);

  a.op = SPLIT;
  a.b[0] = rank - 1;
  rf_shape ss = xs;
  ss.dims[rank - 1] = 7;
  a.a[0] = 2, a.a[1] = -1, a.a[2] = 0;
  in[0] = gc_random(rng, dt, ss, -4, 4);
  add(s, "Split", dt, &a, 0, 1, in);

  a.op = SLICE;
  for (int i = 0; i < rank; i++) {
    a.a[i] = xs.dims[i] / 2;
    a.b[i] = i % 2 ? -1 : (xs.dims[i] - a.a[i]) / 2;
  }
  in[0] = X();
  add(s, "Slice", dt, &a, 0, 1, in);

  a.op = EXPAND_SQUEEZE;
  a.a[0] = -1;
  in[0] = X();
  add(s, "ExpandDims+Squeeze", dt, &a, 0, 1, in);

  a.op = PAD;
  for (int i = 0; i < 2 * rank; i++) a.a[i] = (int64_t)(rf_test_rand(rng) % 3);
  in[0] = X();
  add(s, "Pad", dt, &a, 0, 1, in);

  a.op = TILE;
  for (int i = 0; i < rank; i++) a.a[i] = (int64_t)(rf_test_rand(rng) % 3);
  in[0] = X();
  add(s, "Tile", dt, &a, 0, 1, in);

  rf_shape big = xs;
  for (int i = 0; i < rank; i++) big.dims[i] += i + 1;
  a.op = PAD_TO; /* x at begin inside zeros shaped like `big` */
  for (int i = 0; i < rank; i++)
    a.a[i] = (int64_t)(rf_test_rand(rng) % (uint64_t)(i + 2));
  in[0] = X();
  in[1] = gc_random(rng, dt, big, -4, 4);
  add(s, "_PadTo", dt, &a, 0, 2, in);
  a.op = SLICE_TO;
  in[0] = gc_random(rng, dt, big, -4, 4);
  in[1] = X();
  add(s, "_SliceTo", dt, &a, 0, 2, in);

  a.op = SPLIT_LIKE;
  a.b[0] = 0;
  rf_shape l0 = xs, l1 = xs, v = xs;
  l0.dims[0] = 2, l1.dims[0] = 3, v.dims[0] = 5;
  in[0] = gc_random(rng, dt, v, -4, 4);
  in[1] = gc_random(rng, dt, l0, -4, 4);
  in[2] = gc_random(rng, dt, l1, -4, 4);
  add(s, "_SplitLike", dt, &a, 0, 3, in);

  if (dt != RF_BOOL) {
    a.op = TILE_GRAD;
    rf_shape dys = xs;
    for (int i = 0; i < rank; i++) {
      a.a[i] = (int64_t)(rf_test_rand(rng) % 4);
      dys.dims[i] *= a.a[i];
    }
    in[0] = gc_random(rng, dt, dys, -4, 4);
    in[1] = X();
    add(s, "_TileGrad", dt, &a, -1, 2, in);
  }
#undef X
}

static void test_shape_ops(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(71);
  gc_set *s = gc_new();
  for (int d = 0; d < GC_COUNT(gc_all); d++)
    for (int rank = 1; rank <= 4; rank++) add_cases(s, &rng, gc_all[d], rank);
  gc_run(s);
}

/* One large case: the grid-stride loops and 64-bit index math past one
 * block per element. */
static void test_large(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(72);
  gc_set *s = gc_new();
  op_arg a = {.op = TRANSPOSE, .n = 3, .a = {2, 0, 1}};
  rf_tensor *in[1] = {
      gc_random(&rng, RF_FLOAT32, rf_shape_of(3, 67, 129, 65), -1, 1)};
  gc_add(s, "Transpose large", build, &a, sizeof a, 0, 1, in);
  op_arg t = {.op = TILE, .n = 2, .a = {300, 3}};
  in[0] = gc_random(&rng, RF_INT64, rf_shape_of(2, 97, 33), -9, 9);
  gc_add(s, "Tile large", build, &t, sizeof t, 0, 1, in);
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_ops),
      cmocka_unit_test(test_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
