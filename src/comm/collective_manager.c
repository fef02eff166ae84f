/* comm/collective_manager.c - where participants of a collective meet.
 *
 * Entries live in one table keyed by "shared_name\x1fstep". An entry is
 * PENDING until num_devices participants arrive (then it leaves the table and
 * runs) or until it fails (timeout, disagreement, cancellation): a FAILED entry
 * stays until the step ends so that late participants fail at once instead of
 * waiting out another timeout. A watchdog thread sleeps until the earliest
 * deadline. Callbacks always run outside the lock.
 *
 * A group with participants in other processes (task_devices < num_devices)
 * gathers only this process's here, then goes to the session's job
 * (comm/job.h), which agrees with the other processes and moves the data; a
 * local failure of such a group is reported to the job so that every
 * process fails it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/collective.h"
#include "comm/job.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/shape.h"
#include "core/status.h"
#include "device/step.h"

enum entry_state { PENDING, FAILED };

typedef struct entry {
  char *key; /* shared_name \x1f step: the table key */
  char *shared_name;
  int64_t step_id;
  enum entry_state state;
  int expected, arrived, cap;
  int num_devices; /* of the whole group; expected when not cross */
  bool cross;      /* participants in other processes too */
  int64_t job_step;
  rf__coll_participant *parts;
  int64_t deadline_ns; /* 0: none */
  int64_t timeout_ms;
  rf_status *error; /* FAILED entries */
  /* Participants failed under the lock wait here, chained through
   * doomed_next, until they are called outside it (no allocation needed). */
  rf__coll_participant *doomed;
  int num_doomed;
  struct entry *doomed_next;
  UT_hash_handle hh;
} entry;

typedef struct cancelled_step {
  int64_t step_id;
  rf_status *why;
} cancelled_step;

struct rf__collective_manager {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the watchdog's */
  pthread_t watchdog;
  int stopping;
  entry *table;
  /* When the watchdog will wake next (0: never) and the last timeout a
   * participant asked for. A join wakes the watchdog only for a deadline
   * before its wake time; idle, it wakes every max(last_timeout_ns, 1 s),
   * so a steady stream of steps joins without waking it (a wake-up is a
   * thread hand-off: ~14 us of a ~55 us 4-device all-reduce step). */
  int64_t watch_ns, last_timeout_ns;
  cancelled_step *cancelled;
  int num_cancelled, cap_cancelled;
  rf__threadpool *pool;
  rf__job *job; /* NULL: one process */
};

static const char *const kind_names[] = {
#define RF_X(e, s) s,
    RF_COLLECTIVE_KIND_LIST(RF_X)
#undef RF_X
};
_Static_assert(sizeof kind_names / sizeof *kind_names == RF_COLL_KIND_COUNT,
               "one name per kind");

const char *rf__collective_kind_name(rf__collective_kind k) {
  return (int)k >= 0 && k < RF_COLL_KIND_COUNT ? kind_names[k] : "invalid";
}

static const rf__coll_backend *const backends[] = {
    &rf__cpu_coll_backend,
#ifdef RF_HAVE_CUDA
    &rf__gpu_coll_backend,
#endif
};

#define IDLE_WAKE_NS 1000000000LL

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- failing participants (outside the lock) ---- */

void rf__coll_report(rf__coll_participant *parts, int n, const rf_status *st,
                     rf_tensor **outs) {
  for (int i = 0; i < n; i++) {
    rf_tensor *out = NULL;
    if (!st && outs) {
      out = outs[i];
      outs[i] = NULL;
    }
    parts[i].done(parts[i].arg, st ? rf__status_copy(st) : NULL, out);
  }
}

/* Releases the participants' inputs, then calls their dones with st; the
 * last done gets st itself, so that nothing of this call stays allocated
 * once that done has run (it may end the step and return its run to the
 * user, who may then count live allocations or free the session). */
