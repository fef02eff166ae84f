/* comm/mpi/coordinator.c - task 0 of a job decides, for every collective
 * that spans several tasks, whether and when it runs. Each task sends READY
 * with a descriptor of its part; when every task of the group has, and they
 * agree (collective, num_devices, dtype, reduction, device type, devices,
 * shapes, exactly one root), task 0 sends GO to all of them - one order for
 * the whole job, so no communicator ever sees two collectives in different
 * orders. Otherwise ABORT with a message naming the field, the values and a
 * device and node of each side; the group's deadline (the session's
 * collective timeout from its first READY) names the tasks and devices that
 * never came; a task's local failure (FAILED) or failed step (STEP_FAILED)
 * fails the group everywhere at once. A failed group is remembered for a
 * while so late tasks fail at once instead of waiting out the timeout. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/op.h"
#include "core/log.h"
#include "core/format.h"
#include "core/mem.h"
#include "core/status.h"

#define FORGET_MIN_NS 10000000000LL /* 10 s */
#define PROBE_MS 1000 /* how long a timed-out group waits for PONGs */

struct rf__mpi_centry {
  char *key, *name, *devices;
  char *shown; /* name as messages quote it: capped (core/format.h) */
  int64_t job_step, timeout_ms;
  int n; /* tasks of the group (0: unknown, a tombstone) */
  int *tasks, *counts;
  rf__mpi_msg *descs; /* [n]; type 0 until that task's READY */
  char **reps;        /* [n]: "device (node 'x')" of the task */
  int arrived;
  int64_t deadline_ns;
  bool failed;
  rf_code code;
  char *msg;
  int64_t forget_ns;
  /* Past the deadline: the missing tasks were PINGed until probe_ns;
   * answered[i]: 0 silent, else task tasks[i] answered (2: it has not
   * reached the collective). */
  int64_t probe_ns;
  unsigned char *answered;
  /* When its first READY came; whether its deadline was moved once
   * because a missing task is held up in the previous job step's entry of
   * the same collective (held_up). */
  int64_t start_ns;
  bool extended;
  UT_hash_handle hh;
};

struct rf__mpi_fstep {
  int64_t job_step, forget_ns;
  int task;
  rf_code code;
  char *msg;
  struct rf__mpi_fstep *next;
};

static void entry_free(rf__mpi_centry *e) {
  for (int i = 0; e->reps && i < e->n; i++) rf__free(e->reps[i]);
  rf__free(e->reps);
  rf__free(e->descs);
  rf__free(e->tasks);
  rf__free(e->counts);
  rf__free(e->key);
  rf__free(e->name);
  rf__free(e->shown);
  rf__free(e->devices);
  rf__free(e->msg);
  rf__free(e->answered);
  rf__free(e);
}

static int index_of(const rf__mpi_centry *e, int task) {
  for (int i = 0; i < e->n; i++)
    if (e->tasks[i] == task) return i;
  return -1;
}

static int64_t forget_after(int64_t timeout_ms) {
  int64_t t = 2 * timeout_ms * 1000000;
  return t > FORGET_MIN_NS ? t : FORGET_MIN_NS;
}

/* ABORT to task `to`. Unsent to this task (no memory for the message):
 * handed to its member here, so that its collective fails at once instead
 * of waiting for a verdict; another task then times out. */
static void abort_task(rf__job *j, int to, const char *name, int64_t job_step,
                       rf_code code, const char *text) {
  rf__mpi_msg h = {
      .type = RF_MSG_ABORT, .job_step = job_step, .code = (int32_t)code};
  if (rf__mpi_send_msg(j, to, &h, name, NULL, text) == RF_OK || to != j->task)
    return;
  h.task = j->task;
  h.epoch = j->epoch;
  rf__mpi_msg_view v = {&h, name, "", text ? text : ""};
  rf__mpi_member_verdict(j, &v, rf__mpi_now_ns());
}

static void send_abort(rf__job *j, int to, const rf__mpi_centry *e) {
  abort_task(j, to, e->name, e->job_step, e->code, e->msg);
}

/* ---- collectives it had no memory to record ---- */

static uint64_t name_hash(const char *name) { /* FNV-1a */
  uint64_t x = 14695981039346656037ULL;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    x = (x ^ *c) * 1099511628211ULL;
  return x;
}

