/* tests/test_bucketing.c - all-reduces fused into buckets at compile time
 * (rf_session_options.collective_bucket_bytes) and narrowed for the wire
 * (collective_comm_dtype, rf_all_reduce_set_comm_dtype), through the public
 * API: random graphs of dependent and independent collectives on mixed
 * device sets, every dtype, fetched bit for bit against the same graph
 * unfused; the number of collectives left after the rewrite (from
 * rf_graph_lower) against what the bucket size implies; gradients; the wire
 * dtype against the same casts built by hand; the log line saying which
 * copies happened; and the errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log_collector.h"
#include "testutil.h"

#include <ringflow/collectives.h>
#include <ringflow/debug.h>
#include <ringflow/gradients.h>
#include <ringflow/log.h>

#define NDEV 4
#define MAXC 24
#define MAXF (MAXC * NDEV)

static uint64_t rng;
/* "cpu", or "gpu" for the GPU variant of the random graphs */
static const char *dev_type = "cpu";

static int setup(void **state) {
  (void)state;
  if (!rng) rng = rf_test_rng(18);
  return 0;
}

static rf_session_options options(int64_t bucket_bytes) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = NDEV;
  if (strcmp(dev_type, "gpu") == 0) o.num_gpu_devices = NDEV;
  o.num_threads = 2;
  o.collective_timeout_ms = 30000; /* a fusing mistake would hang */
  o.collective_bucket_bytes = bucket_bytes;
  return o;
}

/* A graph, its feeds and the outputs to fetch. */
typedef struct case_graph {
  rf_graph *g;
  rf_feed feeds[MAXF];
  int nfeeds;
  rf_output fetches[MAXF];
  int nfetches;
} case_graph;

static void case_free(case_graph *c) {
  for (int i = 0; i < c->nfeeds; i++) rf_tensor_release(c->feeds[i].value);
  rf_graph_free(c->g);
}

static rf_output feed(case_graph *c, rf_dtype t, rf_shape s, int d) {
  char dev[16];
  snprintf(dev, sizeof dev, "%s:%d", dev_type, d);
  assert_ok(rf_graph_push_device(c->g, dev));
  rf_output x = rf_placeholder(c->g, NULL, t, s);
  rf_graph_pop_device(c->g);
  bool uns = t == RF_UINT8;
  bool small = t == RF_INT8 || t == RF_FLOAT16 || t == RF_BFLOAT16;
  c->feeds[c->nfeeds++] = (rf_feed){x, rf_test_random_tensor(&rng, t, s,
                                                             uns     ? 0
                                                             : small ? -8
                                                                     : -50,
                                                             small ? 8 : 50)};
  return x;
}

/* a + b on device d. */
static rf_output add_on(case_graph *c, int d, rf_output a, rf_output b) {
  char dev[16];
  snprintf(dev, sizeof dev, "%s:%d", dev_type, d);
  assert_ok(rf_graph_push_device(c->g, dev));
  rf_output y = rf_add(c->g, NULL, a, b);
  rf_graph_pop_device(c->g);
  return y;
}

/* Runs c with the options and returns the fetched values. */
static void run(case_graph *c, const rf_session_options *o, rf_tensor **out) {
  assert_graph_ok(c->g);
  rf_session *s = NULL;
  assert_ok(rf_session_new(c->g, o, &s));
  assert_ok(rf_session_run(s, c->feeds, c->nfeeds, c->fetches, c->nfetches,
                           NULL, 0, out));
  rf_session_free(s);
}

static void assert_same_bits(rf_tensor **a, rf_tensor **b, int n,
                             const char *what) {
  for (int i = 0; i < n; i++) {
    size_t na = rf_tensor_nbytes(a[i]), nb = rf_tensor_nbytes(b[i]);
    rf_shape sa = rf_tensor_shape(a[i]), sb = rf_tensor_shape(b[i]);
    if (na != nb || !rf_shape_equal(&sa, &sb) ||
        rf_tensor_dtype(a[i]) != rf_tensor_dtype(b[i]) ||
        (na && memcmp(rf_tensor_data(a[i]), rf_tensor_data(b[i]), na) != 0))
      fail_msg("%s: fetch %d differs from the unfused graph's", what, i);
  }
}

/* A fresh collective name (rf_all_reduce_n's generated names clash on a
 * second call: see the report of issue 18). */
static const char *fresh(void) {
  static char buf[32];
  static int k;
  snprintf(buf, sizeof buf, "c%d", k++);
  return buf;
}

static void release_all(rf_tensor **t, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(t[i]);
}

/* The distinct shared names of the AllReduce nodes of g lowered with o:
 * the collectives a step runs. */
static int count_all_reduces(const rf_graph *g, const rf_session_options *o) {
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, o, &low));
  const char *names[4096];
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *nd = rf_graph_node(low, i);
    if (strcmp(rf_node_op(nd), "AllReduce") != 0) continue;
    const char *sn;
    assert_ok(rf_node_attr_string(nd, "shared_name", &sn));
    int k = 0;
    while (k < n && strcmp(names[k], sn) != 0) k++;
    if (k == n) names[n++] = sn;
  }
  rf_graph_free(low);
  return n;
}

/* ---- random graphs, every dtype, bit for bit ---- */

static const rf_dtype dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                  RF_FLOAT64, RF_INT8,     RF_UINT8,
                                  RF_INT32,   RF_INT64};
static const rf_reduction reductions[] = {RF_REDUCE_SUM, RF_REDUCE_MIN,
                                          RF_REDUCE_MAX, RF_REDUCE_PROD};

static rf_shape random_shape(void) {
  static const int64_t counts[] = {0, 1, 3, 17, 250, 1000, 4099};
  int64_t n = counts[rf_test_rand(&rng) % 7];
  if (n % 2 == 0 && n > 0 && rf_test_rand(&rng) % 2)
    return rf_shape_of(2, (int64_t)2, n / 2);
  return rf_shape_of(1, n);
}