static void fail_parts_give(rf__coll_participant *parts, int n, rf_status *st) {
  for (int i = 0; i < n; i++) { /* before the dones: see collective.h */
    rf_tensor_release(parts[i].input);
    parts[i].input = NULL;
  }
  for (int i = 0; i < n; i++)
    parts[i].done(parts[i].arg, i == n - 1 ? st : rf__status_copy(st), NULL);
  if (n == 0) rf_status_free(st);
}

/* fail_parts_give with a copy of st (which stays the caller's). */
static void fail_parts(rf__coll_participant *parts, int n,
                       const rf_status *st) {
  fail_parts_give(parts, n, rf__status_copy(st));
}

static void entry_free(entry *e) {
  rf__free(e->key);
  rf__free(e->shared_name);
  rf__free(e->parts);
  rf_status_free(e->error);
  rf__free(e);
}

static int by_device_index(const void *a, const void *b) {
  const rf__coll_participant *x = a, *y = b;
  return (x->device->index > y->device->index) -
         (x->device->index < y->device->index);
}

/* Lists the devices present, e.g. "cpu:0, cpu:2", into buf. */
static void list_devices(const rf__coll_participant *p, int n, char *buf,
                         size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s (%s)", i ? ", " : "",
                             p[i].device->canonical, p[i].node);
}

/* The length of the "/task:K/" prefix of a device name (0: none). */
static size_t task_prefix(const char *name) {
  if (strncmp(name, "/task:", 6) != 0) return 0;
  const char *slash = strchr(name + 1, '/');
  return slash ? (size_t)(slash - name) + 1 : 0;
}

/* Lists the devices of the group (from any participant's group_devices)
 * that have not arrived, e.g. "cpu:1, cpu:3"; "" when unknown. In a group
 * of several processes only this process's devices (p's task) count. */
static void list_missing(const rf__coll_participant *p, int n, char *buf,
                         size_t len) {
  const char *all = NULL;
  for (int i = 0; i < n && !all; i++) all = p[i].group_devices;
  size_t used = 0, tp = n > 0 ? task_prefix(p[0].device->canonical) : 0;
  buf[0] = '\0';
  while (all && *all && used < len) {
    size_t k = strcspn(all, ",");
    bool here = tp && (k < tp || strncmp(all, p[0].device->canonical, tp));
    for (int i = 0; i < n && !here; i++)
      here = strlen(p[i].device->canonical) == k &&
             strncmp(p[i].device->canonical, all, k) == 0;
    if (!here)
      used += (size_t)snprintf(buf + used, len - used, "%s%.*s",
                               used ? ", " : "", (int)k, all);
    all += k + (all[k] == ',');
  }
}

/* ---- agreement ---- */

static rf_status *disagree(const char *field, const char *key, int64_t step,
                           const rf__coll_participant *a, const char *va,
                           const rf__coll_participant *b, const char *vb) {
  return rf__invalid(
      "collective '%s' (step %lld): participants disagree on %s: %s on %s "
      "(node '%s') but %s on %s (node '%s')",
      key, (long long)step, field, va, a->device->canonical, a->node, vb,
      b->device->canonical, b->node);
}

static rf_status *check_pair(const char *key, int64_t step,
                             const rf__coll_participant *a,
                             const rf__coll_participant *b) {
  char sa[96], sb[96];
  if (a->kind != b->kind)
    return disagree("the collective", key, step, a,
                    rf__collective_kind_name(a->kind), b,
                    rf__collective_kind_name(b->kind));
  if (a->num_devices != b->num_devices) {
    snprintf(sa, sizeof sa, "%d", a->num_devices);
    snprintf(sb, sizeof sb, "%d", b->num_devices);
    return disagree("num_devices", key, step, a, sa, b, sb);
  }
  if (a->dtype != b->dtype)
    return disagree("dtype", key, step, a, rf_dtype_name(a->dtype), b,
                    rf_dtype_name(b->dtype));
  bool reduces = a->kind == RF_COLL_ALL_REDUCE || a->kind == RF_COLL_REDUCE ||
                 a->kind == RF_COLL_REDUCE_SCATTER;
  if (reduces && a->reduction != b->reduction)
    return disagree("reduction", key, step, a, rf__reduction_name(a->reduction),
                    b, rf__reduction_name(b->reduction));
  if (a->device->name.type != b->device->name.type)
    return disagree("device type", key, step, a,
                    rf__device_type_name(a->device->name.type), b,
                    rf__device_type_name(b->device->name.type));
  if (a->device == b->device)
    return rf__invalid(
        "collective '%s' (step %lld): device %s joined twice "
        "(nodes '%s' and '%s')",
        key, (long long)step, a->device->canonical, a->node, b->node);
  return NULL;
}

