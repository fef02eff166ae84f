/* runtime/session.c - the public session API: options, devices and pool,
 * resolving a run's feeds/fetches/targets by name, the compile cache (one
 * plan per signature string, under a mutex so concurrent runs are safe), the
 * recent requests (a repeated request finds its plan without a name lookup),
 * and one step per run with a fresh step id. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "ops/op_registry.h"
#include "passes/pass_registry.h"
#include "runtime/env_knobs.h"
#include "runtime/families.h"
#include "runtime/session_internal.h"
#include "comm/collective.h"
#include "comm/job.h"
#include "device/step.h"
#include "runtime/step_graph.h"
#include "runtime/trace.h"
#ifdef RF_HAVE_CUDA
#include "device/gpu/gpu.h"
#endif

#define MAX_CPU_DEVICES 64
#define MAX_THREADS 4096 /* worker threads: beyond any machine's cores */
#define MAX_GPU_DEVICES 64
/* rf_session_run's arrays fit on the stack up to this many words (about 40
 * feeds and fetches). */
#define RUN_STACK_WORDS 128

/* RF_GPU_GRAPHS (0 or 1) in the environment sets gpu_graphs' default: an
 * opt-out for programs that cannot be changed. Another value gives 2, which
 * rf_session_new refuses naming the variable (env_graphs_note). */
static int default_gpu_graphs(void) {
  const char *e = getenv("RF_GPU_GRAPHS");
  if (!e || !*e) return RF_DEFAULT_GPU_GRAPHS;
  return !strcmp(e, "0") ? 0 : !strcmp(e, "1") ? 1 : 2;
}

void rf_session_options_init(rf_session_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->num_cpu_devices = 1;
  o->num_threads = 0;
  o->default_device = "cpu:0";
  o->collective_timeout_ms = 300000;
  o->gpu_sync_on_finish = 1;
  o->collective_bucket_bytes = RF_DEFAULT_BUCKET_BYTES;
  o->gpu_graphs = default_gpu_graphs();
  o->group_optimizer_updates = 1;
  o->matmul_epilogues = RF_MATMUL_EPILOGUES_AUTO;
  o->conv_epilogues = RF_CONV_EPILOGUES_GPU;
}

static rf_status *check_options(const rf_session_options *o) {
  if (o->num_cpu_devices < 1 || o->num_cpu_devices > MAX_CPU_DEVICES)
    return rf__invalid(
        "session options: num_cpu_devices must be in 1..%d, "
        "got %d",
        MAX_CPU_DEVICES, o->num_cpu_devices);
  if (o->num_gpu_devices < 0 || o->num_gpu_devices > MAX_GPU_DEVICES)
    return rf__invalid(
        "session options: num_gpu_devices must be in 0..%d, got %d",
        MAX_GPU_DEVICES, o->num_gpu_devices);
  if (o->num_threads < 0 || o->num_threads > MAX_THREADS)
    return rf__invalid(
        "session options: num_threads must be in 0..%d (0: one per core), "
        "got %d",
        MAX_THREADS, o->num_threads);
  if (o->collective_timeout_ms <= 0 ||
      o->collective_timeout_ms > RF_COLLECTIVE_TIMEOUT_MS_MAX)
    return rf__invalid(
        "session options: collective_timeout_ms must be in 1..%lld (about "
        "31 years), got %lld",
        (long long)RF_COLLECTIVE_TIMEOUT_MS_MAX,
        (long long)o->collective_timeout_ms);
  if (o->collective_bucket_bytes < 0 &&
      o->collective_bucket_bytes != RF_BUCKET_BYTES_AUTO)
    return rf__invalid(
        "session options: collective_bucket_bytes must be >= 0 or "
        "RF_BUCKET_BYTES_AUTO (-1), got %lld",
        (long long)o->collective_bucket_bytes);
  rf_dtype comm = o->collective_comm_dtype
                      ? rf_dtype_from_name(o->collective_comm_dtype)
                      : RF_FLOAT32;
  if (comm != RF_FLOAT32 && comm != RF_BFLOAT16 && comm != RF_FLOAT16)
    return rf__invalid(
        "session options: collective_comm_dtype must be NULL, \"float32\", "
        "\"bfloat16\" or \"float16\", got \"%s\"",
        o->collective_comm_dtype);
  if (o->group_optimizer_updates != 0 && o->group_optimizer_updates != 1)
    return rf__invalid(
        "session options: group_optimizer_updates must be 0 or 1, got %d",
        o->group_optimizer_updates);
  if (o->gpu_sync_on_finish != 0 && o->gpu_sync_on_finish != 1)
    return rf__invalid(
        "session options: gpu_sync_on_finish must be 0 or 1, got %d",
        o->gpu_sync_on_finish);
  if (o->allow_tf32 != 0 && o->allow_tf32 != 1)
    return rf__invalid("session options: allow_tf32 must be 0 or 1, got %d",
                       o->allow_tf32);
  if (o->gpu_graphs != 0 && o->gpu_graphs != 1) {
    const char *e = getenv("RF_GPU_GRAPHS");
    if (default_gpu_graphs() == 2 && o->gpu_graphs == 2) /* the variable's */
      return rf__invalid(
          "session options: gpu_graphs: RF_GPU_GRAPHS is '%s' (0 or 1)", e);
    return rf__invalid("session options: gpu_graphs must be 0 or 1, got %d",
                       o->gpu_graphs);
  }
  RF_CHECK(rf__epilogue_options_check(o->matmul_epilogues, o->conv_epilogues));
  RF_CHECK(rf__env_knobs_check());
  if (o->job < RF_JOB_AUTO || o->job > RF_JOB_MPI)
    return rf__invalid(
        "session options: job must be RF_JOB_AUTO, RF_JOB_SINGLE or "
        "RF_JOB_MPI, got %d",
        o->job);
  return NULL;
}

