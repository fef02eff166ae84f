/* tests/test_host_memory.c - host-memory arguments of GPU kernels and the
 * other GPU rules that need no GPU: placement of small int32 producers on
 * cpu:0, partition's host_memory _Recv, the post-partition check, GPU device
 * options of a session without a GPU, output allocation on GPU devices, and
 * the public accessors refusing device tensors. The compile stages run on a
 * hand-made device list (cpu:0, cpu:1, gpu:0, gpu:1) with test ops whose GPU
 * kernel defs declare host-memory arguments (their kernels never run). */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "passes/pass_registry.h"
#include "runtime_test_ops.h"

/* HmReshape(x: T, shape: int32) -> y: T: shape in host memory on a GPU.
 * HmShape(x: T) -> int32: outputs host memory on a GPU (like Shape).
 * HmUse(x: int32) -> int32: wants its input in device memory. */
static const rf__op_spec hm_specs[] = {
    {.name = "HmReshape",
     .inputs = "x: T, shape: int32",
     .outputs = "y: T",
     .attrs = "T: type"},
    {.name = "HmShape",
     .inputs = "x: T",
     .outputs = "s: int32",
     .attrs = "T: type"},
    {.name = "HmUse", .inputs = "x: int32", .outputs = "y: int32"},
};

static rf_status *never(rf__kernel_ctx *ctx) {
  return rf__kernel_error(ctx, RF_INTERNAL, "not run in this test");
}

static const rf__kernel_def hm_kernels[] = {
    {.op = "HmReshape", .device_type = RF_DEVICE_CPU, .compute = never},
    {.op = "HmReshape",
     .device_type = RF_DEVICE_GPU,
     .compute = never,
     .host_memory_inputs = 1u << 1},
    {.op = "HmShape", .device_type = RF_DEVICE_CPU, .compute = never},
    {.op = "HmShape",
     .device_type = RF_DEVICE_GPU,
     .compute = never,
     .host_memory_outputs = 1u},
    {.op = "HmUse", .device_type = RF_DEVICE_CPU, .compute = never},
    {.op = "HmUse", .device_type = RF_DEVICE_GPU, .compute = never},
    /* TestConst on GPUs (device memory output), when not registered yet. */
    {.op = "TestConst", .device_type = RF_DEVICE_GPU, .compute = rt_const},
    {.op = "TestSink", .device_type = RF_DEVICE_GPU, .compute = rt_nothing},
};

static int setup(void **state) {
  static int done;
  rt_register();
  if (done) return 0;
  done = 1;
  for (size_t i = 0; i < sizeof hm_specs / sizeof hm_specs[0]; i++)
    assert_ok(rf__op_register(&hm_specs[i]));
  for (size_t i = 0; i < sizeof hm_kernels / sizeof hm_kernels[0]; i++)
    if (!rf__kernel_find(hm_kernels[i].op, hm_kernels[i].device_type))
      assert_ok(rf__kernel_register(&hm_kernels[i]));
  return 0;
}

/* cpu:0, cpu:1, gpu:0, gpu:1 (n = 4) or just the CPUs (n = 2). */
typedef struct devs {
  rf__device d[4];
  rf_session_options opts;
} devs;

static void devs_init(devs *v) {
  rf__device_name names[4] = {{-1, RF_DEVICE_CPU, 0},
                              {-1, RF_DEVICE_CPU, 1},
                              {-1, RF_DEVICE_GPU, 0},
                              {-1, RF_DEVICE_GPU, 1}};
  for (int i = 0; i < 4; i++)
    rf__device_init(&v->d[i], i, &names[i], rf_default_allocator(), NULL);
  rf_session_options_init(&v->opts);
}

static void devs_fini(devs *v) {
  for (int i = 0; i < 4; i++) rf__device_destroy(&v->d[i]);
}

static rf_node *node(rf_graph *g, const char *op, const char *name,
                     const char *dev, const rf_output *in, int nin) {
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  if (dev) rf_node_builder_device(b, dev);
  for (int i = 0; i < nin; i++) rf_node_builder_input(b, in[i]);
  return rt_finish(b);
}

