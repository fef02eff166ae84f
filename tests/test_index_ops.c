/* tests/test_index_ops.c - Gather, OneHot and Select run through a session on
 * fresh random inputs of every dtype against references written here (byte
 * for byte), with repeated, empty and broadcast cases; their gradients
 * (Gather's scatter-add, Select's split, second order) against central
 * finite differences in float64, with shapes known and unknown; and the
 * errors, at build and at run time, naming the node and op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static rf_tensor *indices(uint64_t *rng, rf_dtype dt, rf_shape s, int64_t n) {
  return rf_test_random_tensor(rng, dt, s, 0, (double)n);
}

static void same_bytes(const rf_tensor *t, rf_shape want, const char *ref,
                       const char *what) {
  rf_shape s = rf_tensor_shape(t);
  if (!rf_shape_equal(&s, &want)) fail_msg("%s: wrong shape", what);
  size_t nb =
      (size_t)rf_tensor_num_elements(t) * rf_dtype_size(rf_tensor_dtype(t));
  if (nb && memcmp(rf_tensor_data(t), ref, nb))
    fail_msg("%s (%s): values differ", what, rf_dtype_name(rf_tensor_dtype(t)));
}

/* Gather of params (a, b, c) along each axis with (2, 3) indices. */
static void check_gather(uint64_t *rng, rf_dtype dt, rf_dtype it,
                         bool unknown) {
  rf_shape ps = rf_shape_of(3, 3, 4, 2);
  rf_tensor *p = rf_test_random_tensor(rng, dt, ps, -50, 50);
  size_t es = rf_dtype_size(dt);
  for (int axis = 0; axis < 3; axis++) {
    for (int empty = 0; empty < 2; empty++) {
      rf_shape is = empty ? rf_shape_of(2, 0, 3) : rf_shape_of(2, 2, 3);
      rf_tensor *ix = indices(rng, it, is, ps.dims[axis]);
      rf_graph *g = rf_graph_new();
      rf_output pp =
          rf_placeholder(g, "p", dt, unknown ? rf_shape_unknown() : ps);
      rf_output pi =
          rf_placeholder(g, "i", it, unknown ? rf_shape_unknown() : is);
      rf_output y = rf_gather(g, NULL, pp, pi, axis - (axis == 2 ? 3 : 0));
      assert_graph_ok(g);
      rf_feed f[2] = {{pp, p}, {pi, ix}};
      rf_tensor *out;
      rf_test_run(g, 1, f, 2, &y, 1, &out);
      /* out[o, j, i] = p[o, ix[j], i] */
      int64_t outer = 1, inner = 1, k = rf_tensor_num_elements(ix);
      for (int d = 0; d < axis; d++) outer *= ps.dims[d];
      for (int d = axis + 1; d < 3; d++) inner *= ps.dims[d];
      rf_shape os = rf_shape_scalar();
      for (int d = 0; d < axis; d++) os.dims[os.rank++] = ps.dims[d];
      for (int d = 0; d < 2; d++) os.dims[os.rank++] = is.dims[d];
      for (int d = axis + 1; d < 3; d++) os.dims[os.rank++] = ps.dims[d];
      char *ref = calloc((size_t)(outer * k * inner + 1), es);
      for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < k; j++)
          for (int64_t i = 0; i < inner; i++) {
            int64_t v = (int64_t)rf_tensor_get(ix, j);
            memcpy(ref + ((o * k + j) * inner + i) * es,
                   (const char *)rf_tensor_data(p) +
                       ((o * ps.dims[axis] + v) * inner + i) * es,
                   es);
          }
      same_bytes(out, os, ref, "Gather");
      free(ref);
      rf_tensor_release(out);
      rf_tensor_release(ix);
      rf_graph_free(g);
    }
  }
  rf_tensor_release(p);
}

