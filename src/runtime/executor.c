/* runtime/executor.c - runs one step over the device plans.
 *
 * A thread runs ready nodes of a frame from a local stack; a completing node
 * makes its successors ready (atomic pending counts, skipped for nodes with a
 * single predecessor) and pushes them. Nothing on this path allocates, locks
 * or touches a counter shared with other threads, so a chain costs a kernel
 * call plus a few stores per node. Work leaves the thread only (a) when
 * several nodes are ready and pool workers are idle: a slice of the stack is
 * handed over as one batch; (b) into an asynchronous kernel, whose completion
 * continues on the thread that completes it. The frame counts its holders -
 * running drains, queued batches, pending async kernels - and is done when
 * the last lets go. On the first error the step is marked cancelled and its
 * rendezvous aborted: nodes not yet started are skipped and pending receives
 * fail, so every device drains promptly. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "ops/op_registry.h"
#include "runtime/executor_internal.h"
#include "runtime/rendezvous.h"
#include "runtime/trace.h"
#include "comm/collective.h"

/* The step as a whole: waits for every device's frame. */
typedef struct run {
  atomic_int frames_left;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  rf_status *first_error; /* under mu */
} run;

#define INLINE_STACK 128
/* Nested async completions (a send firing a receive that runs a send...)
 * deeper than this continue on the pool instead of growing the C stack. */
#define MAX_INLINE_DEPTH 8

typedef struct stack {
  int *items;
  int n, cap;
  int inline_items[INLINE_STACK];
} stack;

static _Thread_local int completion_depth;

static void stack_init(stack *s) {
  s->items = s->inline_items;
  s->n = 0;
  s->cap = INLINE_STACK;
}

static void stack_fini(stack *s) {
  if (s->items != s->inline_items) rf__free(s->items);
}

static bool stack_push(stack *s, int v) {
  if (s->n == s->cap) {
    int ncap = s->cap * 2;
    int *items = s->items == s->inline_items ? NULL : s->items;
    items = rf__realloc(items, sizeof(int) * (size_t)ncap);
    if (!items) return false;
    if (s->items == s->inline_items)
      memcpy(items, s->inline_items, sizeof(int) * (size_t)s->n);
    s->items = items;
    s->cap = ncap;
  }
  s->items[s->n++] = v;
  return true;
}

static void drain(frame *f, stack *s);

/* ---- holders ---- */