static bool oom_known(const rf__job *j, const char *name, int64_t job_step,
                      int64_t now) {
  uint64_t x = name_hash(name);
  int n = j->num_oom < 8 ? j->num_oom : 8;
  for (int i = 0; i < n; i++)
    if (j->oom[i].job_step == job_step && j->oom[i].name_hash == x &&
        now < j->oom[i].forget_ns)
      return true;
  return false;
}

/* A READY that task 0 had no memory to record: without a record its group
 * would wait for it until the deadline and blame the others. It fails the
 * collective at once: ABORT to the sender, and to every later READY of it
 * (remembered in a fixed table: no memory is needed). */
static void oom_ready(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  if (!oom_known(j, v->name, v->h->job_step, now)) {
    int i = j->num_oom++ % 8;
    j->oom[i].job_step = v->h->job_step;
    j->oom[i].name_hash = name_hash(v->name);
    j->oom[i].forget_ns =
        now +
        forget_after(v->h->timeout_ms > 0 ? v->h->timeout_ms : j->timeout_ms);
  }
  char msg[512];
  snprintf(msg, sizeof msg,
           "collective '%.200s' (job step %lld): out of memory on task 0, "
           "the job's coordinator",
           v->name, (long long)v->h->job_step);
  abort_task(j, v->h->task, v->name, v->h->job_step, RF_RESOURCE_EXHAUSTED,
             msg);
}

/* Fails e with a message (code, printf format) and tells every task that
 * reported; later reports get the same answer at once. */
static void fail(rf__job *j, rf__mpi_centry *e, int64_t now, rf_code code,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void fail(rf__job *j, rf__mpi_centry *e, int64_t now, rf_code code,
                 const char *fmt, ...) {
  if (e->failed) return;
  char msg[RF_MPI_TEXT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  e->failed = true;
  e->code = code;
  if (code == RF_DEADLINE_EXCEEDED) RF__LOG(RF_LOG_WARN, "%s", msg);
  e->msg = rf__strdup(msg);
  e->forget_ns = now + forget_after(e->timeout_ms);
  for (int i = 0; i < e->n; i++)
    if (e->descs[i].type) send_abort(j, e->tasks[i], e);
}

/* "task 1 (/task:1/cpu:0, /task:1/cpu:1)" for every task of e whose READY
 * is (or is not: want_arrived false) in. */
static void list_tasks(const rf__mpi_centry *e, bool want_arrived, char *buf,
                       size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < e->n && used < len; i++) {
    if ((e->descs[i].type != 0) != want_arrived) continue;
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "/task:%d/", e->tasks[i]);
    used += (size_t)snprintf(buf + used, len - used, "%stask %d (",
                             used ? ", " : "", e->tasks[i]);
    bool first = true;
    for (const char *c = e->devices; *c && used < len;) {
      size_t k = strcspn(c, ",");
      if (k > (size_t)pl && strncmp(c, prefix, (size_t)pl) == 0) {
        used += (size_t)snprintf(buf + used, len - used, "%s%.*s",
                                 first ? "" : ", ", (int)k, c);
        first = false;
      }
      c += k + (c[k] == ',');
    }
    if (used < len) used += (size_t)snprintf(buf + used, len - used, ")");
  }
}

static rf__mpi_centry *entry_new(rf__job *j, const char *key, const char *name,
                                 int64_t job_step, const char *devices,
                                 int64_t timeout_ms, int64_t now) {
  rf__mpi_centry *e = rf__calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = rf__strdup(key);
  e->name = rf__strdup(name);
  e->shown = rf__format("%s", name);
  e->devices = rf__strdup(devices ? devices : "");
  bool ok = e->key && e->name && e->shown && e->devices;
  if (ok && devices && devices[0]) {
    rf_status *st = rf__mpi_parse_set(devices, &e->n, &e->tasks, &e->counts);
    ok = !st;
    rf_status_free(st);
    e->descs = ok ? rf__calloc((size_t)e->n, sizeof *e->descs) : NULL;
    e->reps = ok ? rf__calloc((size_t)e->n, sizeof *e->reps) : NULL;
    ok = ok && e->descs && e->reps;
  }
  int rf__hash_oom = 0;
  if (ok) HASH_ADD_KEYPTR(hh, j->centries, e->key, strlen(e->key), e);
  if (!ok || rf__hash_oom) {
    entry_free(e);
    return NULL;
  }
  e->job_step = job_step;
  e->timeout_ms = timeout_ms > 0 ? timeout_ms : 300000;
  e->start_ns = now;
  e->deadline_ns = now + e->timeout_ms * 1000000;
  /* A step that already failed on a task of the group. */
  for (rf__mpi_fstep *f = j->failed; f; f = f->next)
    if (f->job_step == job_step && index_of(e, f->task) >= 0) {
      fail(j, e, now, f->code,
           "collective '%s' (job step %lld): task %d failed that step: %s",
           name, (long long)job_step, f->task, f->msg);
      break;
    }
  return e;
}

