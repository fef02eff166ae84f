/* runtime/executor.c - runs one step over the device plans.
 *
 * A thread runs ready nodes of a frame from local stacks; a completing node
 * makes its successors ready (atomic pending counts, skipped for nodes with a
 * single predecessor) and pushes them. Nothing on this path allocates, locks
 * or touches a counter shared with other threads, so a chain costs a kernel
 * call plus a few stores per node. Ready nodes are cheap or expensive (the
 * kernel's rf__kernel_cost, TensorFlow's IsExpensive): cheap ones always run
 * inline, first; work leaves the thread only (a) when several expensive nodes
 * are ready (or one waits behind a long run of cheap ones) and pool workers
 * are idle: a slice of them is handed over as one batch; (b) into an
 * asynchronous kernel, whose completion continues on the thread that
 * completes it (on CPU devices its expensive nodes go to the pool: a
 * collective completes every participant from one thread). A step starts on the
 * calling thread: it runs the cheap start of every device in turn, keeps the
 * first device's expensive work (unless that device is the only one with any:
 * then it goes to an idle worker) and hands every other device's to the pool,
 * so no device's start waits behind another's long kernel while steps of cheap
 * nodes (a small collective) never leave the caller. The frame counts its
 * holders - running drains, queued batches, pending async kernels - and is done
 * when the last lets go. On the first error the step is marked cancelled and
 * its rendezvous aborted: nodes not yet started are skipped and pending
 * receives fail, so every device drains promptly. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/format.h"
#include "core/mem.h"
#include "ops/op_registry.h"
#include "runtime/executor_internal.h"
#include "device/gpu/order.h"
#include "device/rendezvous.h"
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

#define INLINE_STACK 64
/* Nested async completions (a send firing a receive that runs a send...)
 * deeper than this continue on the pool instead of growing the C stack. */
#define MAX_INLINE_DEPTH 8
/* Cheap nodes a thread runs while an expensive one waits before it offers
 * that one to an idle worker (a long cheap chain must not starve it). */
#define CHEAP_BEFORE_OFFLOAD 32
/* Cheap nodes the caller runs to start one device before moving on to the
 * next device's start: bounds how long any device's start waits. */
#define START_BUDGET 256

typedef struct stack {
  int *items;
  int n, cap;
  int inline_items[INLINE_STACK];
} stack;

/* The ready nodes a thread holds, by cost. */
typedef struct ready {
  stack cheap, dear;
} ready;

static _Thread_local int completion_depth;

/* RF_GPU_GRAPH_DEBUG=serial (rf__step.capture_serial): one lock for every
 * kernel of a captured step, sync and async. Recursive: an async kernel's
 * done may run the next nodes on the same thread while it is held. */
static pthread_mutex_t serial_mu;
static pthread_once_t serial_once = PTHREAD_ONCE_INIT;

static void serial_init(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&serial_mu, &a);
  pthread_mutexattr_destroy(&a);
}

/* Takes (or, with lock false, lets go of) what serialises the enqueues of
 * node kernels on dev while f's step is captured: the device's capture_mu
 * (device.h), or the one lock above with capture_serial. sync: a kernel
 * that returns when enqueued (async kernels only take the one lock). */
static void capture_lock(const frame *f, rf__device *dev, bool sync,
                         bool lock) {
  if (!f->step->capturing || !dev->enter) return;
  if (f->step->capture_serial) {
    pthread_once(&serial_once, serial_init);
    if (lock)
      pthread_mutex_lock(&serial_mu);
    else
      pthread_mutex_unlock(&serial_mu);
  } else if (sync) {
    if (lock)
      pthread_mutex_lock(&dev->capture_mu);
    else
      pthread_mutex_unlock(&dev->capture_mu);
  }
}

static void stack_init(stack *s) {
  s->items = s->inline_items;
  s->n = 0;
  s->cap = INLINE_STACK;
}

static void stack_fini(stack *s) {
  if (s->items != s->inline_items) rf__free(s->items);
}

static void ready_init(ready *rd) {
  stack_init(&rd->cheap);
  stack_init(&rd->dear);
}

static void ready_fini(ready *rd) {
  stack_fini(&rd->cheap);
  stack_fini(&rd->dear);
}

static int ready_count(const ready *rd) { return rd->cheap.n + rd->dear.n; }

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

static void drain(frame *f, ready *rd);

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

/* Cancels the step; keeps st if it is the step's first error (then aborts
 * its rendezvous and collectives), else frees it. */
