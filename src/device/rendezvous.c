/* device/rendezvous.c - a chained hash table of pending entries keyed by
 * (step, key) under one mutex, plus one record per active step listing its
 * entries (so abort and end_step touch only that step). Entries and step
 * records are recycled through free lists, so a steady-state step allocates
 * nothing. Callbacks always run after the mutex is released. */
#include "device/rendezvous.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"

#define SMALL_KEY 56

typedef struct step_rec step_rec;

typedef struct entry {
  struct entry *hnext;         /* bucket chain */
  struct entry *sprev, *snext; /* the step's list */
  step_rec *step;
  uint64_t hash;
  char *key; /* small_key or a heap copy */
  char small_key[SMALL_KEY];
  rf_tensor *value;     /* sent first */
  rf__rendezvous_fn fn; /* received first */
  void *arg;
} entry;

struct step_rec {
  step_rec *next; /* active list, or free list */
  int64_t id;
  rf_status *aborted;
  entry *entries;
};

struct rf__rendezvous {
  pthread_mutex_t mu;
  entry **buckets;
  size_t num_buckets; /* power of two */
  int count;
  step_rec *steps; /* active, few: one per running step */
  step_rec *free_steps;
  entry *free_entries;
};

/* A fired or failed waiter, called once the lock is dropped. */
typedef struct callback {
  rf__rendezvous_fn fn;
  void *arg;
  rf_status *st;
  rf_tensor *value;
} callback;

static uint64_t hash_key(int64_t step, const char *key) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)step * 0x9E3779B97F4A7C15ull;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return h ^ (h >> 29);
}

rf_status *rf__rendezvous_new(rf__rendezvous **out) {
  rf__rendezvous *r = rf__calloc(1, sizeof *r);
  RF_CHECK_ALLOC(r);
  r->num_buckets = 256;
  r->buckets = rf__calloc(r->num_buckets, sizeof(entry *));
  if (!r->buckets) {
    rf__free(r);
    return rf__oom();
  }
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return NULL;
}

/* ---- step records (mu held) ---- */