/* K collectives of dtype t on random device sets (2..4 of the 4 devices,
 * in order); about a third read an earlier collective's result on the same
 * devices (a path: they must not fuse). */
static int random_case(case_graph *c, rf_dtype t) {
  *c = (case_graph){.g = rf_graph_new()};
  int K = 6 + (int)(rf_test_rand(&rng) % 14);
  rf_output res[MAXC][NDEV];
  int devs[MAXC][NDEV], ndevs[MAXC];
  rf_shape shapes[MAXC];
  for (int k = 0; k < K; k++) {
    int n = 0;
    while (n < 2) { /* a subset of at least two devices, in order */
      n = 0;
      for (int d = 0; d < NDEV; d++)
        if (rf_test_rand(&rng) % 3) devs[k][n++] = d;
    }
    ndevs[k] = n;
    int dep = -1;
    for (int j = 0; j < k && rf_test_rand(&rng) % 3 == 0; j++)
      if (ndevs[j] == n && memcmp(devs[j], devs[k], sizeof(int) * n) == 0)
        dep = j;
    shapes[k] = dep >= 0 ? shapes[dep] : random_shape();
    rf_output in[NDEV];
    for (int r = 0; r < n; r++) {
      in[r] = feed(c, t, shapes[k], devs[k][r]);
      if (dep >= 0)
        in[r] = add_on(c, devs[k][r], in[r], res[dep][r]);
      else if (rf_test_rand(&rng) % 2) /* a kernel that writes in place */
        in[r] = add_on(c, devs[k][r], in[r], in[r]);
    }
    rf_reduction red = reductions[rf_test_rand(&rng) % 4];
    rf_all_reduce_n(c->g, fresh(), in, n, red, res[k]);
    for (int r = 0; r < n; r++) c->fetches[c->nfetches++] = res[k][r];
  }
  return K;
}

static void test_random_graphs_fused_match_unfused_bitwise(void **state) {
  static const int64_t sizes[] = {64, 1024, 4096, 65536, 1 << 20};
  int fused_somewhere = 0;
  for (size_t ti = 0; ti < sizeof dtypes / sizeof *dtypes; ti++) {
    for (int rep = 0; rep < 3; rep++) {
      case_graph c;
      int K = random_case(&c, dtypes[ti]);
      rf_session_options off = options(0);
      rf_session_options on = options(sizes[rf_test_rand(&rng) % 5]);
      assert_int_equal(count_all_reduces(c.g, &off), K);
      int fused = count_all_reduces(c.g, &on);
      assert_true(fused <= K);
      fused_somewhere += fused < K;
      rf_tensor *a[MAXF], *b[MAXF];
      run(&c, &off, a);
      run(&c, &on, b);
      char what[96];
      snprintf(what, sizeof what, "%s, %d collectives, %d after fusing",
               rf_dtype_name(dtypes[ti]), K, fused);
      assert_same_bits(a, b, c.nfetches, what);
      release_all(a, c.nfetches);
      release_all(b, c.nfetches);
      case_free(&c);
    }
  }
  assert_true(fused_somewhere > 0); /* the test exercised fusion */
}

/* The same on 4 virtual GPU devices (one GPU): _BucketPack's copies on the
 * devices' streams, the CUDA-kernel collectives, views of device memory. */
static void test_random_graphs_on_gpus(void **state) {
  rf_test_need_gpu();
  dev_type = "gpu";
  for (size_t ti = 0; ti < sizeof dtypes / sizeof *dtypes; ti++) {
    case_graph c;
    int K = random_case(&c, dtypes[ti]);
    rf_session_options off = options(0), on = options(1 << 20);
    rf_tensor *a[MAXF], *b[MAXF];
    run(&c, &off, a);
    run(&c, &on, b);
    char what[96];
    snprintf(what, sizeof what, "GPU, %s, %d collectives, %d after fusing",
             rf_dtype_name(dtypes[ti]), K, count_all_reduces(c.g, &on));
    assert_same_bits(a, b, c.nfetches, what);
    release_all(a, c.nfetches);
    release_all(b, c.nfetches);
    case_free(&c);
  }
  dev_type = "cpu";
}

/* ---- the rewrite: how many collectives are left ---- */

/* K independent float32 all-reduces of `count` elements on all devices. */
static void independent_case(case_graph *c, int K, int64_t count,
                             rf_reduction red) {
  *c = (case_graph){.g = rf_graph_new()};
  for (int k = 0; k < K; k++) {
    rf_output in[NDEV], out[NDEV];
    for (int d = 0; d < NDEV; d++)
      in[d] = feed(c, RF_FLOAT32, rf_shape_of(1, count), d);
    rf_all_reduce_n(c->g, fresh(), in, NDEV, red, out);
    for (int d = 0; d < NDEV; d++) c->fetches[c->nfetches++] = out[d];
  }
}

static void test_collectives_left_match_the_bucket_size(void **state) {
  case_graph c;
  independent_case(&c, 12, 256, RF_REDUCE_SUM); /* 1 KiB each */
  rf_session_options o = options(0);
  assert_int_equal(count_all_reduces(c.g, &o), 12);
  o.collective_bucket_bytes = 4096; /* 4 per bucket */
  assert_int_equal(count_all_reduces(c.g, &o), 3);
  o.collective_bucket_bytes = 4095; /* 3 per bucket */
  assert_int_equal(count_all_reduces(c.g, &o), 4);
  o.collective_bucket_bytes = 1000; /* smaller than one: none fuse */
  assert_int_equal(count_all_reduces(c.g, &o), 12);
  o.collective_bucket_bytes = 1 << 30;
  assert_int_equal(count_all_reduces(c.g, &o), 1);
  case_free(&c);
  /* 250 floats (1000 bytes) take 1024 in a bucket: slices stay 64-byte
   * aligned, so the views out need no copy. */
  independent_case(&c, 12, 250, RF_REDUCE_SUM);
  o.collective_bucket_bytes = 4096;
  assert_int_equal(count_all_reduces(c.g, &o), 3);
  o.collective_bucket_bytes = 3999;
  assert_int_equal(count_all_reduces(c.g, &o), 4);
  case_free(&c);
  /* One too large for a bucket goes alone and closes the open bucket, so
   * the small ones ready before it meet without waiting for those ready
   * after it (in a backward pass: the last layers' gradients, before the
   * ones the earlier layers still compute): 1 KiB, 16 KiB, 1 KiB, 1 KiB in
   * 4 KiB buckets are three collectives. */
  c = (case_graph){.g = rf_graph_new()};
  static const int64_t counts[] = {256, 4096, 256, 256};
  for (int k = 0; k < 4; k++) {
    rf_output in[NDEV], out[NDEV];
    for (int d = 0; d < NDEV; d++)
      in[d] = feed(&c, RF_FLOAT32, rf_shape_of(1, counts[k]), d);
    rf_all_reduce_n(c.g, fresh(), in, NDEV, RF_REDUCE_SUM, out);
  }
  o.collective_bucket_bytes = 4096;
  assert_int_equal(count_all_reduces(c.g, &o), 3);
  case_free(&c);
}

