/* tests/test_collective_gradient_names.c - several gradient constructions
 * through one collective (two objectives, a gradient of a gradient): each
 * construction's gradient collectives get names of their own, so every run
 * works, whether it fetches both gradients in one step or one alone, and a
 * user's collective named like the old gradient name ("ar_grad") stays a
 * separate group. Every collective with a gradient (all-reduce sum, avg,
 * max, prod; all-gather; reduce-scatter; reduce; broadcast) on 2 and 3
 * devices, against float64 vector-Jacobian products computed here. Names
 * are deterministic (two processes building the same graph derive the same
 * names), survive a JSON round trip, and the reserved character '#' is
 * refused in names users give. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

enum {
  K_SUM,
  K_AVG,
  K_MAX,
  K_PROD,
  K_GATHER,
  K_SCATTER,
  K_REDUCE,
  K_BCAST,
  K_COUNT
};
static const char *const kind_names[K_COUNT] = {
    "all-reduce sum", "all-reduce avg", "all-reduce max", "all-reduce prod",
    "all-gather",     "reduce-scatter", "reduce",         "broadcast"};

#define ROWS 2 /* rows of one device's block */
#define COLS 3
#define MAXN 3

typedef struct objective {
  rf_output r[MAXN]; /* cotangents, one per y */
  rf_tensor *rv[MAXN];
  rf_output dx[MAXN]; /* the gradient of this construction */
} objective;

typedef struct fixture {
  int kind, n;
  rf_graph *g;
  rf_output xs[MAXN], ys[MAXN];
  int nx, ny;
  rf_tensor *in[MAXN];
  objective obj[2];
  rf_output user[MAXN]; /* a user's all-reduce sum named "<base>_grad" */
} fixture;

static void dev(int i, char *buf) { sprintf(buf, "cpu:%d", i); }

static rf_shape x_shape(const fixture *f) {
  return rf_shape_of(2, (int64_t)(f->kind == K_SCATTER ? f->n * ROWS : ROWS),
                     (int64_t)COLS);
}

static rf_shape y_shape(const fixture *f) {
  return rf_shape_of(2, (int64_t)(f->kind == K_GATHER ? f->n * ROWS : ROWS),
                     (int64_t)COLS);
}

static const char *base_name(int kind) {
  switch (kind) {
    case K_GATHER: return "ag";
    case K_SCATTER: return "rs";
    case K_REDUCE: return "red";
    case K_BCAST: return "bc";
    default: return "ar";
  }
}

