/* runtime/executor_internal.h - the executor's data, shared by the plan
 * builder (executor_plan.c) and the step runner (executor.c).
 *
 * Per device, nodes have dense local ids. Node v reads its inputs from
 * slots[in_base .. in_base+num_in) of the frame and its kernel writes outputs
 * to outs[out_base .. out_base+num_out). Its out edges are
 * edges[edge_begin..edge_end): each moves output src_out into a consumer's
 * slot; the edge marked `take` is the output's last consumer and inherits the
 * kernel's reference, the others retain. Outputs nobody consumes are listed in
 * drops[] and released. A frame's pending counts equal init_pending whenever
 * the frame sits in the cache. */
#ifndef RF_RUNTIME_EXECUTOR_INTERNAL_H
#define RF_RUNTIME_EXECUTOR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "kernels/kernel.h"
#include "runtime/executor.h"

typedef struct xnode {
  const rf_node *node;
  const rf__kernel_def *kernel;
  rf_status *(*compute)(rf__kernel_ctx *ctx); /* NULL for async kernels */
  void *state;
  int in_base, num_in;
  int out_base, num_out;
  int edge_begin, edge_end; /* data out edges */
  int ctl_begin, ctl_end;   /* control successors */
  int drop_begin, drop_end; /* unconsumed outputs */
  int init_pending;         /* data + control in edges */
  int async_index;          /* into frame->actx; -1 for sync kernels */
  rf__kernel_cost cost;     /* the kernel's: decides inline or hand-off */
  bool has_home;            /* an output has a place in a bucket */
} xnode;

typedef struct xedge {
  int src_out;
  int dst;  /* local id */
  int slot; /* absolute slot of the consumer's input */
  int take; /* last consumer of src_out: gets the kernel's reference */
} xedge;

struct frame;

/* A bucket of fused all-reduces on this device: its _BucketPack node, whose
 * output is one flat tensor of `total` elements that the producers of the
 * pack's inputs write into directly (runtime/executor_homes.c). */
typedef struct xbucket {
  int pack; /* local id */
  rf_dtype dtype;
  int64_t total;
} xbucket;

/* The place reserved for one output: elements [offset, offset + capacity)
 * of bucket `bucket`'s tensor; bucket -1: none. */
typedef struct xhome {
  int bucket;
  int64_t offset, capacity;
} xhome;

typedef struct dplan {
  rf__device *device; /* not owned */
  int num_nodes, num_slots, num_outs, num_async, num_roots;
  xnode *nodes;
  xedge *edges;
  int *ctl;   /* local ids */
  int *drops; /* output indices */
  int *roots; /* nodes with init_pending == 0 */
  int num_buckets;
  xbucket *buckets; /* [num_buckets] */
  xhome *homes;     /* [num_outs], or NULL without buckets */
  pthread_mutex_t frames_mu;
  struct frame *free_frames;
} dplan;

struct rf__executor {
  int num_plans; /* devices holding nodes */
  dplan *plans;
};

/* One device's part of one step. */
struct run;

typedef struct node_ref { /* a stable argument for async ctx and pool tasks */
  struct frame *frame;
  int id;
} node_ref;

typedef struct batch { /* ready nodes handed to a pool worker */
  struct frame *frame;
  int begin, n; /* range of frame->handoff */
} batch;

typedef struct frame {
  dplan *plan;
  struct run *run;
  rf__step *step;
  rf_tensor **slots;   /* [num_slots] */
  rf_tensor **outs;    /* [num_outs] */
  atomic_int *pending; /* [num_nodes] */
  /* Holders of the frame: running drains, queued tasks and pending async
   * kernels each hold one; the frame is done when the last lets go. */
  atomic_int holders;
  rf__kernel_ctx *actx; /* [num_async] */
  node_ref *refs;       /* [num_nodes] */
  /* A node is handed off at most once per step, so num_nodes entries
   * suffice; a batch is described at batches[begin]. */
  int *handoff;   /* [num_nodes] */
  batch *batches; /* [num_nodes] */
  atomic_int handoff_top;
  /* This step's tensor of each bucket, made by the first producer that
   * writes into it and taken by the pack; NULL before and after. */
  _Atomic(rf_tensor *) *bucket_tensors; /* [num_buckets] */
  struct frame *next;                   /* in the plan's cache */
} frame;

/* Reserves places in each bucket's tensor for the outputs that feed its
 * _BucketPack directly (runtime/executor_homes.c); after the plan's nodes
 * and edges are built. */
rf_status *rf__plan_homes(dplan *p);
/* ctx->output_home for nodes with has_home: a view of output i's place in
 * this step's bucket tensor (made on first use), or NULL. */
rf_tensor *rf__executor_output_home(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                                    const rf_shape *shape);
/* Releases bucket tensors a step left behind (a cancelled step). */
void rf__frame_drop_buckets(struct frame *f);

/* Frames: taken from the plan's cache or made; returned after the step. */
frame *rf__frame_acquire(dplan *p);
void rf__frame_release(dplan *p, frame *f);
/* Puts a frame back into its pristine state after a cancelled step: releases
 * leftover tensors and resets pending counts. */
void rf__frame_scrub(frame *f);

#endif