/* Whether some node of g asks for a device of a named task. */
static bool names_a_task(const rf_graph *g) {
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    rf__device_name name;
    if (!n || !n->requested_device || !n->requested_device[0]) continue;
    rf_status *st = rf__device_name_parse(n->requested_device, &name);
    rf_status_free(st); /* a bad name is placement's error to report */
    if (!st && name.task >= 0) return true;
  }
  return false;
}

/* Makes the session a task of an MPI job when the options or the graph ask
 * for it (see rf_session_options.job). */
static rf_status *join_job(rf_session *s, const rf_graph *g) {
  const rf_session_options *o = &s->opts;
  s->task = 0;
  s->num_tasks = 1;
  bool want = o->job == RF_JOB_MPI ||
              (o->job == RF_JOB_AUTO &&
               (o->mpi_comm || (names_a_task(g) && rf__job_launched())));
  if (!want) return NULL;
  rf_status *st =
      rf__job_attach(o->mpi_comm, o->num_cpu_devices, o->num_gpu_devices,
                     o->collective_timeout_ms, s->pool, &s->job);
  if (st) return rf__status_prefix(st, "rf_session_new");
  s->task = rf__job_task(s->job);
  s->num_tasks = rf__job_num_tasks(s->job);
  return NULL;
}

/* How many devices the other tasks of the job have (0 without a job). */
static int remote_device_count(const rf_session *s) {
  int total = 0;
  for (int t = 0; s->job && t < s->num_tasks; t++) {
    int nc, ng;
    rf__job_devices(s->job, t, &nc, &ng);
    if (t != s->task) total += nc + ng;
  }
  return total;
}

/* The other tasks' devices, after this process's (their room is already
 * allocated: devices are never moved once initialised, their mutexes
 * included): name, canonical, remote. */
static void add_remote_devices(rf_session *s) {
  for (int t = 0; t < s->num_tasks; t++) {
    int nc, ng;
    rf__job_devices(s->job, t, &nc, &ng);
    for (int i = 0; t != s->task && i < nc + ng; i++) {
      rf__device_name name = {t, i < nc ? RF_DEVICE_CPU : RF_DEVICE_GPU,
                              i < nc ? i : i - nc};
      rf__device *d = &s->devices[s->num_job_devices];
      rf__device_init(d, s->num_job_devices, &name, NULL, NULL);
      d->remote = true;
      s->num_job_devices++;
    }
  }
}

/* GPU devices gpu:0..n-1 at devices[0..n), already initialised as plain
 * devices: streams, handles and allocators (device/gpu/device.c). */
static rf_status *make_gpus(rf_session *s, rf__device *devices, int n) {
#ifdef RF_HAVE_CUDA
  rf_status *st = rf__gpu_runtime_new(devices, n, &s->gpu);
#else
  (void)devices;
  rf_status *st =
      rf__error(RF_FAILED_PRECONDITION, "no GPU: built without CUDA");
#endif
  if (!st) return NULL;
  return rf__status_prefix(st, "session options: num_gpu_devices is %d", n);
}

/* For a session that may capture steps: the GPU devices' cuBLAS handles get
 * workspaces of their own (a capture with cuBLAS's default pool records
 * memory nodes, and on 4-8 virtual GPUs of one GPU replays then faulted:
 * the "on" runs of scripts/gpu_graph_stress.sh failed 5 of 12, the
 * "workspace" ones 0 of 12); and RF_GPU_GRAPH_DEBUG (runtime/step_graph.h). */