/* Shapes: every participant that has an input must agree (a broadcast
 * receiver's expected shape must be compatible with the sender's). */
static bool shape_compatible(const rf_shape *known, const rf_shape *want) {
  if (want->rank < 0) return true;
  if (want->rank != known->rank) return false;
  for (int i = 0; i < want->rank; i++)
    if (want->dims[i] >= 0 && want->dims[i] != known->dims[i]) return false;
  return true;
}

/* Whether n inputs of shape s (rank >= 1) gather into a shape a tensor may
 * have. */
static bool gather_fits(const rf_shape *s, int n) {
  rf_shape all = *s;
  if (!rf__dim_mul(s->dims[0], n, &all.dims[0])) return false;
  rf_status *st = rf__shape_check(&all);
  bool ok = st == NULL;
  rf_status_free(st);
  return ok;
}

/* In a group of several processes the root may be elsewhere: receivers are
 * then checked by the job, against the root's shape. Divisibility counts
 * every process's participants (num_devices). */
static rf_status *check_shapes(const rf__coll_group *g) {
  const rf__coll_participant *ref = g->root >= 0 ? &g->p[g->root] : &g->p[0];
  char sa[128], sb[128];
  int n = g->p[0].num_devices;
  for (int i = 0; i < g->n; i++) {
    const rf__coll_participant *p = &g->p[i];
    if (!ref->input && !p->input) continue;
    bool ok = p->input ? rf_shape_equal(&p->shape, &ref->shape)
                       : shape_compatible(&ref->shape, &p->shape);
    if (!ok) {
      rf_shape_format(&ref->shape, sa, sizeof sa);
      rf_shape_format(&p->shape, sb, sizeof sb);
      return disagree("shape", g->key, g->step_id, ref, sa, p, sb);
    }
  }
  if (g->kind == RF_COLL_REDUCE_SCATTER && ref->shape.rank == 0)
    return rf__invalid(
        "collective '%s' (step %lld): reduce_scatter needs inputs of "
        "rank >= 1, got a scalar",
        g->key, (long long)g->step_id);
  if (g->kind == RF_COLL_REDUCE_SCATTER) {
    int64_t rows = ref->shape.dims[0];
    if (rows % n != 0)
      return rf__invalid(
          "collective '%s' (step %lld): reduce_scatter needs a "
          "first dimension divisible by %d devices, got %s",
          g->key, (long long)g->step_id, n,
          (rf_shape_format(&ref->shape, sa, sizeof sa), sa));
  }
  if (g->kind == RF_COLL_ALL_GATHER && ref->shape.rank == 0)
    return rf__invalid(
        "collective '%s' (step %lld): all_gather needs inputs of "
        "rank >= 1, got a scalar",
        g->key, (long long)g->step_id);
  /* Checked once here: every backend multiplies the rows by n. */
  if (g->kind == RF_COLL_ALL_GATHER && !gather_fits(&ref->shape, n))
    return rf__invalid(
        "collective '%s' (step %lld): all_gather of %d inputs of shape %s "
        "overflows int64",
        g->key, (long long)g->step_id, n,
        (rf_shape_format(&ref->shape, sa, sizeof sa), sa));
  return NULL;
}

/* cross: the root may be in another process (the job checks that there is
 * exactly one). */
