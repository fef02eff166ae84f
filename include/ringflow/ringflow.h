/* ringflow/ringflow.h - the whole public API. */
#ifndef RINGFLOW_RINGFLOW_H
#define RINGFLOW_RINGFLOW_H

#include "ringflow/checkpoint.h"
#include "ringflow/dtype.h"
#include "ringflow/gradients.h"
#include "ringflow/graph.h"
#include "ringflow/log.h"
#include "ringflow/ops.h"
#include "ringflow/session.h"
#include "ringflow/status.h"
#include "ringflow/tensor.h"

#define RINGFLOW_VERSION_MAJOR 0
#define RINGFLOW_VERSION_MINOR 1
#define RINGFLOW_VERSION_PATCH 0

#endif