/* The entry of (name, job_step), made when absent (devices NULL: a
 * tombstone for a failure that came first); NULL without memory. */
static rf__mpi_centry *find_or_make(rf__job *j, const char *name,
                                    int64_t job_step, const char *devices,
                                    int64_t timeout_ms, int64_t now) {
  char buf[256];
  char *key = rf__mpi_key(name, job_step, buf, sizeof buf);
  if (!key) return NULL;
  rf__mpi_centry *e = NULL;
  HASH_FIND_STR(j->centries, key, e);
  if (!e) e = entry_new(j, key, name, job_step, devices, timeout_ms, now);
  rf__mpi_key_free(key, buf);
  return e;
}

/* ---- agreement ---- */

static const char *rep(const rf__mpi_centry *e, int i) {
  return e->reps[i] ? e->reps[i] : "?";
}

static void shape_text(const rf__mpi_msg *d, char *buf, size_t len) {
  int64_t dims[RF_MAX_RANK];
  int rank = d->rank < RF_MAX_RANK ? d->rank : RF_MAX_RANK;
  for (int i = 0; i < rank; i++) dims[i] = d->dims[i];
  rf_shape s = rf_shape_make(rank, dims);
  rf_shape_format(&s, buf, len);
}

static bool reducing(int kind) {
  return kind == RF_COLL_ALL_REDUCE || kind == RF_COLL_REDUCE ||
         kind == RF_COLL_REDUCE_SCATTER;
}

static bool disagree(rf__job *j, rf__mpi_centry *e, int64_t now, int a, int b,
                     const char *field, const char *va, const char *vb) {
  fail(j, e, now, RF_INVALID_ARGUMENT,
       "collective '%s' (job step %lld): participants disagree on %s: %s on "
       "%s but %s on %s",
       e->shown, (long long)e->job_step, field, va, rep(e, a), vb, rep(e, b));
  return false;
}

/* The k-th (from 1) device of the group's list, "?" past its end. */
static void nth_device(const char *list, int k, char *buf, size_t len) {
  for (int i = 1; i < k && list; i++) {
    list = strchr(list, ',');
    if (list) list++;
  }
  size_t n = list ? strcspn(list, ",") : 0;
  if (!list || !n || k < 1) {
    snprintf(buf, len, "?");
    return;
  }
  snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), list);
}