static void build_forward(fixture *f, uint64_t *rng) {
  f->g = rf_graph_new();
  rf_graph *g = f->g;
  f->nx = f->kind == K_BCAST ? 1 : f->n;
  for (int i = 0; i < f->nx; i++) {
    char d[16], name[16];
    dev(i, d);
    sprintf(name, "x%d", i);
    assert_ok(rf_graph_push_device(g, d));
    f->xs[i] = rf_placeholder(g, name, RF_FLOAT64, x_shape(f));
    rf_graph_pop_device(g);
    /* away from 0 and distinct: prod's ratios and max's winner are sharp */
    f->in[i] = rf_test_random_tensor(rng, RF_FLOAT64, x_shape(f), 0.5, 2);
  }
  static const rf_reduction reds[] = {RF_REDUCE_SUM, RF_REDUCE_AVG,
                                      RF_REDUCE_MAX, RF_REDUCE_PROD};
  const char *base = base_name(f->kind);
  f->ny = f->n;
  switch (f->kind) {
    case K_GATHER: rf_all_gather_n(g, base, f->xs, f->n, f->ys); break;
    case K_SCATTER:
      rf_reduce_scatter_n(g, base, f->xs, f->n, RF_REDUCE_SUM, f->ys);
      break;
    case K_REDUCE:
      assert_ok(rf_graph_push_device(g, "cpu:0"));
      f->ys[0] = rf_reduce(g, base, f->xs, f->n, RF_REDUCE_SUM);
      rf_graph_pop_device(g);
      f->ny = 1;
      break;
    case K_BCAST: {
      rf_output b = rf_broadcast(g, base, f->xs[0]);
      for (int j = 0; j < f->n; j++) {
        char d[16];
        dev(j, d);
        assert_ok(rf_graph_push_device(g, d));
        f->ys[j] = rf_identity(g, NULL, b);
        rf_graph_pop_device(g);
      }
      break;
    }
    default: rf_all_reduce_n(g, base, f->xs, f->n, reds[f->kind], f->ys);
  }
  /* A user's own collective with the name the gradient once took. */
  char user[32];
  snprintf(user, sizeof user, "%s_grad", base);
  rf_output uin[MAXN];
  for (int i = 0; i < f->n; i++) {
    char d[16];
    dev(i, d);
    assert_ok(rf_graph_push_device(g, d));
    uin[i] = rf_identity(g, NULL, f->xs[f->kind == K_BCAST ? 0 : i]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, user, uin, f->n, RF_REDUCE_SUM, f->user);
  assert_graph_ok(g);
}

/* One construction: cotangents r_j (constants on y_j's device). */
static void build_gradient(fixture *f, int k, uint64_t *rng) {
  objective *o = &f->obj[k];
  for (int j = 0; j < f->ny; j++) {
    o->rv[j] = rf_test_random_tensor(rng, RF_FLOAT64, y_shape(f), -1, 1);
    assert_ok(rf_graph_push_device(f->g, rf_node_device(f->ys[j].node)));
    o->r[j] = rf_const(f->g, NULL, o->rv[j]);
    rf_graph_pop_device(f->g);
  }
  assert_ok(rf_gradients(f->g, f->ys, f->ny, f->xs, f->nx, o->r, o->dx));
  for (int i = 0; i < f->nx; i++) assert_non_null(o->dx[i].node);
}

static double at(const rf_tensor *t, int row, int col) {
  return rf_tensor_get(t, (int64_t)row * COLS + col);
}

/* The float64 vector-Jacobian product of construction k for x_i. */
static double *reference(const fixture *f, int k, int i) {
  const objective *o = &f->obj[k];
  int n = f->n, rows = (int)x_shape(f).dims[0];
  double *want = calloc((size_t)rows * COLS, sizeof *want);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < COLS; c++) {
      double v = 0, rsum = 0;
      for (int j = 0; j < f->ny; j++)
        rsum += f->kind == K_GATHER || f->kind == K_SCATTER
                    ? 0
                    : at(o->rv[j], r, c);
      switch (f->kind) {
        case K_SUM:
        case K_REDUCE:
        case K_BCAST: v = rsum; break;
        case K_AVG: v = rsum / n; break;
        case K_MAX: {
          int win = 0;
          for (int m = 1; m < n; m++)
            if (at(f->in[m], r, c) > at(f->in[win], r, c)) win = m;
          v = win == i ? rsum : 0;
          break;
        }
        case K_PROD: {
          double others = 1;
          for (int m = 0; m < n; m++)
            if (m != i) others *= at(f->in[m], r, c);
          v = rsum * others;
          break;
        }
        case K_GATHER: /* y_j = rows of every x: x_i's block in each */
          for (int j = 0; j < n; j++) v += at(o->rv[j], i * ROWS + r, c);
          break;
        case K_SCATTER: /* y_j = block j of the sum */
          v = at(o->rv[r / ROWS], r % ROWS, c);
          break;
      }
      want[r * COLS + c] = v;
    }
  return want;
}

static void check(const fixture *f, int k, rf_tensor *const *out) {
  for (int i = 0; i < f->nx; i++) {
    double *want = reference(f, k, i);
    if (!out[i]) fail_msg("%s: no output", kind_names[f->kind]);
    assert_tensor_near(out[i], x_shape(f), want, 1e-12);
    free(want);
  }
}

