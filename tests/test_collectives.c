/* tests/test_collectives.c - TensorFlow's nccl_ops_test ported to ringflow on
 * virtual CPU devices: all-reduce sum/prod/min/max (and avg), reduce sum,
 * broadcast, all-gather and reduce-scatter over the device sets {1,2,0},
 * {1,0} and 8 devices with a random receiver/sender, every dtype, against
 * float64 references; gradients; single-device broadcast; all-reduce and
 * reduce+broadcast agreeing in one run; fetching the output of a Reduce or
 * Broadcast by its own handle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64};
#define NUM_DTYPES (int)(sizeof all_dtypes / sizeof *all_dtypes)

typedef struct devset {
  int n;
  int ids[8];
} devset;

static const devset device_sets[] = {
    {3, {1, 2, 0}}, {2, {1, 0}}, {8, {0, 1, 2, 3, 4, 5, 6, 7}}};
#define NUM_SETS (int)(sizeof device_sets / sizeof *device_sets)

/* Where device id sorts among devices (rank order, ties of max/min
 * gradients): the id itself on one process; tests/mpi/ spreads ids over
 * tasks and defines its own. */
#ifndef DEVICE_ORDER
#define DEVICE_ORDER(id) (id)
#endif

/* tests/test_gpu_collectives.c includes this file with RF_COLLECTIVES_HOOKS
 * defined: it supplies device_name() and run_session() for GPU devices (and
 * its own main), so the same matrix runs on virtual GPU devices. */
#ifndef RF_COLLECTIVES_HOOKS
static void device_name(int id, char *buf) { sprintf(buf, "cpu:%d", id); }

/* One session with 8 devices, one run. */
static void run_session(rf_graph *g, const rf_feed *feeds, int nfeeds,
                        const rf_output *fetches, int n, rf_tensor **outs) {
  rf_test_run(g, 8, feeds, nfeeds, fetches, n, outs);
}
#endif

/* Values that keep every reduction in range for every dtype. */
static rf_tensor *random_input(uint64_t *rng, rf_dtype dt, rf_reduction red) {
  rf_shape s = rf_shape_of(2, (int64_t)3, (int64_t)4);
  /* 8-bit products of 8 devices would wrap past 2^8: keep those to ones */
  if (red == RF_REDUCE_PROD)
    return rf_test_random_tensor(rng, dt, s, 1,
                                 rf_dtype_size(dt) == 1 ? 1.99 : 2.5);
  if (rf_dtype_is_float(dt)) return rf_test_random_tensor(rng, dt, s, -2, 2);
  return rf_test_random_tensor(rng, dt, s, 0, 10);
}

static double combine(rf_reduction red, double a, double b) {
  switch (red) {
    case RF_REDUCE_PROD: return a * b;
    case RF_REDUCE_MIN: return b < a ? b : a;
    case RF_REDUCE_MAX: return b > a ? b : a;
    default: return a + b;
  }
}

/* The reference: float64 reduction of the inputs, in input order. */
static double *reference(rf_tensor **in, int n, rf_reduction red, rf_dtype dt) {
  int64_t len = rf_tensor_num_elements(in[0]);
  double *want = calloc((size_t)len, sizeof *want);
  for (int64_t e = 0; e < len; e++) {
    double a = rf_tensor_get(in[0], e);
    for (int k = 1; k < n; k++) a = combine(red, a, rf_tensor_get(in[k], e));
    if (red == RF_REDUCE_AVG)
      a = rf_dtype_is_integer(dt) ? trunc(a / n) : a / n;
    want[e] = a;
  }
  return want;
}

static double tol_for(rf_dtype dt, int n) { return rf_test_tolerance(dt) * n; }

/* Placeholders x_i on each device of the set, fed with inputs. */
static void placeholders(rf_graph *g, const devset *ds, rf_dtype dt,
                         rf_output *xs) {
  for (int i = 0; i < ds->n; i++) {
    char dev[16], name[16];
    device_name(ds->ids[i], dev);
    sprintf(name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, name, dt, rf_shape_of(2, (int64_t)3, (int64_t)4));
    rf_graph_pop_device(g);
  }
}

static void run(rf_graph *g, const rf_output *xs, rf_tensor **in, int n,
                const rf_output *fetches, int nf, rf_tensor **out) {
  rf_feed feeds[8];
  for (int i = 0; i < n; i++) feeds[i] = (rf_feed){xs[i], in[i]};
  run_session(g, feeds, n, fetches, nf, out);
}