static void record_error(frame *f, rf_status *st) {
  run *r = f->run;
  bool first = false;
  pthread_mutex_lock(&r->mu);
  if (!r->first_error) {
    r->first_error = st;
    first = true;
  }
  /* Marked under mu, after first_error: an error a kernel derives from the
   * mark (CANCELLED) can never be taken for the first. And by every error,
   * not only the first: a frame whose node failed second could otherwise
   * run out of work and be done before the first error's thread had marked
   * the step, and frame_done would skip the scrub, leaving the pending
   * counts and slots of the nodes it never reached to the frame's next step
   * (nodes run early with missing inputs; tensors leaked). */
  atomic_store(&f->step->cancelled, 1);
  pthread_mutex_unlock(&r->mu);
  if (!first) {
    rf_status_free(st);
    return;
  }
  /* first_error lives until the run ends, after every frame is done. */
  rf__rendezvous_abort(f->step->rendezvous, f->step->id, st);
  rf__collective_cancel_step(f->step->collectives, f->step->id, st);
}

/* Makes sure a kernel's error names its node, op and device. */
static rf_status *name_error(frame *f, const xnode *x, rf_status *st) {
  char *tag =
      rf__format("node '%s'", x->node->name); /* quoted as messages do */
  bool named = tag && strstr(rf_status_message(st), tag);
  rf__free(tag);
  if (named) return st;
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

/* Moves the top kc cheap and kd expensive nodes of rd into one batch for a
 * pool worker (cheap ones run first). False (rd unchanged) if the pool
 * refuses. */
static bool hand_off(frame *f, ready *rd, int kc, int kd) {
  int k = kc + kd;
  int begin =
      atomic_fetch_add_explicit(&f->handoff_top, k, memory_order_relaxed);
  if (begin + k > f->plan->num_nodes) { /* only after refused hand-offs */
    atomic_fetch_sub_explicit(&f->handoff_top, k, memory_order_relaxed);
    return false;
  }
  memcpy(f->handoff + begin, rd->cheap.items + rd->cheap.n - kc,
         sizeof(int) * (size_t)kc);
  memcpy(f->handoff + begin + kc, rd->dear.items + rd->dear.n - kd,
         sizeof(int) * (size_t)kd);
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
  rd->cheap.n -= kc;
  rd->dear.n -= kd;
  return true;
}

/* With idle workers, hands over the expensive nodes beyond `keep` (shared
 * among the idle workers and this thread). */
static void offload(frame *f, ready *rd, int keep) {
  int idle = rf__threadpool_idle(f->plan->device->pool);
  if (idle <= 0) return;
  int k = (rd->dear.n - keep) / (idle + 1);
  if (k < 1) k = 1;
  for (; idle > 0 && rd->dear.n > keep; idle--) {
    if (k > rd->dear.n - keep) k = rd->dear.n - keep;
    if (!hand_off(f, rd, 0, k)) return;
  }
}

/* Whether ready node x runs inline without a second thought. */
static bool is_cheap(const frame *f, const xnode *x) {
  if (x->cost == RF_COST_CHEAP) return true;
  if (x->cost != RF_COST_PER_ELEMENT) return false;
  int64_t n = 0; /* every input has arrived: the slots are filled */
  rf_tensor *const *in = f->slots + x->in_base;
  for (int i = 0; i < x->num_in; i++) n += in[i] ? in[i]->num_elements : 0;
  return n <= RF_CHEAP_MAX_ELEMENTS;
}

/* Queues ready node v on rd; if rd cannot grow, a pool worker takes v, or
 * (no memory at all) it runs right here, deeper in the C stack. */
static void make_ready(frame *f, ready *rd, int v) {
  stack *s = is_cheap(f, &f->plan->nodes[v]) ? &rd->cheap : &rd->dear;
  if (stack_push(s, v)) return;
  hold(f);
  rf_status *st =
      rf__threadpool_schedule(f->plan->device->pool, node_task, &f->refs[v]);
  if (!st) return;
  rf_status_free(st);
  let_go(f);
  ready one;
  ready_init(&one);
  one.dear.items[one.dear.n++] = v;
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
static void complete(frame *f, int v, rf_status *st, ready *rd) {
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
    if (arrive(f, e->dst)) make_ready(f, rd, e->dst);
  }
  for (int k = x->drop_begin; k < x->drop_end; k++)
    rf_tensor_release(out[p->drops[k]]);
  for (int i = 0; i < x->num_out; i++) out[i] = NULL;
  for (int k = x->ctl_begin; k < x->ctl_end; k++)
    if (arrive(f, p->ctl[k])) make_ready(f, rd, p->ctl[k]);
}

/* Continues the step after an async kernel. Fan-out: a collective's
 * completions are delivered one participant after another by the thread
 * that completes it, and each used to continue its device inline, so the
 * next participant heard of its result only after this device's expensive
 * kernels (a product, Adam) had run: the devices' continuations ran back to
 * back on one core (`ringflow train --trace`, 4 CPU devices, batch 64,
 * --sync sharded). On CPU devices the expensive nodes a completion makes
 * ready go to the pool as one queued batch and this thread keeps the cheap
 * ones. Handing them over only when a worker was idle still ran a third
 * device's inline whenever both workers were busy, holding back the fourth
 * (tests/test_scheduling.c: test_collective_completions_fan_out). */
static void async_done(rf__kernel_ctx *ctx, rf_status *st) {
  node_ref *ref = ctx->executor_private;
  frame *f = ref->frame;
  if (ctx->stream_taken) rf__gpu_enqueue_end(ctx->device->order);
  if (ctx->step->trace)
    rf__trace_record(ctx->step->trace, ctx->device->index, ctx->node,
                     ctx->trace_start, rf__trace_now());
  ready rd;
  ready_init(&rd);
  complete(f, ref->id, st, &rd);
  /* We inherit the hold taken when the kernel started. */
  if (completion_depth >= MAX_INLINE_DEPTH && ready_count(&rd) > 0)
    hand_off(f, &rd, rd.cheap.n, rd.dear.n);
  else if (rd.dear.n > 0 && f->plan->device->name.type == RF_DEVICE_CPU)
    hand_off(f, &rd, 0, rd.dear.n); /* fan-out, above */
  completion_depth++;
  drain(f, &rd);
  completion_depth--;
  ready_fini(&rd);
  let_go(f);
}

/* The context node v's kernel runs with. */
static rf__kernel_ctx node_ctx(frame *f, const xnode *x, int v) {
  return (rf__kernel_ctx){
      .node = x->node,
      .def = x->kernel,
      .state = x->state,
      .num_inputs = x->num_in,
      .inputs = f->slots + x->in_base,
      .num_outputs = x->num_out,
      .outputs = f->outs + x->out_base,
      .device = f->plan->device,
      .step = f->step,
      .executor_private = &f->refs[v],
      .output_home = x->has_home ? rf__executor_output_home : NULL};
}

/* Runs node v (skips it once the step is cancelled). */
static void run_node(frame *f, int v, ready *rd) {
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
      complete(f, v, st, rd);
      return;
    }
  }
  rf__kernel_ctx ctx = node_ctx(f, x, v);
  if (x->compute) {
    int64_t t0 = f->step->trace ? rf__trace_now() : 0;
    capture_lock(f, dev, true, true);
    rf_status *st = x->compute(&ctx);
    capture_lock(f, dev, true, false);
    /* before complete() releases the kernel's buffers: device/gpu/order.h */
    if (ctx.stream_taken) rf__gpu_enqueue_end(dev->order);
    if (f->step->trace)
      rf__trace_record(f->step->trace, f->plan->device->index, x->node, t0,
                       rf__trace_now());
    complete(f, v, st, rd);
    return;
  }
  /* An async kernel's context outlives this call: it lives in the frame. */
  rf__kernel_ctx *actx = &f->actx[x->async_index];
  *actx = ctx;
  actx->done = async_done;
  actx->trace_start = f->step->trace ? rf__trace_now() : 0;
  hold(f);                        /* released by async_done */
  const rf__step *step = f->step; /* f may be done when compute_async ends */
  bool serial = step->capturing && step->capture_serial && dev->enter;
  if (serial) capture_lock(f, dev, false, true);
  x->kernel->compute_async(actx, async_done);
  if (serial) pthread_mutex_unlock(&serial_mu);
}

