/* tests/test_group_updates.c - multi-tensor optimizer updates
 * (rf_session_options.group_optimizer_updates, passes/group_updates.c):
 * ApplyAdam, ApplyAdamW and ApplyMomentum (plain and Nesterov) of several
 * variables of random shapes (empty ones included) run several steps on
 * fresh random data with grouping on and off; the variables must be
 * bit-identical, float32 and float64, and the lowered graph must hold one
 * _MultiApply* node for them. Updates that differ in a scalar input, dtype,
 * use_nesterov or device, or that a path joins, are never grouped; a
 * grouped update under allocation failures (tests/fault_sweep.h) moves
 * every variable of the group together or none; a GPU run (skipped without
 * one) matches the CPU. Float64 beta powers behind Casts (as ringflow
 * train keeps them) are read straight by the grouped node, rounded as the
 * Casts would, bit for bit. AssignMuls of one device and dtype (Adam's beta
 * powers) become one _MultiAssignMul: its outputs and the variables are bit
 * for bit the ungrouped ones for every float dtype, on the CPU and the GPU;
 * dependent ones, other dtypes and two of one variable stay apart; under
 * allocation failures all or nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "testutil.h"

#define MAXP 8

typedef enum { ADAM, ADAMW, MOMENTUM, NESTEROV } kind;
static const char *const kind_names[] = {"Adam", "AdamW", "Momentum",
                                         "Nesterov"};

typedef struct model {
  rf_graph *g;
  kind k;
  rf_dtype dt;
  int n, nslots; /* variables per parameter: 3 (Adam) or 2 */
  rf_shape shapes[MAXP];
  rf_output init[MAXP][3], read[MAXP][3], grad[MAXP];
  rf_output hp[7]; /* b1p, b2p, lr, b1, b2, eps, wd; momentum: lr, mu */
  rf_node *assign[3 * MAXP], *update[MAXP];
  /* f64_powers: b1p and b2p are Casts of these float64 placeholders (as
   * ringflow train keeps them: float64 variables) */
  bool f64_powers;
  rf_output pw[2];
} model;

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static rf_output scalar_in(model *m, const char *name) {
  return rf_placeholder(m->g, name, m->dt, rf_shape_scalar());
}

/* n parameters of random shapes (the second one empty) on `device`;
 * f64_powers: the beta powers come from float64 placeholders by Casts. */
static void build_with(model *m, kind k, rf_dtype dt, int n, const char *device,
                       bool f64_powers) {
  memset(m, 0, sizeof *m);
  m->g = rf_graph_new();
  m->k = k, m->dt = dt, m->n = n;
  m->nslots = k == ADAM || k == ADAMW ? 3 : 2;
  m->f64_powers = f64_powers;
  assert_ok(rf_graph_push_device(m->g, device));
  static const char *const hp_names[] = {"b1p", "b2p", "lr", "b1",
                                         "b2",  "eps", "wd"};
  for (int j = 0; j < 7; j++) m->hp[j] = scalar_in(m, hp_names[j]);
  for (int j = 0; f64_powers && j < 2; j++) {
    m->pw[j] = rf_placeholder(m->g, j ? "b2p64" : "b1p64", RF_FLOAT64,
                              rf_shape_scalar());
    m->hp[j] = rf_cast(m->g, j ? "b2p_cast" : "b1p_cast", m->pw[j], dt);
  }
  for (int p = 0; p < n; p++) {
    int rank = (int)(rf_test_rand(&rng) % 3);
    int64_t d0 = 1 + (int64_t)(rf_test_rand(&rng) % 40);
    int64_t d1 = 1 + (int64_t)(rf_test_rand(&rng) % 9);
    m->shapes[p] = rank == 0   ? rf_shape_scalar()
                   : rank == 1 ? rf_shape_of(1, d0)
                               : rf_shape_of(2, d0, d1);
    if (p == 1) m->shapes[p] = rf_shape_of(2, (int64_t)0, d1);
    rf_output vars[3];
    for (int s = 0; s < m->nslots; s++) {
      char name[32];
      snprintf(name, sizeof name, "p%d_%d", p, s);
      vars[s] = rf_variable(m->g, name, dt, m->shapes[p]);
      snprintf(name, sizeof name, "p%d_%d_init", p, s);
      m->init[p][s] = rf_placeholder(m->g, name, dt, m->shapes[p]);
      m->assign[p * m->nslots + s] =
          rf_assign(m->g, NULL, vars[s], m->init[p][s]);
      m->read[p][s] = rf_read_variable(m->g, NULL, vars[s]);
    }
    char name[32];
    snprintf(name, sizeof name, "g%d", p);
    m->grad[p] = rf_placeholder(m->g, name, dt, m->shapes[p]);
    rf_output *h = m->hp;
    if (k == ADAM)
      m->update[p] = rf_apply_adam(m->g, NULL, vars[0], vars[1], vars[2], h[0],
                                   h[1], h[2], h[3], h[4], h[5], m->grad[p]);
    else if (k == ADAMW)
      m->update[p] =
          rf_apply_adamw(m->g, NULL, vars[0], vars[1], vars[2], h[0], h[1],
                         h[2], h[3], h[4], h[5], h[6], m->grad[p]);
    else
      m->update[p] = rf_apply_momentum(m->g, NULL, vars[0], vars[1], h[2],
                                       m->grad[p], h[3], k == NESTEROV);
  }
  rf_graph_pop_device(m->g);
  assert_graph_ok(m->g);
}