static void test_dependent_collectives_never_fuse(void **state) {
  case_graph c = {.g = rf_graph_new()};
  rf_output prev[NDEV];
  for (int k = 0; k < 6; k++) { /* a chain: each reads the last result */
    rf_output in[NDEV];
    for (int d = 0; d < NDEV; d++) {
      in[d] = feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)64), d);
      if (k) in[d] = add_on(&c, d, in[d], prev[d]);
    }
    rf_all_reduce_n(c.g, fresh(), in, NDEV, RF_REDUCE_SUM, prev);
  }
  for (int d = 0; d < NDEV; d++) c.fetches[c.nfetches++] = prev[d];
  rf_session_options on = options(1 << 20), off = options(0);
  assert_int_equal(count_all_reduces(c.g, &on), 6);
  rf_tensor *a[NDEV], *b[NDEV];
  run(&c, &off, a);
  run(&c, &on, b);
  assert_same_bits(a, b, c.nfetches, "chain");
  release_all(a, NDEV);
  release_all(b, NDEV);
  case_free(&c);
}

/* A path through another collective (an all-gather, whose participants
 * meet) joins two all-reduces as surely as an edge. */
static void test_path_through_another_collective_keeps_apart(void **state) {
  case_graph c = {.g = rf_graph_new()};
  rf_output in[2], a[2], gathered[2], in2[2], b[2];
  for (int d = 0; d < 2; d++)
    in[d] = feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)8), d);
  rf_all_reduce_n(c.g, "a", in, 2, RF_REDUCE_SUM, a);
  /* device 0's result reaches device 1's b only through the gather */
  rf_output g_in[2] = {a[0],
                       feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)8), 1)};
  rf_all_gather_n(c.g, "g", g_in, 2, gathered);
  for (int d = 0; d < 2; d++)
    in2[d] = feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)16), d);
  in2[1] = add_on(&c, 1, in2[1], gathered[1]);
  rf_all_reduce_n(c.g, "b", in2, 2, RF_REDUCE_SUM, b);
  for (int d = 0; d < 2; d++) {
    c.fetches[c.nfetches++] = a[d];
    c.fetches[c.nfetches++] = b[d];
  }
  rf_session_options on = options(1 << 20), off = options(0);
  assert_int_equal(count_all_reduces(c.g, &on), 2);
  rf_tensor *x[4], *y[4];
  run(&c, &off, x);
  run(&c, &on, y);
  assert_same_bits(x, y, 4, "through an all-gather");
  release_all(x, 4);
  release_all(y, 4);
  case_free(&c);
}

static void test_only_alike_collectives_fuse(void **state) {
  case_graph c = {.g = rf_graph_new()};
  /* on cpu:0,1 twice (fuse), on cpu:1,2 (alone), float64 (alone), max
   * (alone) */
  static const int sets[5][2] = {{0, 1}, {1, 2}, {0, 1}, {0, 1}, {0, 1}};
  for (int k = 0; k < 5; k++) {
    rf_output in[2], out[2];
    rf_dtype t = k == 3 ? RF_FLOAT64 : RF_FLOAT32;
    for (int r = 0; r < 2; r++)
      in[r] = feed(&c, t, rf_shape_of(1, (int64_t)32), sets[k][r]);
    rf_all_reduce_n(c.g, fresh(), in, 2, k == 4 ? RF_REDUCE_MAX : RF_REDUCE_SUM,
                    out);
    for (int r = 0; r < 2; r++) c.fetches[c.nfetches++] = out[r];
  }
  rf_session_options on = options(1 << 20), off = options(0);
  assert_int_equal(count_all_reduces(c.g, &off), 5);
  assert_int_equal(count_all_reduces(c.g, &on), 4);
  rf_tensor *a[10], *b[10];
  run(&c, &off, a);
  run(&c, &on, b);
  assert_same_bits(a, b, 10, "mixed collectives");
  release_all(a, 10);
  release_all(b, 10);
  case_free(&c);
}

/* ---- gradients ---- */

/* Replicas of tanh(tanh(x W1) W2) summed across devices by an all-reduce
 * in the forward pass (its gradient is an all-reduce too); each replica's
 * weight gradients all-reduced. Fused and unfused give the same bits. */