/* HmReshape(x, shape) named name on dev. */
static rf_node *hm_reshape(rf_graph *g, const char *name, const char *dev,
                           rf_output x, rf_output shape) {
  rf_output in[2] = {x, shape};
  return node(g, "HmReshape", name, dev, in, 2);
}

static rf_output int_const(rf_graph *g, const char *name, const char *dev) {
  rf_node_builder *b = rf_node_builder_new(g, "TestConst", name);
  if (dev) rf_node_builder_device(b, dev);
  rf_node_builder_attr_dtype(b, "T", RF_INT32);
  rf_node_builder_attr_shape(b, "shape", rf_shape_of(1, (int64_t)2));
  return (rf_output){rt_finish(b), 0};
}

/* Placement and the host-memory rule on a copy-free graph. */
static void place(rf_graph *g, devs *v, int n) {
  rf__pass_ctx ctx = {
      .graph = g, .devices = v->d, .num_devices = n, .num_tasks = 1};
  assert_ok(rf__place(&ctx));
  assert_ok(rf__place_host_memory(&ctx));
}

static const char *dev_of(const devs *v, const rf_node *n) {
  return v->d[n->assigned_device].canonical;
}

static void test_int32_host_producers_move_to_cpu0(void **state) {
  devs v;
  devs_init(&v);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_const_node(g, "x", "gpu:1", 1, rf_shape_of(1, 4));
  /* Only a host-memory consumer: moves, although it asked for gpu:1. */
  rf_output s1 = int_const(g, "s1", "gpu:1");
  hm_reshape(g, "r1", "gpu:1", x, s1);
  /* A host-memory consumer and a device-memory one: stays. */
  rf_output s2 = int_const(g, "s2", "gpu:1");
  hm_reshape(g, "r2", "gpu:1", x, s2);
  node(g, "HmUse", "u2", "gpu:1", &s2, 1);
  /* A host-memory consumer plus a CPU consumer: moves. */
  rf_output s3 = int_const(g, "s3", "gpu:0");
  hm_reshape(g, "r3", "gpu:1", x, s3);
  node(g, "TestSink", "k3", "cpu:1", &s3, 1);
  /* Already host memory on the GPU (Shape-like): stays. */
  rf_output s4 = {node(g, "HmShape", "s4", "gpu:1", &x, 1), 0};
  hm_reshape(g, "r4", "gpu:1", x, s4);
  /* Not int32: stays even when consumed only on the host. */
  rf_output f = rt_const_node(g, "f", "gpu:1", 2, rf_shape_scalar());
  node(g, "TestSink", "k5", "cpu:0", &f, 1);
  /* Only CPU consumers (no host-memory input of a GPU kernel): stays. */
  rf_output s6 = int_const(g, "s6", "gpu:0");
  node(g, "TestSink", "k6", "cpu:0", &s6, 1);
  assert_graph_ok(g);
  place(g, &v, 4);
  assert_string_equal(dev_of(&v, s1.node), "cpu:0");
  assert_string_equal(dev_of(&v, s2.node), "gpu:1");
  assert_string_equal(dev_of(&v, s3.node), "cpu:0");
  assert_string_equal(dev_of(&v, s4.node), "gpu:1");
  assert_string_equal(dev_of(&v, f.node), "gpu:1");
  assert_string_equal(dev_of(&v, s6.node), "gpu:0");
  assert_string_equal(dev_of(&v, x.node), "gpu:1");
  rf_graph_free(g);
  devs_fini(&v);
}

static void test_rule_needs_gpu_devices_and_cpu0(void **state) {
  devs v;
  devs_init(&v);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_const_node(g, "x", "cpu:1", 1, rf_shape_of(1, 4));
  rf_output s = int_const(g, "s", "cpu:1");
  hm_reshape(g, "r", "cpu:1", x, s);
  place(g, &v, 2); /* CPU devices only: nothing to do */
  assert_string_equal(dev_of(&v, s.node), "cpu:1");
  rf_graph_free(g);
  devs_fini(&v);
}

/* The _Recv node feeding input `in` of n. */
static const rf_node *recv_of(const rf_node *n, int in) {
  const rf_node *r = n->data_in[in]->src;
  assert_string_equal(r->op->name, "_Recv");
  return r;
}