static void check_user(const fixture *f, rf_tensor *const *out) {
  rf_shape s = x_shape(f);
  int64_t m = rf_shape_num_elements(&s);
  double *want = calloc((size_t)m, sizeof *want);
  for (int i = 0; i < f->n; i++)
    for (int64_t e = 0; e < m; e++)
      want[e] += rf_tensor_get(f->in[f->kind == K_BCAST ? 0 : i], e);
  for (int i = 0; i < f->n; i++) assert_tensor_near(out[i], s, want, 1e-12);
  free(want);
}

static void release(rf_tensor **t, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(t[i]);
}

/* Both gradients in one step (with the user's "_grad" collective), then
 * each alone, then the user's collective alone, in one session. */
static void run_and_check(fixture *f) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = f->n;
  o.collective_timeout_ms = 60000;
  rf_session *s = NULL;
  assert_ok(rf_session_new(f->g, &o, &s));
  rf_feed feeds[MAXN];
  for (int i = 0; i < f->nx; i++) feeds[i] = (rf_feed){f->xs[i], f->in[i]};
  rf_output fetch[3 * MAXN];
  rf_tensor *out[3 * MAXN] = {NULL};
  int nf = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < f->nx; i++) fetch[nf++] = f->obj[k].dx[i];
  for (int i = 0; i < f->n; i++) fetch[nf++] = f->user[i];
  rf_status *st = rf_session_run(s, feeds, f->nx, fetch, nf, NULL, 0, out);
  if (st)
    fail_msg("%s on %d devices, both gradients: %s", kind_names[f->kind], f->n,
             rf_status_message(st));
  check(f, 0, out);
  check(f, 1, out + f->nx);
  check_user(f, out + 2 * f->nx);
  release(out, nf);
  for (int k = 0; k < 2; k++) {
    st = rf_session_run(s, feeds, f->nx, f->obj[k].dx, f->nx, NULL, 0, out);
    if (st)
      fail_msg("%s on %d devices, gradient %d alone: %s", kind_names[f->kind],
               f->n, k + 1, rf_status_message(st));
    check(f, k, out);
    release(out, f->nx);
  }
  assert_ok(rf_session_run(s, feeds, f->nx, f->user, f->n, NULL, 0, out));
  check_user(f, out);
  release(out, f->n);
  rf_session_free(s);
}

static void fixture_free(fixture *f) {
  release(f->in, f->nx);
  for (int k = 0; k < 2; k++) release(f->obj[k].rv, f->ny);
  rf_graph_free(f->g);
}

/* ---- two objectives through every collective with a gradient ---- */

static void test_two_gradients_through_every_collective(void **state) {
  uint64_t rng = rf_test_rng(1);
  for (int n = 2; n <= MAXN; n++)
    for (int kind = 0; kind < K_COUNT; kind++) {
      fixture f = {.kind = kind, .n = n};
      build_forward(&f, &rng);
      build_gradient(&f, 0, &rng);
      build_gradient(&f, 1, &rng);
      run_and_check(&f);
      fixture_free(&f);
    }
}

/* ---- a gradient of a gradient ---- */

/* y = allreduce_sum(x) on n devices; L1 = sum_i <r_i, y_i * y_i>, whose
 * gradient g_m = 2 sum_i r_i * y_i (the same on every device);
 * L2 = sum_m <q_m, g_m>, whose gradient is 2 (sum_i r_i)(sum_m q_m). The
 * second construction runs through the forward all-reduce and through the
 * first construction's gradient all-reduce. */