static void check_one_hot(uint64_t *rng, rf_dtype dt, rf_dtype it) {
  rf_shape is = rf_shape_of(2, 2, 3);
  rf_tensor *ix = rf_test_random_tensor(rng, it, is, 0, 5); /* 4 is off */
  for (int axis = -1; axis < 3; axis++) {
    rf_graph *g = rf_graph_new();
    rf_output pi = rf_placeholder(g, "i", it, is);
    rf_output y = rf_one_hot(g, NULL, pi, 4, 1, 0, axis, dt);
    assert_graph_ok(g);
    rf_feed f = {pi, ix};
    rf_tensor *out;
    rf_test_run(g, 1, &f, 1, &y, 1, &out);
    int a = axis < 0 ? 2 : axis;
    rf_shape os = rf_shape_of(3, 2, 3, 3);
    for (int d = 0, s = 0; d < 3; d++) os.dims[d] = d == a ? 4 : is.dims[s++];
    rf_tensor *on, *off;
    assert_ok(rf_tensor_new_scalar(dt, 1, &on));
    assert_ok(rf_tensor_new_scalar(dt, 0, &off));
    size_t es = rf_dtype_size(dt);
    char *ref = calloc(24, es);
    for (int64_t e = 0; e < 24; e++) {
      int64_t idx[3], r = e, src[2];
      for (int d = 2; d >= 0; d--) idx[d] = r % os.dims[d], r /= os.dims[d];
      for (int d = 0, s = 0; d < 3; d++)
        if (d != a) src[s++] = idx[d];
      bool hot = (int64_t)rf_tensor_get(ix, src[0] * 3 + src[1]) == idx[a];
      memcpy(ref + e * es, rf_tensor_data(hot ? on : off), es);
    }
    same_bytes(out, os, ref, "OneHot");
    free(ref);
    rf_tensor_release(on);
    rf_tensor_release(off);
    rf_tensor_release(out);
    rf_graph_free(g);
  }
  rf_tensor_release(ix);
}

static void check_select(uint64_t *rng, rf_dtype dt, bool unknown) {
  static const rf_shape shapes[][3] = {
      {{2, {2, 3}}, {2, {2, 3}}, {2, {2, 3}}},
      {{1, {3}}, {2, {2, 3}}, {0, {0}}},
      {{2, {2, 1}}, {2, {1, 3}}, {3, {2, 1, 1}}},
      {{0, {0}}, {2, {0, 3}}, {1, {3}}},
  };
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    rf_tensor *in[3] = {rf_test_random_tensor(rng, RF_BOOL, shapes[k][0], 0, 2),
                        rf_test_random_tensor(rng, dt, shapes[k][1], -50, 50),
                        rf_test_random_tensor(rng, dt, shapes[k][2], -50, 50)};
    rf_graph *g = rf_graph_new();
    rf_output p[3];
    rf_feed f[3];
    for (int i = 0; i < 3; i++) {
      p[i] = rf_placeholder(g, NULL, rf_tensor_dtype(in[i]),
                            unknown ? rf_shape_unknown() : shapes[k][i]);
      f[i] = (rf_feed){p[i], in[i]};
    }
    rf_output y = rf_select(g, NULL, p[0], p[1], p[2]);
    assert_graph_ok(g);
    rf_tensor *out;
    rf_test_run(g, 1, f, 3, &y, 1, &out);
    rf_shape os = rf_tensor_shape(out);
    int64_t n = rf_tensor_num_elements(out);
    size_t es = rf_dtype_size(dt);
    char *ref = calloc((size_t)n + 1, es);
    for (int64_t e = 0; e < n; e++) {
      int64_t idx[RF_MAX_RANK], r = e, off[3] = {0, 0, 0};
      for (int d = os.rank - 1; d >= 0; d--)
        idx[d] = r % os.dims[d], r /= os.dims[d];
      for (int i = 0; i < 3; i++) {
        const rf_shape *s = &shapes[k][i];
        for (int d = 0; d < s->rank; d++) {
          int64_t x = idx[os.rank - s->rank + d];
          off[i] = off[i] * s->dims[d] + (s->dims[d] == 1 ? 0 : x);
        }
      }
      bool c = rf_tensor_get(in[0], off[0]) != 0;
      memcpy(ref + e * es,
             (const char *)rf_tensor_data(in[c ? 1 : 2]) + off[c ? 1 : 2] * es,
             es);
    }
    same_bytes(out, os, ref, "Select");
    free(ref);
    rf_tensor_release(out);
    for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
    rf_graph_free(g);
  }
}

static void test_values_every_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(21);
  for (int d = 0; d < NDT; d++)
    for (int unknown = 0; unknown < 2; unknown++) {
      check_gather(&rng, all_dtypes[d], unknown ? RF_INT64 : RF_INT32, unknown);
      check_select(&rng, all_dtypes[d], unknown);
    }
  for (int d = 0; d < NDT; d++) {
    check_one_hot(&rng, all_dtypes[d], RF_INT32);
    check_one_hot(&rng, all_dtypes[d], RF_UINT8);
  }
}

/* ---- gradients ---- */

typedef struct grad_case {
  const char *name;
  int op; /* 0 Gather, 1 Select */
  rf_shape xs[3];
  int64_t axis;
  int64_t idx[6];
  rf_shape is;
} grad_case;