static void build(model *m, kind k, rf_dtype dt, int n, const char *device) {
  build_with(m, k, dt, n, device, false);
}

/* The nodes whose op starts with `prefix` after lowering; *members gets
 * their N summed. */
static int prefixed_nodes(const rf_graph *g, const rf_session_options *o,
                          const char *prefix, int64_t *members) {
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, o, &low));
  int count = 0;
  *members = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    const rf_node *n = rf_graph_node(low, i);
    if (strncmp(rf_node_op(n), prefix, strlen(prefix)) != 0) continue;
    int64_t k = 0;
    assert_ok(rf_node_attr_int(n, "N", &k));
    count++;
    *members += k;
  }
  rf_graph_free(low);
  return count;
}

/* The _MultiApply* nodes (grouped optimizer updates). */
static int multi_nodes(const rf_graph *g, const rf_session_options *o,
                       int64_t *members) {
  return prefixed_nodes(g, o, "_MultiApply", members);
}

/* The _MultiAssignMul nodes. */
static int multi_mul_nodes(const rf_graph *g, const rf_session_options *o,
                           int64_t *members) {
  return prefixed_nodes(g, o, "_MultiAssignMul", members);
}

/* Random data for `steps` steps: initial values, then per step the
 * gradients and scalars (b1p, b2p follow the step; lr changes). */
typedef struct data {
  rf_tensor *init[MAXP][3], *grad[4][MAXP], *hp[4][7];
  int steps;
} data;

static rf_tensor *scalar(rf_dtype dt, double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(dt, v, &t));
  return t;
}

static void make_data(const model *m, data *d, int steps) {
  d->steps = steps;
  for (int p = 0; p < m->n; p++) {
    for (int s = 0; s < m->nslots; s++) /* v >= 0 */
      d->init[p][s] = rf_test_random_tensor(&rng, m->dt, m->shapes[p],
                                            s == 2 ? 0.0 : -1.0, 1.0);
    for (int t = 0; t < steps; t++)
      d->grad[t][p] = rf_test_random_tensor(&rng, m->dt, m->shapes[p], -1, 1);
  }
  for (int t = 0; t < steps; t++) {
    double lr = rf_test_uniform(&rng, 0.001, 0.1);
    double hp[7] = {0.9, 0.999, lr, 0.9, 0.999, 1e-7, 0.01};
    for (int i = 0; i <= t; i++) hp[0] *= 0.9, hp[1] *= 0.999;
    if (m->k == MOMENTUM || m->k == NESTEROV) hp[3] = 0.85; /* mu */
    for (int j = 0; j < 7; j++)
      d->hp[t][j] = scalar(j < 2 && m->f64_powers ? RF_FLOAT64 : m->dt, hp[j]);
  }
}

static void free_data(const model *m, data *d) {
  for (int p = 0; p < m->n; p++) {
    for (int s = 0; s < m->nslots; s++) rf_tensor_release(d->init[p][s]);
    for (int t = 0; t < d->steps; t++) rf_tensor_release(d->grad[t][p]);
  }
  for (int t = 0; t < d->steps; t++)
    for (int j = 0; j < 7; j++) rf_tensor_release(d->hp[t][j]);
}

static rf_session_options options(int group, int cpus, int gpus) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = cpus;
  o.num_gpu_devices = gpus;
  o.group_optimizer_updates = group;
  return o;
}

static void init_vars(rf_session *sess, const model *m, const data *d) {
  rf_feed feeds[3 * MAXP];
  int nf = 0;
  for (int p = 0; p < m->n; p++)
    for (int s = 0; s < m->nslots; s++)
      feeds[nf++] = (rf_feed){m->init[p][s], d->init[p][s]};
  assert_ok(rf_session_run(sess, feeds, nf, NULL, 0, m->assign, nf, NULL));
}

/* Step t: every update as a target. */
static rf_status *step(rf_session *s, const model *m, const data *d, int t) {
  rf_feed feeds[MAXP + 7];
  int nf = 0;
  for (int p = 0; p < m->n; p++)
    feeds[nf++] = (rf_feed){m->grad[p], d->grad[t][p]};
  for (int j = 0; j < 7; j++)
    feeds[nf++] =
        (rf_feed){j < 2 && m->f64_powers ? m->pw[j] : m->hp[j], d->hp[t][j]};
  return rf_session_run(s, feeds, nf, NULL, 0, m->update, m->n, NULL);
}

/* Every variable after the steps: out[p * 3 + s]. */
static void read_all(rf_session *sess, const model *m, rf_tensor **out) {
  rf_output fetches[3 * MAXP];
  int nf = 0;
  for (int p = 0; p < m->n; p++)
    for (int s = 0; s < m->nslots; s++) fetches[nf++] = m->read[p][s];
  assert_ok(rf_session_run(sess, NULL, 0, fetches, nf, NULL, 0, out));
}

