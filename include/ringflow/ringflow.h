/* ringflow/ringflow.h - the whole public API, but ringflow/debug.h (hooks
 * for tests: allocation fault injection), which a program includes itself. */
#ifndef RINGFLOW_RINGFLOW_H
#define RINGFLOW_RINGFLOW_H

#include "ringflow/checkpoint.h"
#include "ringflow/collectives.h"
#include "ringflow/dtype.h"
#include "ringflow/gradients.h"
#include "ringflow/graph.h"
#include "ringflow/graph_io.h"
#include "ringflow/log.h"
#include "ringflow/ops.h"
#include "ringflow/session.h"
#include "ringflow/status.h"
#include "ringflow/tensor.h"

#define RINGFLOW_VERSION_MAJOR 0
#define RINGFLOW_VERSION_MINOR 1
#define RINGFLOW_VERSION_PATCH 0

#endif