static void test_gradients_of_fused_collectives(void **state) {
  case_graph c = {.g = rf_graph_new()};
  rf_output w1[NDEV], w2[NDEV], h[NDEV], hs[NDEV], loss[NDEV];
  rf_output g1[NDEV], g2[NDEV], s1[NDEV], s2[NDEV];
  for (int d = 0; d < NDEV; d++) {
    rf_output x =
        feed(&c, RF_FLOAT32, rf_shape_of(2, (int64_t)5, (int64_t)7), d);
    w1[d] = feed(&c, RF_FLOAT32, rf_shape_of(2, (int64_t)7, (int64_t)6), d);
    w2[d] = feed(&c, RF_FLOAT32, rf_shape_of(2, (int64_t)6, (int64_t)3), d);
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(c.g, dev));
    h[d] = rf_tanh(c.g, NULL, rf_matmul(c.g, NULL, x, w1[d], false, false));
    rf_graph_pop_device(c.g);
  }
  rf_all_reduce_n(c.g, "h", h, NDEV, RF_REDUCE_SUM, hs);
  for (int d = 0; d < NDEV; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(c.g, dev));
    rf_output y =
        rf_tanh(c.g, NULL, rf_matmul(c.g, NULL, hs[d], w2[d], false, false));
    loss[d] = rf_sum(c.g, NULL, y, NULL, -1, false);
    rf_graph_pop_device(c.g);
  }
  for (int d = 0; d < NDEV; d++) {
    rf_output ws[2] = {w1[d], w2[d]}, gs[2];
    assert_ok(rf_gradients(c.g, &loss[d], 1, ws, 2, NULL, gs));
    g1[d] = gs[0];
    g2[d] = gs[1];
  }
  rf_all_reduce_n(c.g, "g1", g1, NDEV, RF_REDUCE_SUM, s1);
  rf_all_reduce_n(c.g, "g2", g2, NDEV, RF_REDUCE_SUM, s2);
  for (int d = 0; d < NDEV; d++) {
    c.fetches[c.nfetches++] = s1[d];
    c.fetches[c.nfetches++] = s2[d];
  }
  rf_session_options on = options(1 << 20), off = options(0);
  /* h, h's gradient (h#grad1..), g1, g2: the gradient all-reduces of the
   * four replicas are one collective; g2's can go with h's gradient, g1
   * waits for it */
  int unfused = count_all_reduces(c.g, &off);
  int fused = count_all_reduces(c.g, &on);
  assert_true(fused < unfused);
  rf_tensor *a[2 * NDEV], *b[2 * NDEV];
  run(&c, &off, a);
  run(&c, &on, b);
  assert_same_bits(a, b, 2 * NDEV, "gradients");
  release_all(a, 2 * NDEV);
  release_all(b, 2 * NDEV);
  case_free(&c);
}

/* ---- reduced-precision communication ---- */

/* The session's bf16/fp16 wire equals casting by hand around a float32
 * all-reduce (bucketed or not); an attr of float32 keeps full precision. */
static void test_comm_dtype_equals_casts_by_hand(void **state) {
  static const rf_dtype wires[] = {RF_BFLOAT16, RF_FLOAT16};
  for (int wi = 0; wi < 2; wi++) {
    case_graph c = {.g = rf_graph_new()}, h = {.g = rf_graph_new()};
    rf_output in[3][NDEV], hin[NDEV], out[NDEV], hout[NDEV];
    for (int k = 0; k < 3; k++) { /* three, to fuse */
      for (int d = 0; d < NDEV; d++) {
        in[k][d] = feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)300), d);
        /* the same values in h, cast to the wire dtype by hand */
        rf_tensor *v = rf_tensor_retain(c.feeds[c.nfeeds - 1].value);
        char dev[16];
        snprintf(dev, sizeof dev, "cpu:%d", d);
        assert_ok(rf_graph_push_device(h.g, dev));
        rf_output p =
            rf_placeholder(h.g, NULL, RF_FLOAT32, rf_shape_of(1, (int64_t)300));
        hin[d] = rf_cast(h.g, NULL, p, wires[wi]);
        rf_graph_pop_device(h.g);
        h.feeds[h.nfeeds++] = (rf_feed){p, v};
      }
      rf_all_reduce_n(c.g, fresh(), in[k], NDEV, RF_REDUCE_SUM, out);
      rf_all_reduce_n(h.g, fresh(), hin, NDEV, RF_REDUCE_SUM, hout);
      for (int d = 0; d < NDEV; d++) {
        c.fetches[c.nfetches++] = out[d];
        h.fetches[h.nfetches++] = rf_cast(h.g, NULL, hout[d], RF_FLOAT32);
      }
    }
    int n = c.nfetches;
    rf_tensor *want[3 * NDEV], *got[3 * NDEV], *exact[3 * NDEV];
    rf_session_options off = options(0);
    run(&h, &off, want);
    for (int bucket = 0; bucket < 2; bucket++) {
      rf_session_options o = options(bucket ? 1 << 20 : 0);
      o.collective_comm_dtype = rf_dtype_name(wires[wi]);
      assert_int_equal(count_all_reduces(c.g, &o), bucket ? 1 : 3);
      run(&c, &o, got);
      assert_same_bits(want, got, n, "comm dtype");
      release_all(got, n);
    }
    /* float32 on every participant of the first collective: exact */
    run(&c, &off, exact);
    for (int d = 0; d < NDEV; d++)
      assert_ok(rf_all_reduce_set_comm_dtype(c.fetches[d].node, RF_FLOAT32));
    rf_session_options o = options(0);
    o.collective_comm_dtype = rf_dtype_name(wires[wi]);
    run(&c, &o, got);
    assert_same_bits(exact, got, NDEV, "comm_dtype float32 attr");
    assert_same_bits(want + NDEV, got + NDEV, n - NDEV, "the others narrow");
    release_all(got, n);
    release_all(exact, n);
    release_all(want, n);
    case_free(&c);
    case_free(&h);
  }
}

/* Participants that disagree on comm_dtype: the collective stays float32
 * (exact), rather than meeting with two dtypes. */
static void test_disagreeing_comm_dtype_stays_float32(void **state) {
  case_graph c;
  independent_case(&c, 2, 300, RF_REDUCE_SUM);
  rf_tensor *exact[2 * NDEV], *got[2 * NDEV];
  rf_session_options o = options(1 << 20);
  run(&c, &o, exact);
  assert_ok(rf_all_reduce_set_comm_dtype(c.fetches[1].node, RF_BFLOAT16));
  run(&c, &o, got);
  assert_same_bits(exact, got, 2 * NDEV, "disagreeing comm_dtype");
  release_all(exact, 2 * NDEV);
  release_all(got, 2 * NDEV);
  case_free(&c);
}

