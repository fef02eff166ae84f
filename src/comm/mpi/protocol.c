/* comm/mpi/protocol.c - the control messages between tasks (engine.h):
 * a fixed header, then the collective's name, its devices and a text, each
 * NUL-terminated. Names and devices travel whole (a cut name could meet
 * another collective), so a message is as long as it needs; only the text
 * is cut, at RF_MPI_TEXT_MAX. Every message of a job travels on its ctl
 * communicator with one tag; the engine probes for the next one from any
 * task (MPI_Improbe) and receives it into a buffer grown to fit, and MPI
 * keeps the order of two messages between the same two tasks, which is what
 * makes the coordinator's GO order everyone's. */
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/mpi_status.h"
#include "core/debug_counters.h"
#include "core/mem.h"
#include "core/status.h"

struct rf__mpi_send {
  MPI_Request req;
  char *buf;
  struct rf__mpi_send *next;
};

/* Appends at most max bytes of s (NULL: "") and a NUL; the length kept. */
static int32_t put(char *buf, size_t *at, const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (n > max) n = max;
  if (n) memcpy(buf + *at, s, n);
  buf[*at + n] = '\0';
  *at += n + 1;
  return (int32_t)n;
}

static size_t len_of(const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  return n < max ? n : max;
}

/* A message's send, its buffer filled; NULL without memory. */
static rf__mpi_send *send_new(rf__job *j, const rf__mpi_msg *h,
                              const char *name, const char *devices,
                              const char *text, int *len) {
  size_t size = sizeof *h + len_of(name, INT32_MAX) +
                len_of(devices, INT32_MAX) + len_of(text, RF_MPI_TEXT_MAX) + 3;
  rf__mpi_send *s = rf__calloc(1, sizeof *s);
  char *buf = size <= INT_MAX ? rf__malloc(size) : NULL;
  if (!s || !buf) {
    rf__free(s);
    rf__free(buf);
    return NULL;
  }
  rf__mpi_msg *m = (rf__mpi_msg *)buf;
  *m = *h;
  m->task = j->task;
  m->epoch = j->epoch;
  size_t at = sizeof *m;
  m->name_len = put(buf, &at, name, INT32_MAX);
  m->devices_len = put(buf, &at, devices, INT32_MAX);
  m->text_len = put(buf, &at, text, RF_MPI_TEXT_MAX);
  s->buf = buf;
  *len = (int)at;
  return s;
}

/* Starts s (consumed) to `to`. */
static rf_code send_post(rf__job *j, int to, rf__mpi_send *s, int len) {
  /* Counted before it can arrive: once the peer has it, this process's
   * step may complete and its caller read the count. */
  rf__debug_count_control_message();
  if (MPI_Isend(s->buf, len, MPI_BYTE, to, RF_MPI_TAG_CTL, j->ctl, &s->req) !=
      MPI_SUCCESS) {
    rf__free(s->buf);
    rf__free(s);
    return RF_UNAVAILABLE;
  }
  s->next = j->sends;
  j->sends = s;
  return RF_OK;
}

rf_code rf__mpi_send_msg(rf__job *j, int to, const rf__mpi_msg *h,
                         const char *name, const char *devices,
                         const char *text) {
  int len = 0;
  rf__mpi_send *s = send_new(j, h, name, devices, text, &len);
  if (!s) return RF_RESOURCE_EXHAUSTED; /* the peer times out instead */
  return send_post(j, to, s, len);
}

rf_code rf__mpi_send_msg_all(rf__job *j, int n, const int *to,
                             const rf__mpi_msg *h, const char *name,
                             const char *devices, const char *text) {
  rf__mpi_send *ready = NULL; /* all made before any is sent */
  int len = 0;
  for (int i = 0; i < n; i++) {
    rf__mpi_send *s = send_new(j, h, name, devices, text, &len);
    if (!s) {
      while (ready) {
        rf__mpi_send *r = ready;
        ready = r->next;
        rf__free(r->buf);
        rf__free(r);
      }
      return RF_RESOURCE_EXHAUSTED;
    }
    s->next = ready;
    ready = s;
  }
  rf_code code = RF_OK;
  for (int i = n - 1; i >= 0; i--) { /* ready holds them last first */
    rf__mpi_send *s = ready;
    ready = s->next;
    rf_code c = send_post(j, to[i], s, len);
    if (c != RF_OK) code = c;
  }
  return code;
}

