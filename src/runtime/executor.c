/* runtime/executor.c - runs one step over the device plans.
 *
 * A frame counts its `outstanding` nodes (ready or running); it is done when
 * the count reaches 0. A thread runs ready nodes from a local stack; a node
 * completing makes its successors ready (atomic pending counts, skipped for
 * single-predecessor nodes) and adjusts outstanding by (#ready - 1), so a chain
 * touches no shared counter at all. Extra ready nodes go to idle pool workers.
 * Asynchronous kernels continue on the thread that completes them. On the
 * first error the step is marked cancelled and its rendezvous aborted: nodes
 * not yet started are skipped and pending receives fail, so every device
 * drains promptly. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "ops/op_registry.h"
#include "runtime/executor_internal.h"
#include "runtime/rendezvous.h"
#include "comm/collective.h"

/* The step as a whole: waits for every device's frame. */
typedef struct run {
  rf__step *step;
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
    return rf__internal("node '%s' (%s) on %s: the kernel %s output %d (%s "
                        "expected)", x->node->name, x->node->op->name,
                        f->plan->device->canonical,
                        out[i] ? "produced a wrong dtype for" : "did not set",
                        i, rf_dtype_name(x->node->out_dtypes[i]));
  }
  return NULL;
}

/* ---- completion ---- */

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

/* Queues ready node v on s and returns true; or, when s cannot grow, counts v
 * as outstanding itself, hands it to the pool (or runs it right here) and
 * returns false. Counting first matters: v may finish before our caller
 * settles its own count. */
static void node_task(void *arg);
static bool make_ready(frame *f, stack *s, int v) {
  if (stack_push(s, v)) return true;
  atomic_fetch_add_explicit(&f->outstanding, 1, memory_order_relaxed);
  rf_status *st = rf__threadpool_schedule(f->plan->device->pool, node_task,
                                          &f->refs[v]);
  if (!st) return false;
  rf_status_free(st);
  stack one;
  stack_init(&one);
  one.items[one.n++] = v;
  drain(f, &one);
  return false;
}

/* Finishes node v: releases its inputs, hands its outputs to consumers (or
 * records the error), and settles the outstanding count. */
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
  int ready = 0;
  if (st || atomic_load_explicit(&f->step->cancelled, memory_order_relaxed)) {
    if (st) record_error(f, name_error(f, x, st));
    for (int i = 0; i < x->num_out; i++) {
      rf_tensor_release(out[i]);
      out[i] = NULL;
    }
  } else {
    for (int k = x->edge_begin; k < x->edge_end; k++) {
      const xedge *e = &p->edges[k];
      rf_tensor *t = out[e->src_out];
      f->slots[e->slot] = e->take ? t : rf_tensor_retain(t);
      if (arrive(f, e->dst)) ready += make_ready(f, s, e->dst);
    }
    for (int k = x->drop_begin; k < x->drop_end; k++)
      rf_tensor_release(out[p->drops[k]]);
    for (int i = 0; i < x->num_out; i++) out[i] = NULL;
    for (int k = x->ctl_begin; k < x->ctl_end; k++)
      if (arrive(f, p->ctl[k])) ready += make_ready(f, s, p->ctl[k]);
  }
  if (ready == 1) return; /* one in, one out: outstanding unchanged */
  int before = atomic_fetch_add_explicit(&f->outstanding, ready - 1,
                                         memory_order_acq_rel);
  if (before + ready - 1 == 0) frame_done(f);
}

static void async_done(rf__kernel_ctx *ctx, rf_status *st) {
  node_ref *ref = ctx->executor_private;
  frame *f = ref->frame;
  stack s;
  stack_init(&s);
  complete(f, ref->id, st, &s);
  if (completion_depth < MAX_INLINE_DEPTH) {
    completion_depth++;
    drain(f, &s);
    completion_depth--;
  } else {
    /* Too deep: hand the ready nodes to the pool; keep those it refuses. */
    int kept = 0;
    for (int i = 0; i < s.n; i++) {
      rf_status *e = rf__threadpool_schedule(f->plan->device->pool, node_task,
                                             &f->refs[s.items[i]]);
      if (e) {
        rf_status_free(e);
        s.items[kept++] = s.items[i];
      }
    }
    s.n = kept;
    drain(f, &s);
  }
  stack_fini(&s);
}