static void train(const model *m, const data *d, rf_session_options o,
                  rf_tensor **out) {
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  init_vars(s, m, d);
  for (int t = 0; t < d->steps; t++) assert_ok(step(s, m, d, t));
  read_all(s, m, out);
  rf_session_free(s);
}

/* Same bytes (the same bits for floats, NaNs included). */
static bool same(const rf_tensor *a, const rf_tensor *b) {
  size_t n = rf_tensor_nbytes(a);
  return n == rf_tensor_nbytes(b) &&
         (!n || memcmp(rf_tensor_data(a), rf_tensor_data(b), n) == 0);
}

static void assert_same_bits(const model *m, rf_tensor **a, rf_tensor **b,
                             const char *what) {
  for (int i = 0; i < m->n * m->nslots; i++) {
    if (!same(a[i], b[i]))
      fail_msg("%s %s %s: variable %d differs grouped and ungrouped", what,
               kind_names[m->k], rf_dtype_name(m->dt), i);
  }
}

static void release_all(rf_tensor **t, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(t[i]);
}

static void test_bit_identical(void **state) {
  (void)state;
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int k = ADAM; k <= NESTEROV; k++)
    for (int di = 0; di < 2; di++) {
      model m;
      data d;
      build(&m, (kind)k, dts[di], 7, "cpu:0");
      make_data(&m, &d, 3);
      rf_session_options on = options(1, 1, 0), off = options(0, 1, 0);
      int64_t members;
      assert_int_equal(multi_nodes(m.g, &on, &members), 1);
      assert_int_equal(members, 7);
      assert_int_equal(multi_nodes(m.g, &off, &members), 0);
      rf_tensor *a[3 * MAXP], *b[3 * MAXP];
      train(&m, &d, on, a);
      train(&m, &d, off, b);
      assert_same_bits(&m, a, b, "cpu:0");
      release_all(a, m.n * m.nslots);
      release_all(b, m.n * m.nslots);
      free_data(&m, &d);
      rf_graph_free(m.g);
    }
}

/* The lowered graph's _MultiApply* node (one expected), its Tpower, and
 * how many Cast nodes are left. */
static void lowered_powers(const model *m, rf_dtype *tpower, int *casts) {
  rf_session_options on = options(1, 1, 0);
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m->g, &on, &low));
  int multis = 0;
  *casts = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    const rf_node *n = rf_graph_node(low, i);
    if (strcmp(rf_node_op(n), "Cast") == 0) (*casts)++;
    if (strncmp(rf_node_op(n), "_MultiApply", 11) != 0) continue;
    multis++;
    assert_ok(rf_node_attr_dtype(n, "Tpower", tpower));
  }
  assert_int_equal(multis, 1);
  rf_graph_free(low);
}

/* ringflow train's beta powers: float64 values cast to float32 for Adam.
 * Grouped, the multi-tensor node reads the float64 values (Tpower float64)
 * and the two Casts go; the kernels round as the Casts did, so every
 * variable is bit-identical to the ungrouped run with its Casts, over
 * steps whose powers (0.9^t, 0.999^t) round in float32. A Cast read
 * elsewhere too stays; float64 updates keep theirs (no rounding to drop). */
