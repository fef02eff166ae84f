/* device/rendezvous.h - hands tensors between devices of one process, keyed by
 * (key string, step id). Whichever of send and recv comes second completes the
 * pair; recv never blocks a thread (its callback fires when the value arrives
 * or the step is aborted). One rendezvous serves every step of a session.
 *
 *   send(r, step, "a:0;cpu:1", t)        recv(r, step, "a:0;cpu:1", fn, arg)
 *        ...                             fn(arg, NULL, t) - t is the receiver's
 */
#ifndef RF_RUNTIME_RENDEZVOUS_H
#define RF_RUNTIME_RENDEZVOUS_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct rf__rendezvous rf__rendezvous;

/* A receive's completion: exactly one of st (an error) and value (a reference
 * the callee owns) is non-NULL; the callee owns st too. Called once, from the
 * thread that completes the pair (possibly inside rf__rendezvous_recv), with
 * no lock of the rendezvous held. */
typedef void (*rf__rendezvous_fn)(void *arg, rf_status *st, rf_tensor *value);

rf_status *rf__rendezvous_new(rf__rendezvous **out);
/* Frees r; every step must have been ended (leftovers are released and their
 * waiters told CANCELLED). NULL is ignored. */
void rf__rendezvous_free(rf__rendezvous *r);

/* Delivers `value` (retained) under (key, step): to a waiting receiver, or
 * stored until one comes. Fails - value untouched - with the step's abort
 * status once the step was aborted, INTERNAL for a second send of one key. */
rf_status *rf__rendezvous_send(rf__rendezvous *r, int64_t step, const char *key,
                               rf_tensor *value);

/* Asks for the value under (key, step); fn fires when it is there - at once if
 * it already is - or with the abort status if the step is or gets aborted. A
 * second receive of one key gets INTERNAL through fn. */
void rf__rendezvous_recv(rf__rendezvous *r, int64_t step, const char *key,
                         rf__rendezvous_fn fn, void *arg);

/* Fails the step: every receiver waiting in it gets a copy of st now, stored
 * values are dropped, and later sends and receives of the step fail with st.
 * Only the first abort of a step counts. st is borrowed. */
void rf__rendezvous_abort(rf__rendezvous *r, int64_t step, const rf_status *st);

/* Forgets the step: releases values nobody received and fails remaining
 * waiters with CANCELLED. Call when no send or recv of the step can come any
 * more; afterwards the rendezvous holds nothing of the step. */
void rf__rendezvous_end_step(rf__rendezvous *r, int64_t step);

/* Entries (values plus waiters) currently held, over all steps; for tests. */
int rf__rendezvous_pending(rf__rendezvous *r);

#endif