/* Task b's descriptor against task a's; false (e failed) on a difference. */
static bool agree(rf__job *j, rf__mpi_centry *e, int64_t now, int a, int b,
                  const char *devices_b) {
  const rf__mpi_msg *x = &e->descs[a], *y = &e->descs[b];
  char sa[128], sb[128];
  if (x->kind != y->kind)
    return disagree(j, e, now, a, b, "the collective",
                    rf__collective_kind_name(x->kind),
                    rf__collective_kind_name(y->kind));
  if (x->num_devices != y->num_devices) {
    snprintf(sa, sizeof sa, "%d", x->num_devices);
    snprintf(sb, sizeof sb, "%d", y->num_devices);
    return disagree(j, e, now, a, b, "num_devices", sa, sb);
  }
  if (x->dtype != y->dtype)
    return disagree(j, e, now, a, b, "dtype", rf_dtype_name(x->dtype),
                    rf_dtype_name(y->dtype));
  if (reducing(x->kind) && x->reduction != y->reduction)
    return disagree(j, e, now, a, b, "reduction",
                    rf__reduction_name(x->reduction),
                    rf__reduction_name(y->reduction));
  if (x->device_type != y->device_type)
    return disagree(j, e, now, a, b, "device type",
                    rf__device_type_name(x->device_type),
                    rf__device_type_name(y->device_type));
  if (devices_b && strcmp(devices_b, e->devices) != 0)
    return disagree(j, e, now, a, b, "the group's devices", e->devices,
                    devices_b);
  if (x->root_at && y->root_at && x->root_at != y->root_at) {
    char ra[RF_DEVICE_NAME_MAX + 16], rb[RF_DEVICE_NAME_MAX + 16];
    nth_device(e->devices, x->root_at, ra, sizeof ra);
    nth_device(e->devices, y->root_at, rb, sizeof rb);
    snprintf(sa, sizeof sa, "%s", ra);
    snprintf(sb, sizeof sb, "%s", rb);
    return disagree(j, e, now, a, b,
                    x->kind == RF_COLL_REDUCE ? "the root (the receiver)"
                                              : "the root (the sender)",
                    sa, sb);
  }
  if (x->has_input && y->has_input) {
    bool same = x->rank == y->rank;
    for (int i = 0; same && i < x->rank && i < RF_MAX_RANK; i++)
      same = x->dims[i] == y->dims[i];
    if (!same) {
      shape_text(x, sa, sizeof sa);
      shape_text(y, sb, sizeof sb);
      return disagree(j, e, now, a, b, "shape", sa, sb);
    }
  }
  /* Every process must pick the same algorithm (algorithm.c): the table
   * goes by what was checked above, RF_MPI_ALGORITHM by the environment
   * of each process. */
  if (x->algo_setting != y->algo_setting)
    return disagree(j, e, now, a, b, "RF_MPI_ALGORITHM",
                    rf__mpi_algorithm_name(x->algo_setting),
                    rf__mpi_algorithm_name(y->algo_setting));
  return true;
}

/* Every task is in: roots, receivers' shapes; then GO to all. */
static void decide(rf__job *j, rf__mpi_centry *e, int64_t now) {
  int kind = e->descs[0].kind, roots = 0, root = -1, input = -1;
  for (int i = 0; i < e->n; i++) {
    roots += e->descs[i].local_roots;
    if (e->descs[i].local_roots) root = i;
    if (input < 0 && e->descs[i].has_input) input = i;
  }
  bool rooted = kind == RF_COLL_REDUCE || kind == RF_COLL_BROADCAST;
  if (rooted && roots != 1) {
    /* The processes built graphs that place the root on different tasks:
     * name the sides, as every other disagreement does - two tasks that
     * each hold it (their READY speaks for the root), or, when none does,
     * every task (each put it on another task). */
    const char *role = kind == RF_COLL_REDUCE ? "receiver" : "sender";
    char sides[2048] = "";
    size_t used = 0;
    for (int i = 0, k = 0; i < e->n && used < sizeof sides; i++) {
      if (roots && !e->descs[i].local_roots) continue;
      if (roots && k == 2) break;
      used += (size_t)snprintf(sides + used, sizeof sides - used, "%s%s",
                               k ? (roots ? " but on " : ", ") : "", rep(e, i));
      k++;
    }
    fail(j, e, now, RF_INVALID_ARGUMENT,
         "collective '%s' (job step %lld): participants disagree on the "
         "root: %s needs exactly one root (the %s), found %d: %s%s%s",
         e->shown, (long long)e->job_step, rf__collective_kind_name(kind), role,
         roots,
         roots ? "on "
               : "each process's graph puts it on another task (none of ",
         sides, roots ? "" : " holds it)");
    return;
  }
  const rf__mpi_msg *ref = &e->descs[root >= 0 ? root : input >= 0 ? input : 0];
  for (int i = 0; i < e->n; i++) { /* broadcast receivers' expected shapes */
    const rf__mpi_msg *d = &e->descs[i];
    bool ok = d->has_input || d->rank < 0 || d->rank == ref->rank;
    for (int k = 0; ok && !d->has_input && d->rank >= 0 && k < d->rank; k++)
      ok = d->dims[k] < 0 || d->dims[k] == ref->dims[k];
    if (!ok) {
      char sa[128], sb[128];
      shape_text(ref, sa, sizeof sa);
      shape_text(d, sb, sizeof sb);
      disagree(j, e, now, (int)(ref - e->descs), i, "shape", sa, sb);
      return;
    }
  }
  int root_rank = -1; /* the root's rank in the job (NCCL's root) */
  if (root >= 0) {
    root_rank = e->descs[root].local_root;
    for (int i = 0; i < root; i++) root_rank += e->counts[i];
  }
  /* Kept agreed (agreed.c) only when every task asked alike. */
  int agree = e->descs[0].agree;
  for (int i = 1; i < e->n; i++)
    if (e->descs[i].agree != agree) agree = RF_AGREE_NO;
  rf__mpi_msg go = {.type = RF_MSG_GO,
                    .job_step = e->job_step,
                    .root_index = root,
                    .root_rank = root_rank,
                    .rank = ref->rank,
                    .agree = agree};
  memcpy(go.dims, ref->dims, sizeof go.dims);
  /* GO to every task or to none: a task without it would leave the others
   * in the MPI collective until it times out and breaks the session. */
  if (rf__mpi_send_msg_all(j, e->n, e->tasks, &go, e->name, NULL, NULL) ==
      RF_RESOURCE_EXHAUSTED) {
    fail(j, e, now, RF_RESOURCE_EXHAUSTED,
         "collective '%s' (job step %lld): out of memory on task 0, the "
         "job's coordinator",
         e->shown, (long long)e->job_step);
    return;
  }
  HASH_DEL(j->centries, e);
  entry_free(e);
}