static void test_float64_powers(void **state) {
  (void)state;
  static const kind kinds[] = {ADAM, ADAMW};
  for (int ki = 0; ki < 2; ki++)
    for (int di = 0; di < 2; di++) {
      rf_dtype dt = di ? RF_FLOAT64 : RF_FLOAT32;
      model m;
      data d;
      build_with(&m, kinds[ki], dt, 5, "cpu:0", true);
      make_data(&m, &d, 4);
      rf_dtype tpower = RF_DTYPE_INVALID;
      int casts = -1;
      lowered_powers(&m, &tpower, &casts);
      assert_int_equal(tpower, RF_FLOAT64);
      assert_int_equal(casts, dt == RF_FLOAT32 ? 0 : 2);
      rf_tensor *a[3 * MAXP], *b[3 * MAXP];
      train(&m, &d, options(1, 1, 0), a);
      train(&m, &d, options(0, 1, 0), b);
      assert_same_bits(&m, a, b, "float64 powers");
      release_all(a, m.n * m.nslots);
      release_all(b, m.n * m.nslots);
      /* the first power's Cast read by another node too: it stays, the
       * update still reads the float64 value */
      rf_output twice = rf_mul(m.g, "twice", m.hp[0], m.hp[0]);
      (void)twice;
      assert_graph_ok(m.g);
      lowered_powers(&m, &tpower, &casts);
      assert_int_equal(tpower, RF_FLOAT64);
      assert_int_equal(casts, dt == RF_FLOAT32 ? 1 : 2);
      train(&m, &d, options(1, 1, 0), a);
      train(&m, &d, options(0, 1, 0), b);
      assert_same_bits(&m, a, b, "float64 powers, a Cast kept");
      release_all(a, m.n * m.nslots);
      release_all(b, m.n * m.nslots);
      free_data(&m, &d);
      rf_graph_free(m.g);
    }
  /* one power from a Cast, the other not: nothing is wired past a Cast */
  model m;
  build(&m, ADAM, RF_FLOAT32, 3, "cpu:0");
  rf_output p64 = rf_placeholder(m.g, "p64", RF_FLOAT64, rf_shape_scalar());
  rf_output c = rf_cast(m.g, "only_one", p64, RF_FLOAT32);
  rf_output *h = m.hp;
  for (int p = 0; p < 2; p++) {
    char name[16];
    snprintf(name, sizeof name, "one%d", p);
    rf_shape sh = rf_shape_of(1, (int64_t)4);
    rf_output v[3];
    for (int s = 0; s < 3; s++) {
      char vn[24];
      snprintf(vn, sizeof vn, "%s_%d", name, s);
      v[s] = rf_variable(m.g, vn, RF_FLOAT32, sh);
    }
    rf_apply_adam(m.g, name, v[0], v[1], v[2], c, h[1], h[2], h[3], h[4], h[5],
                  rf_placeholder(m.g, NULL, RF_FLOAT32, sh));
  }
  assert_graph_ok(m.g);
  rf_session_options on = options(1, 1, 0);
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m.g, &on, &low));
  int f32_multis = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    const rf_node *n = rf_graph_node(low, i);
    rf_dtype tp;
    if (strncmp(rf_node_op(n), "_MultiApply", 11) != 0) continue;
    assert_ok(rf_node_attr_dtype(n, "Tpower", &tp));
    f32_multis += tp == RF_FLOAT32;
  }
  assert_int_equal(f32_multis, 2); /* the model's and the two "one" */
  assert_non_null(rf_graph_find_node(low, "only_one"));
  rf_graph_free(low);
  rf_graph_free(m.g);
}

/* A float64 power is taken only by float32 updates: a float16 one is
 * INVALID_ARGUMENT naming the power and both dtypes. */