static bool host_attr(const rf_node *recv) {
  bool h = false;
  if (rf__attrs_find(&recv->attrs, "host_memory"))
    assert_ok(rf__attrs_get_bool(&recv->attrs, "host_memory", &h));
  return h;
}

static const char *key_of(const rf_node *n) {
  const char *k = NULL;
  assert_ok(rf__attrs_get_string(&n->attrs, "key", &k));
  return k;
}

static void test_partition_hands_host_memory_over(void **state) {
  devs v;
  devs_init(&v);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_const_node(g, "x", "gpu:0", 1, rf_shape_of(1, 4));
  /* s on cpu:1 feeds a host-memory input on gpu:1 and a device-memory input
   * on gpu:1: two pairs, one with host_memory. */
  rf_output s = int_const(g, "s", "cpu:1");
  rf_node *r = hm_reshape(g, "r", "gpu:1", x, s);
  rf_node *u = node(g, "HmUse", "u", "gpu:1", &s, 1);
  /* A Shape-like host output of gpu:0 feeding gpu:1's host input. */
  rf_output hs = {node(g, "HmShape", "hs", "gpu:0", &x, 1), 0};
  rf_node *r2 = hm_reshape(g, "r2", "gpu:1", x, hs);
  assert_graph_ok(g);
  place(g, &v, 4);
  rf__pass_ctx ctx = {
      .graph = g, .devices = v.d, .num_devices = 4, .num_tasks = 1};
  assert_ok(rf__partition(&ctx));
  assert_ok(rf__check_host_memory(&ctx));
  const rf_node *rh = recv_of(r, 1), *rd = recv_of(u, 0);
  assert_ptr_not_equal(rh, rd);
  assert_true(host_attr(rh));
  assert_false(host_attr(rd));
  assert_non_null(strstr(key_of(rh), ":0/host;gpu:1"));
  assert_null(strstr(key_of(rd), "/host"));
  assert_true(host_attr(recv_of(r2, 1)));
  /* The data input of r crosses gpu:0 -> gpu:1 in device memory. */
  assert_false(host_attr(recv_of(r, 0)));
  assert_ptr_equal(recv_of(r, 0), recv_of(r2, 0));
  rf_graph_free(g);
  devs_fini(&v);
}

static void test_device_memory_into_a_host_input_is_an_error(void **state) {
  devs v;
  devs_init(&v);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_const_node(g, "x", "gpu:0", 1, rf_shape_of(1, 4));
  rf_output s = int_const(g, "s", "gpu:0");
  rf_output d = {node(g, "HmUse", "d", "gpu:0", &s, 1), 0};
  hm_reshape(g, "r", "gpu:0", x, d);
  assert_graph_ok(g);
  place(g, &v, 4);
  /* d (int32, with a CPU kernel) moved to the host; pin it back to the GPU
   * to get what a producer that cannot move leads to. */
  assert_string_equal(dev_of(&v, d.node), "cpu:0");
  d.node->assigned_device = 2;
  rf__pass_ctx ctx = {
      .graph = g, .devices = v.d, .num_devices = 4, .num_tasks = 1};
  assert_ok(rf__partition(&ctx));
  assert_status(rf__check_host_memory(&ctx), RF_INVALID_ARGUMENT,
                "node 'r' (HmReshape) on gpu:0 reads input 1 from host "
                "memory, but node 'd' (HmUse) produces it in device memory "
                "on gpu:0");
  rf_graph_free(g);
  devs_fini(&v);
}

/* Without a GPU (or CUDA), asking for GPU devices fails cleanly. */
static void test_gpu_options(void **state) {
  rf_graph *g = rf_graph_new();
  rf_session_options o;
  rf_session_options_init(&o);
  assert_int_equal(o.num_gpu_devices, 0);
  rf_session *s = NULL;
  o.num_gpu_devices = -1;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "num_gpu_devices must be in 0..64, got -1");
  o.num_gpu_devices = 65;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "num_gpu_devices must be in 0..64, got 65");
  o.num_gpu_devices = 2;
  rf_status *st = rf_session_new(g, &o, &s);
  if (st) {
#ifdef RF_HAVE_CUDA
    assert_status(st, RF_FAILED_PRECONDITION,
                  "session options: num_gpu_devices is 2: no GPU: "
                  "cudaGetDeviceCount returned");
#else
    assert_status(st, RF_FAILED_PRECONDITION,
                  "session options: num_gpu_devices is 2: no GPU: built "
                  "without CUDA");
#endif
  } else { /* a GPU machine: the devices follow the CPU devices */
    rf_session_free(s);
  }
  /* A request for a GPU the session does not have names the devices,
   * when the session is made. */
  rt_const_node(g, "c", "gpu:0", 1, rf_shape_scalar());
  rf_session_options_init(&o);
  s = NULL;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "node 'c' (TestConst) requests device gpu:0, but the "
                "session has cpu:0 (1 device)");
  assert_null(s);
  rf_graph_free(g);
}