static void all_reduce_case(rf_dtype dt, rf_reduction red, const devset *ds,
                            uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output xs[8], ys[8];
  rf_tensor *in[8], *out[8];
  placeholders(g, ds, dt, xs);
  rf_all_reduce_n(g, "ar", xs, ds->n, red, ys);
  assert_graph_ok(g);
  for (int i = 0; i < ds->n; i++) {
    in[i] = random_input(rng, dt, red);
    char dev[16];
    device_name(ds->ids[i], dev);
    assert_string_equal(rf_node_device(ys[i].node), dev);
  }
  run(g, xs, in, ds->n, ys, ds->n, out);
  double *want = reference(in, ds->n, red, dt);
  for (int i = 0; i < ds->n; i++) {
    assert_tensor_near(out[i], rf_tensor_shape(in[0]), want,
                       tol_for(dt, ds->n));
    /* bit-identical on every device */
    assert_memory_equal(rf_tensor_data(out[i]), rf_tensor_data(out[0]),
                        rf_tensor_nbytes(out[0]));
  }
  free(want);
  for (int i = 0; i < ds->n; i++) {
    rf_tensor_release(in[i]);
    rf_tensor_release(out[i]);
  }
  rf_graph_free(g);
}

static void test_all_reduce_matrix(void **state) {
  uint64_t rng = rf_test_seed();
  for (int r = RF_REDUCE_SUM; r <= RF_REDUCE_AVG; r++)
    for (int d = 0; d < NUM_DTYPES; d++)
      for (int s = 0; s < NUM_SETS; s++)
        all_reduce_case(all_dtypes[d], (rf_reduction)r, &device_sets[s], &rng);
}