static void test_float64_power_of_float16_refused(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_shape sh = rf_shape_of(1, (int64_t)3);
  rf_output v[3];
  rf_node *assign[3];
  rf_tensor *zeros = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT16, &sh, NULL, &zeros));
  memset(rf_tensor_mutable_data(zeros), 0, 6);
  for (int s = 0; s < 3; s++) {
    char name[8];
    snprintf(name, sizeof name, "v%d", s);
    v[s] = rf_variable(g, name, RF_FLOAT16, sh);
    assign[s] = rf_assign(g, NULL, v[s], rf_const(g, NULL, zeros));
  }
  rf_tensor_release(zeros);
  rf_node_builder *b = rf_node_builder_new(g, "_MultiApplyAdam", "bad");
  for (int s = 0; s < 3; s++) rf_node_builder_input(b, v[s]);
  for (int j = 0; j < 2; j++)
    rf_node_builder_input(b, rf_const_scalar(g, NULL, RF_FLOAT64, 0.5));
  for (int j = 0; j < 4; j++)
    rf_node_builder_input(b, rf_const_scalar(g, NULL, RF_FLOAT16, 0.5));
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT16, sh);
  rf_node_builder_input(b, grad);
  rf_node_builder_attr_int(b, "N", 1);
  rf_node *bad = NULL;
  assert_ok(rf_node_builder_finish(b, &bad));
  assert_graph_ok(g);
  rf_session_options o = options(1, 1, 0);
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, assign, 3, NULL));
  rf_tensor *gv = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT16, &sh, NULL, &gv));
  memset(rf_tensor_mutable_data(gv), 0, 6);
  rf_feed feed = {grad, gv};
  rf_status *st = rf_session_run(s, &feed, 1, NULL, 0, &bad, 1, NULL);
  assert_status(st, RF_INVALID_ARGUMENT,
                "beta1_power (float64) and grad (float16) must share a float "
                "dtype");
  rf_tensor_release(gv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Adds one more update of kind `k` of a fresh parameter p, reading scalar
 * input 2 (lr) from `lr` instead of the model's. */
static rf_node *extra_update(model *m, kind k, rf_output lr, bool nesterov,
                             const char *name) {
  rf_shape sh = rf_shape_of(1, (int64_t)5);
  rf_output v[3];
  for (int s = 0; s < 3; s++) {
    char buf[48];
    snprintf(buf, sizeof buf, "%s_%d", name, s);
    v[s] = rf_variable(m->g, buf, m->dt, sh);
  }
  rf_output g = rf_placeholder(m->g, NULL, m->dt, sh), *h = m->hp;
  if (k == ADAM)
    return rf_apply_adam(m->g, name, v[0], v[1], v[2], h[0], h[1], lr, h[3],
                         h[4], h[5], g);
  return rf_apply_momentum(m->g, name, v[0], v[1], lr, g, h[3], nesterov);
}

static void test_never_grouped(void **state) {
  (void)state;
  rf_session_options on = options(1, 2, 0);
  int64_t members;
  /* A different lr: two groups of one key each, the odd one alone. */
  model m;
  build(&m, ADAM, RF_FLOAT32, 3, "cpu:0");
  rf_output lr2 = scalar_in(&m, "lr2");
  extra_update(&m, ADAM, lr2, false, "odd");
  assert_int_equal(multi_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 3);
  rf_graph_free(m.g);
  /* Another device: cpu:1's update stays alone. */
  build(&m, ADAM, RF_FLOAT32, 3, "cpu:0");
  assert_ok(rf_graph_push_device(m.g, "cpu:1"));
  extra_update(&m, ADAM, m.hp[2], false, "far");
  rf_graph_pop_device(m.g);
  assert_int_equal(multi_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 3);
  rf_graph_free(m.g);
  /* Nesterov and plain momentum never share a node. */
  build(&m, MOMENTUM, RF_FLOAT64, 2, "cpu:0");
  extra_update(&m, MOMENTUM, m.hp[2], true, "nest");
  assert_int_equal(multi_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 2);
  rf_graph_free(m.g);
  /* Another dtype: float32 and float64 updates in their own groups. */
  build(&m, MOMENTUM, RF_FLOAT32, 2, "cpu:0");
  model m64 = m;
  m64.dt = RF_FLOAT64;
  for (int j = 0; j < 7; j++) m64.hp[j] = scalar_in(&m64, NULL);
  extra_update(&m64, MOMENTUM, m64.hp[2], false, "wide1");
  extra_update(&m64, MOMENTUM, m64.hp[2], false, "wide2");
  assert_int_equal(multi_nodes(m.g, &on, &members), 2);
  assert_int_equal(members, 4);
  rf_graph_free(m.g);
  /* A dependent pair: the second update waits for the first (a control
   * edge), so the two never share a node; the others still do. */
  build(&m, ADAM, RF_FLOAT32, 3, "cpu:0");
  rf_node *late = extra_update(&m, ADAM, m.hp[2], false, "late");
  assert_ok(rf_graph_add_control_edge(m.g, m.update[0], late));
  assert_graph_ok(m.g);
  assert_int_equal(multi_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 3);
  /* ... and with grouping off nothing is grouped. */
  rf_session_options off = options(0, 2, 0);
  assert_int_equal(multi_nodes(m.g, &off, &members), 0);
  off.group_optimizer_updates = 2;
  rf_session *s = NULL;
  rf_status *st = rf_session_new(m.g, &off, &s);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  assert_non_null(strstr(rf_status_message(st), "group_optimizer_updates"));
  rf_status_free(st);
  rf_graph_free(m.g);
}

/* Scalars given as a Const per update (as tools/mlp.c builds them): equal
 * values group, another value does not. */
static void test_equal_consts_group(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_shape sh = rf_shape_of(1, (int64_t)4);
  for (int p = 0; p < 4; p++) {
    rf_output var = rf_variable(g, NULL, RF_FLOAT32, sh);
    rf_output acc = rf_variable(g, NULL, RF_FLOAT32, sh);
    rf_output grad = rf_placeholder(g, NULL, RF_FLOAT32, sh);
    double mu = p == 3 ? 0.8 : 0.9; /* the last one differs */
    rf_apply_momentum(g, NULL, var, acc,
                      rf_const_scalar(g, NULL, RF_FLOAT32, 0.01), grad,
                      rf_const_scalar(g, NULL, RF_FLOAT32, mu), false);
  }
  assert_graph_ok(g);
  rf_session_options on = options(1, 1, 0);
  int64_t members;
  assert_int_equal(multi_nodes(g, &on, &members), 1);
  assert_int_equal(members, 3);
  rf_graph_free(g);
}

/* ---- allocation failures: the group moves together ---- */

typedef struct fault_case {
  model m;
  data d;
  rf_session *s;
  rf_tensor *before[3 * MAXP], *after[3 * MAXP];
} fault_case;

static void fault_prepare(void *arg) {
  fault_case *c = arg;
  init_vars(c->s, &c->m, &c->d);
}

static rf_status *fault_attempt(void *arg) {
  fault_case *c = arg;
  rf_status *st = step(c->s, &c->m, &c->d, 0);
  rf_debug_fail_allocation_after(0); /* the check reads with no failures */
  rf_tensor *now[3 * MAXP];
  read_all(c->s, &c->m, now);
  int nv = c->m.n * c->m.nslots, old = 0, updated = 0;
  for (int i = 0; i < nv; i++) {
    if (rf_tensor_nbytes(c->before[i]) == 0) continue; /* the empty parameter */
    if (same(now[i], c->before[i]))
      old++;
    else if (same(now[i], c->after[i]))
      updated++;
    else
      fail_msg("variable %d is neither its old value nor its update", i);
  }
  if (old && updated)
    fail_msg(
        "%d variables updated, %d not: a grouped update is all or "
        "nothing",
        updated, old);
  if (!st && old) fail_msg("the step succeeded but left variables old");
  release_all(now, nv);
  return st;
}

static void test_all_or_nothing_under_faults(void **state) {
  (void)state;
  fault_case c;
  build(&c.m, ADAM, RF_FLOAT32, 5, "cpu:0");
  make_data(&c.m, &c.d, 1);
  rf_session_options o = options(1, 1, 0);
  int64_t members;
  assert_int_equal(multi_nodes(c.m.g, &o, &members), 1);
  assert_ok(rf_session_new(c.m.g, &o, &c.s));
  init_vars(c.s, &c.m, &c.d);
  read_all(c.s, &c.m, c.before);
  assert_ok(step(c.s, &c.m, &c.d, 0));
  read_all(c.s, &c.m, c.after);
  /* A reader holding the old values makes the update copy every value:
   * the allocations the sweep fails. */
  fs_plan plan = {.what = "grouped Adam step",
                  .attempt = fault_attempt,
                  .arg = &c,
                  .first_n = 200,
                  .max_attempts = 100,
                  .check_leaks = true,
                  .warm_up = true,
                  .prepare = fault_prepare};
  fs_result r = fs_sweep(&plan, FS_AFTER);
  assert_true(r.failures > 0);
  r = fs_sweep(&plan, FS_ONCE);
  assert_true(r.failures > 0);
  int nv = c.m.n * c.m.nslots;
  release_all(c.before, nv);
  release_all(c.after, nv);
  rf_session_free(c.s);
  free_data(&c.m, &c.d);
  rf_graph_free(c.m.g);
}

/* ---- GPU: grouped on gpu:0 against ungrouped on gpu:0 (bit-identical,
 * one kernel) and against the CPU (float tolerance) ---- */

static void test_gpu(void **state) {
  (void)state;
  rf_test_need_gpu();
  /* the four kinds, then Adam and AdamW with float64 powers (the GPU
   * kernel rounds them as the ungrouped run's Casts do) */
  for (int r = 0; r < 6; r++) {
    kind k = r < 4 ? (kind)r : (kind)(r - 4);
    bool f64 = r >= 4;
    model mg, mc;
    data d;
    uint64_t saved = rng;
    build_with(&mg, k, RF_FLOAT32, 7, "gpu:0", f64);
    rng = saved;
    build_with(&mc, k, RF_FLOAT32, 7, "cpu:0", f64);
    make_data(&mg, &d, 3);
    rf_tensor *a[3 * MAXP], *b[3 * MAXP], *c[3 * MAXP];
    train(&mg, &d, options(1, 1, 1), a);
    train(&mg, &d, options(0, 1, 1), b);
    train(&mc, &d, options(0, 1, 0), c);
    assert_same_bits(&mg, a, b, "gpu:0");
    for (int i = 0; i < mg.n * mg.nslots; i++) {
      double *want = rf_test_to_doubles(c[i]);
      assert_tensor_near(a[i], rf_tensor_shape(c[i]), want, 1e-5);
      free(want);
    }
    int nv = mg.n * mg.nslots;
    release_all(a, nv), release_all(b, nv), release_all(c, nv);
    free_data(&mg, &d);
    rf_graph_free(mg.g);
    rf_graph_free(mc.g);
  }
}

/* ---- AssignMul: _MultiAssignMul ---- */

typedef struct mul_model {
  rf_graph *g;
  rf_dtype dt;
  int n;
  rf_shape shapes[MAXP];
  rf_output init[MAXP], value[MAXP], out[MAXP], read[MAXP];
  rf_node *assign[MAXP];
} mul_model;

/* n AssignMuls of variables of random shapes (the second one empty) by
 * fed values, on `device`. */
static void build_mul(mul_model *m, rf_dtype dt, int n, const char *device) {
  memset(m, 0, sizeof *m);
  m->g = rf_graph_new();
  m->dt = dt, m->n = n;
  assert_ok(rf_graph_push_device(m->g, device));
  for (int p = 0; p < n; p++) {
    int rank = (int)(rf_test_rand(&rng) % 3);
    int64_t d0 = 1 + (int64_t)(rf_test_rand(&rng) % 30);
    m->shapes[p] = rank == 0   ? rf_shape_scalar()
                   : rank == 1 ? rf_shape_of(1, d0)
                               : rf_shape_of(2, d0, (int64_t)3);
    if (p == 1) m->shapes[p] = rf_shape_of(1, (int64_t)0);
    char name[32];
    snprintf(name, sizeof name, "w%d", p);
    rf_output var = rf_variable(m->g, name, dt, m->shapes[p]);
    m->init[p] = rf_placeholder(m->g, NULL, dt, m->shapes[p]);
    m->assign[p] = rf_assign(m->g, NULL, var, m->init[p]);
    m->value[p] = rf_placeholder(m->g, NULL, dt, m->shapes[p]);
    snprintf(name, sizeof name, "mul%d", p);
    m->out[p] = rf_assign_mul(m->g, name, var, m->value[p]);
    m->read[p] = rf_read_variable(m->g, NULL, var);
  }
  rf_graph_pop_device(m->g);
  assert_graph_ok(m->g);
}

/* Three steps; out[t * n + p]: step t's new values, then out[3n + p] the
 * variables read at the end. */
static void run_muls(const mul_model *m, rf_session_options o,
                     rf_tensor *const *init, rf_tensor *const *vals,
                     rf_tensor **out) {
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  rf_feed feeds[MAXP];
  for (int p = 0; p < m->n; p++) feeds[p] = (rf_feed){m->init[p], init[p]};
  assert_ok(rf_session_run(s, feeds, m->n, NULL, 0, m->assign, m->n, NULL));
  for (int t = 0; t < 3; t++) {
    for (int p = 0; p < m->n; p++)
      feeds[p] = (rf_feed){m->value[p], vals[t * m->n + p]};
    assert_ok(
        rf_session_run(s, feeds, m->n, m->out, m->n, NULL, 0, out + t * m->n));
  }
  assert_ok(rf_session_run(s, NULL, 0, m->read, m->n, NULL, 0, out + 3 * m->n));
  rf_session_free(s);
}

static void check_muls(const char *device, int gpus) {
  static const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                 RF_FLOAT64};
  for (int di = 0; di < 4; di++) {
    mul_model m, mc; /* mc: the same model on cpu:0, for a GPU run */
    uint64_t saved = rng;
    build_mul(&m, dts[di], 6, device);
    if (gpus) {
      uint64_t after = rng;
      rng = saved;
      build_mul(&mc, dts[di], 6, "cpu:0");
      rng = after;
    }
    rf_session_options on = options(1, 1, gpus), off = options(0, 1, gpus);
    int64_t members;
    assert_int_equal(multi_mul_nodes(m.g, &on, &members), 1);
    assert_int_equal(members, 6);
    assert_int_equal(multi_mul_nodes(m.g, &off, &members), 0);
    rf_tensor *init[MAXP], *vals[3 * MAXP];
    for (int p = 0; p < m.n; p++) {
      init[p] = rf_test_random_tensor(&rng, m.dt, m.shapes[p], -2, 2);
      for (int t = 0; t < 3; t++)
        vals[t * m.n + p] =
            rf_test_random_tensor(&rng, m.dt, m.shapes[p], -1.5, 1.5);
    }
    rf_tensor *a[4 * MAXP], *b[4 * MAXP], *c[4 * MAXP];
    run_muls(&m, on, init, vals, a);
    run_muls(&m, off, init, vals, b);
    int nout = 4 * m.n;
    for (int i = 0; i < nout; i++) assert_same_bytes(a[i], b[i]);
    if (gpus) { /* the CPU's multiplications, bit for bit */
      run_muls(&mc, options(1, 1, 0), init, vals, c);
      for (int i = 0; i < nout; i++) assert_same_bytes(a[i], c[i]);
      release_all(c, nout);
      rf_graph_free(mc.g);
    }
    /* against float64 math: init * v0 * v1 * v2, each product rounded */
    for (int p = 0; p < m.n; p++) {
      int64_t ne = rf_shape_num_elements(&m.shapes[p]);
      double *want = malloc(sizeof *want * (size_t)(ne + 1));
      for (int64_t i = 0; i < ne; i++) {
        double v = rf_tensor_get(init[p], i);
        for (int t = 0; t < 3; t++) v *= rf_tensor_get(vals[t * m.n + p], i);
        want[i] = v;
      }
      assert_tensor_near(a[3 * m.n + p], m.shapes[p], want,
                         4 * rf_test_tolerance(m.dt));
      free(want);
    }
    release_all(a, nout);
    release_all(b, nout);
    release_all(init, m.n);
    release_all(vals, 3 * m.n);
    rf_graph_free(m.g);
  }
}