static void test_comm_dtype_errors(void **state) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, (int64_t)4));
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(1, (int64_t)4));
  rf_graph_pop_device(g);
  rf_output y = rf_all_reduce(g, "y", x, RF_REDUCE_SUM, 1, NULL);
  rf_output z = rf_all_reduce(g, "z", f, RF_REDUCE_SUM, 1, NULL);
  assert_graph_ok(g);
  assert_status(rf_all_reduce_set_comm_dtype(y.node, RF_BFLOAT16),
                RF_INVALID_ARGUMENT,
                "node 'y' (AllReduce) on cpu:0 reduces float64");
  assert_status(rf_all_reduce_set_comm_dtype(x.node, RF_BFLOAT16),
                RF_INVALID_ARGUMENT, "node 'x' (Placeholder) on cpu:0 is not");
  assert_status(rf_all_reduce_set_comm_dtype(z.node, RF_INT8),
                RF_INVALID_ARGUMENT, "must be float32, bfloat16 or float16");
  assert_status(rf_all_reduce_set_comm_dtype(NULL, RF_FLOAT16),
                RF_INVALID_ARGUMENT, "NULL node");
  assert_ok(rf_all_reduce_set_comm_dtype(y.node, RF_DTYPE_INVALID)); /* auto */
  assert_ok(rf_all_reduce_set_comm_dtype(z.node, RF_FLOAT32));
  const char *v;
  assert_ok(rf_node_attr_string(z.node, "comm_dtype", &v));
  assert_string_equal(v, "float32");
  rf_session_options o = options(0);
  o.collective_comm_dtype = "int32";
  rf_session *s = NULL;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_comm_dtype must be NULL, \"float32\", "
                "\"bfloat16\" or \"float16\", got \"int32\"");
  o = options(-2); /* -1 is RF_BUCKET_BYTES_AUTO */
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_bucket_bytes must be >= 0 or "
                "RF_BUCKET_BYTES_AUTO (-1), got -2");
  rf_graph_free(g);
  /* An attr given through the node builder is checked at compile. */
  g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  x = rf_placeholder(g, "x", RF_INT32, rf_shape_of(1, (int64_t)4));
  rf_node_builder *b = rf_node_builder_new(g, "AllReduce", "w");
  rf_node_builder_input(b, x);
  rf_node_builder_attr_string(b, "reduction", "sum");
  rf_node_builder_attr_int(b, "num_devices", 1);
  rf_node_builder_attr_string(b, "shared_name", "w");
  rf_node_builder_attr_string(b, "comm_dtype", "float16");
  rf_node *w;
  assert_ok(rf_node_builder_finish(b, &w));
  rf_graph_pop_device(g);
  o = options(0);
  rf_graph *low = NULL;
  assert_status(rf_graph_lower(g, &o, &low), RF_INVALID_ARGUMENT,
                "node 'w' (AllReduce) on cpu:0: comm_dtype float16 applies to "
                "float32 all-reduces only, this one is int32");
  rf_graph_free(g);
}

/* comm_dtype float32 asks for no narrowing, so any all-reduce takes it, as
 * the graph-file attr and COLLECTIVES.md have it: only bfloat16 and float16
 * are refused for one that is not float32. The result stays exact. */
