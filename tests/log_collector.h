/* tests/log_collector.h - a log callback (ringflow/log.h) that keeps every
 * message it is given, with its level, for the log tests to search. Safe to
 * call from any thread. Header-only: each test includes it once. */
#ifndef RF_TESTS_LOG_COLLECTOR_H
#define RF_TESTS_LOG_COLLECTOR_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct log_collector {
  pthread_mutex_t mu;
  int n, cap;
  rf_log_level *levels;
  char **msgs;
} log_collector;

static log_collector logs = {PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL};

/* The callback: user is the collector. */
static inline void log_collect(rf_log_level level, const char *msg,
                               void *user) {
  log_collector *c = user;
  pthread_mutex_lock(&c->mu);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 256;
    c->levels = realloc(c->levels, sizeof *c->levels * (size_t)c->cap);
    c->msgs = realloc(c->msgs, sizeof *c->msgs * (size_t)c->cap);
  }
  c->levels[c->n] = level;
  c->msgs[c->n++] = strdup(msg);
  pthread_mutex_unlock(&c->mu);
}

static inline void logs_clear(log_collector *c) {
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->n; i++) free(c->msgs[i]);
  c->n = 0;
  pthread_mutex_unlock(&c->mu);
}

/* Collects every message of `level` and above into `logs` from now on. */
static inline void logs_start(rf_log_level level) {
  logs_clear(&logs);
  assert_ok(rf_set_log_callback(level, log_collect, &logs));
}

/* Messages of `level` (-1: any) holding every non-NULL sub. */
static inline int logs_count(int level, const char *a, const char *b,
                             const char *c) {
  int k = 0;
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n; i++) {
    const char *m = logs.msgs[i];
    if ((level < 0 || (int)logs.levels[i] == level) && (!a || strstr(m, a)) &&
        (!b || strstr(m, b)) && (!c || strstr(m, c)))
      k++;
  }
  pthread_mutex_unlock(&logs.mu);
  return k;
}

/* How many messages of each level arrived. */
static inline void logs_by_level(int counts[4]) {
  memset(counts, 0, 4 * sizeof *counts);
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n; i++) counts[logs.levels[i]]++;
  pthread_mutex_unlock(&logs.mu);
}

static inline void logs_print(void) {
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n; i++)
    fprintf(stderr, "  [%s] %s\n", rf_log_level_name(logs.levels[i]),
            logs.msgs[i]);
  pthread_mutex_unlock(&logs.mu);
}

/* Asserts that a message of `level` holds every non-NULL sub; prints the
 * messages when none does. */
#define assert_logged(level, a, b, c) \
  logs_expect((level), (a), (b), (c), __FILE__, __LINE__)
static inline void logs_expect(rf_log_level level, const char *a, const char *b,
                               const char *c, const char *file, int line) {
  if (logs_count((int)level, a, b, c) > 0) return;
  logs_print();
  fprintf(stderr, "no %s message with \"%s\" \"%s\" \"%s\"\n",
          rf_log_level_name(level), a, b ? b : "", c ? c : "");
  _fail(file, line);
}

/* Test teardown: logging off, messages dropped (an assertion that failed
 * mid-test must not leave the callback installed). */
static inline int logs_stop(void **state) {
  (void)state;
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, NULL, NULL));
  logs_clear(&logs);
  return 0;
}

#endif
