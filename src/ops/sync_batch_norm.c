/* ops/sync_batch_norm.c - synchronized batch norm over n devices, built from
 * ringflow's collectives so that its gradient needs no op of its own:
 *   per device i:  s_i = sum(x_i), n_i = count of x_i's rows
 *   all-reduce:    S = sum s_i, N = sum n_i;  mean = S / N
 *   per device i:  q_i = sum((x_i - mean)^2)
 *   all-reduce:    Q = sum q_i;  variance = Q / N (biased)
 *   per device i:  y_i = BatchNormInference(x_i, gamma_i, beta_i, mean,
 *                                           variance)
 * (sums over every axis but the last). Two passes keep the variance free of
 * the cancellation of E[x^2] - mean^2. rf_gradients differentiates through
 * it: the gradient of an all-reduce sum is an all-reduce sum, so the
 * backward pass all-reduces the gradients of S and Q, the statistics of dy
 * it needs, and every replica gets the gradient of the global batch. */
#include <stdio.h>
#include <stdlib.h>

#include "graph/graph.h"
#include "ops/batch_norm_layer.h"
#include "ringflow/collectives.h"
#include "ringflow/ops.h"

#define RF_SYNC_BN_MAX_DEVICES 1024

static void refuse(rf_graph *g, const char *name, const char *what) {
  rf__graph_record(g, rf__invalid("rf_sync_batch_norm_n%s%s%s: %s",
                                  RF__BN_NAME(name), what));
}

/* Checks what the builders below cannot: n, the arrays, one float dtype and
 * one known rank >= 2 for every x. */
static bool check(rf_graph *g, const char *name, int n, const rf_output *xs,
                  const rf_output *gammas, const rf_output *betas,
                  const rf_output *mm, const rf_output *mv, double momentum,
                  rf_batch_norm_result *outs) {
  if (n < 1 || n > RF_SYNC_BN_MAX_DEVICES || !xs || !gammas || !betas ||
      !outs || !mm != !mv) {
    refuse(g, name,
           "n must be in 1..1024 with xs, gammas, betas and outs given, and "
           "moving_means and moving_variances both given or both NULL");
    return false;
  }
  if (!(momentum >= 0 && momentum <= 1)) {
    refuse(g, name, "momentum must be in [0, 1]");
    return false;
  }
  for (int i = 0; i < n; i++) {
    rf_output in[4] = {xs[i], gammas[i], betas[i], mm ? mm[i] : xs[i]};
    rf_output in5 = mv ? mv[i] : xs[i];
    if (!rf__graph_inputs_ok(g, "SyncBatchNorm", name, in, 4) ||
        !rf__graph_inputs_ok(g, "SyncBatchNorm", name, &in5, 1))
      return false;
    rf_shape s = rf_output_shape(xs[i]), s0 = rf_output_shape(xs[0]);
    rf_dtype dt = rf_output_dtype(xs[i]);
    char msg[256];
    if (s.rank < 2 || s.rank != s0.rank || dt != rf_output_dtype(xs[0]) ||
        !rf_dtype_is_float(dt)) {
      char ss[96];
      rf_shape_format(&s, ss, sizeof ss);
      snprintf(msg, sizeof msg,
               "xs[%d] ('%s' on '%s', %s %s) must have a known rank >= 2 and "
               "the float dtype and rank of xs[0]",
               i, rf_node_name(xs[i].node), rf_node_device(xs[i].node),
               rf_dtype_name(dt), ss);
      refuse(g, name, msg);
      return false;
    }
  }
  return true;
}

/* name_suffix, or NULL (a generated name) when name is NULL. */
static const char *derive(char *buf, size_t size, const char *name,
                          const char *suffix) {
  if (!name) return NULL;
  snprintf(buf, size, "%.200s_%s", name, suffix);
  return buf;
}

/* The count of x's rows per channel: a constant where x's shape is known on
 * every device, else sum(ones_like(x)) over the rows. */
static rf_output count_of(rf_graph *g, rf_output x, rf_dtype dt, bool known,
                          const int64_t *axes, int naxes) {
  if (!known)
    return rf_sum(g, NULL, rf_ones_like(g, NULL, x), axes, naxes, false);
  rf_shape s = rf_output_shape(x);
  double rows = 1;
  for (int i = 0; i < s.rank - 1; i++) rows *= (double)s.dims[i];
  return rf_const_scalar(g, NULL, dt, rows);
}