static rf_status *graph_debug(rf_session *s) {
  if (!s->opts.gpu_graphs || !s->gpu) return NULL;
  RF_CHECK(
      rf__graph_debug_parse(getenv("RF_GPU_GRAPH_DEBUG"), &s->graph_debug));
#ifdef RF_HAVE_CUDA
  /* RF_GPU_BLAS_WORKSPACE=BYTES: another size, for measuring (0: cuBLAS
   * may pick no algorithm that needs a workspace, such as split-K with a
   * separate reduction). */
  size_t ws = RF_GPU_BLAS_WORKSPACE_BYTES;
  const char *env = getenv("RF_GPU_BLAS_WORKSPACE");
  if (env) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (!*env || *end || errno || env[0] == '-' || v > ((size_t)1 << 32))
      return rf__invalid(
          "environment variable RF_GPU_BLAS_WORKSPACE='%s': expected a "
          "number of bytes from 0 to 4294967296",
          env);
    ws = (size_t)v;
  }
  RF_CHECK(rf__gpu_blas_workspaces(s->gpu, ws));
#endif
  if (s->graph_debug)
    RF__LOG(RF_LOG_INFO, "gpu graphs: RF_GPU_GRAPH_DEBUG=%s",
            getenv("RF_GPU_GRAPH_DEBUG"));
  return NULL;
}

/* Pool, job, devices and rendezvous; the default device must be one of
 * this process's devices. */
static rf_status *make_devices(rf_session *s, const rf_graph *g) {
  int ncpu = s->opts.num_cpu_devices, ngpu = s->opts.num_gpu_devices;
  RF_CHECK(rf__threadpool_new(s->opts.num_threads, &s->pool));
  RF_CHECK(join_job(s, g));
  s->devices = rf__calloc((size_t)(ncpu + ngpu + remote_device_count(s)),
                          sizeof(rf__device));
  RF_CHECK_ALLOC(s->devices);
  for (int i = 0; i < ncpu + ngpu; i++) {
    rf__device_name name = {s->job ? s->task : -1,
                            i < ncpu ? RF_DEVICE_CPU : RF_DEVICE_GPU,
                            i < ncpu ? i : i - ncpu};
    rf__device_init(&s->devices[i], i, &name, rf_default_allocator(), s->pool);
    s->num_devices++;
  }
  s->num_job_devices = s->num_devices;
  if (s->job) add_remote_devices(s);
  if (ngpu > 0) RF_CHECK(make_gpus(s, s->devices + ncpu, ngpu));
  for (int i = ncpu; i < ncpu + ngpu; i++)
    s->devices[i].allow_tf32 = s->opts.allow_tf32 == 1;
  RF_CHECK(rf__rendezvous_new(&s->rendezvous));
  RF_CHECK(rf__collective_manager_new(s->pool, &s->collectives));
  rf__collective_manager_set_job(s->collectives, s->job);
  const char *dd = s->opts.default_device ? s->opts.default_device : "cpu:0";
  rf__device_name name;
  rf_status *st = rf__device_name_parse(dd, &name);
  if (st) return rf__status_prefix(st, "session options: default_device");
  s->default_device = rf__device_find(s->devices, s->num_devices, &name);
  if (s->default_device >= 0 && s->devices[s->default_device].remote)
    s->default_device = -1;
  if (s->default_device < 0) {
    char list[256];
    rf__device_list_format(s->devices, s->num_devices, list, sizeof list);
    return rf__invalid(
        "session options: default_device %s is not a device "
        "of the session (%s)",
        dd, list);
  }
  snprintf(s->default_device_name, sizeof s->default_device_name, "%s",
           s->devices[s->default_device].canonical);
  s->opts.default_device = s->default_device_name;
  return NULL;
}

