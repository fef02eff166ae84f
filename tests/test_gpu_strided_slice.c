/* tests/test_gpu_strided_slice.c - StridedSlice and its gradient op
 * _StridedSliceGrad on gpu:0 against the CPU kernels: random shapes (size-0
 * and size-1 dims), begin/end (negative, past the ends), strides (negative,
 * larger than the dim) and masks, every dtype, exact. Skips without a GPU
 * (tests/gpu_compare.h). */
#include "gpu_compare.h"

/* Small enough for a case's argument (GC_ARG bytes). */
typedef struct ss_arg {
  int8_t n, grad;
  int8_t begin[4], end[4], strides[4];
  uint8_t begin_mask, end_mask, shrink;
} ss_arg;

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const ss_arg *a = varg;
  int64_t b[4], e[4], s[4];
  for (int i = 0; i < a->n; i++)
    b[i] = a->begin[i], e[i] = a->end[i], s[i] = a->strides[i];
  if (!a->grad) {
    out[0] = rf_strided_slice(g, NULL, in[0], b, e, s, a->n, a->begin_mask,
                              a->end_mask, a->shrink);
    return 1;
  }
  /* _StridedSliceGrad(dy = in[1], like = in[0]) */
  rf_node_builder *nb = rf_node_builder_new(g, "_StridedSliceGrad", NULL);
  rf_node_builder_input(nb, in[1]);
  rf_node_builder_input(nb, in[0]);
  rf_node_builder_attr_int_list(nb, "begin", b, a->n);
  rf_node_builder_attr_int_list(nb, "end", e, a->n);
  rf_node_builder_attr_int_list(nb, "strides", s, a->n);
  rf_node_builder_attr_int(nb, "begin_mask", a->begin_mask);
  rf_node_builder_attr_int(nb, "end_mask", a->end_mask);
  rf_node_builder_attr_int(nb, "shrink_axis_mask", a->shrink);
  rf_node *node = NULL;
  assert_ok(rf_node_builder_finish(nb, &node));
  out[0] = (rf_output){node, 0};
  return 1;
}

static int64_t rand_in(uint64_t *rng, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_test_rand(rng) % (uint64_t)(hi - lo + 1));
}

/* The slice's shape, from a graph that infers it. */
static rf_shape sliced_shape(rf_shape xs, const ss_arg *a) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  ss_arg fwd = *a;
  fwd.grad = 0;
  rf_output y;
  build(g, &x, &fwd, &y);
  assert_graph_ok(g);
  rf_shape s = rf_output_shape(y);
  rf_graph_free(g);
  return s;
}

static void add_cases(gc_set *s, uint64_t *rng, rf_dtype dt) {
  for (int k = 0; k < 6; k++) {
    rf_shape xs = rf_shape_scalar();
    xs.rank = (int)rand_in(rng, 1, 4);
    for (int i = 0; i < xs.rank; i++) {
      int64_t r = rand_in(rng, 0, 9);
      xs.dims[i] = r == 0 ? 0 : r < 3 ? 1 : r + 3;
    }
    ss_arg a = {.n = (int8_t)rand_in(rng, 0, xs.rank), .grad = k % 2};
    for (int i = 0; i < a.n; i++) {
      int64_t d = xs.dims[i];
      a.begin[i] = (int8_t)rand_in(rng, -d - 2, d + 2);
      a.end[i] = (int8_t)rand_in(rng, -d - 2, d + 2);
      a.strides[i] =
          (int8_t)(rand_in(rng, 1, 3) * (rf_test_rand(rng) & 1 ? -1 : 1));
      if (rf_test_rand(rng) % 6 == 0)
        a.strides[i] = (int8_t)(a.strides[i] * (d + 2));
      if (rf_test_rand(rng) % 4 == 0) a.begin_mask |= (uint8_t)(1 << i);
      if (rf_test_rand(rng) % 4 == 0) a.end_mask |= (uint8_t)(1 << i);
      if (d > 0 && rf_test_rand(rng) % 5 == 0) {
        a.shrink |= (uint8_t)(1 << i);
        a.strides[i] = 1;
        a.begin[i] = (int8_t)rand_in(rng, -d, d - 1);
      }
    }
    rf_tensor *in[2] = {gc_random(rng, dt, xs, -4, 4), NULL};
    char label[64];
    snprintf(label, sizeof label, "%s %d %s",
             a.grad ? "_StridedSliceGrad" : "StridedSlice", k,
             rf_dtype_name(dt));
    if (a.grad) in[1] = gc_random(rng, dt, sliced_shape(xs, &a), -4, 4);
    gc_add(s, label, build, &a, sizeof a, 0, a.grad ? 2 : 1, in);
  }
}

static void test_strided_slice(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(81);
  gc_set *s = gc_new();
  for (int d = 0; d < GC_COUNT(gc_all); d++)
    for (int rep = 0; rep < 4; rep++) add_cases(s, &rng, gc_all[d]);
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strided_slice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