static rf_output build(rf_graph *g, const rf_output *x, const grad_case *c,
                       rf_tensor *cond) {
  if (c->op == 0) {
    rf_tensor *ix;
    assert_ok(rf_tensor_new_copy(RF_INT64, &c->is, c->idx, &ix));
    rf_output y = rf_gather(g, NULL, x[0], rf_const(g, NULL, ix), c->axis);
    rf_tensor_release(ix);
    return y;
  }
  return rf_select(g, NULL, rf_const(g, NULL, cond), x[0], x[1]);
}

static double run_y(rf_session *s, rf_feed *f, int n, rf_output y) {
  rf_tensor *v;
  assert_ok(rf_session_run(s, f, n, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

static rf_output weighted(rf_graph *g, rf_output f, rf_shape s, uint64_t *rng) {
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, s, -1, 1);
  rf_output y = rf_sum(g, NULL, rf_mul(g, NULL, f, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  return y;
}

static void check_grad(const grad_case *c, bool unknown, bool second,
                       uint64_t *rng) {
  int nx = c->op == 0 ? 1 : 2;
  rf_graph *g = rf_graph_new();
  rf_output x[2], dx[2];
  rf_feed f[2];
  for (int j = 0; j < nx; j++) {
    x[j] = rf_placeholder(g, NULL, RF_FLOAT64,
                          unknown ? rf_shape_unknown() : c->xs[j]);
    f[j] = (rf_feed){x[j],
                     rf_test_random_tensor(rng, RF_FLOAT64, c->xs[j], -1, 1)};
  }
  rf_tensor *cond = rf_test_random_tensor(rng, RF_BOOL, c->xs[2], 0, 2);
  rf_output y = build(g, x, c, cond);
  rf_tensor *probe;
  rf_test_run(g, 1, f, nx, &y, 1, &probe);
  rf_shape ys = rf_tensor_shape(probe);
  rf_tensor_release(probe);
  if (second) {
    rf_output inner = weighted(g, rf_mul(g, NULL, y, y), ys, rng);
    assert_ok(rf_gradients(g, &inner, 1, x, nx, NULL, dx));
    y = dx[0];
    ys = c->xs[0];
  }
  rf_output loss = weighted(g, y, ys, rng);
  assert_ok(rf_gradients(g, &loss, 1, x, nx, NULL, dx));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *got[2];
  assert_ok(rf_session_run(s, f, nx, dx, nx, NULL, 0, got));
  for (int j = 0; j < nx; j++) {
    rf_shape gs = rf_tensor_shape(got[j]);
    if (!rf_shape_equal(&gs, &c->xs[j])) fail_msg("%s: dx shape", c->name);
    rf_tensor *orig = f[j].value;
    for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
      double v[2];
      for (int side = 0; side < 2; side++) {
        rf_tensor *p;
        assert_ok(rf_tensor_new_copy(RF_FLOAT64, &c->xs[j],
                                     rf_tensor_data(orig), &p));
        ((double *)rf_tensor_mutable_data(p))[i] += side ? -1e-6 : 1e-6;
        f[j].value = p;
        v[side] = run_y(s, f, nx, loss);
        rf_tensor_release(p);
      }
      f[j].value = orig;
      double want = (v[0] - v[1]) / 2e-6, have = rf_tensor_get(got[j], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1, fabs(want))))
        fail_msg("%s%s%s: dx%d[%lld]: finite difference %.12g, gradient %.12g",
                 c->name, unknown ? " (unknown shapes)" : "",
                 second ? " (second order)" : "", j, (long long)i, want, have);
    }
    rf_tensor_release(got[j]);
  }
  for (int j = 0; j < nx; j++) rf_tensor_release(f[j].value);
  rf_tensor_release(cond);
  rf_session_free(s);
  rf_graph_free(g);
}

static const grad_case grad_cases[] = {
    {"Gather/axis0 repeats", 0, {{2, {4, 3}}}, 0, {2, 0, 2, 3}, {1, {4}}},
    {"Gather/axis1 2d indices",
     0,
     {{3, {2, 3, 2}}},
     1,
     {1, 1, 0, 2, 1, 1},
     {2, {3, 2}}},
    {"Gather/axis-1 size-1", 0, {{2, {3, 1}}}, -1, {0, 0}, {1, {2}}},
    {"Gather/empty indices", 0, {{2, {3, 2}}}, 0, {0}, {1, {0}}},
    {"Select/same", 1, {{2, {2, 3}}, {2, {2, 3}}, {2, {2, 3}}}, 0, {0}, {0}},
    {"Select/broadcast",
     1,
     {{2, {1, 3}}, {0, {0}}, {3, {2, 2, 1}}},
     0,
     {0},
     {0}},
};

static void test_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(22);
  for (size_t i = 0; i < sizeof grad_cases / sizeof grad_cases[0]; i++)
    for (int unknown = 0; unknown < 2; unknown++)
      for (int second = 0; second < 2; second++)
        check_grad(&grad_cases[i], unknown, second, &rng);
}