static void test_gradient_of_gradient(void **state) {
  uint64_t rng = rf_test_rng(2);
  const int n = 3;
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)ROWS, (int64_t)COLS);
  rf_output xs[MAXN], ys[MAXN], l1[MAXN], g1[MAXN], l2[MAXN], g2[MAXN];
  rf_tensor *in[MAXN], *rv[MAXN], *qv[MAXN];
  for (int i = 0; i < n; i++) {
    char d[16];
    dev(i, d);
    assert_ok(rf_graph_push_device(g, d));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT64, s);
    rf_graph_pop_device(g);
    in[i] = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1, 1);
    rv[i] = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1, 1);
    qv[i] = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1, 1);
  }
  rf_all_reduce_n(g, "ar", xs, n, RF_REDUCE_SUM, ys);
  for (int i = 0; i < n; i++) {
    assert_ok(rf_graph_push_device(g, rf_node_device(xs[i].node)));
    rf_output yy = rf_mul(g, NULL, ys[i], ys[i]);
    l1[i] = rf_sum(g, NULL, rf_mul(g, NULL, rf_const(g, NULL, rv[i]), yy), NULL,
                   -1, false);
    rf_graph_pop_device(g);
  }
  assert_ok(rf_gradients(g, l1, n, xs, n, NULL, g1));
  for (int i = 0; i < n; i++) {
    assert_ok(rf_graph_push_device(g, rf_node_device(xs[i].node)));
    l2[i] = rf_sum(g, NULL, rf_mul(g, NULL, rf_const(g, NULL, qv[i]), g1[i]),
                   NULL, -1, false);
    rf_graph_pop_device(g);
  }
  assert_ok(rf_gradients(g, l2, n, xs, n, NULL, g2));
  assert_graph_ok(g);
  rf_feed feeds[MAXN];
  for (int i = 0; i < n; i++) feeds[i] = (rf_feed){xs[i], in[i]};
  rf_output fetch[2 * MAXN];
  rf_tensor *out[2 * MAXN];
  memcpy(fetch, g1, sizeof *g1 * n);
  memcpy(fetch + n, g2, sizeof *g2 * n);
  rf_test_run(g, n, feeds, n, fetch, 2 * n, out);
  double w1[ROWS * COLS], w2[ROWS * COLS];
  for (int e = 0; e < ROWS * COLS; e++) {
    double y = 0, rs = 0, qs = 0, ry = 0;
    for (int i = 0; i < n; i++) {
      y += rf_tensor_get(in[i], e);
      rs += rf_tensor_get(rv[i], e);
      qs += rf_tensor_get(qv[i], e);
    }
    ry = 2 * rs * y;
    w1[e] = ry;
    w2[e] = 2 * rs * qs;
  }
  for (int i = 0; i < n; i++) {
    assert_tensor_near(out[i], s, w1, 1e-12);
    assert_tensor_near(out[n + i], s, w2, 1e-12);
  }
  release(out, 2 * n);
  release(in, n);
  release(rv, n);
  release(qv, n);
  rf_graph_free(g);
}

/* ---- the naming rule ---- */

/* The shared names of g's grouped collectives, in node order, one per line
 * (malloc'ed). */
static char *shared_names(const rf_graph *g) {
  size_t cap = 1024, len = 0;
  char *s = malloc(cap);
  s[0] = '\0';
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const rf_node *n = rf_graph_node(g, i);
    const char *sn;
    rf_status *st = rf_node_attr_string(n, "shared_name", &sn);
    if (st) {
      rf_status_free(st);
      continue;
    }
    size_t k = strlen(sn) + 2;
    while (len + k + 1 > cap) s = realloc(s, cap *= 2);
    len += (size_t)sprintf(s + len, "%s\n", sn);
  }
  return s;
}

/* How many nodes of g have this shared_name. */
static int group_size(const rf_graph *g, const char *name) {
  int count = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    const char *sn;
    rf_status *st =
        rf_node_attr_string(rf_graph_node(g, i), "shared_name", &sn);
    if (st)
      rf_status_free(st);
    else
      count += strcmp(sn, name) == 0;
  }
  return count;
}