static void test_float32_comm_dtype_on_any_dtype(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x[2], y[2];
  for (int i = 0; i < 2; i++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    x[i] = rf_const_scalar(g, i ? "b" : "a", RF_INT64,
                           (double)((int64_t)1 << 40) + i);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", x, 2, RF_REDUCE_SUM, y);
  assert_graph_ok(g);
  for (int i = 0; i < 2; i++)
    assert_ok(rf_all_reduce_set_comm_dtype(y[i].node, RF_FLOAT32));
  const char *v;
  assert_ok(rf_node_attr_string(y[0].node, "comm_dtype", &v));
  assert_string_equal(v, "float32");
  assert_status(rf_all_reduce_set_comm_dtype(y[0].node, RF_FLOAT16),
                RF_INVALID_ARGUMENT, "node 'ar_0' (AllReduce) on cpu:0");
  rf_session_options o = options(1 << 20);
  o.collective_comm_dtype = "bfloat16"; /* the attr wins; int64 never narrows */
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *out[2];
  assert_ok(rf_session_run(s, NULL, 0, y, 2, NULL, 0, out));
  for (int i = 0; i < 2; i++) {
    assert_int_equal(*(const int64_t *)rf_tensor_data(out[i]),
                     ((int64_t)1 << 41) + 1);
    rf_tensor_release(out[i]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* RF_FLOAT32 never narrows, so every all-reduce takes it, as a graph file's
 * comm_dtype "float32" loads and compiles on any all-reduce (GRAPH_FORMAT.md):
 * only a narrowing dtype is refused for one that is not float32. The values
 * stay exact under a session that narrows float32 ones. */
static void test_float32_comm_dtype_on_any_all_reduce(void **state) {
  (void)state;
  const rf_dtype types[] = {RF_FLOAT64, RF_INT32, RF_FLOAT16, RF_INT64};
  uint64_t r = rf_test_rng(41);
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    rf_graph *g = rf_graph_new();
    rf_output in[2], out[2];
    rf_tensor *v[2];
    for (int d = 0; d < 2; d++) {
      char dev[8];
      snprintf(dev, sizeof dev, "cpu:%d", d);
      assert_ok(rf_graph_push_device(g, dev));
      v[d] = rf_test_random_tensor(&r, types[k], rf_shape_of(1, (int64_t)9), -4,
                                   4);
      in[d] = rf_const(g, NULL, v[d]);
      rf_graph_pop_device(g);
    }
    rf_all_reduce_n(g, "ar", in, 2, RF_REDUCE_SUM, out);
    assert_graph_ok(g);
    for (int d = 0; d < 2; d++)
      assert_ok(rf_all_reduce_set_comm_dtype(out[d].node, RF_FLOAT32));
    assert_status(rf_all_reduce_set_comm_dtype(out[0].node, RF_BFLOAT16),
                  RF_INVALID_ARGUMENT,
                  "only float32 all-reduces take a narrowing");
    rf_session_options o = options(1 << 20);
    o.collective_comm_dtype = "bfloat16";
    rf_session *s = NULL;
    assert_ok(rf_session_new(g, &o, &s));
    rf_tensor *got[2];
    assert_ok(rf_session_run(s, NULL, 0, out, 2, NULL, 0, got));
    double *a = rf_test_to_doubles(v[0]), *b = rf_test_to_doubles(v[1]);
    double want[9];
    for (int i = 0; i < 9; i++) want[i] = a[i] + b[i];
    for (int d = 0; d < 2; d++) {
      assert_int_equal(rf_tensor_dtype(got[d]), types[k]);
      assert_tensor_near(got[d], rf_shape_of(1, (int64_t)9), want,
                         types[k] == RF_FLOAT16 ? 1e-2 : 0);
      rf_tensor_release(got[d]);
    }
    free(a);
    free(b);
    rf_tensor_release(v[0]);
    rf_tensor_release(v[1]);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* A node without a device is named without an empty "on" (an AllReduce
 * always has one). */
static void test_comm_dtype_error_without_device(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_node *n = rf_noop(g, "nop");
  rf_status *st = rf_all_reduce_set_comm_dtype(n, RF_BFLOAT16);
  assert_non_null(strstr(rf_status_message(st), "node 'nop' (NoOp) is not"));
  rf_status_free(st);
  rf_graph_free(g);
}

/* ---- running out of memory ---- */

/* Fails the k-th allocation (and all after it) of making a session and
 * running a step of fused, narrowed all-reduces, for every k: each attempt
 * ends in RESOURCE_EXHAUSTED or succeeds with the same bits, and nothing
 * leaks (the pass, pack and unpack included). */
static void test_every_allocation_failure(void **state) {
  case_graph c;
  independent_case(&c, 3, 250, RF_REDUCE_SUM);
  rf_session_options o = options(1 << 20);
  o.collective_comm_dtype = "bfloat16";
  rf_tensor *want[3 * NDEV], *got[3 * NDEV];
  run(&c, &o, want);
  int failures = 0;
  for (int64_t k = 1;; k++) {
    rf_default_allocator_trim();
    int64_t before = rf_debug_live_allocations();
    rf_debug_fail_allocation_after(k);
    rf_session *s = NULL;
    rf_status *st = rf_session_new(c.g, &o, &s);
    if (!st)
      st = rf_session_run(s, c.feeds, c.nfeeds, c.fetches, c.nfetches, NULL, 0,
                          got);
    rf_session_free(s);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      assert_same_bits(want, got, c.nfetches, "after the failures");
      release_all(got, c.nfetches);
    }
    rf_default_allocator_trim();
    int64_t after = rf_debug_live_allocations();
    if (after != before)
      fail_msg("k=%lld: %lld allocations leaked (%s)", (long long)k,
               (long long)(after - before), st ? rf_status_message(st) : "ok");
    if (!st) break;
    if (rf_status_code(st) != RF_RESOURCE_EXHAUSTED)
      fail_msg("k=%lld: expected RESOURCE_EXHAUSTED, got %s: %s", (long long)k,
               rf_code_name(rf_status_code(st)), rf_status_message(st));
    rf_status_free(st);
    failures++;
    assert_true(k < 200000);
  }
  assert_true(failures > 50);
  release_all(want, c.nfetches);
  case_free(&c);
}

/* ---- what the log says ---- */

static bool logged(const char *sub) {
  bool found = false;
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n && !found; i++)
    found = strstr(logs.msgs[i], sub) != NULL;
  pthread_mutex_unlock(&logs.mu);
  return found;
}

/* K all-reduces of `count` float32 on every device, whose inputs are
 * x + x (a kernel allocating its output: it writes into its slice of the
 * bucket), each x + x also fetched itself (it must keep its value after the
 * reduction). Fetches: the K * NDEV results, then the K * NDEV sums. */
static void produced_case(case_graph *c, int K, int64_t count) {
  *c = (case_graph){.g = rf_graph_new()};
  rf_output doubled[MAXC][NDEV];
  for (int k = 0; k < K; k++) {
    rf_output out[NDEV];
    for (int d = 0; d < NDEV; d++) {
      rf_output x = feed(c, RF_FLOAT32, rf_shape_of(1, count), d);
      doubled[k][d] = add_on(c, d, x, x);
    }
    rf_all_reduce_n(c->g, fresh(), doubled[k], NDEV, RF_REDUCE_SUM, out);
    for (int d = 0; d < NDEV; d++) c->fetches[c->nfetches++] = out[d];
  }
  for (int k = 0; k < K; k++)
    for (int d = 0; d < NDEV; d++) c->fetches[c->nfetches++] = doubled[k][d];
}

static void test_producers_write_into_the_bucket(void **state) {
  (void)state;
  enum { K = 3, N = 250 };
  case_graph c;
  produced_case(&c, K, N);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, log_collect, &logs));
  rf_session_options o = options(1 << 20);
  rf_session *s = NULL;
  assert_ok(rf_session_new(c.g, &o, &s));
  for (int step = 0; step < 3; step++) { /* frames are reused */
    rf_tensor *out[2 * K * NDEV];
    assert_ok(rf_session_run(s, c.feeds, c.nfeeds, c.fetches, c.nfetches, NULL,
                             0, out));
    for (int k = 0; k < K; k++) {
      const float *x[NDEV];
      for (int d = 0; d < NDEV; d++)
        x[d] = rf_tensor_data(c.feeds[k * NDEV + d].value);
      for (int d = 0; d < NDEV; d++) {
        const float *sum = rf_tensor_data(out[k * NDEV + d]);
        const float *own = rf_tensor_data(out[(K + k) * NDEV + d]);
        for (int i = 0; i < N; i++) {
          float want = 0; /* float32, rank order: the backend's order */
          for (int r = 0; r < NDEV; r++) want += x[r][i] + x[r][i];
          assert_true(sum[i] == want);
          assert_true(own[i] == x[d][i] + x[d][i]);
        }
      }
    }
    release_all(out, 2 * K * NDEV);
  }
  rf_session_free(s);
  assert_ok(rf_set_log_callback(RF_LOG_ERROR, NULL, NULL));
  assert_true(
      logged("3 of 3 inputs written in place by their producers, 0 "
             "copied in (0 bytes)"));
  logs_clear(&logs);
  case_free(&c);
}

static void test_log_says_which_copies_happen(void **state) {
  case_graph c;
  independent_case(&c, 3, 250, RF_REDUCE_SUM);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, log_collect, &logs));
  rf_session_options o = options(1 << 20);
  rf_tensor *out[3 * NDEV];
  run(&c, &o, out);
  release_all(out, 3 * NDEV);
  o.collective_comm_dtype = "bfloat16";
  run(&c, &o, out);
  release_all(out, 3 * NDEV);
  assert_ok(rf_set_log_callback(RF_LOG_ERROR, NULL, NULL));
  assert_true(
      logged("3 all-reduces (float32, sum) on 4 devices, 3000 bytes + "
             "72 padding: producers write into the bucket, zero-copy views "
             "out (_BucketUnpack)"));
  /* Fed placeholders are forwarded, not allocated: the pack copies them. */
  assert_true(
      logged("0 of 3 inputs written in place by their producers, 3 "
             "copied in (3000 bytes)"));
  assert_true(
      logged("zero-copy views out (_BucketUnpack), cast to bfloat16 "
             "for the wire and back"));
  logs_clear(&logs);
  case_free(&c);
}

