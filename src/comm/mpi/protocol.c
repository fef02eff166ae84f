/* comm/mpi/protocol.c - the control messages between tasks (engine.h):
 * a fixed header, then the collective's name, its devices and a text, each
 * NUL-terminated, in at most RF_MPI_MSG_MAX bytes. Every message of a job
 * travels on its ctl communicator with one tag; one receive from any task is
 * always posted, and MPI keeps the order of two messages between the same
 * two tasks, which is what makes the coordinator's GO order everyone's. */
#include <sched.h>
#include <string.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/mpi_status.h"
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

void rf__mpi_send_msg(rf__job *j, int to, const rf__mpi_msg *h,
                      const char *name, const char *devices, const char *text) {
  rf__mpi_send *s = rf__calloc(1, sizeof *s);
  char *buf = rf__malloc(RF_MPI_MSG_MAX);
  if (!s || !buf) { /* the peer times out instead: nothing else to do */
    rf__free(s);
    rf__free(buf);
    return;
  }
  rf__mpi_msg *m = (rf__mpi_msg *)buf;
  *m = *h;
  m->task = j->task;
  m->epoch = j->epoch;
  size_t at = sizeof *m, room = RF_MPI_MSG_MAX - sizeof *m - 3;
  m->name_len = put(buf, &at, name, RF_MPI_NAME_MAX);
  room -= (size_t)m->name_len;
  m->devices_len = put(buf, &at, devices, room / 2);
  room -= (size_t)m->devices_len;
  m->text_len = put(buf, &at, text, room);
  s->buf = buf;
  if (MPI_Isend(buf, (int)at, MPI_BYTE, to, RF_MPI_TAG_CTL, j->ctl, &s->req) !=
      MPI_SUCCESS) {
    rf__free(buf);
    rf__free(s);
    return;
  }
  s->next = j->sends;
  j->sends = s;
}

rf_status *rf__mpi_post_recv(rf__job *j) {
  return RF_MPI_STATUS(MPI_Irecv(j->recv_buf, RF_MPI_MSG_MAX, MPI_BYTE,
                                 MPI_ANY_SOURCE, RF_MPI_TAG_CTL, j->ctl,
                                 &j->recv_req));
}

bool rf__mpi_test_recv(rf__job *j, rf__mpi_msg_view *v) {
  if (j->recv_req == MPI_REQUEST_NULL) return false;
  int done = 0, bytes = 0;
  MPI_Status status;
  if (MPI_Test(&j->recv_req, &done, &status) != MPI_SUCCESS || !done)
    return false;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  j->recv_req = MPI_REQUEST_NULL;
  const rf__mpi_msg *h = (const rf__mpi_msg *)j->recv_buf;
  size_t need = sizeof *h;
  if ((size_t)bytes >= need)
    need +=
        (size_t)h->name_len + (size_t)h->devices_len + (size_t)h->text_len + 3;
  if ((size_t)bytes < need || h->name_len < 0 || h->devices_len < 0 ||
      h->text_len < 0 || h->epoch != j->epoch)
    return false; /* not this session's: dropped */
  v->h = h;
  v->name = j->recv_buf + sizeof *h;
  v->devices = v->name + h->name_len + 1;
  v->text = v->devices + h->devices_len + 1;
  return true;
}

bool rf__mpi_poll_sends(rf__job *j) {
  for (rf__mpi_send **p = &j->sends; *p;) {
    rf__mpi_send *s = *p;
    int done = 0;
    if (MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) {
      *p = s->next;
      rf__free(s->buf);
      rf__free(s);
    } else {
      p = &s->next;
    }
  }
  return j->sends != NULL;
}

/* Buffers of sends abandoned at detach: MPI may still read them until it
 * finalises, so they are freed when the engine stops (engine thread). */
static rf__mpi_send *orphans;

void rf__mpi_drop_messages(rf__job *j) {
  if (j->recv_req != MPI_REQUEST_NULL) {
    MPI_Cancel(&j->recv_req);
    MPI_Wait(&j->recv_req, MPI_STATUS_IGNORE);
  }
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