static void reduce_case(rf_dtype dt, const devset *ds, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output xs[8];
  rf_tensor *in[8], *out;
  placeholders(g, ds, dt, xs);
  int receiver = (int)(rf_test_rand(rng) % (uint64_t)ds->n);
  char dev[16];
  device_name(ds->ids[receiver], dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output y = rf_reduce(g, "reduce", xs, ds->n, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  for (int i = 0; i < ds->n; i++) in[i] = random_input(rng, dt, RF_REDUCE_SUM);
  run(g, xs, in, ds->n, &y, 1, &out); /* fetched by its own handle */
  double *want = reference(in, ds->n, RF_REDUCE_SUM, dt);
  assert_tensor_near(out, rf_tensor_shape(in[0]), want, tol_for(dt, ds->n));
  free(want);
  for (int i = 0; i < ds->n; i++) rf_tensor_release(in[i]);
  rf_tensor_release(out);
  rf_graph_free(g);
}

static void test_reduce_matrix(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  for (int d = 0; d < NUM_DTYPES; d++)
    for (int s = 0; s < NUM_SETS; s++)
      reduce_case(all_dtypes[d], &device_sets[s], &rng);
}

static void broadcast_case(rf_dtype dt, const devset *ds, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  int sender = (int)(rf_test_rand(rng) % (uint64_t)ds->n);
  char dev[16];
  device_name(ds->ids[sender], dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x =
      rf_placeholder(g, "x", dt, rf_shape_of(2, (int64_t)3, (int64_t)4));
  rf_output b = rf_broadcast(g, "bcast", x);
  rf_graph_pop_device(g);
  rf_output ys[9];
  for (int i = 0; i < ds->n; i++) {
    device_name(ds->ids[i], dev);
    assert_ok(rf_graph_push_device(g, dev));
    ys[i] = rf_identity(g, NULL, b);
    rf_graph_pop_device(g);
  }
  ys[ds->n] = b; /* the Broadcast's own handle */
  assert_graph_ok(g);
  rf_tensor *in = random_input(rng, dt, RF_REDUCE_SUM), *out[9];
  rf_feed feed = {x, in};
  run_session(g, &feed, 1, ys, ds->n + 1, out);
  double *want = rf_test_to_doubles(in);
  for (int i = 0; i <= ds->n; i++) {
    assert_tensor_near(out[i], rf_tensor_shape(in), want, 0);
    rf_tensor_release(out[i]);
  }
  free(want);
  rf_tensor_release(in);
  rf_graph_free(g);
}

static void test_broadcast_matrix(void **state) {
  uint64_t rng = rf_test_seed() + 2;
  for (int d = 0; d < NUM_DTYPES; d++)
    for (int s = 0; s < NUM_SETS; s++)
      broadcast_case(all_dtypes[d], &device_sets[s], &rng);
}

static void test_all_gather_reduce_scatter(void **state) {
  uint64_t rng = rf_test_seed() + 3;
  for (int d = 0; d < NUM_DTYPES; d++)
    for (int s = 0; s < NUM_SETS; s++) {
      const devset *ds = &device_sets[s];
      rf_dtype dt = all_dtypes[d];
      rf_graph *g = rf_graph_new();
      rf_output xs[8], gathered[8], scattered[8];
      rf_tensor *in[8], *out[16];
      /* (n*2, 3) inputs so reduce-scatter splits them in n pieces */
      for (int i = 0; i < ds->n; i++) {
        char dev[16], name[16];
        device_name(ds->ids[i], dev);
        sprintf(name, "x%d", i);
        assert_ok(rf_graph_push_device(g, dev));
        xs[i] = rf_placeholder(
            g, name, dt, rf_shape_of(2, (int64_t)(2 * ds->n), (int64_t)3));
        rf_graph_pop_device(g);
        in[i] = rf_test_random_tensor(
            &rng, dt, rf_shape_of(2, (int64_t)(2 * ds->n), (int64_t)3), 0, 5);
      }
      rf_all_gather_n(g, "ag", xs, ds->n, gathered);
      rf_reduce_scatter_n(g, "rs", xs, ds->n, RF_REDUCE_SUM, scattered);
      rf_output fetches[16];
      memcpy(fetches, gathered, sizeof *gathered * (size_t)ds->n);
      memcpy(fetches + ds->n, scattered, sizeof *scattered * (size_t)ds->n);
      run(g, xs, in, ds->n, fetches, 2 * ds->n, out);
      int64_t per = 6 * ds->n; /* elements per input */
      /* Ranks follow device order: rank[i] = how many devices sort before
       * participant i's. */
      int rank[8];
      for (int i = 0; i < ds->n; i++) {
        rank[i] = 0;
        for (int k = 0; k < ds->n; k++)
          rank[i] += DEVICE_ORDER(ds->ids[k]) < DEVICE_ORDER(ds->ids[i]);
      }
      double *want_g = calloc((size_t)(per * ds->n), sizeof(double));
      for (int k = 0; k < ds->n; k++)
        for (int64_t e = 0; e < per; e++)
          want_g[rank[k] * per + e] = rf_tensor_get(in[k], e);
      double *sum = reference(in, ds->n, RF_REDUCE_SUM, dt);
      for (int i = 0; i < ds->n; i++) {
        assert_tensor_near(
            out[i], rf_shape_of(2, (int64_t)(2 * ds->n * ds->n), (int64_t)3),
            want_g, 0);
        assert_tensor_near(out[ds->n + i],
                           rf_shape_of(2, (int64_t)2, (int64_t)3),
                           sum + 6 * rank[i], tol_for(dt, ds->n));
      }
      free(want_g);
      free(sum);
      for (int i = 0; i < ds->n; i++) {
        rf_tensor_release(in[i]);
        rf_tensor_release(out[i]);
        rf_tensor_release(out[ds->n + i]);
      }
      rf_graph_free(g);
    }
}

/* d(sum_i <r_i, allsum(x)_i>)/dx_j = sum_i r_i on every device. */
static void test_all_reduce_gradient(void **state) {
  uint64_t rng = rf_test_seed() + 4;
  for (int s = 0; s < NUM_SETS; s++) {
    const devset *ds = &device_sets[s];
    rf_graph *g = rf_graph_new();
    rf_output xs[8], ys[8], dxs[8], rs[8];
    rf_tensor *in[8], *rv[8], *out[8];
    placeholders(g, ds, RF_FLOAT64, xs);
    rf_all_reduce_n(g, "ar", xs, ds->n, RF_REDUCE_SUM, ys);
    for (int i = 0; i < ds->n; i++) {
      rv[i] = rf_test_random_tensor(
          &rng, RF_FLOAT64, rf_shape_of(2, (int64_t)3, (int64_t)4), -1, 1);
      char dev[16];
      device_name(ds->ids[i], dev);
      assert_ok(rf_graph_push_device(g, dev));
      rs[i] = rf_const(g, NULL, rv[i]);
      rf_graph_pop_device(g);
      in[i] = random_input(&rng, RF_FLOAT64, RF_REDUCE_SUM);
    }
    assert_ok(rf_gradients(g, ys, ds->n, xs, ds->n, rs, dxs));
    run(g, xs, in, ds->n, dxs, ds->n, out);
    double *want = reference(rv, ds->n, RF_REDUCE_SUM, RF_FLOAT64);
    for (int i = 0; i < ds->n; i++) {
      assert_string_equal(rf_node_device(dxs[i].node),
                          rf_node_device(xs[i].node));
      assert_tensor_near(out[i], rf_shape_of(2, (int64_t)3, (int64_t)4), want,
                         1e-12);
      rf_tensor_release(out[i]);
      rf_tensor_release(in[i]);
      rf_tensor_release(rv[i]);
    }
    free(want);
    rf_graph_free(g);
  }
}

/* Reduce's gradient is the incoming gradient on every input's device;
 * Broadcast's is the sum of its consumers' gradients. */
static void test_reduce_and_broadcast_gradients(void **state) {
  uint64_t rng = rf_test_seed() + 5;
  for (int s = 0; s < NUM_SETS; s++) {
    const devset *ds = &device_sets[s];
    rf_graph *g;
    rf_output xs[8], dxs[8];
    rf_tensor *in[8], *out[8];
    char dev[16];
    /* sum: the incoming gradient itself; avg: divided by the inputs */
    for (int avg = 0; avg < 2; avg++) {
      g = rf_graph_new();
      placeholders(g, ds, RF_FLOAT64, xs);
      int recv = (int)(rf_test_rand(&rng) % (uint64_t)ds->n);
      device_name(ds->ids[recv], dev);
      assert_ok(rf_graph_push_device(g, dev));
      rf_reduction red = avg ? RF_REDUCE_AVG : RF_REDUCE_SUM;
      rf_output y = rf_reduce(g, "reduce", xs, ds->n, red);
      rf_tensor *rv = rf_test_random_tensor(
          &rng, RF_FLOAT64, rf_shape_of(2, (int64_t)3, (int64_t)4), -1, 1);
      rf_output r = rf_const(g, NULL, rv);
      rf_graph_pop_device(g);
      assert_ok(rf_gradients(g, &y, 1, xs, ds->n, &r, dxs));
      for (int i = 0; i < ds->n; i++)
        in[i] = random_input(&rng, RF_FLOAT64, red);
      run(g, xs, in, ds->n, dxs, ds->n, out);
      double *want = rf_test_to_doubles(rv);
      for (int k = 0; avg && k < 12; k++) want[k] /= ds->n;
      for (int i = 0; i < ds->n; i++) {
        assert_tensor_near(out[i], rf_shape_of(2, (int64_t)3, (int64_t)4), want,
                           avg ? 1e-15 : 0);
        rf_tensor_release(out[i]);
        rf_tensor_release(in[i]);
      }
      free(want);
      rf_tensor_release(rv);
      rf_graph_free(g);
    }

    /* broadcast: consumers (two on one device) weighted by r_i */
    g = rf_graph_new();
    int sender = (int)(rf_test_rand(&rng) % (uint64_t)ds->n);
    device_name(ds->ids[sender], dev);
    assert_ok(rf_graph_push_device(g, dev));
    rf_output x = rf_placeholder(g, "x", RF_FLOAT64,
                                 rf_shape_of(2, (int64_t)3, (int64_t)4));
    rf_output b = rf_broadcast(g, "bcast", x);
    rf_graph_pop_device(g);
    rf_output ys[9], rs[9];
    rf_tensor *rvs[9];
    int ny = 0;
    for (int i = 0; i < ds->n; i++) {
      device_name(ds->ids[i], dev);
      assert_ok(rf_graph_push_device(g, dev));
      for (int twice = 0; twice < (i == 0 ? 2 : 1); twice++) {
        ys[ny] = rf_identity(g, NULL, b);
        rvs[ny] = rf_test_random_tensor(
            &rng, RF_FLOAT64, rf_shape_of(2, (int64_t)3, (int64_t)4), -1, 1);
        rs[ny] = rf_const(g, NULL, rvs[ny]);
        ny++;
      }
      rf_graph_pop_device(g);
    }
    rf_output dx;
    assert_ok(rf_gradients(g, ys, ny, &x, 1, rs, &dx));
    rf_tensor *xin = random_input(&rng, RF_FLOAT64, RF_REDUCE_SUM), *dxv;
    rf_feed feed = {x, xin};
    run_session(g, &feed, 1, &dx, 1, &dxv);
    double *sum = reference(rvs, ny, RF_REDUCE_SUM, RF_FLOAT64);
    assert_tensor_near(dxv, rf_shape_of(2, (int64_t)3, (int64_t)4), sum, 1e-12);
    free(sum);
    for (int i = 0; i < ny; i++) rf_tensor_release(rvs[i]);
    rf_tensor_release(xin);
    rf_tensor_release(dxv);
    rf_graph_free(g);
  }
}

static void test_single_device_broadcast(void **state) {
  rf_graph *g = rf_graph_new();
  char dev[16];
  device_name(2, dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, (int64_t)5));
  rf_output b = rf_broadcast(g, "bcast", x);
  rf_output y = rf_identity(g, "y", b);
  rf_graph_pop_device(g);
  uint64_t rng = rf_test_seed() + 6;
  rf_tensor *in = rf_test_random_tensor(&rng, RF_FLOAT32,
                                        rf_shape_of(1, (int64_t)5), -1, 1),
            *out[2];
  rf_feed feed = {x, in};
  rf_output f[2] = {y, b};
  run_session(g, &feed, 1, f, 2, out);
  double *want = rf_test_to_doubles(in);
  assert_tensor_near(out[0], rf_shape_of(1, (int64_t)5), want, 0);
  assert_tensor_near(out[1], rf_shape_of(1, (int64_t)5), want, 0);
  free(want);
  rf_tensor_release(in);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  rf_graph_free(g);
}

/* sum through all-reduce and through reduce + broadcast, fetched together. */
static void test_all_reduce_and_reduce_broadcast_agree(void **state) {
  uint64_t rng = rf_test_seed() + 7;
  const devset *ds = &device_sets[0];
  rf_graph *g = rf_graph_new();
  rf_output xs[8], ar[8], viab[8];
  rf_tensor *in[8], *out[16];
  placeholders(g, ds, RF_FLOAT32, xs);
  rf_all_reduce_n(g, "ar", xs, ds->n, RF_REDUCE_SUM, ar);
  char dev[16];
  device_name(ds->ids[0], dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output r = rf_reduce(g, "r", xs, ds->n, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "b", r);
  rf_graph_pop_device(g);
  for (int i = 0; i < ds->n; i++) {
    device_name(ds->ids[i], dev);
    assert_ok(rf_graph_push_device(g, dev));
    viab[i] = rf_identity(g, NULL, b);
    rf_graph_pop_device(g);
    in[i] = random_input(&rng, RF_FLOAT32, RF_REDUCE_SUM);
  }
  rf_output fetches[16];
  memcpy(fetches, ar, sizeof *ar * (size_t)ds->n);
  memcpy(fetches + ds->n, viab, sizeof *viab * (size_t)ds->n);
  run(g, xs, in, ds->n, fetches, 2 * ds->n, out);
  for (int i = 0; i < ds->n; i++) {
#ifdef RF_COLLECTIVES_AGREE_TO_TOLERANCE
    /* tests/mpi/: MPI's reduce and all-reduce sum in different orders */
    double *via = rf_test_to_doubles(out[ds->n + i]);
    assert_tensor_near(out[i], rf_tensor_shape(out[i]), via,
                       rf_test_tolerance(RF_FLOAT32) * ds->n);
    free(via);
#else
    assert_memory_equal(rf_tensor_data(out[i]), rf_tensor_data(out[ds->n + i]),
                        rf_tensor_nbytes(out[i]));
#endif
  }
  for (int i = 0; i < 2 * ds->n; i++) rf_tensor_release(out[i]);
  for (int i = 0; i < ds->n; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
}

/* Fetching one participant runs them all (tensorflow#19690: all_sum hung
 * unless every output was fetched). */
static void test_fetching_one_participant_runs_all(void **state) {
  uint64_t rng = rf_test_seed() + 8;
  const devset *ds = &device_sets[0];
  rf_graph *g = rf_graph_new();
  rf_output xs[8], ys[8];
  rf_tensor *in[8], *out;
  placeholders(g, ds, RF_FLOAT64, xs);
  rf_all_reduce_n(g, "ar", xs, ds->n, RF_REDUCE_MAX, ys);
  for (int i = 0; i < ds->n; i++)
    in[i] = random_input(&rng, RF_FLOAT64, RF_REDUCE_MAX);
  run(g, xs, in, ds->n, &ys[1], 1, &out);
  double *want = reference(in, ds->n, RF_REDUCE_MAX, RF_FLOAT64);
  assert_tensor_near(out, rf_shape_of(2, (int64_t)3, (int64_t)4), want, 0);
  free(want);
  for (int i = 0; i < ds->n; i++) rf_tensor_release(in[i]);
  rf_tensor_release(out);
  rf_graph_free(g);
}

/* Gradients beyond the reference: avg, prod (with zeros), max and min (ties to
 * the lowest device index), against float64 derivatives computed here. */
static double reduce_elems(rf_reduction red, const double *v, int n) {
  double a = v[0];
  for (int k = 1; k < n; k++) a = combine(red, a, v[k]);
  return red == RF_REDUCE_AVG ? a / n : a;
}

static void test_other_reduction_gradients(void **state) {
  uint64_t rng = rf_test_seed() + 9;
  const devset *ds = &device_sets[0]; /* {1, 2, 0} */
  const rf_reduction reds[] = {RF_REDUCE_AVG, RF_REDUCE_PROD, RF_REDUCE_MAX,
                               RF_REDUCE_MIN};
  for (size_t ri = 0; ri < sizeof reds / sizeof *reds; ri++) {
    rf_reduction red = reds[ri];
    rf_graph *g = rf_graph_new();
    rf_output xs[8], ys[8], rs[8], dxs[8];
    rf_tensor *in[8], *rv[8], *out[8];
    placeholders(g, ds, RF_FLOAT64, xs);
    char name[32];
    sprintf(name, "ar%d", (int)red);
    rf_all_reduce_n(g, name, xs, ds->n, red, ys);
    for (int i = 0; i < ds->n; i++) {
      rv[i] =
          rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 4), -1, 1);
      char dev[16];
      device_name(ds->ids[i], dev);
      assert_ok(rf_graph_push_device(g, dev));
      rs[i] = rf_const(g, NULL, rv[i]);
      rf_graph_pop_device(g);
      in[i] =
          rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 4), -2, 2);
    }
    /* special cases in element columns: ties (max/min), zeros (prod) */
    for (int i = 0; i < ds->n; i++) {
      double *d = rf_tensor_mutable_data(in[i]);
      d[0] = 1.5;                 /* a tie on every device */
      d[1] = i == 0 ? 0.0 : d[1]; /* one zero */
      d[2] = i < 2 ? 0.0 : d[2];  /* two zeros */
    }
    assert_ok(rf_gradients(g, ys, ds->n, xs, ds->n, rs, dxs));
    run(g, xs, in, ds->n, dxs, ds->n, out);
    for (int e = 0; e < 12; e++) {
      double v[8], rsum = 0;
      for (int k = 0; k < ds->n; k++) {
        v[k] = rf_tensor_get(in[k], e);
        rsum += rf_tensor_get(rv[k], e);
      }
      for (int i = 0; i < ds->n; i++) {
        double want;
        if ((red == RF_REDUCE_MAX || red == RF_REDUCE_MIN)) {
          double ext = reduce_elems(red, v, ds->n);
          int winner = -1;
          for (int k = 0; k < ds->n; k++)
            if (v[k] == ext &&
                (winner < 0 ||
                 DEVICE_ORDER(ds->ids[k]) < DEVICE_ORDER(ds->ids[winner])))
              winner = k;
          want = i == winner ? rsum : 0;
        } else { /* multilinear or linear: central differences are exact */
          double h = 1e-4, save = v[i];
          v[i] = save + h;
          double up = reduce_elems(red, v, ds->n);
          v[i] = save - h;
          double down = reduce_elems(red, v, ds->n);
          v[i] = save;
          want = rsum * (up - down) / (2 * h);
        }
        double got = rf_tensor_get(out[i], e);
        if (fabs(got - want) > 1e-8 * (1 + fabs(want)))
          fail_msg("%s gradient, device %d elem %d: got %.12g want %.12g",
                   red == RF_REDUCE_AVG    ? "avg"
                   : red == RF_REDUCE_PROD ? "prod"
                   : red == RF_REDUCE_MAX  ? "max"
                                           : "min",
                   ds->ids[i], e, got, want);
      }
    }
    for (int i = 0; i < ds->n; i++) {
      rf_tensor_release(in[i]);
      rf_tensor_release(rv[i]);
      rf_tensor_release(out[i]);
    }
    rf_graph_free(g);
  }
}