/* ---- messages ---- */

static void on_ready(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  const rf__mpi_msg *h = v->h;
  if (oom_known(j, v->name, h->job_step, now)) {
    oom_ready(j, v, now);
    return;
  }
  rf__mpi_centry *e =
      find_or_make(j, v->name, h->job_step, v->devices, h->timeout_ms, now);
  if (!e) {
    oom_ready(j, v, now);
    return;
  }
  if (e->n == 0 && !e->failed) return; /* cannot happen: READY has devices */
  int i = e->n ? index_of(e, h->task) : -1;
  if (!e->failed && i < 0)
    fail(j, e, now, RF_INTERNAL,
         "collective '%s' (job step %lld): task %d reported for a group of "
         "devices %s",
         e->shown, (long long)e->job_step, h->task, e->devices);
  if (e->failed) {
    send_abort(j, h->task, e);
    return;
  }
  if (e->descs[i].type) return; /* twice: ignored */
  e->descs[i] = *h;
  e->reps[i] = rf__strdup(v->text);
  e->arrived++;
  int first = -1;
  for (int k = 0; k < e->n && first < 0; k++)
    if (k != i && e->descs[k].type) first = k;
  if (first >= 0 && !agree(j, e, now, first, i, v->devices)) return;
  if (e->arrived == e->n) decide(j, e, now);
}

static void on_failed(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  const rf__mpi_msg *h = v->h;
  rf__mpi_centry *e = find_or_make(j, v->name, h->job_step, NULL, 0, now);
  if (!e) return;
  fail(j, e, now, (rf_code)h->code,
       "collective '%s' (job step %lld) failed on task %d: %s", e->shown,
       (long long)e->job_step, h->task, v->text);
}

static void on_step_failed(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  const rf__mpi_msg *h = v->h;
  rf__mpi_fstep *f = rf__calloc(1, sizeof *f);
  if (f) f->msg = rf__strdup(v->text);
  if (!f || !f->msg) {
    rf__free(f);
    return;
  }
  f->job_step = h->job_step;
  f->task = h->task;
  f->code = (rf_code)h->code;
  f->forget_ns = now + forget_after(j->timeout_ms);
  f->next = j->failed;
  j->failed = f;
  rf__mpi_centry *e, *tmp;
  HASH_ITER(hh, j->centries, e, tmp) {
    if (e->job_step == f->job_step && !e->failed && index_of(e, f->task) >= 0)
      fail(j, e, now, f->code,
           "collective '%s' (job step %lld): task %d failed that step: %s",
           e->shown, (long long)e->job_step, f->task, f->msg);
  }
}

void rf__mpi_coord_handle(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  switch (v->h->type) {
    case RF_MSG_READY: on_ready(j, v, now); break;
    case RF_MSG_FAILED: on_failed(j, v, now); break;
    case RF_MSG_STEP_FAILED: on_step_failed(j, v, now); break;
    default: break;
  }
}

