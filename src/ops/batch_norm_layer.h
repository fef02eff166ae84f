/* ops/batch_norm_layer.h - the moving-average updates of batch norm, shared
 * by rf_batch_norm and rf_sync_batch_norm_n. */
#ifndef RF_OPS_BATCH_NORM_LAYER_H
#define RF_OPS_BATCH_NORM_LAYER_H

#include "ringflow/ops.h"

/* A NoOp target running the updates of both moving averages with the given
 * statistics; NULL with the error recorded in g. */
rf_node *rf__batch_norm_updates(rf_graph *g, rf_output moving_mean,
                                rf_output moving_variance, rf_output mean,
                                rf_output variance, double momentum);

/* The three %s arguments of "<builder>%s%s%s: ..." naming the layer: " 'l'"
 * when a name is given, nothing when it is NULL or empty (never "''"). */
#define RF__BN_NAME(name)                                  \
  ((name) && *(name) ? " '" : ""), ((name) ? (name) : ""), \
      ((name) && *(name) ? "'" : "")

#endif