static void test_assign_mul_grouped(void **state) {
  (void)state;
  check_muls("cpu:0", 0);
}

/* Never together: a dependent AssignMul (its value is another's new
 * value), another dtype, two AssignMuls of one variable. */
static void test_assign_mul_never_grouped(void **state) {
  (void)state;
  rf_session_options on = options(1, 1, 0);
  int64_t members;
  mul_model m;
  build_mul(&m, RF_FLOAT32, 4, "cpu:0");
  rf_output var = rf_variable(m.g, "dep", RF_FLOAT32, m.shapes[0]);
  rf_assign_mul(m.g, "dep_mul", var, m.out[0]);
  rf_output v64 = rf_variable(m.g, "wide", RF_FLOAT64, rf_shape_scalar());
  rf_assign_mul(m.g, "wide_mul", v64,
                rf_const_scalar(m.g, NULL, RF_FLOAT64, 0.5));
  assert_graph_ok(m.g);
  /* the four, and "dep_mul" alone; "wide_mul" alone */
  assert_int_equal(multi_mul_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 4);
  rf_graph_free(m.g);
  build_mul(&m, RF_FLOAT32, 3, "cpu:0");
  rf_output w0 = {rf_graph_find_node(m.g, "w0"), 0};
  assert_non_null(w0.node);
  rf_assign_mul(m.g, "again", w0,
                rf_placeholder(m.g, NULL, RF_FLOAT32, m.shapes[0]));
  assert_graph_ok(m.g);
  /* w0's second AssignMul opens a group of its own */
  assert_int_equal(multi_mul_nodes(m.g, &on, &members), 1);
  assert_int_equal(members, 3);
  rf_graph_free(m.g);
}