/* Construction k of a collective "X" makes "X#grad<k>" (and, for max and
 * prod, "X#grad<k>#winner", "...#inputs", "...#places"), k counting
 * the constructions in the graph that made gradient collectives: every
 * process building the same graph in the same order gets the same names. */
static void test_names_are_deterministic_and_documented(void **state) {
  char *names[2];
  for (int copy = 0; copy < 2; copy++) {
    uint64_t rng = 99; /* same graph twice */
    fixture f = {.kind = K_MAX, .n = 2};
    build_forward(&f, &rng);
    build_gradient(&f, 0, &rng);
    build_gradient(&f, 1, &rng);
    names[copy] = shared_names(f.g);
    assert_int_equal(group_size(f.g, "ar"), 2);
    assert_int_equal(group_size(f.g, "ar_grad"), 2); /* the user's */
    assert_int_equal(group_size(f.g, "ar#grad1"), 2);
    assert_int_equal(group_size(f.g, "ar#grad1#winner"), 2);
    assert_int_equal(group_size(f.g, "ar#grad2"), 2);
    assert_int_equal(group_size(f.g, "ar#grad2#winner"), 2);
    fixture_free(&f);
  }
  assert_string_equal(names[0], names[1]);
  free(names[0]);
  free(names[1]);
  /* prod's helpers; all-gather's gradient (a reduce-scatter) */
  uint64_t rng = 5;
  fixture f = {.kind = K_PROD, .n = 2};
  build_forward(&f, &rng);
  build_gradient(&f, 0, &rng);
  assert_int_equal(group_size(f.g, "ar#grad1#inputs"), 2);
  assert_int_equal(group_size(f.g, "ar#grad1#places"), 2);
  fixture_free(&f);
  f = (fixture){.kind = K_GATHER, .n = 2};
  build_forward(&f, &rng);
  build_gradient(&f, 0, &rng);
  build_gradient(&f, 1, &rng);
  assert_int_equal(group_size(f.g, "ag#grad1"), 2);
  assert_int_equal(group_size(f.g, "ag#grad2"), 2);
  fixture_free(&f);
}

/* A saved graph keeps its gradient collectives; a construction after
 * loading picks a number no name in the graph uses. */
static void test_gradient_after_json_round_trip(void **state) {
  uint64_t rng = rf_test_rng(3);
  fixture f = {.kind = K_SUM, .n = 2};
  build_forward(&f, &rng);
  build_gradient(&f, 0, &rng);
  char *json;
  assert_ok(rf_graph_to_json(f.g, &json));
  rf_graph *loaded;
  assert_ok(rf_graph_from_json(json, strlen(json), &loaded));
  rf_string_free(json);
  /* Same graph, handles re-found by name in the loaded copy. */
  rf_graph *old = f.g;
  f.g = loaded;
  for (int i = 0; i < f.nx; i++)
    f.xs[i] =
        (rf_output){rf_graph_find_node(loaded, rf_node_name(f.xs[i].node)), 0};
  for (int j = 0; j < f.ny; j++)
    f.ys[j] =
        (rf_output){rf_graph_find_node(loaded, rf_node_name(f.ys[j].node)), 0};
  for (int i = 0; i < f.n; i++)
    f.user[i] = (rf_output){
        rf_graph_find_node(loaded, rf_node_name(f.user[i].node)), 0};
  for (int i = 0; i < f.nx; i++)
    f.obj[0].dx[i] = (rf_output){
        rf_graph_find_node(loaded, rf_node_name(f.obj[0].dx[i].node)),
        f.obj[0].dx[i].index};
  rf_graph_free(old);
  build_gradient(&f, 1, &rng);
  assert_int_equal(group_size(f.g, "ar#grad1"), 2);
  assert_int_equal(group_size(f.g, "ar#grad2"), 2);
  run_and_check(&f);
  fixture_free(&f);
}

/* '#' is reserved for the collectives rf_gradients makes: names users give
 * through the builders may not hold it. */