static step_rec *find_step(rf__rendezvous *r, int64_t id) {
  for (step_rec *s = r->steps; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

static step_rec *get_step(rf__rendezvous *r, int64_t id) {
  step_rec *s = find_step(r, id);
  if (s) return s;
  s = r->free_steps;
  if (s)
    r->free_steps = s->next;
  else if (!(s = rf__malloc(sizeof *s)))
    return NULL;
  s->id = id;
  s->aborted = NULL;
  s->entries = NULL;
  s->next = r->steps;
  r->steps = s;
  return s;
}

/* ---- entries (mu held) ---- */

static void maybe_grow(rf__rendezvous *r) {
  if ((size_t)r->count <= r->num_buckets * 2) return;
  size_t n = r->num_buckets * 2;
  entry **b = rf__calloc(n, sizeof(entry *));
  if (!b) return; /* longer chains, still correct */
  for (size_t i = 0; i < r->num_buckets; i++) {
    for (entry *e = r->buckets[i], *next; e; e = next) {
      next = e->hnext;
      e->hnext = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  }
  rf__free(r->buckets);
  r->buckets = b;
  r->num_buckets = n;
}

static entry *find_entry(rf__rendezvous *r, int64_t step, const char *key,
                         uint64_t h) {
  for (entry *e = r->buckets[h & (r->num_buckets - 1)]; e; e = e->hnext)
    if (e->hash == h && e->step->id == step && strcmp(e->key, key) == 0)
      return e;
  return NULL;
}

static entry *add_entry(rf__rendezvous *r, step_rec *s, const char *key,
                        uint64_t h) {
  entry *e = r->free_entries;
  if (e)
    r->free_entries = e->hnext;
  else if (!(e = rf__malloc(sizeof *e)))
    return NULL;
  size_t len = strlen(key) + 1;
  if (len <= SMALL_KEY) {
    e->key = e->small_key;
  } else if (!(e->key = rf__malloc(len))) {
    e->hnext = r->free_entries;
    r->free_entries = e;
    return NULL;
  }
  memcpy(e->key, key, len);
  e->hash = h;
  e->step = s;
  e->value = NULL;
  e->fn = NULL;
  e->arg = NULL;
  size_t b = h & (r->num_buckets - 1);
  e->hnext = r->buckets[b];
  r->buckets[b] = e;
  e->sprev = NULL;
  e->snext = s->entries;
  if (s->entries) s->entries->sprev = e;
  s->entries = e;
  r->count++;
  maybe_grow(r);
  return e;
}

/* Unlinks e from its bucket and its step, and recycles it. */
static void remove_entry(rf__rendezvous *r, entry *e) {
  entry **pp = &r->buckets[e->hash & (r->num_buckets - 1)];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  if (e->sprev)
    e->sprev->snext = e->snext;
  else
    e->step->entries = e->snext;
  if (e->snext) e->snext->sprev = e->sprev;
  if (e->key != e->small_key) rf__free(e->key);
  e->hnext = r->free_entries;
  r->free_entries = e;
  r->count--;
}

static rf_status *copy_status(const rf_status *st) {
  return rf__status_copy(st);
}

/* ---- the API ---- */

rf_status *rf__rendezvous_send(rf__rendezvous *r, int64_t step, const char *key,
                               rf_tensor *value) {
  uint64_t h = hash_key(step, key);
  callback cb = {0};
  rf_status *st = NULL;
  pthread_mutex_lock(&r->mu);
  step_rec *s = get_step(r, step);
  entry *e = s ? find_entry(r, step, key, h) : NULL;
  if (!s) {
    st = rf__oom();
  } else if (s->aborted) {
    st = copy_status(s->aborted);
  } else if (e && !e->fn) {
    st = rf__internal("rendezvous: key '%s' was sent twice in step %lld", key,
                      (long long)step);
  } else if (e) { /* a receiver waits: hand over directly */
    cb = (callback){e->fn, e->arg, NULL, rf_tensor_retain(value)};
    remove_entry(r, e);
  } else if ((e = add_entry(r, s, key, h))) {
    e->value = rf_tensor_retain(value);
  } else {
    st = rf__oom();
  }
  pthread_mutex_unlock(&r->mu);
  if (cb.fn) cb.fn(cb.arg, NULL, cb.value);
  return st;
}

void rf__rendezvous_recv(rf__rendezvous *r, int64_t step, const char *key,
                         rf__rendezvous_fn fn, void *arg) {
  uint64_t h = hash_key(step, key);
  rf_status *st = NULL;
  rf_tensor *value = NULL;
  bool wait = false;
  pthread_mutex_lock(&r->mu);
  step_rec *s = get_step(r, step);
  entry *e = s ? find_entry(r, step, key, h) : NULL;
  if (!s) {
    st = rf__oom();
  } else if (s->aborted) {
    st = copy_status(s->aborted);
  } else if (e && e->fn) {
    st = rf__internal("rendezvous: key '%s' was received twice in step %lld",
                      key, (long long)step);
  } else if (e) { /* the value is here */
    value = e->value;
    remove_entry(r, e);
  } else if ((e = add_entry(r, s, key, h))) {
    e->fn = fn;
    e->arg = arg;
    wait = true;
  } else {
    st = rf__oom();
  }
  pthread_mutex_unlock(&r->mu);
  if (!wait) fn(arg, st, value);
}

/* Detaches every entry of s; waiters go to *cbs (a list threaded through the
 * entries' hnext, returned for the caller to fire unlocked). Values are
 * released after unlocking too. mu held. */
static entry *detach_step_entries(rf__rendezvous *r, step_rec *s) {
  entry *out = NULL;
  while (s->entries) {
    entry *e = s->entries;
    rf__rendezvous_fn fn = e->fn;
    void *arg = e->arg;
    rf_tensor *v = e->value;
    remove_entry(r, e);
    /* remove_entry put e on the free list; take it back as a carrier. */
    r->free_entries = e->hnext;
    e->fn = fn;
    e->arg = arg;
    e->value = v;
    e->hnext = out;
    out = e;
  }
  return out;
}

/* Fires or releases the carriers from detach_step_entries, then recycles them
 * (taking the lock once more). */
static void finish_detached(rf__rendezvous *r, entry *list,
                            const rf_status *st) {
  entry *last = NULL;
  for (entry *e = list; e; e = e->hnext) {
    if (e->fn) e->fn(e->arg, copy_status(st), NULL);
    rf_tensor_release(e->value);
    last = e;
  }
  if (!last) return;
  pthread_mutex_lock(&r->mu);
  last->hnext = r->free_entries;
  r->free_entries = list;
  pthread_mutex_unlock(&r->mu);
}

void rf__rendezvous_abort(rf__rendezvous *r, int64_t step,
                          const rf_status *st) {
  rf_status *mine = copy_status(st ? st : rf__oom());
  entry *list = NULL;
  pthread_mutex_lock(&r->mu);
  step_rec *s = get_step(r, step);
  if (s && !s->aborted) {
    s->aborted = mine;
    mine = NULL;
    list = detach_step_entries(r, s);
  }
  pthread_mutex_unlock(&r->mu);
  rf_status_free(mine);
  if (list) finish_detached(r, list, st ? st : rf__oom());
}

void rf__rendezvous_end_step(rf__rendezvous *r, int64_t step) {
  entry *list = NULL;
  rf_status *aborted = NULL;
  pthread_mutex_lock(&r->mu);
  step_rec **pp = &r->steps;
  while (*pp && (*pp)->id != step) pp = &(*pp)->next;
  step_rec *s = *pp;
  if (s) {
    *pp = s->next;
    list = detach_step_entries(r, s);
    aborted = s->aborted;
    s->next = r->free_steps;
    r->free_steps = s;
  }
  pthread_mutex_unlock(&r->mu);
  rf_status_free(aborted);
  if (list) {
    rf_status *c = rf__error(RF_CANCELLED,
                             "step %lld ended before its "
                             "tensors were exchanged",
                             (long long)step);
    finish_detached(r, list, c);
    rf_status_free(c);
  }
}

int rf__rendezvous_pending(rf__rendezvous *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void rf__rendezvous_free(rf__rendezvous *r) {
  if (!r) return;
  while (r->steps) rf__rendezvous_end_step(r, r->steps->id);
  for (step_rec *s = r->free_steps, *next; s; s = next) {
    next = s->next;
    rf__free(s);
  }
  for (entry *e = r->free_entries, *next; e; e = next) {
    next = e->hnext;
    rf__free(e);
  }
  rf__free(r->buckets);
  pthread_mutex_destroy(&r->mu);
  rf__free(r);
}