/* Allocation failures: a reader holds the old values, so each variable is
 * copied; the group's variables move together or not at all. */
typedef struct mul_fault {
  mul_model m;
  rf_session *s;
  rf_tensor *init[MAXP], *vals[MAXP], *before[MAXP], *after[MAXP];
} mul_fault;

static void mul_fault_prepare(void *arg) {
  mul_fault *c = arg;
  rf_feed feeds[MAXP];
  for (int p = 0; p < c->m.n; p++)
    feeds[p] = (rf_feed){c->m.init[p], c->init[p]};
  assert_ok(
      rf_session_run(c->s, feeds, c->m.n, NULL, 0, c->m.assign, c->m.n, NULL));
}

static rf_status *mul_fault_attempt(void *arg) {
  mul_fault *c = arg;
  rf_feed feeds[MAXP];
  for (int p = 0; p < c->m.n; p++)
    feeds[p] = (rf_feed){c->m.value[p], c->vals[p]};
  rf_tensor *outs[MAXP] = {NULL};
  rf_status *st =
      rf_session_run(c->s, feeds, c->m.n, c->m.out, c->m.n, NULL, 0, outs);
  rf_debug_fail_allocation_after(0);
  if (!st) release_all(outs, c->m.n);
  rf_tensor *now[MAXP];
  assert_ok(rf_session_run(c->s, NULL, 0, c->m.read, c->m.n, NULL, 0, now));
  int old = 0, updated = 0;
  for (int p = 0; p < c->m.n; p++) {
    if (rf_tensor_nbytes(c->before[p]) == 0) continue;
    if (same(now[p], c->before[p]))
      old++;
    else if (same(now[p], c->after[p]))
      updated++;
    else
      fail_msg("variable %d is neither its old value nor its product", p);
  }
  if (old && updated)
    fail_msg("%d variables multiplied, %d not: all or nothing", updated, old);
  if (!st && old) fail_msg("the step succeeded but left variables old");
  release_all(now, c->m.n);
  return st;
}