static void test_reserved_character_refused(void **state) {
  rf_shape s = rf_shape_of(1, (int64_t)3);
  for (int which = 0; which < 4; which++) {
    rf_graph *g = rf_graph_new();
    assert_ok(rf_graph_push_device(g, "cpu:0"));
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
    rf_graph_pop_device(g);
    rf_output y = {NULL, 0};
    if (which == 0)
      y = rf_all_reduce(g, "p", x, RF_REDUCE_SUM, 1, "ar#grad1");
    else if (which == 1)
      y = rf_all_gather(g, "p", x, 1, "x#");
    else if (which == 2)
      y = rf_reduce_scatter(g, "p", x, RF_REDUCE_SUM, 1, "#");
    else {
      rf_node_builder *b = rf_node_builder_new(g, "AllReduce", "p");
      rf_node_builder_input(b, x);
      rf_node_builder_device(b, "cpu:0");
      rf_node_builder_attr_string(b, "reduction", "sum");
      rf_node_builder_attr_int(b, "num_devices", 1);
      rf_node_builder_attr_string(b, "shared_name", "ar#grad7");
      rf_node *n = NULL;
      rf_status *st = rf_node_builder_finish(b, &n);
      assert_null(n);
      assert_status(st, RF_INVALID_ARGUMENT, "reserved");
      rf_graph_free(g);
      continue;
    }
    assert_null(y.node);
    assert_int_equal(rf_graph_num_nodes(g), 1);
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "'#'");
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "reserved");
    rf_graph_free(g);
  }
}

/* The builders of all participants at once: a name holding '#' is refused
 * for the reserved character (not as the participant's node name made from
 * it), and an empty name (participants "_0", ..., gradient "#grad1") is
 * refused too, as an empty shared_name is; nothing is added. */
static void test_collective_names_refused_whole(void **state) {
  rf_shape s = rf_shape_of(1, (int64_t)3);
  static const char *const names[] = {"a#b", "#", ""};
  for (int which = 0; which < 3; which++)
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
      rf_graph *g = rf_graph_new();
      rf_output x[2];
      for (int d = 0; d < 2; d++) {
        char dev[8];
        snprintf(dev, sizeof dev, "cpu:%d", d);
        assert_ok(rf_graph_push_device(g, dev));
        x[d] = rf_placeholder(g, d ? "x1" : "x0", RF_FLOAT32, s);
        rf_graph_pop_device(g);
      }
      rf_output y[2] = {{NULL, 0}, {NULL, 0}};
      if (which == 0)
        rf_all_reduce_n(g, names[k], x, 2, RF_REDUCE_SUM, y);
      else if (which == 1)
        rf_all_gather_n(g, names[k], x, 2, y);
      else
        rf_reduce_scatter_n(g, names[k], x, 2, RF_REDUCE_SUM, y);
      assert_null(y[0].node);
      assert_int_equal(rf_graph_num_nodes(g), 2);
      if (names[k][0]) {
        assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                      "holds '#', which is reserved");
        /* the collective named, no participant's node */
        rf_status *st = rf_graph_status(g); /* a copy: ours to free */
        assert_null(strstr(rf_status_message(st), "_0"));
        rf_status_free(st);
      } else {
        assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                      "must not be empty");
      }
      rf_graph_free(g);
    }
  /* one participant at a time: an empty shared_name */
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
  rf_output y = rf_all_reduce(g, "p", x, RF_REDUCE_SUM, 1, "");
  rf_graph_pop_device(g);
  assert_null(y.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "shared_name is empty");
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'p' (AllReduce)");
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collective_names_refused_whole),
      cmocka_unit_test(test_two_gradients_through_every_collective),
      cmocka_unit_test(test_gradient_of_gradient),
      cmocka_unit_test(test_names_are_deterministic_and_documented),
      cmocka_unit_test(test_gradient_after_json_round_trip),
      cmocka_unit_test(test_reserved_character_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