/* Room for bytes in j->recv_buf; false without memory. */
static bool recv_room(rf__job *j, size_t bytes) {
  if (bytes <= j->recv_cap && j->recv_buf) return true;
  size_t cap = bytes < 4096 ? 4096 : bytes;
  char *b = rf__malloc(cap);
  if (!b) return false;
  rf__free(j->recv_buf);
  j->recv_buf = b;
  j->recv_cap = cap;
  return true;
}

int rf__mpi_recv(rf__job *j, rf__mpi_msg_view *v, rf_status **err) {
  int found = 0, bytes = 0;
  MPI_Message msg;
  MPI_Status status;
  *err = RF_MPI_STATUS(MPI_Improbe(MPI_ANY_SOURCE, RF_MPI_TAG_CTL, j->ctl,
                                   &found, &msg, &status));
  if (*err || !found) return 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  if (bytes < 0 ||
      !recv_room(j, (size_t)bytes)) { /* lost: its peer times out */
    char none;
    MPI_Mrecv(&none, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    return -1;
  }
  *err = RF_MPI_STATUS(
      MPI_Mrecv(j->recv_buf, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE));
  if (*err) return 0;
  const rf__mpi_msg *h = (const rf__mpi_msg *)j->recv_buf;
  size_t need = sizeof *h;
  if ((size_t)bytes >= need)
    need +=
        (size_t)h->name_len + (size_t)h->devices_len + (size_t)h->text_len + 3;
  if ((size_t)bytes < need || h->name_len < 0 || h->devices_len < 0 ||
      h->text_len < 0 || h->epoch != j->epoch)
    return -1; /* not this session's: dropped */
  v->h = h;
  v->name = j->recv_buf + sizeof *h;
  v->devices = v->name + h->name_len + 1;
  v->text = v->devices + h->devices_len + 1;
  return 1;
}

/* Buffers of sends abandoned (at detach, or when testing them failed): MPI
 * may still read them until it finalises, so they are freed when the engine
 * stops (engine thread). */
static rf__mpi_send *orphans;

bool rf__mpi_poll_sends(rf__job *j) {
  for (rf__mpi_send **p = &j->sends; *p;) {
    rf__mpi_send *s = *p;
    int done = 0;
    if (MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      /* The request may still be live in MPI: neither freed (OpenMPI
       * aborts on freeing an erroneous one) nor tested again; its buffer
       * is kept to the end. */
      *p = s->next;
      s->req = MPI_REQUEST_NULL;
      s->next = orphans;
      orphans = s;
    } else if (done) {
      *p = s->next;
      rf__free(s->buf);
      rf__free(s);
    } else {
      p = &s->next;
    }
  }
  return j->sends != NULL;
}

void rf__mpi_drop_messages(rf__job *j) {
  /* Sends to tasks that left may never complete: give them a moment, then
   * drop the requests and keep the buffers. */
  int64_t until = rf__mpi_now_ns() + 200000000;
  while (rf__mpi_poll_sends(j) && rf__mpi_now_ns() < until) sched_yield();
  while (j->sends) {
    rf__mpi_send *s = j->sends;
    j->sends = s->next;
    MPI_Request_free(&s->req);
    s->next = orphans;
    orphans = s;
  }
}

void rf__mpi_free_orphans(void) {
  while (orphans) {
    rf__mpi_send *s = orphans;
    orphans = s->next;
    rf__free(s->buf);
    rf__free(s);
  }
}

char *rf__mpi_key(const char *name, int64_t job_step, char *buf, size_t len) {
  size_t need = strlen(name) + 24; /* '\x1f', a sign, 19 digits, NUL */
  char *key = need <= len ? buf : rf__malloc(need);
  if (key) snprintf(key, need, "%s\x1f%lld", name, (long long)job_step);
  return key;
}

void rf__mpi_key_free(char *key, const char *buf) {
  if (key != buf) rf__free(key);
}
