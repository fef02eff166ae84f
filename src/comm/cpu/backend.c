/* comm/cpu/backend.c - the shared-memory backend for CPU devices. All devices
 * of a session share one address space, so a collective is one pass over the
 * inputs: the work is split in blocks across the thread pool (the thread that
 * completed the group takes part; small collectives stay on that thread),
 * reduced in rank order, and the result is
 * one immutable tensor that every receiving participant shares (zero copy).
 * Broadcast hands the sender's tensor itself to every receiver. */
#include <string.h>

#include "comm/cpu/reduce_kernels.h"
#include "core/status.h"

#define BLOCK_ELEMS 16384
/* Below this many input bytes (all participants together) one thread does
 * the whole collective: another thread's help costs a hand-off (a spinning
 * worker's pick-up, or a futex wake-up when none spins). Measured for a
 * 4-device float32 all-reduce on 2 cores (us per step, 3 runs): 4 x 128 KiB
 * one thread 14-20, split 17-29; 4 x 256 KiB one thread 30-46, split
 * 28-35. */
#define SPLIT_MIN_BYTES (1 << 20)

/* The pool to split the work over, or NULL for this thread alone. */
static rf__threadpool *helpers(const rf__coll_group *g, int64_t bytes) {
  return bytes >= SPLIT_MIN_BYTES ? g->pool : NULL;
}

typedef struct job {
  rf__coll_group *g;
  const void *ins[64 + 1];
  void **outs;   /* reduce_scatter: one buffer per rank */
  void *out;     /* all_reduce, reduce, all_gather */
  int64_t count; /* elements per input */
  int64_t blocks_per_rank;
  size_t esize;
} job;

static void reduce_blocks(void *arg, int64_t b, int64_t e) {
  job *j = arg;
  int64_t lo = b * BLOCK_ELEMS, hi = e * BLOCK_ELEMS;
  if (hi > j->count) hi = j->count;
  rf__cpu_reduce(j->g->dtype, j->g->reduction, j->ins, j->g->n, j->out, lo, hi);
}

/* Item = (rank r, block k): out_r[k-th block] = reduce of input slice r. */
static void scatter_blocks(void *arg, int64_t b, int64_t e) {
  job *j = arg;
  int64_t per = j->count / j->g->n; /* elements per rank */
  const void *ins[65];
  for (int64_t item = b; item < e; item++) {
    int64_t r = item / j->blocks_per_rank, k = item % j->blocks_per_rank;
    int64_t lo = k * BLOCK_ELEMS,
            hi = lo + BLOCK_ELEMS < per ? lo + BLOCK_ELEMS : per;
    for (int i = 0; i < j->g->n; i++)
      ins[i] = (const char *)j->ins[i] + (size_t)(r * per) * j->esize;
    rf__cpu_reduce(j->g->dtype, j->g->reduction, ins, j->g->n, j->outs[r], lo,
                   hi);
  }
}

/* Item = (rank r, block k): copy block k of input r to its slot. */
static void gather_blocks(void *arg, int64_t b, int64_t e) {
  job *j = arg;
  for (int64_t item = b; item < e; item++) {
    int64_t r = item / j->blocks_per_rank, k = item % j->blocks_per_rank;
    int64_t lo = k * BLOCK_ELEMS,
            hi = lo + BLOCK_ELEMS < j->count ? lo + BLOCK_ELEMS : j->count;
    if (hi <= lo) continue;
    memcpy((char *)j->out + (size_t)(r * j->count + lo) * j->esize,
           (const char *)j->ins[r] + (size_t)lo * j->esize,
           (size_t)(hi - lo) * j->esize);
  }
}

/* Gives the manager's references to the inputs back as soon as nothing reads
 * them, and hands each result reference over rather than releasing ours
 * after the last done: a participant's done may end its step, and a buffer
 * still referenced here then would not be back in the allocator's cache when
 * the next step asks for one, which costs a fresh (first-touch) buffer. */
static void drop_inputs(rf__coll_group *g) {
  for (int i = 0; i < g->n; i++) {
    rf_tensor_release(g->p[i].input);
    g->p[i].input = NULL; /* the manager's release is then a no-op */
  }
}

/* Every participant gets st (copied) or one reference to `shared`; takes
 * ownership of the caller's reference to shared. */
static void finish_all(rf__coll_group *g, rf_status *st, rf_tensor *shared) {
  drop_inputs(g);
  for (int i = 0; i < g->n; i++) {
    rf_status *copy = st ? rf__status_copy(st) : NULL;
    rf_tensor *mine =
        shared && i < g->n - 1 ? rf_tensor_retain(shared) : shared;
    g->p[i].done(g->p[i].arg, copy, mine);
  }
}

static rf_status *alloc_like(rf__coll_group *g, int rank, const rf_shape *shape,
                             rf_tensor **out) {
  rf_status *st =
      rf_tensor_new(g->dtype, shape, g->p[rank].device->allocator, out);
  return rf__status_prefix(st, "collective '%s' on %s", g->key,
                           g->p[rank].device->canonical);
}