/* Runs rd's nodes and everything they make ready: cheap ones first; an
 * expensive one is offered to idle workers when another is kept here, or
 * when it has waited behind CHEAP_BEFORE_OFFLOAD cheap ones. */
static void drain(frame *f, ready *rd) {
  int waited = 0;
  for (;;) {
    int v;
    if (rd->cheap.n > 0) {
      if (rd->dear.n > 0 && ++waited >= CHEAP_BEFORE_OFFLOAD) {
        offload(f, rd, 0);
        waited = 0;
      }
      v = rd->cheap.items[--rd->cheap.n];
    } else if (rd->dear.n > 0) {
      if (rd->dear.n > 1) offload(f, rd, 1);
      v = rd->dear.items[--rd->dear.n];
      waited = 0;
    } else {
      return;
    }
    run_node(f, v, rd);
  }
}

static void node_task(void *arg) {
  node_ref *ref = arg;
  ready rd;
  ready_init(&rd);
  rd.dear.items[rd.dear.n++] = ref->id;
  drain(ref->frame, &rd);
  ready_fini(&rd);
  let_go(ref->frame);
}

/* Runs a handed-off range in place (so no node is handed off twice) and
 * whatever it makes ready. */
static void batch_task(void *arg) {
  batch *b = arg;
  frame *f = b->frame;
  ready rd;
  ready_init(&rd);
  for (int i = 0; i < b->n; i++) {
    run_node(f, f->handoff[b->begin + i], &rd);
    drain(f, &rd);
  }
  ready_fini(&rd);
  let_go(f);
}

