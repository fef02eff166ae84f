/* tools/prefetch.c - the helper thread of prefetch.h. States: idle (nothing
 * in flight), asked (the thread builds idx's batch), built (waiting to be
 * taken); every change is made under mu and signalled on cv. */
#include "prefetch.h"

#include <pthread.h>
#include <stdlib.h>

#include "mlp.h"

enum { IDLE, ASKED, BUILT };

struct prefetch {
  prefetch_fn fn;
  void *arg;
  int count;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;
  bool stop;
  const int *idx;
  rf_status *st; /* the built batch's error */
  rf_tensor *x[MLP_MAX_DEVICES], *y[MLP_MAX_DEVICES];
};

static void *run(void *arg) {
  prefetch *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->state != ASKED && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
    if (p->state != ASKED) break; /* stopping, nothing asked */
    const int *idx = p->idx;
    pthread_mutex_unlock(&p->mu);
    rf_status *st = p->fn(p->arg, idx, p->x, p->y);
    pthread_mutex_lock(&p->mu);
    p->st = st;
    p->state = BUILT;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

prefetch *prefetch_new(prefetch_fn fn, void *arg, int count) {
  if (count < 1 || count > MLP_MAX_DEVICES) return NULL;
  prefetch *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  *p = (prefetch){.fn = fn, .arg = arg, .count = count, .state = IDLE};
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (pthread_create(&p->thread, NULL, run, p) != 0) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
  }
  return p;
}

void prefetch_free(prefetch *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  while (p->state == ASKED) pthread_cond_wait(&p->cv, &p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  if (p->state == BUILT && !p->st) {
    for (int i = 0; i < p->count; i++) {
      rf_tensor_release(p->x[i]);
      rf_tensor_release(p->y[i]);
    }
  }
  rf_status_free(p->st);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void prefetch_start(prefetch *p, const int *idx) {
  pthread_mutex_lock(&p->mu);
  if (p->state == IDLE) {
    p->idx = idx;
    p->state = ASKED;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
}

bool prefetch_take(prefetch *p, const int *idx, rf_status **st, rf_tensor **x,
                   rf_tensor **y) {
  pthread_mutex_lock(&p->mu);
  if (p->state == IDLE || p->idx != idx) {
    pthread_mutex_unlock(&p->mu);
    return false;
  }
  while (p->state == ASKED) pthread_cond_wait(&p->cv, &p->mu);
  *st = p->st;
  p->st = NULL;
  if (!*st) {
    for (int i = 0; i < p->count; i++) {
      x[i] = p->x[i];
      y[i] = p->y[i];
    }
  }
  p->state = IDLE;
  pthread_mutex_unlock(&p->mu);
  return true;
}