static void run_reducing(rf__coll_group *g, job *j) {
  bool all = g->kind == RF_COLL_ALL_REDUCE;
  int owner = all ? 0 : g->root;
  rf_tensor *out = NULL;
  rf_status *st = alloc_like(g, owner, &g->p[owner].shape, &out);
  if (!st) {
    j->out = rf_tensor_mutable_data(out);
    int64_t blocks = (j->count + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
    rf__threadpool_parallel_for(helpers(g, j->count * j->esize * g->n), blocks,
                                BLOCK_ELEMS * g->n, reduce_blocks, j);
  }
  if (all || st) {
    finish_all(g, st, out);
  } else { /* reduce: only the root gets the result (our reference) */
    drop_inputs(g);
    for (int i = 0; i < g->n; i++)
      g->p[i].done(g->p[i].arg, NULL, i == g->root ? out : NULL);
  }
  rf_status_free(st);
}

static void run_broadcast(rf__coll_group *g) {
  rf_tensor *value = rf_tensor_retain(g->p[g->root].input);
  int root = g->root, last = root == g->n - 1 ? g->n - 2 : g->n - 1;
  drop_inputs(g);
  for (int i = 0; i < g->n; i++)
    g->p[i].done(g->p[i].arg, NULL,
                 i == root   ? NULL
                 : i == last ? value
                             : rf_tensor_retain(value));
  if (g->n == 1) rf_tensor_release(value); /* nobody received it */
}

static void run_all_gather(rf__coll_group *g, job *j) {
  rf_shape shape = g->p[0].shape;
  shape.dims[0] *= g->n;
  rf_tensor *out = NULL;
  rf_status *st = alloc_like(g, 0, &shape, &out);
  if (!st) {
    j->out = rf_tensor_mutable_data(out);
    j->blocks_per_rank = (j->count + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
    rf__threadpool_parallel_for(helpers(g, j->count * j->esize * g->n),
                                j->blocks_per_rank * g->n, BLOCK_ELEMS,
                                gather_blocks, j);
  }
  finish_all(g, st, out);
  rf_status_free(st);
}

static void run_reduce_scatter(rf__coll_group *g, job *j) {
  rf_shape shape = g->p[0].shape;
  shape.dims[0] /= g->n;
  rf_tensor *outs[64] = {0};
  void *bufs[64];
  rf_status *st = NULL;
  for (int r = 0; r < g->n && !st; r++) {
    st = alloc_like(g, r, &shape, &outs[r]);
    if (!st) bufs[r] = rf_tensor_mutable_data(outs[r]);
  }
  if (!st) {
    j->outs = bufs;
    int64_t per = j->count / g->n;
    j->blocks_per_rank = (per + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
    rf__threadpool_parallel_for(helpers(g, j->count * j->esize * g->n),
                                j->blocks_per_rank * g->n, BLOCK_ELEMS * g->n,
                                scatter_blocks, j);
  }
  if (st) {
    for (int r = 0; r < g->n; r++) rf_tensor_release(outs[r]);
    finish_all(g, st, NULL);
    rf_status_free(st);
    return;
  }
  drop_inputs(g);
  for (int r = 0; r < g->n; r++) g->p[r].done(g->p[r].arg, NULL, outs[r]);
}

static void cpu_run(rf__coll_group *g) {
  if (g->n > 64) {
    rf_status *st = rf__invalid(
        "collective '%s': at most 64 CPU participants, got %d", g->key, g->n);
    finish_all(g, st, NULL);
    rf_status_free(st);
    return;
  }
  bool reduces = g->kind == RF_COLL_ALL_REDUCE || g->kind == RF_COLL_REDUCE ||
                 g->kind == RF_COLL_REDUCE_SCATTER;
  if (reduces && !rf__cpu_reduce_supported(g->dtype, g->reduction)) {
    rf_status *st = rf__error(RF_UNIMPLEMENTED,
                              "collective '%s': %s of %s is not supported on "
                              "CPU devices",
                              g->key, rf__reduction_name(g->reduction),
                              rf_dtype_name(g->dtype));
    finish_all(g, st, NULL);
    rf_status_free(st);
    return;
  }
  job j = {.g = g, .esize = rf_dtype_size(g->dtype)};
  for (int i = 0; i < g->n; i++)
    j.ins[i] = g->p[i].input ? rf_tensor_data(g->p[i].input) : NULL;
  int ref = g->root >= 0 ? g->root : 0;
  j.count = rf_shape_num_elements(&g->p[ref].shape);
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE: run_reducing(g, &j); break;
    case RF_COLL_BROADCAST: run_broadcast(g); break;
    case RF_COLL_ALL_GATHER: run_all_gather(g, &j); break;
    case RF_COLL_REDUCE_SCATTER: run_reduce_scatter(g, &j); break;
    default: {
      rf_status *st = rf__internal("collective '%s': unknown kind", g->key);
      finish_all(g, st, NULL);
      rf_status_free(st);
    }
  }
}

const rf__coll_backend rf__cpu_coll_backend = {
    .name = "shared-memory",
    .device_type = RF_DEVICE_CPU,
    .run = cpu_run,
};