/* ---- steps ---- */

/* The first part of a device's step, on the caller: makes the roots ready
 * and runs cheap nodes (at most START_BUDGET); expensive nodes and any cheap
 * ones beyond the budget stay in rd. */
static void start_cheap(frame *f, ready *rd) {
  const dplan *p = f->plan;
  for (int i = 0; i < p->num_roots; i++) make_ready(f, rd, p->roots[i]);
  for (int ran = 0; rd->cheap.n > 0 && ran < START_BUDGET; ran++)
    run_node(f, rd->cheap.items[--rd->cheap.n], rd);
}

/* Starts every device: the cheap start of each in turn on this thread, then
 * the rest of the first device that has more to do runs here, and that of
 * every other device is handed to the pool at once, so none waits behind
 * another device's long kernel. Each frame's initial hold is let go here.
 *
 * When that first device is the only one with more to do and a worker is
 * idle, its rest goes to the pool too and this thread only waits: with the
 * caller computing, three threads (the caller, the worker that takes the
 * device's next async continuation or handed-off node, and the helper of a
 * parallel_for) share two cores, and the kernel placed woken helpers on the
 * caller's core while the other stayed idle until its next tick (perf sched
 * on an otherwise quiet machine: 25-35 waits of 1.5-4 ms per 80 steps of
 * `ringflow train --devices cpu:0 --batch 1024`, 63-75k samples/s; handed
 * over: 4-9 waits, 87-92k). Several devices keep the caller busy (measured:
 * handing all of them over lost 10-15% at 4 devices, batch 256). */
static void start_frames(frame **frames, int n) {
  ready held, other; /* the kept device's rest; any other device's */
  ready_init(&held);
  ready_init(&other);
  frame *mine = NULL;
  bool alone = true; /* no other device has more to do */
  for (int i = 0; i < n; i++) {
    frame *f = frames[i];
    ready *rd = mine ? &other : &held;
    start_cheap(f, rd);
    if (ready_count(rd) > 0 && !mine) {
      mine = f; /* run below, after every device has started */
      continue;
    }
    if (ready_count(rd) > 0) {
      alone = false;
      if (!hand_off(f, rd, rd->cheap.n, rd->dear.n))
        drain(f, rd); /* the pool refused (no memory): run it here */
    }
    let_go(f);
  }
  if (mine) {
    if (!(alone && held.dear.n > 0 &&
          rf__threadpool_idle(mine->plan->device->pool) > 0 &&
          hand_off(mine, &held, held.cheap.n, held.dear.n)))
      drain(mine, &held);
    let_go(mine);
  }
  ready_fini(&held);
  ready_fini(&other);
}

/* Frames for every plan in *out, or RESOURCE_EXHAUSTED (none taken) naming
 * the device whose frame could not be made. */
static rf_status *acquire_frames(rf__executor *x, const rf__step *step,
                                 frame **few, frame ***out) {
  frame **frames = x->num_plans <= 8
                       ? few
                       : rf__malloc(sizeof(frame *) * (size_t)x->num_plans);
  if (!frames)
    return rf__status_prefix(rf__oom(),
                             "step %lld: the executor's frames of "
                             "%d devices (%s, ...)",
                             (long long)step->id, x->num_plans,
                             x->plans[0].device->canonical);
  for (int i = 0; i < x->num_plans; i++) {
    frames[i] = rf__frame_acquire(&x->plans[i]);
    if (frames[i]) continue;
    const char *dev = x->plans[i].device->canonical;
    while (i-- > 0) rf__frame_release(&x->plans[i], frames[i]);
    if (frames != few) rf__free(frames);
    return rf__status_prefix(rf__oom(), "step %lld: the executor's frame on %s",
                             (long long)step->id, dev);
  }
  *out = frames;
  return NULL;
}

rf_status *rf__executor_run(rf__executor *x, rf__step *step) {
  frame *few[8], **frames = NULL;
  rf_status *st = acquire_frames(x, step, few, &frames);
  if (st) { /* nothing ran: fail the step's collectives as record_error does,
               which tells the other processes of a job at once */
    atomic_store(&step->cancelled, 1);
    rf__rendezvous_abort(step->rendezvous, step->id, st);
    rf__collective_cancel_step(step->collectives, step->id, st);
    return st;
  }
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
  start_frames(frames, n);
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