static rf_status *check_roots(rf__coll_group *g, bool cross) {
  bool rooted = g->kind == RF_COLL_REDUCE || g->kind == RF_COLL_BROADCAST;
  g->root = -1;
  int roots = 0;
  for (int i = 0; i < g->n; i++)
    if (g->p[i].is_root) {
      roots++;
      g->root = i;
    }
  if (rooted && (cross ? roots > 1 : roots != 1))
    return rf__invalid(
        "collective '%s' (step %lld): %s needs exactly one root "
        "(the %s), found %d",
        g->key, (long long)g->step_id, rf__collective_kind_name(g->kind),
        g->kind == RF_COLL_REDUCE ? "receiver" : "sender", roots);
  if (!rooted) g->root = -1;
  for (int i = 0; i < g->n; i++) {
    bool needs_input = !(g->kind == RF_COLL_BROADCAST && i != g->root);
    if (needs_input && !g->p[i].input)
      return rf__internal("collective '%s': participant on %s has no input",
                          g->key, g->p[i].device->canonical);
  }
  return NULL;
}

/* "collective: group 'g' step 7 formed: all_reduce sum float32 on cpu:0,
 * cpu:1" (debug), once the group agrees. */
static void log_formed(const rf__coll_group *g, const entry *e) {
  char devs[2048];
  size_t used = 0;
  devs[0] = '\0';
  for (int i = 0; i < g->n && used < sizeof devs; i++)
    used += (size_t)snprintf(devs + used, sizeof devs - used, "%s%s",
                             i ? ", " : "", g->p[i].device->canonical);
  bool reduces = g->kind == RF_COLL_ALL_REDUCE || g->kind == RF_COLL_REDUCE ||
                 g->kind == RF_COLL_REDUCE_SCATTER;
  char cross[64] = "";
  if (e->cross)
    snprintf(cross, sizeof cross, " (%d of %d devices, with other tasks)", g->n,
             e->num_devices);
  rf__log_write(RF_LOG_DEBUG,
                "collective: group '%.200s' step %lld formed: %s%s%s %s on "
                "%s%s",
                g->key, (long long)g->step_id,
                rf__collective_kind_name(g->kind), reduces ? " " : "",
                reduces ? rf__reduction_name(g->reduction) : "",
                rf_dtype_name(g->dtype), devs, cross);
}

/* Validates and runs a complete group; takes ownership of e. A group of
 * several processes goes to the job once this process's part agrees. */
static void launch(rf__collective_manager *m, entry *e) {
  rf__coll_group g = {.kind = e->parts[0].kind,
                      .reduction = e->parts[0].reduction,
                      .dtype = e->parts[0].dtype,
                      .n = e->arrived,
                      .p = e->parts,
                      .pool = m->pool,
                      .key = e->shared_name,
                      .step_id = e->step_id,
                      .timeout_ms = e->timeout_ms};
  qsort(g.p, (size_t)g.n, sizeof *g.p, by_device_index);
  rf_status *st = NULL;
  for (int i = 1; i < g.n && !st; i++)
    st = check_pair(g.key, g.step_id, &g.p[0], &g.p[i]);
  if (!st) st = check_roots(&g, e->cross);
  if (!st) st = check_shapes(&g);
  if (!st && rf__log_on(RF_LOG_DEBUG)) log_formed(&g, e);
  bool cross = e->cross && m->job;
  int64_t job_step = e->job_step;
  /* The dones may end the step and return its run to the user, who may then
   * count live allocations or free the session: the entry and its array go
   * before the first done, the group's participants and name onto the
   * stack where they fit (a session has at most 64 CPU and 64 GPU devices;
   * names are mostly short). Otherwise they go after, as fail_doomed's. */
  rf__coll_participant local[64 + 64];
  char name[256];
  size_t len = strlen(e->shared_name);
  bool early = g.n <= (int)(sizeof local / sizeof *local) && len < sizeof name;
  if (early) {
    memcpy(local, g.p, sizeof *g.p * (size_t)g.n);
    memcpy(name, e->shared_name, len + 1);
    g.p = local;
    g.key = name;
    entry_free(e); /* and the array copied above */
    e = NULL;
  } else {
    e->parts = NULL; /* g.p freed below with e */
  }
  if (cross) {
    if (st) {
      rf__job_coll_failed(m->job, g.key, job_step, st);
      fail_parts_give(g.p, g.n, st); /* releases the inputs */
    } else {
      rf__job_coll_run(m->job, &g, g.p[0].group_devices, job_step);
      for (int i = 0; i < g.n; i++) rf_tensor_release(g.p[i].input);
    }
  } else {
    const rf__coll_backend *be = NULL;
    for (size_t i = 0; !st && i < sizeof backends / sizeof *backends; i++)
      if (backends[i]->device_type == g.p[0].device->name.type)
        be = backends[i];
    if (!st && !be)
      st = rf__error(RF_UNIMPLEMENTED,
                     "collective '%s': no collective backend for %s devices",
                     g.key, rf__device_type_name(g.p[0].device->name.type));
    if (st) {
      fail_parts_give(g.p, g.n, st);
    } else {
      be->run(&g); /* calls each done (maybe later); may release inputs */
      for (int i = 0; i < g.n; i++) rf_tensor_release(g.p[i].input);
    }
  }
  if (!early) {
    rf__free(g.p);
    entry_free(e);
  }
}

