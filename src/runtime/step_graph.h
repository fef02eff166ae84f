/* runtime/step_graph.h - a plan's GPU work captured once as a CUDA graph and
 * replayed (rf_session_options.gpu_graphs). The decision (step_graph_policy.c,
 * no CUDA) is separate from the capture and replay (gpu/step_graph.c):
 *   - a plan that can never be captured says why once (a CPU device in the
 *     step, several physical GPUs, values crossing devices through the host,
 *     ops that read the step number on the host, collectives across tasks);
 *   - a run whose feed shapes equal the previous run's is captured; later
 *     runs with the same shapes replay it; another shape runs without the
 *     graph and says so; that shape repeated is captured in its place.
 * A session keeps at most RF__GRAPH_MAX_KEPT graphs: each holds the device
 * memory of its step's temporaries, and a plan is made per (feeds,
 * fetches, targets), so a program running many signatures would otherwise
 * hold that memory for each. Plans beyond it run without a graph (said once
 * through the log); a graph's slot is given back when it is dropped or its
 * plan freed. No eviction: one that cycles through more signatures would
 * capture at every run.
 * Invariant: while a step is captured no other run of the session is under
 * way (captures wait for none: they are skipped instead, and the run goes
 * uncaptured). */
#ifndef RF_RUNTIME_STEP_GRAPH_H
#define RF_RUNTIME_STEP_GRAPH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tensor.h"
#include "runtime/session_internal.h"

enum { RF__GRAPH_MAX_KEPT = 16 };

typedef enum {
  RF__GRAPH_EAGER = 0, /* run the executor as without graphs */
  RF__GRAPH_CAPTURE,   /* run it under stream capture, then launch */
  RF__GRAPH_REPLAY,    /* launch the graph captured before */
} rf__graph_action;

/* The shapes a plan's graph decision remembers (one per feed). */
typedef struct rf__graph_shapes {
  int num_feeds;
  rf_shape *last;     /* the previous run's feeds */
  rf_shape *captured; /* the graph's feeds */
  bool have_last, have_captured;
} rf__graph_shapes;

/* Why plan p of session s is never captured, written into buf (NULL: it
 * may be). Looks at the compiled graph and its devices only. */
const char *rf__graph_unsupported(const rf_session *s, const rf__plan *p,
                                  char *buf, size_t len);

/* What to do with a run of feeds[0..num_feeds) (num_feeds as at
 * rf__graph_shapes_init), and remembers the shapes as the previous run's.
 * A reason to log is written into why (empty: nothing to say): a feed in
 * device memory, or shapes other than the graph's. RESOURCE_EXHAUSTED
 * cannot happen: the arrays are made at init. */
rf__graph_action rf__graph_decide(rf__graph_shapes *g, rf_tensor *const *feeds,
                                  char *why, size_t len);
/* After a capture that is kept: the previous run's shapes are the graph's. */
void rf__graph_captured(rf__graph_shapes *g);
/* After the graph was dropped: the next run with the same shapes captures
 * again. */
void rf__graph_forget(rf__graph_shapes *g);
rf_status *rf__graph_shapes_init(rf__graph_shapes *g, int num_feeds);
void rf__graph_shapes_fini(rf__graph_shapes *g);

/* A session's runs under way, so that a capture happens only while its run
 * is the one under way (the streams it captures are then the step's
 * alone). begin waits while a capture is under way. */
void rf__graph_run_begin(rf_session *s);
void rf__graph_run_end(rf_session *s);
/* Whether the calling run (between begin and end) is the only one; if so,
 * other runs wait at begin until rf__graph_capture_end. */
bool rf__graph_capture_begin(rf_session *s);
void rf__graph_capture_end(rf_session *s);

/* Switches for finding what makes a replayed step fault, from the
 * environment variable RF_GPU_GRAPH_DEBUG (comma-separated words; read by
 * sessions with gpu_graphs on; docs/PERFORMANCE.md, "CUDA graphs of
 * steps"). They change how a step is captured or launched, never its
 * values. */
enum {
  /* "sync": the host waits for every launch of a step's graph, and a
   * fault is reported by that launch, numbered (1: the capture's own) */
  RF__GRAPH_DEBUG_SYNC = 1,
  /* "serial": while a step is captured, its kernels are enqueued one at a
   * time across all its devices (collectives and fetches included), not
   * one at a time per device */
  RF__GRAPH_DEBUG_SERIAL = 2,
  /* "workspace": each GPU device's cuBLAS handle gets a workspace of its
   * own (cublasSetWorkspace), so a capture records no cuBLAS memory nodes
   * (cudaMallocAsync/cudaFreeAsync inside the graph). Now always so with
   * gpu_graphs (session.c); the word is still accepted. */
  RF__GRAPH_DEBUG_WORKSPACE = 4,
};
/* The flags of text (NULL or empty: 0); INVALID_ARGUMENT naming the word
 * that is none of the above. */
rf_status *rf__graph_debug_parse(const char *text, int *flags);

#ifdef RF_HAVE_CUDA
/* The plan's graph state (gpu/step_graph.c), made at the plan's first run
 * with graphs on; freed with the plan (after its last launch ran). */
typedef struct rf__step_graph rf__step_graph;
rf_status *rf__step_graph_new(rf_session *s, rf__plan *p, rf__step_graph **out);
void rf__step_graph_free(rf__step_graph *g);
/* Runs the step through the graph (capture and launch, or replay) when the
 * decision says so: returns true when it did (*st: the step's error, as
 * the executor's would be; the step's fetches are filled by
 * rf__step_graph_finish after rf__session_end_step), false when the
 * caller runs the executor as without graphs. */
bool rf__step_graph_run(rf_session *s, rf__plan *p, rf__step *step,
                        const rf_feed *feeds, rf_status **st);
/* After rf__session_end_step of a step rf__step_graph_run ran: copies the
 * fetched values out of the graph's buffers into step->fetches (new host
 * tensors). st is the step's result so far (returned, or the first error). */
rf_status *rf__step_graph_finish(rf_session *s, rf__plan *p, rf__step *step,
                                 rf_status *st);
#endif

#endif