rf_status *rf_session_new(const rf_graph *g, const rf_session_options *opts,
                          rf_session **out) {
  if (!g || !out) return rf__invalid("rf_session_new: NULL argument");
  rf_session_options defaults;
  rf_session_options_init(&defaults);
  if (!opts) opts = &defaults;
  RF_CHECK(check_options(opts));
  RF_CHECK(rf__registry_init());
  rf_status *st = rf_graph_status(g);
  if (st)
    return rf__status_prefix(st, "rf_session_new: the graph holds an error");
  rf_session *s = rf__calloc(1, sizeof *s);
  RF_CHECK_ALLOC(s);
  s->opts = *opts;
  /* checked above: one of three names, kept as the library's own string */
  s->opts.collective_comm_dtype =
      opts->collective_comm_dtype
          ? rf_dtype_name(rf_dtype_from_name(opts->collective_comm_dtype))
          : NULL;
  if (opts->dump_graph_dir) {
    s->opts.dump_graph_dir = s->dump_graph_dir =
        rf__strdup(opts->dump_graph_dir);
    if (!s->dump_graph_dir) {
      rf__free(s);
      return rf__oom();
    }
  }
  atomic_init(&s->next_step, 1);
  atomic_init(&s->next_job_step, 1);
  pthread_mutex_init(&s->cache_mu, NULL);
  pthread_mutex_init(&s->trace_mu, NULL);
  pthread_mutex_init(&s->graph_mu, NULL);
  pthread_cond_init(&s->graph_cv, NULL);
  atomic_init(&s->graphs_kept, 0);
  rf__session_sync_init(s);
  RF_CHECK_GOTO(make_devices(s, g), st, fail);
  RF_CHECK_GOTO(graph_debug(s), st, fail);
  RF_CHECK_GOTO(rf__graph_copy(g, &s->graph), st, fail);
  RF_CHECK_GOTO(rf__session_check_devices(s), st, fail);
  if (rf__log_on(RF_LOG_INFO)) {
    char list[1024];
    rf__device_list_format(s->devices, s->num_devices, list, sizeof list);
    rf__log_write(RF_LOG_INFO, "session: devices %s (task %d of %d)", list,
                  s->task, s->num_tasks);
  }
  *out = s;
  return NULL;
fail:
  rf_session_free(s);
  return st;
}

void rf_session_free(rf_session *s) {
  if (!s) return;
  /* Work of pipelined steps may still run on the GPUs: wait for it (and
   * drop its errors) before anything it uses goes. */
  rf__session_sync_free(s);
  for (int i = 0; i < RF__RECENT_REQUESTS; i++) rf__free(s->recent[i]);
  rf__plan *p, *tmp;
  HASH_ITER(hh, s->cache, p, tmp) {
    HASH_DEL(s->cache, p);
    rf__plan_free(p);
  }
  /* The order (no run is in progress): plans first, kernel states may
   * refer to devices or the pool. Then stop what still issues calls into
   * the job: the collective manager's watchdog (a timeout tells the job).
   * Then detach the job: its engine may still hand completions to the pool,
   * but nothing calls it afterwards. Then drain the pool (a worker may
   * still be in a collective's done fan-out after the step's last done),
   * then free what its tasks touch (the manager, the rendezvous: they hold
   * tensors of the devices), and the devices last. */
  rf__collective_manager_stop(s->collectives);
  if (s->job) rf__job_detach(s->job);
  rf__threadpool_free(s->pool);
  rf__collective_manager_free(s->collectives);
  rf__rendezvous_free(s->rendezvous);
  for (int i = 0; i < s->num_job_devices; i++)
    rf__device_destroy(&s->devices[i]);
#ifdef RF_HAVE_CUDA
  /* After everything above, which may still hold device buffers; before the
   * device array goes, since it puts each GPU device back to "no GPU". */
  rf__gpu_runtime_free(s->gpu);
#endif
  rf__free(s->devices);
  rf_graph_free(s->graph);
  pthread_mutex_destroy(&s->cache_mu);
  pthread_mutex_destroy(&s->trace_mu);
  pthread_mutex_destroy(&s->graph_mu);
  pthread_cond_destroy(&s->graph_cv);
  rf__free(s->trace_path);
  rf__free(s->dump_graph_dir);
  rf__free(s);
}

void rf_session_task(const rf_session *s, int *task, int *num_tasks) {
  if (task) *task = s ? s->task : 0;
  if (num_tasks) *num_tasks = s ? s->num_tasks : 1;
}

rf_status *rf_job_tasks(int *task, int *num_tasks) {
  int t = 0, n = 1;
  if (rf__job_launched()) RF_CHECK(rf__job_world(&t, &n));
  if (task) *task = t;
  if (num_tasks) *num_tasks = n;
  return NULL;
}

rf_status *rf_session_trace_next_run(rf_session *s, const char *path) {
  if (!s || !path)
    return rf__invalid("rf_session_trace_next_run: NULL argument");
  if (!path[0]) return rf__invalid("rf_session_trace_next_run: empty path");
  char *copy = rf__strdup(path);
  RF_CHECK_ALLOC(copy);
  pthread_mutex_lock(&s->trace_mu);
  rf__free(s->trace_path);
  s->trace_path = copy;
  pthread_mutex_unlock(&s->trace_mu);
  return NULL;
}

/* The armed trace path, taken by this run (NULL if none). */
static char *take_trace_path(rf_session *s) {
  pthread_mutex_lock(&s->trace_mu);
  char *path = s->trace_path;
  s->trace_path = NULL;
  pthread_mutex_unlock(&s->trace_mu);
  return path;
}

/* ---- resolving a run's request ---- */