/* ---- the table ---- */

/* Bytes a key needs beyond its name: '\x1f', a sign, 19 digits, the NUL. */
#define KEY_EXTRA 22

/* "name\x1fstep" into buf, which holds name_len + KEY_EXTRA bytes: names of
 * any length stay whole (a cut name would meet another collective). Not
 * printf: every participant of every collective makes its key (snprintf was
 * a tenth of a 1 KiB all-reduce step). */
static void make_key(char *buf, const char *name, size_t name_len,
                     int64_t step) {
  char digits[24];
  int nd = 0;
  unsigned long long v =
      step < 0 ? 0ULL - (unsigned long long)step : (unsigned long long)step;
  do digits[nd++] = (char)('0' + v % 10);
  while ((v /= 10) > 0);
  if (step < 0) digits[nd++] = '-';
  memcpy(buf, name, name_len);
  size_t n = name_len;
  buf[n++] = '\x1f';
  while (nd > 0) buf[n++] = digits[--nd];
  buf[n] = '\0';
}

static const rf_status *step_cancelled(rf__collective_manager *m,
                                       int64_t step) {
  for (int i = 0; i < m->num_cancelled; i++)
    if (m->cancelled[i].step_id == step) return m->cancelled[i].why;
  return NULL;
}

/* Marks a pending entry FAILED with st (consumed) and chains it on *list;
 * its participants are failed by fail_doomed once the lock is released. */
static void doom_locked(entry *e, rf_status *st, entry **list) {
  e->doomed = e->parts;
  e->num_doomed = e->arrived;
  e->parts = NULL;
  e->arrived = e->cap = 0;
  e->state = FAILED;
  e->error = st;
  e->deadline_ns = 0;
  e->doomed_next = *list;
  *list = e;
}

/* Fails the participants of every doomed entry (outside the lock), and
 * tells the job about groups of several processes. The entries stay in the
 * table, FAILED, until their step ends. */
static void fail_doomed(rf__collective_manager *m, entry *list) {
  while (list) {
    entry *e = list;
    list = e->doomed_next;
    rf__coll_participant *parts = e->doomed;
    int n = e->num_doomed;
    e->doomed = NULL;
    e->num_doomed = 0;
    e->doomed_next = NULL;
    if (e->cross && m->job)
      rf__job_coll_failed(m->job, e->shared_name, e->job_step, e->error);
    /* The last done may end the step and return its run to the user, who
     * may then count live allocations or free the session: the array goes
     * first (test_fault_injection's timeout sweep saw it freed after the
     * run had returned, 1 allocation "leaked" under load). A session has
     * at most 64 CPU and 64 GPU devices; a larger group keeps the old
     * order. */
    rf__coll_participant local[64 + 64];
    if (n <= (int)(sizeof local / sizeof *local)) {
      memcpy(local, parts, sizeof *parts * (size_t)n);
      rf__free(parts);
      fail_parts(local, n, e->error);
    } else {
      fail_parts(parts, n, e->error);
      rf__free(parts);
    }
  }
}

