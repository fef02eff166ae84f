/* tests/test_gpu_batch_matmul.c - BatchMatMul's cuBLAS kernel against the
 * CPU's OpenBLAS one (tests/gpu_compare.h): the float dtypes (and the
 * integer kernels of both for int32 and int64, exact), every
 * adj_x/adj_y, batches that take the strided-batched call (equal batches,
 * one side broadcast whole) and the per-batch loop (both sides
 * broadcasting), empty and k = 0 cases. Skips without a GPU;
 * RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in. */
#include "gpu_compare.h"

typedef struct adj {
  bool x, y;
} adj;

static int build(rf_graph *g, const rf_output *in, const void *arg,
                 rf_output *out) {
  const adj *a = arg;
  out[0] = rf_batch_matmul(g, NULL, in[0], in[1], a->x, a->y);
  return 1;
}

static rf_shape swap_last(rf_shape s, bool on) {
  if (on) {
    int64_t t = s.dims[s.rank - 1];
    s.dims[s.rank - 1] = s.dims[s.rank - 2];
    s.dims[s.rank - 2] = t;
  }
  return s;
}

static void test_batch_matmul(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(91);
  gc_set *s = gc_new();
  static const rf_shape pairs[][2] = {
      {{3, {4, 17, 33}}, {3, {4, 33, 9}}},  /* strided */
      {{3, {5, 8, 16}}, {2, {16, 12}}},     /* y whole for all */
      {{2, {7, 3}}, {4, {2, 3, 3, 5}}},     /* x whole for all */
      {{4, {2, 1, 6, 4}}, {3, {3, 4, 2}}},  /* both broadcast: loop */
      {{3, {0, 3, 4}}, {3, {1, 4, 2}}},     /* empty batch */
      {{3, {2, 3, 0}}, {3, {2, 0, 5}}},     /* k = 0 */
      {{3, {3, 64, 96}}, {3, {3, 96, 80}}}, /* bigger */
  };
  /* the float dtypes, then int32 and int64 over their whole range (the
   * sums wrap around; exact) */
  static const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                 RF_FLOAT64, RF_INT32,    RF_INT64};
  char label[96];
  for (int d = 0; d < GC_COUNT(dts); d++)
    for (int p = 0; p < GC_COUNT(pairs); p++)
      for (int t = 0; t < 4; t++) {
        adj a = {(t & 1) != 0, (t & 2) != 0};
        rf_tensor *in[2] = {
            gc_random(&rng, dts[d], swap_last(pairs[p][0], a.x), -1, 1),
            gc_random(&rng, dts[d], swap_last(pairs[p][1], a.y), -1, 1)};
        snprintf(label, sizeof label, "BatchMatMul %d adj %d%d %s", p, a.x, a.y,
                 rf_dtype_name(dts[d]));
        gc_add(s, label, build, &a, sizeof a, -1, 2, in);
      }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_matmul),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