/* Runs node v (already counted in outstanding). */
static void run_node(frame *f, int v, stack *s) {
  const xnode *x = &f->plan->nodes[v];
  if (atomic_load_explicit(&f->step->cancelled, memory_order_relaxed)) {
    complete(f, v, NULL, s); /* skipped */
    return;
  }
  if (x->compute) {
    rf__kernel_ctx ctx = {.node = x->node,
                          .state = x->state,
                          .num_inputs = x->num_in,
                          .inputs = f->slots + x->in_base,
                          .num_outputs = x->num_out,
                          .outputs = f->outs + x->out_base,
                          .device = f->plan->device,
                          .step = f->step,
                          .executor_private = &f->refs[v]};
    complete(f, v, x->compute(&ctx), s);
    return;
  }
  rf__kernel_ctx *ctx = &f->actx[x->async_index];
  *ctx = (rf__kernel_ctx){.node = x->node,
                          .state = x->state,
                          .num_inputs = x->num_in,
                          .inputs = f->slots + x->in_base,
                          .num_outputs = x->num_out,
                          .outputs = f->outs + x->out_base,
                          .device = f->plan->device,
                          .step = f->step,
                          .executor_private = &f->refs[v],
                          .done = async_done};
  x->kernel->compute_async(ctx, async_done);
}

/* Gives ready nodes beyond the one we run next to idle workers. */
static void offload(frame *f, stack *s) {
  rf__threadpool *pool = f->plan->device->pool;
  int idle = rf__threadpool_idle(pool);
  while (idle-- > 0 && s->n > 1) {
    rf_status *st = rf__threadpool_schedule(pool, node_task,
                                            &f->refs[s->items[s->n - 1]]);
    if (st) {
      rf_status_free(st);
      return;
    }
    s->n--;
  }
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
}

/* ---- steps ---- */

/* Counts the device's roots as outstanding, then runs them. */
static void start_frame(frame *f) {
  const dplan *p = f->plan;
  atomic_store_explicit(&f->outstanding, p->num_roots, memory_order_relaxed);
  stack s;
  stack_init(&s);
  for (int i = 0; i < p->num_roots; i++) {
    if (stack_push(&s, p->roots[i])) continue;
    drain(f, &s); /* could not grow: make room by running what we have */
    s.items[s.n++] = p->roots[i];
  }
  drain(f, &s);
  stack_fini(&s);
}

static void start_task(void *arg) { start_frame(arg); }

rf_status *rf__executor_run(rf__executor *x, rf__step *step) {
  frame *few[8];
  frame **frames = x->num_plans <= 8
                       ? few
                       : rf__malloc(sizeof(frame *) * (size_t)x->num_plans);
  if (!frames) return rf__oom();
  int got = 0;
  while (got < x->num_plans && (frames[got] = rf__frame_acquire(&x->plans[got])))
    got++;
  if (got < x->num_plans) {
    for (int i = 0; i < got; i++) rf__frame_release(&x->plans[i], frames[i]);
    if (frames != few) rf__free(frames);
    return rf__oom();
  }
  run r = {.step = step, .done = x->num_plans == 0, .first_error = NULL};
  atomic_init(&r.frames_left, x->num_plans);
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  for (int i = 0; i < got; i++) {
    frames[i]->run = &r;
    frames[i]->step = step;
  }
  /* Other devices start on idle workers when there are some; the caller
   * runs device 0 (and any the pool did not take). */
  for (int i = got - 1; i >= 1; i--) {
    rf__threadpool *pool = x->plans[i].device->pool;
    if (rf__threadpool_idle(pool) > 0) {
      rf_status *st = rf__threadpool_schedule(pool, start_task, frames[i]);
      if (!st) continue;
      rf_status_free(st);
    }
    start_frame(frames[i]);
  }
  if (got > 0) start_frame(frames[0]);
  pthread_mutex_lock(&r.mu);
  while (!r.done) pthread_cond_wait(&r.cv, &r.mu);
  pthread_mutex_unlock(&r.mu);
  rf__rendezvous_end_step(step->rendezvous, step->id);
  for (int i = 0; i < got; i++) rf__frame_release(&x->plans[i], frames[i]);
  if (frames != few) rf__free(frames);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  return r.first_error;
}