/* GPU devices allocate device tensors, host memory where the kernel says. */
static void test_alloc_output_on_a_gpu_device(void **state) {
  devs v;
  devs_init(&v);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_const_node(g, "x", NULL, 1, rf_shape_of(1, 3));
  rf_node *n = node(g, "HmShape", "hs", NULL, &x, 1);
  rf_tensor *outs[1] = {NULL};
  rf__kernel_ctx ctx = {.node = n,
                        .num_outputs = 1,
                        .outputs = outs,
                        .device = &v.d[2],
                        .def = rf__kernel_find("HmShape", RF_DEVICE_GPU)};
  rf_shape sh = rf_shape_of(1, 3);
  rf_tensor *t = NULL;
  assert_ok(rf__kernel_alloc_output(&ctx, 0, RF_INT32, &sh, &t));
  assert_int_equal(t->on_gpu, 0); /* host_memory_outputs bit 0 */
  ctx.def = rf__kernel_find("HmUse", RF_DEVICE_GPU);
  assert_ok(rf__kernel_alloc_output(&ctx, 0, RF_INT32, &sh, &t));
  assert_int_equal(t->on_gpu, 1); /* (the fake device's host allocator) */
  t->on_gpu = 0;
  ctx.device = &v.d[0];
  assert_ok(rf__kernel_alloc_output(&ctx, 0, RF_INT32, &sh, &t));
  assert_int_equal(t->on_gpu, 0);
  rf_tensor_release(outs[0]);
  rf_graph_free(g);
  devs_fini(&v);
}

/* The public accessors never expose device memory. */
static void test_accessors_refuse_device_tensors(void **state) {
  rf_shape sh = rf_shape_of(1, 4);
  rf_tensor *t = NULL;
  assert_ok(rf__tensor_new_device(RF_FLOAT32, &sh, rf_default_allocator(), &t));
  assert_int_equal(t->on_gpu, 1);
  assert_null(rf_tensor_data(t));
  assert_null(rf_tensor_mutable_data(t));
  assert_true(rf_tensor_get(t, 0) == 0.0);
  rf_tensor_set(t, 0, 5.0); /* ignored: would write device memory */
  rf_tensor *v = NULL;
  rf_shape sh2 = rf_shape_of(2, 2, 2);
  assert_ok(rf__tensor_new_view(t, &sh2, &v));
  assert_int_equal(v->on_gpu, 1);
  assert_null(rf_tensor_data(v));
  rf_tensor_release(v);
  /* The metadata stays readable. */
  assert_int_equal(rf_tensor_num_elements(t), 4);
  assert_int_equal(rf_tensor_nbytes(t), 16);
  t->on_gpu = 0;
  assert_non_null(rf_tensor_data(t));
  rf_tensor_release(t);
  assert_status(rf__tensor_new_device(RF_FLOAT32, &sh, NULL, &t),
                RF_INVALID_ARGUMENT, "NULL allocator");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_int32_host_producers_move_to_cpu0, setup),
      cmocka_unit_test_setup(test_rule_needs_gpu_devices_and_cpu0, setup),
      cmocka_unit_test_setup(test_partition_hands_host_memory_over, setup),
      cmocka_unit_test_setup(test_device_memory_into_a_host_input_is_an_error,
                             setup),
      cmocka_unit_test_setup(test_gpu_options, setup),
      cmocka_unit_test_setup(test_alloc_output_on_a_gpu_device, setup),
      cmocka_unit_test_setup(test_accessors_refuse_device_tensors, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