static entry *entry_new(const char *key, const char *shared_name, int64_t step,
                        const rf__coll_participant *p, int expected) {
  entry *e = rf__calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = rf__strdup(key);
  e->shared_name = rf__strdup(shared_name);
  e->parts = rf__calloc((size_t)expected, sizeof *e->parts);
  if (!e->key || !e->shared_name || !e->parts) {
    entry_free(e);
    return NULL;
  }
  e->step_id = step;
  e->expected = expected;
  e->cap = expected;
  e->num_devices = p->num_devices;
  e->cross = expected < p->num_devices;
  e->job_step = p->step ? p->step->job_step : -1;
  return e;
}

static rf_status *join(rf__collective_manager *m, const char *key,
                       const char *shared_name, int64_t step_id,
                       int64_t timeout_ms, const rf__coll_participant *p) {
  /* This process's share of a group of several processes. */
  int expected = p->task_devices > 0 && p->task_devices < p->num_devices
                     ? p->task_devices
                     : p->num_devices;
  pthread_mutex_lock(&m->mu);
  const rf_status *cancelled = step_cancelled(m, step_id);
  entry *e = NULL;
  HASH_FIND_STR(m->table, key, e);
  rf_status *fail_now = NULL;
  /* The step's flag is set before rf__collective_cancel_step scans the table
   * under this lock, so a participant either sees it here or is failed by the
   * scan: no allocation is needed to cancel. */
  if (p->step && atomic_load(&p->step->cancelled)) {
    fail_now =
        rf__error(RF_CANCELLED, "collective '%s': step %lld was cancelled",
                  shared_name, (long long)step_id);
  } else if (cancelled) {
    fail_now = rf__status_copy(cancelled);
  } else if (e && e->state == FAILED) {
    fail_now = rf__status_copy(e->error);
  } else if (!e) {
    e = entry_new(key, shared_name, step_id, p, expected);
    int rf__hash_oom = 0;
    if (e) HASH_ADD_KEYPTR(hh, m->table, e->key, strlen(e->key), e);
    if (!e || rf__hash_oom) {
      if (e) entry_free(e);
      pthread_mutex_unlock(&m->mu);
      return rf__oom();
    }
    if (timeout_ms > 0) {
      e->timeout_ms = timeout_ms;
      m->last_timeout_ns = timeout_ms * 1000000;
      e->deadline_ns = now_ns() + m->last_timeout_ns;
      if (!m->watch_ns || e->deadline_ns < m->watch_ns)
        pthread_cond_signal(&m->wake);
    }
  }
  if (fail_now) {
    pthread_mutex_unlock(&m->mu);
    rf__coll_participant copy = *p;
    copy.input = rf_tensor_retain(p->input);
    fail_parts_give(&copy, 1, fail_now);
    return NULL;
  }
  if (p->num_devices != e->num_devices || expected != e->expected) {
    /* The group cannot complete consistently: fail everyone who came. */
    char sa[32], sb[32];
    snprintf(sa, sizeof sa, "%d", e->parts[0].num_devices);
    snprintf(sb, sizeof sb, "%d", p->num_devices);
    rf_status *st =
        e->arrived ? disagree("num_devices", shared_name, step_id, &e->parts[0],
                              sa, p, sb)
                   : rf__internal("collective '%s': bad group", shared_name);
    entry *doomed = NULL;
    doom_locked(e, st, &doomed);
    pthread_mutex_unlock(&m->mu);
    rf__coll_participant copy = *p;
    copy.input = rf_tensor_retain(p->input);
    fail_doomed(m, doomed);
    fail_parts(&copy, 1, e->error); /* e lives until this step ends */
    return NULL;
  }
  e->parts[e->arrived] = *p;
  e->parts[e->arrived].input = rf_tensor_retain(p->input);
  e->arrived++;
  if (e->arrived < e->expected) {
    pthread_mutex_unlock(&m->mu);
    return NULL;
  }
  HASH_DEL(m->table, e);
  pthread_mutex_unlock(&m->mu);
  launch(m, e);
  return NULL;
}