/* ---- errors ---- */

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output p = rf_placeholder(g, "p", RF_FLOAT32, rf_shape_of(2, 3, 2));
  rf_output i32 = rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 2));
  rf_output s = rf_placeholder(g, "s", RF_FLOAT32, rf_shape_scalar());
  static const char *subs[] = {"params must have rank >= 1",
                               "axis 2 is out of range",
                               "Tindices",
                               "depth",
                               "out of range",
                               "Incompatible shapes",
                               "condition"};
  rf_output c13 = rf_placeholder(g, "c", RF_BOOL, rf_shape_of(1, 3));
  for (int k = 0; k < 7; k++) {
    rf_output out;
    switch (k) {
      case 0: out = rf_gather(g, "bad", s, i32, 0); break;
      case 1: out = rf_gather(g, "bad", p, i32, 2); break;
      case 2: out = rf_gather(g, "bad", p, p, 0); break;
      case 3: out = rf_one_hot(g, "bad", i32, -1, 1, 0, -1, RF_FLOAT32); break;
      case 4: out = rf_one_hot(g, "bad", i32, 3, 1, 0, 3, RF_FLOAT32); break;
      case 5: out = rf_select(g, "bad", c13, p, p); break;
      default: out = rf_select(g, "bad", i32, p, p); break;
    }
    assert_null(out.node);
    rf_status *st = rf_graph_status(g);
    assert_non_null(st);
    if (!strstr(rf_status_message(st), subs[k]) ||
        !strstr(rf_status_message(st), "'bad'"))
      fail_msg("case %d: \"%s\" lacks %s", k, rf_status_message(st), subs[k]);
    rf_status_free(st);
    rf_graph_clear_status(g);
  }
  /* An index out of range fails the run on CPU devices, naming it. */
  rf_output y = rf_gather(g, "emb", p, i32, 0);
  rf_output dp;
  rf_output loss = rf_sum(g, NULL, y, NULL, -1, false);
  assert_ok(rf_gradients(g, &loss, 1, &p, 1, NULL, &dp));
  assert_graph_ok(g);
  rf_session *sess = rf_test_cpu_session(g, 1);
  uint64_t rng = rf_test_rng(23);
  rf_tensor *tp =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 3, 2), -1, 1);
  int32_t bad_idx[2] = {1, 3};
  rf_shape is = rf_shape_of(1, 2);
  rf_tensor *ti;
  assert_ok(rf_tensor_new_copy(RF_INT32, &is, bad_idx, &ti));
  rf_feed f[2] = {{p, tp}, {i32, ti}};
  const char *rsubs[] = {"node 'emb' (Gather) on cpu:0",
                         "indices[1] = 3 is not in [0, 3)"};
  rf_test_expect_run_error(sess, f, 2, &y, 1, RF_INVALID_ARGUMENT, rsubs, 2);
  const char *gsubs[] = {"on cpu:0", "indices[1] = 3"};
  rf_test_expect_run_error(sess, f, 2, &dp, 1, RF_INVALID_ARGUMENT, gsubs, 2);
  rf_session_free(sess);
  rf_tensor_release(tp);
  rf_tensor_release(ti);
  rf_graph_free(g);
}

/* Gather's params may have any dtype; the gradient is the float params'
 * alone: rf_gradients through a Gather of integer or bool params leaves dx
 * invalid (as BatchMatMul's integers) instead of failing on _GatherGrad
 * and leaving the error in the graph. */
static void test_gather_non_float_params_no_gradient(void **state) {
  (void)state;
  const rf_dtype dts[] = {RF_INT8, RF_UINT8, RF_INT32, RF_INT64, RF_BOOL};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    rf_graph *g = rf_graph_new();
    rf_output p = rf_placeholder(g, "p", dts[k], rf_shape_of(2, 3, 2));
    rf_output i = rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 2));
    rf_output y = rf_gather(g, "emb", p, i, 0);
    rf_output dx = {(rf_node *)1, 7};
    assert_ok(rf_gradients(g, &y, 1, &p, 1, NULL, &dx));
    assert_null(dx.node);
    assert_graph_ok(g);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values_every_dtype),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_gather_non_float_params_no_gradient),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