/* The deadline passed: asks every missing task whether it is there (its
 * communication thread answers even while it is stuck in an earlier
 * collective); false when it cannot ask (no memory: fail at once). */
static bool probe(rf__job *j, rf__mpi_centry *e, int64_t now) {
  e->answered = rf__calloc((size_t)e->n, 1);
  if (!e->answered) return false;
  e->probe_ns = now + PROBE_MS * 1000000LL;
  rf__mpi_msg h = {.type = RF_MSG_PING, .job_step = e->job_step};
  for (int i = 0; i < e->n; i++) {
    if (e->tasks[i] == j->task) e->answered[i] = 2; /* here: not reached */
    if (!e->descs[i].type && e->tasks[i] != j->task)
      rf__mpi_send_msg(j, e->tasks[i], &h, e->name, NULL, NULL);
  }
  return true;
}

void rf__mpi_coord_pong(rf__job *j, const rf__mpi_msg_view *v) {
  char buf[256];
  char *key = rf__mpi_key(v->name, v->h->job_step, buf, sizeof buf);
  rf__mpi_centry *e = NULL;
  if (key) HASH_FIND_STR(j->centries, key, e);
  rf__mpi_key_free(key, buf);
  int i = e && e->answered ? index_of(e, v->h->task) : -1;
  if (i >= 0) e->answered[i] = v->h->code == 2 ? 2 : 1;
}

/* Of the missing tasks: " (task 2 did not answer within 1000 ms: died or
 * stopped; task 1 answers: it has not reached this collective, maybe
 * held up by an earlier one)"; silent ones are marked lost (not waited for
 * when task 0 leaves). */
static void probe_text(rf__job *j, rf__mpi_centry *e, char *buf, size_t len) {
  char silent[1024] = "", alive[1024] = "", left[1024] = "";
  size_t ns = 0, na = 0, nl = 0;
  for (int i = 0; e->answered && i < e->n; i++) {
    if (e->descs[i].type) continue;
    int t = e->tasks[i];
    bool quiet = !e->answered[i], gone = quiet && rf__mpi_peer_left(j, t);
    char *b = gone ? left : quiet ? silent : alive;
    size_t *u = gone ? &nl : quiet ? &ns : &na;
    if (*u < sizeof silent)
      *u += (size_t)snprintf(b + *u, sizeof silent - *u, "%stask %d",
                             *u ? ", " : "", t);
    if (quiet && t > 0 && t < j->ntasks && j->peers[t] == RF_PEER_OK)
      j->peers[t] = RF_PEER_LOST; /* until it is heard from again */
  }
  rf__mpi_probe_text(silent, alive, left, true, buf, len);
}

/* The entry of e's collective at the job step before e's, while task 0
 * still holds it (pending, or failed and not yet forgotten). */
static rf__mpi_centry *previous_step(rf__job *j, const rf__mpi_centry *e) {
  if (e->job_step <= 0) return NULL;
  char buf[256];
  char *key = rf__mpi_key(e->name, e->job_step - 1, buf, sizeof buf);
  rf__mpi_centry *p = NULL;
  if (key) HASH_FIND_STR(j->centries, key, p);
  rf__mpi_key_free(key, buf);
  return p && p->n ? p : NULL;
}

/* A task missing from e that has come to p (the same collective's
 * previous job step), held up there; -1 when none. */
static int held_up(const rf__mpi_centry *e, const rf__mpi_centry *p) {
  for (int i = 0; i < e->n; i++) {
    if (e->descs[i].type) continue;
    int k = index_of(p, e->tasks[i]);
    if (k >= 0 && p->descs[k].type) return e->tasks[i];
  }
  return -1;
}

/* When a task missing from e is held up in p (the previous job step of
 * the collective), the cause first: "job step 4 of this collective failed
 * waiting for task 1 (...) (which skipped it or failed before it), and
 * task 0 was held up there" - naming the task that skipped that step,
 * not the one that came to it; "" otherwise. */