rf_status *rf__collective_join(rf__collective_manager *m,
                               const char *shared_name, int64_t step_id,
                               int64_t timeout_ms,
                               const rf__coll_participant *p) {
  if (!m || !shared_name || !p || !p->device || !p->done || !p->node)
    return rf__invalid("rf__collective_join: NULL argument");
  if (p->num_devices < 1)
    return rf__invalid("collective '%s': num_devices must be >= 1, got %d",
                       shared_name, p->num_devices);
  /* Short names (nearly all) need no allocation for their key. */
  size_t len = strlen(shared_name);
  char small[256];
  char *key =
      len + KEY_EXTRA <= sizeof small ? small : rf__malloc(len + KEY_EXTRA);
  if (!key) return rf__oom();
  make_key(key, shared_name, len, step_id);
  rf_status *st = join(m, key, shared_name, step_id, timeout_ms, p);
  if (key != small) rf__free(key);
  return st;
}

/* Dooms every pending entry past its deadline. */
static entry *expire_locked(rf__collective_manager *m, int64_t now) {
  entry *doomed = NULL, *e, *tmp;
  HASH_ITER(hh, m->table, e, tmp) {
    if (e->state != PENDING || !e->deadline_ns || e->deadline_ns > now)
      continue;
    char present[1024], missing[1024];
    /* Device order, not arrival order: the same message every run. */
    qsort(e->parts, (size_t)e->arrived, sizeof *e->parts, by_device_index);
    list_devices(e->parts, e->arrived, present, sizeof present);
    list_missing(e->parts, e->arrived, missing, sizeof missing);
    rf_status *st = rf__error(
        RF_DEADLINE_EXCEEDED,
        "collective '%s' (step %lld): timed out after %lld ms waiting for "
        "%s%s%d of %d participants%s; arrived: %s",
        e->shared_name, (long long)e->step_id, (long long)e->timeout_ms,
        missing, missing[0] ? " (" : "", e->expected - e->arrived, e->expected,
        missing[0] ? ")" : "", present);
    doom_locked(e, st, &doomed);
  }
  return doomed;
}