static void frame_done(frame *f) {
  run *r = f->run;
  if (atomic_load_explicit(&f->step->cancelled, memory_order_acquire))
    rf__frame_scrub(f);
  if (atomic_fetch_sub_explicit(&r->frames_left, 1, memory_order_acq_rel) != 1)
    return;
  pthread_mutex_lock(&r->mu);
  r->done = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void hold(frame *f) {
  atomic_fetch_add_explicit(&f->holders, 1, memory_order_relaxed);
}

static void let_go(frame *f) {
  if (atomic_fetch_sub_explicit(&f->holders, 1, memory_order_acq_rel) == 1)
    frame_done(f);
}

/* ---- errors ---- */

/* Keeps st if it is the step's first error (then cancels the step and aborts
 * its rendezvous), else frees it. */
static void record_error(frame *f, rf_status *st) {
  run *r = f->run;
  bool first = false;
  pthread_mutex_lock(&r->mu);
  if (!r->first_error) {
    r->first_error = st;
    first = true;
  }
  pthread_mutex_unlock(&r->mu);
  if (!first) {
    rf_status_free(st);
    return;
  }
  atomic_store(&f->step->cancelled, 1);
  /* first_error lives until the run ends, after every frame is done. */
  rf__rendezvous_abort(f->step->rendezvous, f->step->id, st);
  rf__collective_cancel_step(f->step->collectives, f->step->id, st);
}

/* Makes sure a kernel's error names its node, op and device. */
static rf_status *name_error(frame *f, const xnode *x, rf_status *st) {
  char tag[300];
  snprintf(tag, sizeof tag, "node '%s'", x->node->name);
  if (strstr(rf_status_message(st), tag)) return st;
  return rf__status_prefix(st, "node '%s' (%s) on %s", x->node->name,
                           x->node->op->name, f->plan->device->canonical);
}

/* A kernel that returned OK must have produced every output. */
static rf_status *check_outputs(frame *f, const xnode *x, rf_tensor **out) {
  for (int i = 0; i < x->num_out; i++) {
    if (out[i] && out[i]->dtype == x->node->out_dtypes[i]) continue;
    return rf__internal(
        "node '%s' (%s) on %s: the kernel %s output %d (%s "
        "expected)",
        x->node->name, x->node->op->name, f->plan->device->canonical,
        out[i] ? "produced a wrong dtype for" : "did not set", i,
        rf_dtype_name(x->node->out_dtypes[i]));
  }
  return NULL;
}

/* ---- handing work to the pool ---- */

static void node_task(void *arg);
static void batch_task(void *arg);

/* Moves the top k nodes of s into one batch for a pool worker. False (s
 * unchanged) if the pool refuses. */
static bool hand_off(frame *f, stack *s, int k) {
  int begin =
      atomic_fetch_add_explicit(&f->handoff_top, k, memory_order_relaxed);
  if (begin + k > f->plan->num_nodes) { /* only after refused hand-offs */
    atomic_fetch_sub_explicit(&f->handoff_top, k, memory_order_relaxed);
    return false;
  }
  memcpy(f->handoff + begin, s->items + s->n - k, sizeof(int) * (size_t)k);
  f->batches[begin] = (batch){f, begin, k};
  hold(f);
  rf_status *st = rf__threadpool_schedule(f->plan->device->pool, batch_task,
                                          &f->batches[begin]);
  if (st) {
    /* The range stays reserved, unused: the nodes may be handed off again,
     * so the bound check above is what keeps handoff in range. */
    rf_status_free(st);
    let_go(f); /* cannot be the last: our caller holds the frame */
    return false;
  }
  s->n -= k;
  return true;
}

/* With idle workers, splits the ready nodes beyond the one we run next. */
static void offload(frame *f, stack *s) {
  int idle = rf__threadpool_idle(f->plan->device->pool);
  if (idle <= 0) return;
  int k = (s->n - 1) / (idle + 1);
  if (k < 1) k = 1;
  for (; idle > 0 && s->n > 1; idle--) {
    if (k > s->n - 1) k = s->n - 1;
    if (!hand_off(f, s, k)) return;
  }
}

/* Queues ready node v on s; if s cannot grow, a pool worker takes v, or (no
 * memory at all) it runs right here, deeper in the C stack. */
static void make_ready(frame *f, stack *s, int v) {
  if (stack_push(s, v)) return;
  hold(f);
  rf_status *st =
      rf__threadpool_schedule(f->plan->device->pool, node_task, &f->refs[v]);
  if (!st) return;
  rf_status_free(st);
  let_go(f);
  stack one;
  stack_init(&one);
  one.items[one.n++] = v;
  drain(f, &one);
}

/* ---- running nodes ---- */

/* True when this edge made dst ready. */
static inline bool arrive(frame *f, int dst) {
  const xnode *d = &f->plan->nodes[dst];
  if (d->init_pending == 1) return true; /* sole predecessor: no atomics */
  if (atomic_fetch_sub_explicit(&f->pending[dst], 1, memory_order_acq_rel) != 1)
    return false;
  /* Everyone has arrived: restore the count for the frame's next step. */
  atomic_store_explicit(&f->pending[dst], d->init_pending,
                        memory_order_relaxed);
  return true;
}

/* Finishes node v: releases its inputs, then hands its outputs to consumers
 * and pushes those now ready - or records the error / drops the outputs of a
 * cancelled step. */
static void complete(frame *f, int v, rf_status *st, stack *s) {
  const dplan *p = f->plan;
  const xnode *x = &p->nodes[v];
  rf_tensor **in = f->slots + x->in_base;
  for (int i = 0; i < x->num_in; i++) {
    rf_tensor_release(in[i]);
    in[i] = NULL;
  }
  rf_tensor **out = f->outs + x->out_base;
  if (!st) st = check_outputs(f, x, out);
  if (st || atomic_load_explicit(&f->step->cancelled, memory_order_relaxed)) {
    if (st) record_error(f, name_error(f, x, st));
    for (int i = 0; i < x->num_out; i++) {
      rf_tensor_release(out[i]);
      out[i] = NULL;
    }
    return;
  }
  for (int k = x->edge_begin; k < x->edge_end; k++) {
    const xedge *e = &p->edges[k];
    rf_tensor *t = out[e->src_out];
    f->slots[e->slot] = e->take ? t : rf_tensor_retain(t);
    if (arrive(f, e->dst)) make_ready(f, s, e->dst);
  }
  for (int k = x->drop_begin; k < x->drop_end; k++)
    rf_tensor_release(out[p->drops[k]]);
  for (int i = 0; i < x->num_out; i++) out[i] = NULL;
  for (int k = x->ctl_begin; k < x->ctl_end; k++)
    if (arrive(f, p->ctl[k])) make_ready(f, s, p->ctl[k]);
}

static void async_done(rf__kernel_ctx *ctx, rf_status *st) {
  node_ref *ref = ctx->executor_private;
  frame *f = ref->frame;
  if (ctx->step->trace)
    rf__trace_record(ctx->step->trace, ctx->device->index, ctx->node,
                     ctx->trace_start, rf__trace_now());
  stack s;
  stack_init(&s);
  complete(f, ref->id, st, &s);
  /* We inherit the hold taken when the kernel started. */
  if (completion_depth >= MAX_INLINE_DEPTH && s.n > 0) hand_off(f, &s, s.n);
  completion_depth++;
  drain(f, &s);
  completion_depth--;
  stack_fini(&s);
  let_go(f);
}

/* Runs node v (skips it once the step is cancelled). */
static void run_node(frame *f, int v, stack *s) {
  const xnode *x = &f->plan->nodes[v];
  if (atomic_load_explicit(&f->step->cancelled, memory_order_relaxed)) {
    rf_tensor **in = f->slots + x->in_base; /* skipped: only drop inputs */
    for (int i = 0; i < x->num_in; i++) {
      rf_tensor_release(in[i]);
      in[i] = NULL;
    }
    return;
  }
  rf__device *dev = f->plan->device;
  if (dev->enter) { /* a GPU device: its GPU current on this thread */
    rf_status *st = dev->enter(dev);
    if (st) {
      complete(f, v, st, s);
      return;
    }
  }
  if (x->compute) {
    rf__kernel_ctx ctx = {.node = x->node,
                          .def = x->kernel,
                          .state = x->state,
                          .num_inputs = x->num_in,
                          .inputs = f->slots + x->in_base,
                          .num_outputs = x->num_out,
                          .outputs = f->outs + x->out_base,
                          .device = f->plan->device,
                          .step = f->step,
                          .executor_private = &f->refs[v]};
    if (!f->step->trace) {
      complete(f, v, x->compute(&ctx), s);
      return;
    }
    int64_t t0 = rf__trace_now();
    rf_status *st = x->compute(&ctx);
    rf__trace_record(f->step->trace, f->plan->device->index, x->node, t0,
                     rf__trace_now());
    complete(f, v, st, s);
    return;
  }
  rf__kernel_ctx *ctx = &f->actx[x->async_index];
  *ctx = (rf__kernel_ctx){.node = x->node,
                          .def = x->kernel,
                          .state = x->state,
                          .num_inputs = x->num_in,
                          .inputs = f->slots + x->in_base,
                          .num_outputs = x->num_out,
                          .outputs = f->outs + x->out_base,
                          .device = f->plan->device,
                          .step = f->step,
                          .executor_private = &f->refs[v],
                          .done = async_done,
                          .trace_start = f->step->trace ? rf__trace_now() : 0};
  hold(f); /* released by async_done */
  x->kernel->compute_async(ctx, async_done);
}

static void drain(frame *f, stack *s) {
  while (s->n > 0) {
    if (s->n > 1) offload(f, s);
    int v = s->items[--s->n];
    run_node(f, v, s);
  }
}

static void node_task(void *arg) {
  node_ref *ref = arg;
  stack s;
  stack_init(&s);
  s.items[s.n++] = ref->id;
  drain(ref->frame, &s);
  stack_fini(&s);
  let_go(ref->frame);
}

/* Runs a handed-off range in place (so no node is handed off twice) and
 * whatever it makes ready. */
static void batch_task(void *arg) {
  batch *b = arg;
  frame *f = b->frame;
  stack s;
  stack_init(&s);
  for (int i = 0; i < b->n; i++) {
    run_node(f, f->handoff[b->begin + i], &s);
    drain(f, &s);
  }
  stack_fini(&s);
  let_go(f);
}

/* ---- steps ---- */

/* Runs the device's roots; the frame's initial hold is ours. */
static void start_frame(frame *f) {
  const dplan *p = f->plan;
  stack s;
  stack_init(&s);
  for (int i = 0; i < p->num_roots; i++) {
    if (stack_push(&s, p->roots[i])) continue;
    drain(f, &s); /* could not grow: make room by running what we have */
    s.items[s.n++] = p->roots[i];
  }
  drain(f, &s);
  stack_fini(&s);
  let_go(f);
}

static void start_task(void *arg) { start_frame(arg); }

/* Frames for every plan, or NULL (none taken) when memory runs out. */
static frame **acquire_frames(rf__executor *x, frame **few) {
  frame **frames = x->num_plans <= 8
                       ? few
                       : rf__malloc(sizeof(frame *) * (size_t)x->num_plans);
  if (!frames) return NULL;
  for (int i = 0; i < x->num_plans; i++) {
    frames[i] = rf__frame_acquire(&x->plans[i]);
    if (frames[i]) continue;
    while (i-- > 0) rf__frame_release(&x->plans[i], frames[i]);
    if (frames != few) rf__free(frames);
    return NULL;
  }
  return frames;
}

rf_status *rf__executor_run(rf__executor *x, rf__step *step) {
  frame *few[8];
  frame **frames = acquire_frames(x, few);
  if (!frames) return rf__oom();
  int n = x->num_plans;
  run r = {.done = n == 0, .first_error = NULL};
  atomic_init(&r.frames_left, n);
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  for (int i = 0; i < n; i++) {
    frames[i]->run = &r;
    frames[i]->step = step;
    atomic_store_explicit(&frames[i]->holders, 1, memory_order_relaxed);
    atomic_store_explicit(&frames[i]->handoff_top, 0, memory_order_relaxed);
  }
  /* Other devices start on the pool, so none waits behind a long kernel of
   * another device (running them here in turn when no worker happened to be
   * idle let one slow device hold back every other's start). The caller runs
   * device 0, and any device the pool could not take. */
  for (int i = n - 1; i >= 1; i--) {
    rf__threadpool *pool = x->plans[i].device->pool;
    rf_status *st = rf__threadpool_schedule(pool, start_task, frames[i]);
    if (!st) continue;
    rf_status_free(st);
    start_frame(frames[i]);
  }
  if (n > 0) start_frame(frames[0]);
  pthread_mutex_lock(&r.mu);
  while (!r.done) pthread_cond_wait(&r.cv, &r.mu);
  pthread_mutex_unlock(&r.mu);
  rf__rendezvous_end_step(step->rendezvous, step->id);
  for (int i = 0; i < n; i++) rf__frame_release(&x->plans[i], frames[i]);
  if (frames != few) rf__free(frames);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  return r.first_error;
}