#ifndef RF_COLLECTIVES_HOOKS /* CPU devices: this file's main */
/* A float32 max/min all-reduce that goes over the wire in bfloat16 or
 * float16 (its own comm_dtype, set after rf_gradients, or the session's):
 * its output equals no input, and the summed gradient still goes to the
 * participant holding the extremum (it went nowhere: all zeros). */
static void test_extremum_gradient_over_a_narrow_wire(void **state) {
  (void)state;
  const float vals[3] = {1.01f, 1.02f, 1.03f}; /* one value in bfloat16 */
  for (int way = 0; way < 4; way++) {
    bool max = way % 2 == 0, session_wide = way >= 2;
    rf_graph *g = rf_graph_new();
    rf_output xs[3], ys[3], dxs[3];
    for (int i = 0; i < 3; i++) {
      char dev[16];
      device_name(i, dev);
      assert_ok(rf_graph_push_device(g, dev));
      xs[i] = rf_const_scalar(g, NULL, RF_FLOAT32, max ? vals[i] : -vals[i]);
      rf_graph_pop_device(g);
    }
    rf_all_reduce_n(g, "ext", xs, 3, max ? RF_REDUCE_MAX : RF_REDUCE_MIN, ys);
    assert_ok(rf_gradients(g, ys, 3, xs, 3, NULL, dxs));
    if (!session_wide)
      for (int i = 0; i < 3; i++)
        assert_ok(rf_all_reduce_set_comm_dtype(ys[i].node, RF_BFLOAT16));
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 3;
    if (session_wide) o.collective_comm_dtype = "float16";
    rf_session *s;
    assert_ok(rf_session_new(g, &o, &s));
    rf_tensor *out[4];
    rf_output fetch[4] = {ys[0], dxs[0], dxs[1], dxs[2]};
    assert_ok(rf_session_run(s, NULL, 0, fetch, 4, NULL, 0, out));
    assert_true(rf_tensor_get(out[0], 0) != (max ? vals[2] : -vals[2]));
    /* the 3 outputs' gradients (1 each), summed, to device 2 alone */
    assert_true(rf_tensor_get(out[1], 0) == 0.0);
    assert_true(rf_tensor_get(out[2], 0) == 0.0);
    assert_true(rf_tensor_get(out[3], 0) == 3.0);
    for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* prod's gradient is the product of the others' inputs, computed from them:
 * second order through zeros (z = sum_i dL/dx_i, dz/dx_j = n sum_{i != j}
 * prod_{k != i, j} x_k; it was 0 or wrong at every zero) and a first order
 * whose forward output overflows (y / x_i was inf). */
static void test_prod_gradient_at_zeros_and_overflow(void **state) {
  (void)state;
  const double points[][3] = {{0, 3, 0}, {0, 0, 0}, {0, 2, 0}, {2, 3, 5}};
  for (int n = 2; n <= 3; n++)
    for (size_t p = 0; p < sizeof points / sizeof *points; p++) {
      rf_graph *g = rf_graph_new();
      rf_output xs[3], ys[3], d1[3], d2[3];
      for (int i = 0; i < n; i++) {
        char dev[16];
        device_name(i, dev);
        assert_ok(rf_graph_push_device(g, dev));
        xs[i] = rf_const_scalar(g, NULL, RF_FLOAT64, points[p][i]);
        rf_graph_pop_device(g);
      }
      rf_all_reduce_n(g, "pr", xs, n, RF_REDUCE_PROD, ys);
      assert_ok(rf_gradients(g, ys, n, xs, n, NULL, d1));
      assert_ok(rf_gradients(g, d1, n, xs, n, NULL, d2));
      rf_tensor *out[6];
      rf_output fetch[6];
      for (int i = 0; i < n; i++) fetch[i] = d1[i], fetch[n + i] = d2[i];
      rf_test_run(g, 8, NULL, 0, fetch, 2 * n, out);
      const double *x = points[p];
      for (int j = 0; j < n; j++) {
        double first = n, second = 0;
        for (int k = 0; k < n; k++)
          if (k != j) first *= x[k];
        for (int i = 0; i < n; i++) {
          if (i == j) continue;
          double t = n;
          for (int k = 0; k < n; k++)
            if (k != i && k != j) t *= x[k];
          second += t;
        }
        if (rf_tensor_get(out[j], 0) != first ||
            rf_tensor_get(out[n + j], 0) != second)
          fail_msg(
              "n %d, x (%g, %g, %g), j %d: first %g want %g, second %g "
              "want %g",
              n, x[0], x[1], n > 2 ? x[2] : 0.0, j, rf_tensor_get(out[j], 0),
              first, rf_tensor_get(out[n + j], 0), second);
      }
      for (int i = 0; i < 2 * n; i++) rf_tensor_release(out[i]);
      rf_graph_free(g);
    }
  /* float32 whose product overflows: d/dx_0 = 3 * 1e30 * 1e-30 */
  rf_graph *g = rf_graph_new();
  const float big[3] = {1e30f, 1e30f, 1e-30f};
  rf_output xs[3], ys[3], d1[3];
  for (int i = 0; i < 3; i++) {
    char dev[16];
    device_name(i, dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_const_scalar(g, NULL, RF_FLOAT32, big[i]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "big", xs, 3, RF_REDUCE_PROD, ys);
  assert_ok(rf_gradients(g, ys, 3, xs, 3, NULL, d1));
  rf_tensor *out[2];
  rf_output fetch[2] = {ys[0], d1[0]};
  rf_test_run(g, 8, NULL, 0, fetch, 2, out);
  assert_true(isinf(rf_tensor_get(out[0], 0)));
  assert_true(fabs(rf_tensor_get(out[1], 0) - 3.0) < 1e-5);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  rf_graph_free(g);
}
#endif

/* The participants of a collective form one group for gradients: d loss/d x0
 * where the loss reads only device 1's all-reduce output still flows through
 * device 0's participant, and every participant of the gradient's all-reduce
 * is built (with zeros where no gradient arrives). */
static void test_gradient_through_peers(void **state) {
  uint64_t rng = rf_test_seed() + 10;
  const devset *ds = &device_sets[0];
  rf_graph *g = rf_graph_new();
  rf_output xs[8], ys[8];
  rf_tensor *in[8], *out[2];
  placeholders(g, ds, RF_FLOAT64, xs);
  rf_all_reduce_n(g, "ar", xs, ds->n, RF_REDUCE_SUM, ys);
  char dev[16];
  device_name(ds->ids[1], dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output loss =
      rf_sum(g, NULL, rf_mul(g, NULL, ys[1], ys[1]), NULL, -1, false);
  rf_graph_pop_device(g);
  rf_output dx[2];
  rf_output wrt[2] = {xs[0], xs[2]};
  assert_ok(rf_gradients(g, &loss, 1, wrt, 2, NULL, dx));
  assert_non_null(dx[0].node);
  for (int i = 0; i < ds->n; i++)
    in[i] = random_input(&rng, RF_FLOAT64, RF_REDUCE_SUM);
  run(g, xs, in, ds->n, dx, 2, out);
  /* loss = sum(s^2), s = x0 + x1 + x2: d/dx_i = 2 s */
  double *sum = reference(in, ds->n, RF_REDUCE_SUM, RF_FLOAT64);
  for (int e = 0; e < 12; e++) sum[e] *= 2;
  assert_tensor_near(out[0], rf_shape_of(2, 3, 4), sum, 1e-12);
  assert_tensor_near(out[1], rf_shape_of(2, 3, 4), sum, 1e-12);
  free(sum);
  for (int i = 0; i < ds->n; i++) rf_tensor_release(in[i]);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  rf_graph_free(g);
}

/* The matrix's tests: this file's main, and the files that include it with
 * RF_COLLECTIVES_HOOKS for other device sets (several processes). */
#define RF_COLLECTIVES_TESTS                                        \
  cmocka_unit_test(test_all_reduce_matrix),                         \
      cmocka_unit_test(test_reduce_matrix),                         \
      cmocka_unit_test(test_broadcast_matrix),                      \
      cmocka_unit_test(test_all_gather_reduce_scatter),             \
      cmocka_unit_test(test_all_reduce_gradient),                   \
      cmocka_unit_test(test_reduce_and_broadcast_gradients),        \
      cmocka_unit_test(test_single_device_broadcast),               \
      cmocka_unit_test(test_all_reduce_and_reduce_broadcast_agree), \
      cmocka_unit_test(test_fetching_one_participant_runs_all),     \
      cmocka_unit_test(test_other_reduction_gradients),             \
      cmocka_unit_test(test_gradient_through_peers)

#ifndef RF_COLLECTIVES_HOOKS
int main(void) {
  const struct CMUnitTest tests[] = {
      RF_COLLECTIVES_TESTS,
      cmocka_unit_test(test_extremum_gradient_over_a_narrow_wire),
      cmocka_unit_test(test_prod_gradient_at_zeros_and_overflow)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