static void *watchdog_main(void *arg) {
  rf__collective_manager *m = arg;
  pthread_mutex_lock(&m->mu);
  while (!m->stopping) {
    int64_t now = now_ns();
    entry *doomed = expire_locked(m, now);
    if (doomed) {
      pthread_mutex_unlock(&m->mu);
      /* The entries stay until their step ends, after the dones below. */
      for (entry *e = doomed; e && rf__log_on(RF_LOG_WARN); e = e->doomed_next)
        rf__log_write(RF_LOG_WARN, "%s", rf_status_message(e->error));
      fail_doomed(m, doomed);
      pthread_mutex_lock(&m->mu);
      continue;
    }
    int64_t next = 0;
    entry *e, *tmp;
    HASH_ITER(hh, m->table, e, tmp) {
      if (e->state == PENDING && e->deadline_ns &&
          (!next || e->deadline_ns < next))
        next = e->deadline_ns;
    }
    if (!next && m->last_timeout_ns) /* idle: at most once a second */
      next = now + (m->last_timeout_ns > IDLE_WAKE_NS ? m->last_timeout_ns
                                                      : IDLE_WAKE_NS);
    m->watch_ns = next;
    if (!next) {
      pthread_cond_wait(&m->wake, &m->mu);
    } else {
      struct timespec ts = {next / 1000000000, next % 1000000000};
      pthread_cond_timedwait(&m->wake, &m->mu, &ts);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

rf_status *rf__collective_manager_new(rf__threadpool *pool,
                                      rf__collective_manager **out) {
  if (!out) return rf__invalid("rf__collective_manager_new: NULL out");
  rf__collective_manager *m = rf__calloc(1, sizeof *m);
  RF_CHECK_ALLOC(m);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->wake, &ca);
  pthread_condattr_destroy(&ca);
  m->pool = pool;
  if (pthread_create(&m->watchdog, NULL, watchdog_main, m) != 0) {
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->mu);
    rf__free(m);
    return rf__error(RF_RESOURCE_EXHAUSTED,
                     "could not start the collective watchdog thread");
  }
  *out = m;
  return NULL;
}

void rf__collective_cancel_step(rf__collective_manager *m, int64_t step_id,
                                const rf_status *why) {
  if (!m) return;
  const char *msg = why ? rf_status_message(why) : "the step was cancelled";
  rf_code code = why ? rf_status_code(why) : RF_CANCELLED;
  entry *doomed = NULL, *e, *tmp;
  pthread_mutex_lock(&m->mu);
  /* Best effort (allocates): late joiners of a step without a cancelled flag
   * fail at once. Steps of a session also carry the flag, which needs no
   * allocation. */
  if (!step_cancelled(m, step_id) &&
      rf__grow(&m->cancelled, &m->cap_cancelled, m->num_cancelled + 1,
               sizeof *m->cancelled) == 0) {
    m->cancelled[m->num_cancelled].step_id = step_id;
    m->cancelled[m->num_cancelled].why = rf__status_text(code, msg);
    m->num_cancelled++;
  }
  HASH_ITER(hh, m->table, e, tmp) {
    if (e->step_id == step_id && e->state == PENDING)
      doom_locked(e, rf__status_text(code, msg), &doomed);
  }
  pthread_mutex_unlock(&m->mu);
  fail_doomed(m, doomed);
  if (m->job) rf__job_cancel_step(m->job, step_id, why);
}

void rf__collective_manager_set_job(rf__collective_manager *m, rf__job *job) {
  if (m) m->job = job;
}

void rf__collective_end_step(rf__collective_manager *m, int64_t step_id) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->num_cancelled; i++) {
    if (m->cancelled[i].step_id != step_id) continue;
    rf_status_free(m->cancelled[i].why);
    m->cancelled[i] = m->cancelled[--m->num_cancelled];
    break;
  }
  entry *e, *tmp;
  HASH_ITER(hh, m->table, e, tmp) {
    if (e->step_id == step_id && e->state == FAILED) {
      HASH_DEL(m->table, e);
      entry_free(e);
    }
  }
  pthread_mutex_unlock(&m->mu);
}

void rf__collective_manager_stop(rf__collective_manager *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  bool joined = m->stopping;
  m->stopping = 1;
  pthread_cond_signal(&m->wake);
  pthread_mutex_unlock(&m->mu);
  if (!joined) pthread_join(m->watchdog, NULL);
  m->job = NULL; /* the watchdog read it; nothing here tells the job now */
}

void rf__collective_manager_free(rf__collective_manager *m) {
  if (!m) return;
  rf__collective_manager_stop(m);
  entry *e, *tmp;
  HASH_ITER(hh, m->table, e, tmp) {
    HASH_DEL(m->table, e);
    if (e->state == PENDING && e->arrived) {
      rf_status *st =
          rf__error(RF_CANCELLED, "collective '%s': the session is closing",
                    e->shared_name);
      fail_parts(e->parts, e->arrived, st);
      rf_status_free(st);
    }
    entry_free(e);
  }
  for (int i = 0; i < m->num_cancelled; i++)
    rf_status_free(m->cancelled[i].why);
  rf__free(m->cancelled);
  pthread_cond_destroy(&m->wake);
  pthread_mutex_destroy(&m->mu);
  rf__free(m);
}