/* On CPU devices a bucket's copy in costs about as much memory traffic as
 * the reduction, far more than the collective it saves (docs/PERFORMANCE.md,
 * "Session 10"): an all-reduce whose input on some device is forwarded
 * rather than computed there (a fed placeholder, a producer on another
 * device) fuses only when that input is small; computed inputs, written in
 * place, always fuse. The results stay bit-identical either way. */
static void test_forwarded_inputs_fuse_only_when_small(void **state) {
  (void)state;
  enum { K = 4 };
  rf_session_options o = options(1 << 20);
  case_graph c;
  /* 16 KiB placeholders: each would be copied in, so none fuse */
  independent_case(&c, K, 4096, RF_REDUCE_SUM);
  assert_int_equal(count_all_reduces(c.g, &o), K);
  case_free(&c);
  /* 1 KiB placeholders: copies cheaper than the collectives they save */
  independent_case(&c, K, 256, RF_REDUCE_SUM);
  assert_int_equal(count_all_reduces(c.g, &o), 1);
  case_free(&c);
  /* 16 KiB computed on their device (x + x): written in place, all fuse */
  produced_case(&c, K, 4096);
  assert_int_equal(count_all_reduces(c.g, &o), 1);
  case_free(&c);
  /* The same, except that one all-reduce's input on cpu:2 is computed on
   * cpu:1 (it reaches cpu:2 forwarded by a _Recv): that one stays alone,
   * the others fuse, and the fetched values equal the unfused graph's. */
  c = (case_graph){.g = rf_graph_new()};
  for (int k = 0; k < K; k++) {
    rf_output in[NDEV], out[NDEV];
    for (int d = 0; d < NDEV; d++) {
      rf_output x = feed(&c, RF_FLOAT32, rf_shape_of(1, 4096), d);
      in[d] = add_on(&c, k == 1 && d == 2 ? 1 : d, x, x);
    }
    const char *sn = fresh();
    for (int d = 0; d < NDEV; d++) { /* each participant on its device */
      char dev[16], name[48];
      snprintf(dev, sizeof dev, "cpu:%d", d);
      snprintf(name, sizeof name, "%s_%d", sn, d);
      assert_ok(rf_graph_push_device(c.g, dev));
      out[d] = rf_all_reduce(c.g, name, in[d], RF_REDUCE_MAX, NDEV, sn);
      rf_graph_pop_device(c.g);
      c.fetches[c.nfetches++] = out[d];
    }
  }
  assert_int_equal(count_all_reduces(c.g, &o), 2);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, log_collect, &logs));
  rf_session_options off = options(0);
  rf_tensor *a[K * NDEV], *b[K * NDEV];
  run(&c, &off, a);
  assert_false(logged("not fused")); /* nothing fuses: nothing to explain */
  run(&c, &o, b);
  assert_ok(rf_set_log_callback(RF_LOG_ERROR, NULL, NULL));
  assert_same_bits(a, b, c.nfetches, "one forwarded input");
  assert_true(logged("not fused: its input on cpu:2 is forwarded"));
  logs_clear(&logs);
  release_all(a, c.nfetches);
  release_all(b, c.nfetches);
  case_free(&c);
}

/* The default size depends on the devices' kind (RF_BUCKET_BYTES_AUTO):
 * 1 MiB on CPU devices, 25 MiB on GPU devices; an explicit size holds for
 * every kind. Eight 256 KiB gradients (computed, so written in place) are
 * two 1 MiB buckets or one 25 MiB bucket; the log names the size used. */