/* A growable string for the signature. */
typedef struct sbuf {
  char *p;
  int n, cap;
  bool oom;
} sbuf;

/* Appends "<tag><strlen(name)>:<name>" and, when index >= 0, ":<index>",
 * then ";". Not printf: this runs for every feed and fetch of every step,
 * and vsnprintf was a third of a small all-reduce's step. */
static void sb_put(sbuf *b, char tag, const char *name, int index) {
  if (b->oom) return;
  char num[2][24];
  int len[2] = {0, 0};
  size_t nlen = strlen(name);
  for (int k = 0; k < 2; k++) {
    unsigned long long v = k == 0 ? nlen : (unsigned long long)index;
    if (k == 1 && index < 0) break;
    char tmp[24];
    int t = 0;
    do tmp[t++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (t > 0) num[k][len[k]++] = tmp[--t];
  }
  int need = 1 + len[0] + 1 + (int)nlen + (len[1] ? 1 + len[1] : 0) + 1;
  if (rf__grow(&b->p, &b->cap, b->n + need + 1, 1)) {
    b->oom = true;
    return;
  }
  char *o = b->p + b->n;
  *o++ = tag;
  memcpy(o, num[0], (size_t)len[0]);
  o += len[0];
  *o++ = ':';
  memcpy(o, name, nlen);
  o += nlen;
  if (len[1]) {
    *o++ = ':';
    memcpy(o, num[1], (size_t)len[1]);
    o += len[1];
  }
  *o++ = ';';
  *o = '\0';
  b->n = (int)(o - b->p);
}

static rf_status *find_node(rf_session *s, const rf_node *user,
                            const char *what, int i, rf_node **out) {
  if (!user) return rf__invalid("%s %d is not a valid node or output", what, i);
  rf_node *n = rf_graph_find_node(s->graph, rf_node_name(user));
  if (!n)
    return rf__error(RF_NOT_FOUND, "node '%s' is not in the session's graph",
                     rf_node_name(user));
  *out = n;
  return NULL;
}

static rf_status *find_output(rf_session *s, rf_output user, const char *what,
                              int i, rf_output *out) {
  rf_node *n;
  RF_CHECK(find_node(s, user.node, what, i, &n));
  if (user.index < 0 || user.index >= n->num_outputs)
    return rf__invalid(
        "%s %d: node '%s' (%s) has %d outputs, output %d was "
        "asked for",
        what, i, n->name, n->op->name, n->num_outputs, user.index);
  *out = (rf_output){n, user.index};
  return NULL;
}

static bool shapes_compatible(const rf_shape *want, const rf_shape *got) {
  if (want->rank == RF_UNKNOWN_RANK) return true;
  if (want->rank != got->rank) return false;
  for (int i = 0; i < want->rank; i++)
    if (want->dims[i] >= 0 && want->dims[i] != got->dims[i]) return false;
  return true;
}

static rf_status *check_feed(const rf_session *s, const rf_output *o,
                             const rf_tensor *v, int i) {
  const rf_node *n = o->node;
  if (!v)
    return rf__invalid("feed %d for node '%s' output %d has no value", i,
                       n->name, o->index);
  rf_dtype want = n->out_dtypes[o->index];
  /* A handle holds the address of a variable of some session: one the
   * caller made (rf_tensor_new) or kept from a fetch points anywhere, and
   * the kernels that read it would follow it. */
  if (v->dtype == RF_RESOURCE || want == RF_RESOURCE)
    return rf__invalid(
        "feed for node '%s' (%s) output %d: a %s tensor was fed, but "
        "resource outputs (variable handles) cannot be fed",
        n->name, n->op->name, o->index, rf_dtype_name(v->dtype));
  /* Device memory is read only by GPU devices: without any, say so naming
   * the caller's node (the step's _Arg would name itself). */
  if (v->on_gpu && s->opts.num_gpu_devices == 0)
    return rf__invalid(
        "feed for node '%s' (%s) output %d: fed a %s device tensor, expected "
        "%s in host memory (the session has no GPU devices)",
        n->name, n->op->name, o->index, rf_dtype_name(v->dtype),
        rf_dtype_name(want));
  if (v->dtype != want)
    return rf__invalid(
        "feed for node '%s' (%s) output %d: a %s tensor was "
        "fed, the output is %s",
        n->name, n->op->name, o->index, rf_dtype_name(v->dtype),
        rf_dtype_name(want));
  if (!shapes_compatible(&n->out_shapes[o->index], &v->shape)) {
    char a[128], b[128];
    rf_shape_format(&v->shape, a, sizeof a);
    rf_shape_format(&n->out_shapes[o->index], b, sizeof b);
    return rf__invalid(
        "feed for node '%s' (%s) output %d: shape %s is not "
        "compatible with the node's shape %s",
        n->name, n->op->name, o->index, a, b);
  }
  return NULL;
}

/* Resolves everything into *sig (arrays the caller frees) and the signature
 * string. */
static rf_status *resolve(rf_session *s, const rf_feed *feeds, int nfeeds,
                          const rf_output *fetches, int nfetches,
                          rf_node *const *targets, int ntargets, rf_output *fo,
                          rf_output *xo, rf_node **tn, sbuf *key) {
  for (int i = 0; i < nfeeds; i++) {
    RF_CHECK(find_output(s, feeds[i].output, "feed", i, &fo[i]));
    RF_CHECK(check_feed(s, &fo[i], feeds[i].value, i));
    for (int j = 0; j < i; j++)
      if (fo[j].node == fo[i].node && fo[j].index == fo[i].index)
        return rf__invalid("node '%s' output %d is fed twice", fo[i].node->name,
                           fo[i].index);
    sb_put(key, 'f', fo[i].node->name, fo[i].index);
  }
  for (int i = 0; i < nfetches; i++) {
    RF_CHECK(find_output(s, fetches[i], "fetch", i, &xo[i]));
    sb_put(key, 'o', xo[i].node->name, xo[i].index);
  }
  for (int i = 0; i < ntargets; i++) {
    RF_CHECK(find_node(s, targets[i], "target", i, &tn[i]));
    sb_put(key, 't', tn[i]->name, -1);
  }
  return key->oom
             ? rf__status_prefix(rf__oom(), "rf_session_run: the run's key")
             : NULL;
}

/* The cached plan for sig, compiling it on first use. Two threads may both
 * compile a new signature; the first to finish is kept. */
static rf_status *get_plan(rf_session *s, const rf__signature *sig,
                           const char *key, rf__plan **out) {
  rf__plan *p = NULL;
  pthread_mutex_lock(&s->cache_mu);
  HASH_FIND_STR(s->cache, key, p);
  pthread_mutex_unlock(&s->cache_mu);
  if (p) {
    *out = p;
    return NULL;
  }
  rf__plan *mine;
  RF_CHECK(rf__compile(s, sig, &mine));
  mine->signature = rf__strdup(key);
  if (!mine->signature) {
    rf__plan_free(mine);
    return rf__oom();
  }
  int rf__hash_oom = 0;
  pthread_mutex_lock(&s->cache_mu);
  HASH_FIND_STR(s->cache, key, p);
  if (!p) {
    HASH_ADD_KEYPTR(hh, s->cache, mine->signature, strlen(mine->signature),
                    mine);
    if (!rf__hash_oom) p = mine, mine = NULL;
  }
  pthread_mutex_unlock(&s->cache_mu);
  rf__plan_free(mine);
  if (!p) return rf__oom();
  *out = p;
  return NULL;
}

/* ---- recent requests ---- */

/* A request as its caller gave it - the nodes and output indices of its
 * feeds, fetches and targets (index -1), in that order - with the plan it
 * resolved to and its feeds' outputs in the session's graph (for the feed
 * checks). The session's graph never changes and a request resolves by
 * name, so one with the same nodes, indices and names resolves the same
 * way; the names are compared too, since a caller's node may be freed and
 * another made at its address. One block. */
typedef struct rf__request {
  int num_feeds, num_fetches, num_targets;
  rf__plan *plan;
  const rf_node **user; /* [n] */
  const char **names;   /* [n]: the session graph's nodes' names */
  rf_output *feeds;     /* [num_feeds] */
  int *index;           /* [n] */
} rf__request;

static bool same_node(const rf__request *r, int k, const rf_node *n,
                      int index) {
  return r->user[k] == n && r->index[k] == index &&
         strcmp(rf_node_name(n), r->names[k]) == 0;
}

static bool request_is(const rf__request *r, const rf_feed *feeds, int nfeeds,
                       const rf_output *fetches, int nfetches,
                       rf_node *const *targets, int ntargets) {
  if (r->num_feeds != nfeeds || r->num_fetches != nfetches ||
      r->num_targets != ntargets)
    return false;
  int k = 0;
  for (int i = 0; i < nfeeds; i++, k++)
    if (!same_node(r, k, feeds[i].output.node, feeds[i].output.index))
      return false;
  for (int i = 0; i < nfetches; i++, k++)
    if (!same_node(r, k, fetches[i].node, fetches[i].index)) return false;
  for (int i = 0; i < ntargets; i++, k++)
    if (!same_node(r, k, targets[i], -1)) return false;
  return true;
}

/* The plan of a recent run with this request (NULL: none), and its feeds'
 * outputs in fo. */
static rf__plan *recent_find(rf_session *s, const rf_feed *feeds, int nfeeds,
                             const rf_output *fetches, int nfetches,
                             rf_node *const *targets, int ntargets,
                             rf_output *fo) {
  rf__plan *p = NULL;
  pthread_mutex_lock(&s->cache_mu);
  for (int i = 0; i < RF__RECENT_REQUESTS && !p; i++) {
    const rf__request *r = s->recent[i];
    if (!r ||
        !request_is(r, feeds, nfeeds, fetches, nfetches, targets, ntargets))
      continue;
    p = r->plan;
    if (nfeeds) memcpy(fo, r->feeds, sizeof(rf_output) * (size_t)nfeeds);
  }
  pthread_mutex_unlock(&s->cache_mu);
  return p;
}

/* Remembers a request resolved to plan p, in place of the oldest. Without
 * memory it is not remembered: the next run resolves it again. */
static void recent_add(rf_session *s, rf__plan *p, const rf_feed *feeds,
                       const rf_output *fetches, rf_node *const *targets,
                       const rf__signature *sig) {
  size_t n = (size_t)sig->num_feeds + (size_t)sig->num_fetches +
             (size_t)sig->num_targets;
  rf__request *r =
      rf__malloc(sizeof *r + n * (2 * sizeof(void *) + sizeof(int)) +
                 (size_t)sig->num_feeds * sizeof(rf_output));
  if (!r) return;
  r->num_feeds = sig->num_feeds;
  r->num_fetches = sig->num_fetches;
  r->num_targets = sig->num_targets;
  r->plan = p;
  r->user = (const rf_node **)(r + 1);
  r->names = (const char **)(r->user + n);
  r->feeds = (rf_output *)(r->names + n);
  r->index = (int *)(r->feeds + sig->num_feeds);
  int k = 0;
  for (int i = 0; i < sig->num_feeds; i++, k++) {
    r->user[k] = feeds[i].output.node;
    r->index[k] = feeds[i].output.index;
    r->names[k] = sig->feeds[i].node->name;
    r->feeds[i] = sig->feeds[i];
  }
  for (int i = 0; i < sig->num_fetches; i++, k++) {
    r->user[k] = fetches[i].node;
    r->index[k] = fetches[i].index;
    r->names[k] = sig->fetches[i].node->name;
  }
  for (int i = 0; i < sig->num_targets; i++, k++) {
    r->user[k] = targets[i];
    r->index[k] = -1;
    r->names[k] = sig->targets[i]->name;
  }
  pthread_mutex_lock(&s->cache_mu);
  rf__request *old = s->recent[s->recent_next];
  s->recent[s->recent_next] = r;
  s->recent_next = (s->recent_next + 1) % RF__RECENT_REQUESTS;
  pthread_mutex_unlock(&s->cache_mu);
  rf__free(old);
}

/* Runs plan p as one step; on success fetched[] holds new references. */
static rf_status *run_step(rf_session *s, rf__plan *p, const rf_feed *feeds,
                           rf_tensor **fed, rf_tensor **fetched,
                           int64_t job_step) {
#ifdef RF_HAVE_CUDA
  /* The caller's thread runs kernels too: give back its current device. */
  int prev_gpu = s->gpu ? rf__gpu_current() : -1;
#endif
  for (int i = 0; i < p->num_feeds; i++) fed[i] = feeds[i].value;
  for (int i = 0; i < p->num_fetches; i++) fetched[i] = NULL;
  rf__step step = {
      .id = atomic_fetch_add(&s->next_step, 1),
      .num_feeds = p->num_feeds,
      .feeds = fed,
      .num_fetches = p->num_fetches,
      .fetches = fetched,
      .rendezvous = s->rendezvous,
      .collective_timeout_ms = s->opts.collective_timeout_ms,
      .collectives = s->collectives,
      .job_step = job_step,
  };
  atomic_init(&step.cancelled, 0);
  if (p->cross_task) rf__job_begin_step(s->job, step.id, job_step);
  atomic_init(&step.checks, NULL);
  char *trace_path = take_trace_path(s);
  step.pipelined = rf__step_may_pipeline(s, p, trace_path != NULL);
  rf_status *st = trace_path ? rf__trace_new(&step.trace) : NULL;
  bool graph = false; /* the step ran as a CUDA graph (step_graph.h) */
#ifdef RF_HAVE_CUDA
  if (!st && !trace_path && p->step_graph)
    graph = rf__step_graph_run(s, p, &step, feeds, &st);
#endif
  if (!st && !graph) st = rf__executor_run(p->executor, &step);
  st = rf__session_end_step(s, p, &step, st);
#ifdef RF_HAVE_CUDA
  if (graph) st = rf__step_graph_finish(s, p, &step, st);
#endif
  if (st)
    RF__LOG(RF_LOG_ERROR, "run: step %lld failed: %s", (long long)step.id,
            rf_status_message(st));
#ifdef RF_HAVE_CUDA
  rf__gpu_make_current(prev_gpu);
#endif
  rf__collective_end_step(s->collectives, step.id);
  if (p->cross_task) rf__job_end_step(s->job, step.id);
  if (!st && step.trace)
    st = rf__trace_write(step.trace, s->devices, s->num_devices, trace_path);
  rf__trace_free(step.trace);
  rf__free(trace_path);
  for (int i = 0; i < p->num_fetches && !st; i++)
    if (!fetched[i])
      st = rf__internal("fetch %d was not produced by the step", i);
  if (st)
    for (int i = 0; i < p->num_fetches; i++) {
      rf_tensor_release(fetched[i]);
      fetched[i] = NULL;
    }
  return st;
}

rf_status *rf_session_run(rf_session *s, const rf_feed *feeds, int nfeeds,
                          const rf_output *fetches, int nfetches,
                          rf_node *const *targets, int ntargets,
                          rf_tensor **outputs) {
  const char *bad = !s                     ? "session is NULL"
                    : nfeeds < 0           ? "nfeeds is negative"
                    : nfetches < 0         ? "nfetches is negative"
                    : ntargets < 0         ? "ntargets is negative"
                    : nfeeds && !feeds     ? "feeds is NULL"
                    : nfetches && !fetches ? "fetches is NULL"
                    : nfetches && !outputs ? "outputs is NULL"
                    : ntargets && !targets ? "targets is NULL"
                                           : NULL;
  if (bad)
    return rf__invalid(
        "rf_session_run: %s (nfeeds %d, nfetches %d, "
        "ntargets %d)",
        bad, nfeeds, nfetches, ntargets);
  /* Every run of a job session is a job step, failed or not, so that the
   * processes' counts stay in step. */
  int64_t job_step = s->job ? atomic_fetch_add(&s->next_job_step, 1) : -1;
  /* One block for the resolved request and the step's tensor arrays: on
   * the stack unless the request is large. */
  size_t words = (size_t)nfeeds * 3 + (size_t)nfetches * 3 + (size_t)ntargets;
  void *small[RUN_STACK_WORDS];
  void **mem =
      words <= RUN_STACK_WORDS ? small : rf__malloc(sizeof(void *) * words);
  if (!mem) {
    rf_status *st = rf__status_prefix(rf__oom(), "rf_session_run");
    if (s->job) {
      rf__job_step_failed(s->job, job_step, st);
      rf__job_settle(s->job); /* the others told before the run returns */
    }
    return st;
  }
  _Static_assert(sizeof(rf_output) <= 2 * sizeof(void *), "rf_output fits");
  rf_output *fo = (rf_output *)mem;
  rf_output *xo = (rf_output *)(mem + 2 * (size_t)nfeeds);
  rf_node **tn = (rf_node **)(mem + 2 * (size_t)(nfeeds + nfetches));
  rf_tensor **fed = (rf_tensor **)(tn + ntargets);
  rf_tensor **fetched = fed + nfeeds;
  sbuf key = {0};
  rf_status *st = NULL;
  /* A repeated request: its plan without a name lookup; only the values
   * fed are new. */
  rf__plan *p =
      recent_find(s, feeds, nfeeds, fetches, nfetches, targets, ntargets, fo);
  for (int i = 0; p && i < nfeeds && !st; i++)
    st = check_feed(s, &fo[i], feeds[i].value, i);
  if (!p)
    st = resolve(s, feeds, nfeeds, fetches, nfetches, targets, ntargets, fo, xo,
                 tn, &key);
  rf__signature sig = {fo, nfeeds, xo, nfetches, tn, ntargets};
  /* An error of an earlier pipelined step fails this run instead. */
  if (!st) st = rf__session_take_deferred(s);
  if (!st && !p) {
    st = get_plan(s, &sig, key.p ? key.p : "", &p);
    if (!st) recent_add(s, p, feeds, fetches, targets, &sig);
  }
  if (!st) {
    bool count = p->step_graph != NULL; /* captures wait for no other run */
    if (count) rf__graph_run_begin(s);
    st = run_step(s, p, feeds, fed, fetched, job_step);
    if (count) rf__graph_run_end(s);
  } else if (s->job) {
    rf__job_step_failed(s->job, job_step, st);
  }
  if (!st && nfetches)
    memcpy(outputs, fetched, sizeof(rf_tensor *) * (size_t)nfetches);
  if (st && s->job) rf__job_settle(s->job); /* the others were told */
  rf__free(key.p);
  if (mem != small) rf__free(mem);
  return st;
}