static void test_assign_mul_all_or_nothing(void **state) {
  (void)state;
  mul_fault c;
  build_mul(&c.m, RF_FLOAT32, 5, "cpu:0");
  for (int p = 0; p < c.m.n; p++) {
    c.init[p] = rf_test_random_tensor(&rng, RF_FLOAT32, c.m.shapes[p], -2, 2);
    c.vals[p] = rf_test_random_tensor(&rng, RF_FLOAT32, c.m.shapes[p], -2, 2);
  }
  rf_session_options o = options(1, 1, 0);
  assert_ok(rf_session_new(c.m.g, &o, &c.s));
  mul_fault_prepare(&c);
  assert_ok(rf_session_run(c.s, NULL, 0, c.m.read, c.m.n, NULL, 0, c.before));
  rf_tensor *outs[MAXP];
  rf_feed feeds[MAXP];
  for (int p = 0; p < c.m.n; p++) feeds[p] = (rf_feed){c.m.value[p], c.vals[p]};
  assert_ok(rf_session_run(c.s, feeds, c.m.n, c.m.out, c.m.n, NULL, 0, outs));
  release_all(outs, c.m.n);
  assert_ok(rf_session_run(c.s, NULL, 0, c.m.read, c.m.n, NULL, 0, c.after));
  fs_plan plan = {.what = "grouped AssignMul step",
                  .attempt = mul_fault_attempt,
                  .arg = &c,
                  .first_n = 200,
                  .max_attempts = 100,
                  .check_leaks = true,
                  .warm_up = true,
                  .prepare = mul_fault_prepare};
  assert_true(fs_sweep(&plan, FS_AFTER).failures > 0);
  assert_true(fs_sweep(&plan, FS_ONCE).failures > 0);
  release_all(c.before, c.m.n);
  release_all(c.after, c.m.n);
  release_all(c.init, c.m.n);
  release_all(c.vals, c.m.n);
  rf_session_free(c.s);
  rf_graph_free(c.m.g);
}

static void test_assign_mul_gpu(void **state) {
  (void)state;
  rf_test_need_gpu();
  check_muls("gpu:0", 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_bit_identical, setup),
      cmocka_unit_test_setup(test_float64_powers, setup),
      cmocka_unit_test_setup(test_float64_power_of_float16_refused, setup),
      cmocka_unit_test_setup(test_never_grouped, setup),
      cmocka_unit_test_setup(test_equal_consts_group, setup),
      cmocka_unit_test_setup(test_all_or_nothing_under_faults, setup),
      cmocka_unit_test_setup(test_gpu, setup),
      cmocka_unit_test_setup(test_assign_mul_grouped, setup),
      cmocka_unit_test_setup(test_assign_mul_never_grouped, setup),
      cmocka_unit_test_setup(test_assign_mul_all_or_nothing, setup),
      cmocka_unit_test_setup(test_assign_mul_gpu, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