static void default_size_case(int64_t want_default, int64_t want_explicit,
                              const char *want_log) {
  enum { K = 8, N = 65536 };
  case_graph c;
  produced_case(&c, K, N);
  rf_session_options o = options(0);
  rf_session_options init;
  rf_session_options_init(&init);
  assert_true(init.collective_bucket_bytes == RF_BUCKET_BYTES_AUTO);
  assert_true(RF_DEFAULT_BUCKET_BYTES == RF_BUCKET_BYTES_AUTO);
  o.collective_bucket_bytes = init.collective_bucket_bytes;
  assert_ok(rf_set_log_callback(RF_LOG_INFO, log_collect, &logs));
  assert_int_equal(count_all_reduces(c.g, &o), want_default);
  assert_ok(rf_set_log_callback(RF_LOG_ERROR, NULL, NULL));
  if (!logged(want_log)) {
    logs_print();
    fail_msg("no log line holding \"%s\"", want_log);
  }
  logs_clear(&logs);
  rf_session_options mib = options((int64_t)1 << 20); /* the user's choice */
  assert_int_equal(count_all_reduces(c.g, &mib), want_explicit);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, log_collect, &logs));
  assert_int_equal(count_all_reduces(c.g, &mib), want_explicit);
  assert_ok(rf_set_log_callback(RF_LOG_ERROR, NULL, NULL));
  assert_true(
      logged("buckets of up to 1048576 bytes (collective_bucket_bytes)"));
  logs_clear(&logs);
  rf_session_options off = options(0);
  assert_int_equal(count_all_reduces(c.g, &off), K);
  rf_tensor *a[2 * K * NDEV], *b[2 * K * NDEV];
  run(&c, &off, a);
  run(&c, &o, b);
  assert_same_bits(a, b, c.nfetches, "default bucket size");
  release_all(a, c.nfetches);
  release_all(b, c.nfetches);
  case_free(&c);
}

static void test_default_bucket_size_on_cpus(void **state) {
  (void)state;
  default_size_case(2, 2,
                    "4 all-reduces (float32, sum) on 4 devices, 1048576 bytes"
                    " + 0 padding: producers write into the bucket, zero-copy "
                    "views out (_BucketUnpack); buckets of up to 1048576 bytes "
                    "(the default on CPU devices)");
}

static void test_default_bucket_size_on_gpus(void **state) {
  (void)state;
  rf_test_need_gpu();
  dev_type = "gpu";
  default_size_case(1, 2,
                    "8 all-reduces (float32, sum) on 4 devices, 2097152 bytes"
                    " + 0 padding: producers write into the bucket, zero-copy "
                    "views out (_BucketUnpack); buckets of up to 26214400 "
                    "bytes (the default on GPU devices)");
  dev_type = "cpu";
}

/* Buckets are filled in the order the all-reduces' inputs become ready, not
 * the order they were built in: built deepest first, as a backward pass
 * would list its gradients (c_deep reduces x + x doubled three times,
 * c_mid twice, c_shallow once), the first bucket holds the two ready first
 * (shallow, mid: it is named after shallow), and the deepest meets alone. */
static void test_buckets_follow_readiness(void **state) {
  (void)state;
  case_graph c = {.g = rf_graph_new()};
  rf_output depth[3][NDEV];
  for (int d = 0; d < NDEV; d++) {
    rf_output x = feed(&c, RF_FLOAT32, rf_shape_of(1, (int64_t)256), d);
    depth[0][d] = add_on(&c, d, x, x);
    for (int k = 1; k < 3; k++)
      depth[k][d] = add_on(&c, d, depth[k - 1][d], depth[k - 1][d]);
  }
  static const char *const names[3] = {"c_shallow", "c_mid", "c_deep"};
  for (int k = 2; k >= 0; k--) { /* deepest first */
    rf_output out[NDEV];
    rf_all_reduce_n(c.g, names[k], depth[k], NDEV, RF_REDUCE_SUM, out);
    for (int d = 0; d < NDEV; d++) c.fetches[c.nfetches++] = out[d];
  }
  rf_session_options o = options(2048); /* two 1 KiB slices a bucket */
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(c.g, &o, &low));
  int fused = 0, alone = 0, other = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *n = rf_graph_node(low, i);
    if (strcmp(rf_node_op(n), "AllReduce") != 0) continue;
    const char *sn;
    assert_ok(rf_node_attr_string(n, "shared_name", &sn));
    if (strcmp(sn, "c_shallow#bucket") == 0)
      fused++;
    else if (strcmp(sn, "c_deep") == 0)
      alone++;
    else
      other++, fprintf(stderr, "unexpected all-reduce '%s'\n", sn);
  }
  rf_graph_free(low);
  assert_int_equal(fused, NDEV);
  assert_int_equal(alone, NDEV);
  assert_int_equal(other, 0);
  rf_tensor *a[3 * NDEV], *b[3 * NDEV];
  rf_session_options off = options(0);
  run(&c, &off, a);
  run(&c, &o, b);
  assert_same_bits(a, b, c.nfetches, "readiness order");
  release_all(a, c.nfetches);
  release_all(b, c.nfetches);
  case_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_graphs_fused_match_unfused_bitwise),
      cmocka_unit_test(test_random_graphs_on_gpus),
      cmocka_unit_test(test_collectives_left_match_the_bucket_size),
      cmocka_unit_test(test_dependent_collectives_never_fuse),
      cmocka_unit_test(test_path_through_another_collective_keeps_apart),
      cmocka_unit_test(test_only_alike_collectives_fuse),
      cmocka_unit_test(test_gradients_of_fused_collectives),
      cmocka_unit_test(test_comm_dtype_equals_casts_by_hand),
      cmocka_unit_test(test_disagreeing_comm_dtype_stays_float32),
      cmocka_unit_test(test_comm_dtype_errors),
      cmocka_unit_test(test_float32_comm_dtype_on_any_all_reduce),
      cmocka_unit_test(test_comm_dtype_error_without_device),
      cmocka_unit_test(test_every_allocation_failure),
      cmocka_unit_test(test_log_says_which_copies_happen),
      cmocka_unit_test(test_producers_write_into_the_bucket),
      cmocka_unit_test(test_forwarded_inputs_fuse_only_when_small),
      cmocka_unit_test(test_buckets_follow_readiness),
      cmocka_unit_test(test_default_bucket_size_on_cpus),
      cmocka_unit_test(test_default_bucket_size_on_gpus),
      cmocka_unit_test(test_float32_comm_dtype_on_any_dtype),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
