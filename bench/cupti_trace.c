/* bench/cupti_trace.c - a GPU timeline for a machine without Nsight Systems:
 * a CUDA injection library that records, through CUPTI's activity API,
 * every kernel, memcpy and memset the process runs on the GPU (graph
 * replays included: each node is one record, with its graph's id) with the
 * GPU's start and end times, and writes them as CSV when the process
 * exits. What a profiler like ncu cannot show: the time between the
 * kernels of a step or a replay, and which work runs beside which.
 *
 *   CUDA_INJECTION64_PATH=build-gpu/bench/libcupti_trace.so \
 *   RF_CUPTI_TRACE=trace.csv  <any CUDA program>
 *   python3 bench/cupti_trace_table.py trace.csv
 *
 * The CUDA driver loads the library at cuInit and calls
 * InitializeInjection. Columns: kind (kernel, memcpy, memset), name (a
 * kernel's mangled name, a copy's direction), start and end (ns, the GPU's
 * clock), bytes, stream, graph (0: not from a graph), graph node,
 * correlation id, grid size. Records land in the file in the order CUPTI
 * hands its buffers back, not in time order. Tracing itself adds a little
 * to every launch on the host; the GPU's own times are what it is for. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20)

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size,
                                      size_t *max_records) {
  *buffer = aligned_alloc(8, BUFFER_BYTES);
  *size = *buffer ? BUFFER_BYTES : 0;
  *max_records = 0; /* as many as fit */
}

static const char *copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
  }
}

static void write_record(const CUpti_Activity *rec) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
      fprintf(out, "kernel,\"%s\",%llu,%llu,0,%u,%u,%llu,%u,%lld\n", k->name,
              (unsigned long long)k->start, (unsigned long long)k->end,
              k->streamId, k->graphId, (unsigned long long)k->graphNodeId,
              k->correlationId,
              (long long)k->gridX * k->gridY * (long long)k->gridZ);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
      fprintf(out, "memcpy,%s,%llu,%llu,%llu,%u,%u,%llu,%u,0\n",
              copy_kind(m->copyKind), (unsigned long long)m->start,
              (unsigned long long)m->end, (unsigned long long)m->bytes,
              m->streamId, m->graphId, (unsigned long long)m->graphNodeId,
              m->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
      fprintf(out, "memset,memset,%llu,%llu,%llu,%u,%u,%llu,%u,0\n",
              (unsigned long long)m->start, (unsigned long long)m->end,
              (unsigned long long)m->bytes, m->streamId, m->graphId,
              (unsigned long long)m->graphNodeId, m->correlationId);
      break;
    }
    default: break;
  }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream,
                                      uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity *rec = NULL;
  while (out &&
         cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    write_record(rec);
  free(buffer);
}

static void finish(void) {
  cuptiActivityFlushAll(1);
  if (out) fclose(out);
  out = NULL;
}

int InitializeInjection(void);
int InitializeInjection(void) {
  const char *path = getenv("RF_CUPTI_TRACE");
  out = fopen(path && *path ? path : "cupti_trace.csv", "w");
  if (!out) return 0;
  fprintf(out,
          "kind,name,start,end,bytes,stream,graph,graph_node,correlation,"
          "grid\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) !=
      CUPTI_SUCCESS)
    return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  atexit(finish);
  return 1;
}