static void held_text(const rf__mpi_centry *e, const rf__mpi_centry *p,
                      char *buf, size_t len) {
  buf[0] = '\0';
  int t = p ? held_up(e, p) : -1;
  if (t < 0) return;
  char waits[2048];
  list_tasks(p, false, waits, sizeof waits);
  if (waits[0])
    snprintf(buf, len,
             "job step %lld of this collective %s %s (which skipped it or "
             "failed before it), and task %d %s held up there",
             (long long)p->job_step,
             p->failed ? "failed waiting for" : "waits for", waits, t,
             p->failed ? "was" : "is");
  else
    snprintf(buf, len,
             "job step %lld of this collective failed, and task %d was held "
             "up there",
             (long long)p->job_step, t);
}

bool rf__mpi_coord_poll(rf__job *j, int64_t now) {
  bool pending = false;
  rf__mpi_centry *e, *tmp;
  HASH_ITER(hh, j->centries, e, tmp) {
    /* A task held up in this collective's previous step (a task skipped
     * that step, or failed before it, and went on: its READY for this step
     * came first) comes here once that step fails (at its own deadline and
     * probe, about this one's): this step waits for it, as long as the
     * members that came here wait for a verdict (their grace, less the
     * probe and a margin), instead of failing and blaming it. */
    if (!e->failed && e->n && now >= e->deadline_ns && !e->probe_ns &&
        !e->extended) {
      e->extended = true;
      rf__mpi_centry *p = previous_step(j, e);
      int64_t until = e->start_ns + (e->timeout_ms + rf__mpi_member_grace_ms() -
                                     PROBE_MS - 200) *
                                        1000000;
      if (p && !p->failed && held_up(e, p) >= 0 && until > now) {
        e->deadline_ns = until;
        pending = true;
        continue;
      }
    }
    if (!e->failed && e->n && now >= e->deadline_ns && !e->probe_ns &&
        probe(j, e, now))
      continue; /* pending */
    if (!e->failed && e->n && now >= e->deadline_ns &&
        (!e->probe_ns || now >= e->probe_ns)) {
      char missing[2048], present[2048], why[2200] = "", held[2300];
      list_tasks(e, false, missing, sizeof missing);
      list_tasks(e, true, present, sizeof present);
      probe_text(j, e, why, sizeof why);
      held_text(e, previous_step(j, e), held, sizeof held);
      int absent = 0;
      for (int i = 0; i < e->n; i++)
        if (!e->descs[i].type) absent += e->counts[i];
      int all = 0;
      for (int i = 0; i < e->n; i++) {
        all += e->counts[i];
        int t = e->tasks[i];
        if (!e->answered && !e->descs[i].type && t > 0 && t < j->ntasks &&
            j->peers[t] == RF_PEER_OK)
          j->peers[t] = RF_PEER_LOST; /* not asked: may be dead */
      }
      rf__mpi_peer_suspect(j, now);
      if (held[0])
        fail(j, e, now, RF_DEADLINE_EXCEEDED,
             "collective '%s' (job step %lld): timed out after %lld ms: %s: "
             "%d of %d participants missing (%s); arrived: %s%s",
             e->shown, (long long)e->job_step, (long long)e->timeout_ms, held,
             absent, all, missing, present[0] ? present : "none", why);
      else
        fail(j, e, now, RF_DEADLINE_EXCEEDED,
             "collective '%s' (job step %lld): timed out after %lld ms "
             "waiting for %s: %d of %d participants missing; arrived: %s%s",
             e->shown, (long long)e->job_step, (long long)e->timeout_ms,
             missing, absent, all, present[0] ? present : "none", why);
    }
    if (e->failed && now >= e->forget_ns) {
      HASH_DEL(j->centries, e);
      entry_free(e);
    } else if (!e->failed) {
      pending = true;
    }
  }
  for (rf__mpi_fstep **p = &j->failed; *p;) {
    rf__mpi_fstep *f = *p;
    if (now < f->forget_ns) {
      p = &f->next;
      continue;
    }
    *p = f->next;
    rf__free(f->msg);
    rf__free(f);
  }
  return pending;
}

void rf__mpi_coord_free(rf__job *j) {
  rf__mpi_centry *e, *tmp;
  HASH_ITER(hh, j->centries, e, tmp) {
    HASH_DEL(j->centries, e);
    entry_free(e);
  }
  while (j->failed) {
    rf__mpi_fstep *f = j->failed;
    j->failed = f->next;
    rf__free(f->msg);
    rf__free(f);
  }
}