void rf_sync_batch_norm_n(rf_graph *g, const char *name, int n,
                          const rf_output *xs, const rf_output *gammas,
                          const rf_output *betas, const rf_output *moving_means,
                          const rf_output *moving_variances, double momentum,
                          double epsilon, rf_batch_norm_result *outs) {
  if (rf__graph_failed(g)) return;
  if (!check(g, name, n, xs, gammas, betas, moving_means, moving_variances,
             momentum, outs))
    return;
  for (int i = 0; i < n; i++)
    outs[i] = (rf_batch_norm_result){{NULL, 0}, {NULL, 0}, {NULL, 0}, NULL};
  rf_dtype dt = rf_output_dtype(xs[0]);
  /* float16 and bfloat16 statistics (sums, counts) in float32 */
  rf_dtype st = dt == RF_FLOAT64 ? RF_FLOAT64 : RF_FLOAT32;
  int rank = rf_output_shape(xs[0]).rank;
  int64_t axes[RF_MAX_RANK];
  for (int a = 0; a < rank - 1; a++) axes[a] = a;
  bool known = true;
  for (int i = 0; i < n; i++) {
    rf_shape s = rf_output_shape(xs[i]);
    for (int a = 0; a < s.rank - 1; a++) known = known && s.dims[a] >= 0;
  }
  rf_output *xf = calloc(8 * (size_t)n, sizeof *xf);
  if (!xf) {
    rf__graph_record(g, rf_status_new(RF_RESOURCE_EXHAUSTED,
                                      "rf_sync_batch_norm_n: no memory"));
    return;
  }
  rf_output *s = xf + n, *cnt = s + n, *q = cnt + n, *S = q + n, *N = S + n,
            *Q = N + n, *mean = Q + n;
  char buf[256];
  /* each replica's nodes on its x's device */
#define RF_ON_DEVICE(i, body)                                             \
  do {                                                                    \
    rf_status *pst = rf_graph_push_device(g, rf_node_device(xs[i].node)); \
    if (pst) {                                                            \
      rf__graph_record(g, pst);                                           \
      goto done;                                                          \
    }                                                                     \
    body;                                                                 \
    rf_graph_pop_device(g);                                               \
  } while (0)
  for (int i = 0; i < n; i++)
    RF_ON_DEVICE(i, {
      xf[i] = dt == st ? xs[i] : rf_cast(g, NULL, xs[i], st);
      s[i] = rf_sum(g, NULL, xf[i], axes, rank - 1, false);
      cnt[i] = count_of(g, xf[i], st, known, axes, rank - 1);
    });
  if (rf__graph_failed(g)) goto done;
  rf_all_reduce_n(g, derive(buf, sizeof buf, name, "sum"), s, n, RF_REDUCE_SUM,
                  S);
  rf_all_reduce_n(g, derive(buf, sizeof buf, name, "count"), cnt, n,
                  RF_REDUCE_SUM, N);
  if (rf__graph_failed(g)) goto done;
  for (int i = 0; i < n; i++)
    RF_ON_DEVICE(i, {
      mean[i] = rf_div(g, NULL, S[i], N[i]);
      rf_output d = rf_sub(g, NULL, xf[i], mean[i]);
      q[i] = rf_sum(g, NULL, rf_mul(g, NULL, d, d), axes, rank - 1, false);
    });
  if (rf__graph_failed(g)) goto done;
  rf_all_reduce_n(g, derive(buf, sizeof buf, name, "sqdev"), q, n,
                  RF_REDUCE_SUM, Q);
  if (rf__graph_failed(g)) goto done;
  for (int i = 0; i < n; i++) {
    rf_batch_norm_result r = {{NULL, 0}, {NULL, 0}, {NULL, 0}, NULL};
    char yname[256];
    if (name) snprintf(yname, sizeof yname, "%.200s_%d", name, i);
    RF_ON_DEVICE(i, {
      r.mean = mean[i];
      r.variance = rf_div(g, NULL, Q[i], N[i]);
      if (dt != st) {
        r.mean = rf_cast(g, NULL, r.mean, dt);
        r.variance = rf_cast(g, NULL, r.variance, dt);
      }
      r.y = rf_batch_norm_inference(g, name ? yname : NULL, xs[i], gammas[i],
                                    betas[i], r.mean, r.variance, epsilon);
    });
    if (rf__graph_failed(g)) goto done;
    if (moving_means) {
      r.update = rf__batch_norm_updates(g, moving_means[i], moving_variances[i],
                                        r.mean, r.variance, momentum);
      if (!r.update) goto done;
    }
    outs[i] = r;
  }
done:
  free(xf);
#undef RF_ON_DEVICE
}
