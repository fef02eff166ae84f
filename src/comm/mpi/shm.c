/* comm/mpi/shm.c - collectives through memory shared by the processes of
 * one host (RF_MPI_SHM, algorithm.c), nonblocking: an exchange advances
 * each time it is tested, as MPI's nonblocking calls do (on the
 * communication thread, or on the direct path).
 *
 * Why: across processes on one host MPI moves every message through
 * OpenMPI's vader (a copy through its queues, or a single-copy read of the
 * peer's memory), one message per step of its algorithm, each a handshake.
 * Here every process writes its data once into a segment all of them map,
 * then each reads what it needs straight from the others' slots, in
 * parallel, with one flag per process and phase to say what is ready: the
 * synchronisation is a few cache lines, not messages.
 *
 * The segment (one per communicator, made at a GO, where every process
 * makes it in the same order: rf__mpi_shm_of; kept as an MPI attribute of
 * the communicator and unmapped when it is freed): a header, three flags
 * per process (arrived, reduced, done; each on its own cache line), then
 * two slots per process (rounds alternate between them). A collective
 * runs in rounds; each round moves at most one slot per process:
 *   reductions: process r copies its next piece of every process's
 *     segment of the vector into its slot (arrived), reduces piece r of
 *     every slot into its own slot's piece r (reduced), and the processes
 *     that want the result copy the reduced pieces out (done). Each piece
 *     is reduced once, by its owner, in one order: every process gets the
 *     same bits, run after run (float sums in rank order, fused; other
 *     types and reductions by MPI_Reduce_local, the owner's own first);
 *   all-gather: each copies its next piece in, then every piece out;
 *   broadcast: the root copies a piece in, the others copy it out.
 * Before writing a slot again (two rounds later) a process waits until
 * every process is done with that round. Every round sets all three
 * flags of every process (some unused by its kind), so a flag is never
 * far behind the round count, which wraps at 2^32 (compared as a
 * difference). A test that finds a flag not yet set returns; the caller
 * (the engine's poll, the direct path's spin) tests again, and its
 * deadline names a process that never comes.
 *
 * Made by the communicator's rank 0 (shm_open, posix_fallocate so that a
 * full /dev/shm fails here and not as SIGBUS later, a random token), named
 * to the others by a broadcast, unlinked once all mapped it; whether every
 * process mapped it is agreed by an all-reduce, so every process of the
 * communicator either has it or runs MPI's nonblocking call alike. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi/op.h"
#include "core/mem.h"

#define LINE 64
#define MAGIC 0x7266736d68ULL /* "rfshm" */

enum { ARRIVED, REDUCED, DONE, PHASES };
/* The exchanges' kinds beside the reductions' modes (rf__mpi_shm_mode). */
enum { X_GATHER = RF_MPI_SHM_SCATTER + 1, X_BCAST };

typedef struct flag {
  _Atomic uint32_t seq; /* the last round this process finished */
  char pad[LINE - sizeof(uint32_t)];
} flag;

typedef struct header {
  uint64_t magic, token;
  int32_t procs;
  char pad[LINE - 2 * sizeof(uint64_t) - sizeof(int32_t)];
} header;

struct rf__mpi_shm {
  char *base;  /* the mapping */
  size_t len;  /* of the mapping */
  size_t slot; /* bytes of one slot */
  char *data;  /* slot (r, b) at data + (2 r + b) slot */
  flag *flags; /* [procs][PHASES] */
  int procs, me;
  /* Rounds: reserved by the exchanges started (in one order everywhere, so
   * each round is the same exchange's in every process), and finished
   * here; this process runs them in order, one exchange after another.
   * seq is atomic: the engine can still be testing one exchange (data it
   * took over in flight) while the direct path, on another thread, starts
   * the next one and waits for seq to reach its first round; the release
   * in round_out orders the finished round's copies before that wait. */
  uint32_t reserved;
  _Atomic uint32_t seq;
  /* some process had fewer cores than the processes (agreed): only a
   * forced RF_MPI_ALGORITHM=shm uses it */
  bool crowded;
};

/* ---- the segment ---- */

static atomic_bool refuse; /* tests: this process cannot map segments */
static int keyval = MPI_KEYVAL_INVALID;
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static char unavailable; /* the attribute of a communicator without one */

static void shm_free(rf__mpi_shm *s) {
  if (!s || s == (rf__mpi_shm *)&unavailable) return;
  if (s->base) munmap(s->base, s->len);
  rf__free(s);
}

static int delete_attr(MPI_Comm comm, int key, void *val, void *extra) {
  (void)comm, (void)key, (void)extra;
  shm_free(val);
  return MPI_SUCCESS;
}

static void make_keyval(void) {
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_attr, &keyval, NULL);
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* The slot for collectives of `bytes` (their whole vector) across p
 * processes: a page to 512 KiB, at most 4 MiB / p (a segment is 2 p
 * slots: 8 MiB at most from 8 processes up). */
static size_t slot_for(int64_t bytes, int p) {
  size_t cap = RF_MPI_SHM_SLOT;
  while (cap > 64 * 1024 && cap * (size_t)p > ((size_t)4 << 20)) cap /= 2;
  size_t s = 4096;
  while (s < cap && (int64_t)s < bytes) s *= 2;
  return s;
}

/* Rank 0: a fresh segment of len bytes, its name in name; -1 if none. */
static int create(char *name, size_t cap, size_t len, uint64_t token) {
  static atomic_uint made;
  for (int attempt = 0; attempt < 8; attempt++) {
    snprintf(name, cap, "/ringflow-%d-%u-%08llx", (int)getpid(),
             atomic_fetch_add(&made, 1),
             (unsigned long long)(token >> 32) ^ (unsigned)attempt);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)len) != 0 || posix_fallocate(fd, 0, (off_t)len)) {
      close(fd);
      shm_unlink(name);
      return -1;
    }
    return fd;
  }
  return -1;
}

static uint64_t fresh_token(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30) ^
               ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)&t;
  x ^= x >> 33; /* splitmix's finaliser */
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x | 1;
}

static char *map(int fd, size_t len) {
  char *base =
      mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  return base == MAP_FAILED ? NULL : base;
}

/* The collective part: every process of comm maps rank 0's segment or
 * none does. An MPI error code (the others then fail alike or time out). */
static int attach(MPI_Comm comm, size_t slot, bool crowded, rf__mpi_shm **out) {
  int p, me;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &me);
  *out = NULL;
  size_t head =
      round_up(sizeof(header) + (size_t)p * PHASES * sizeof(flag), 4096);
  size_t len = head + 2 * (size_t)p * slot;
  struct {
    char name[64];
    uint64_t token;
    int ok;
  } msg = {{0}, 0, 0};
  char *base = NULL;
  if (me == 0) { /* made, mapped and its header written before it is named */
    msg.token = fresh_token();
    int fd = create(msg.name, sizeof msg.name, len, msg.token);
    if (fd >= 0) base = map(fd, len);
    if (base) {
      header *h = (header *)base;
      h->magic = MAGIC;
      h->token = msg.token;
      h->procs = p;
    }
    msg.ok = base != NULL;
  }
  int rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, comm);
  if (me != 0 && rc == MPI_SUCCESS && msg.ok && !atomic_load(&refuse)) {
    int fd = shm_open(msg.name, O_RDWR, 0);
    if (fd >= 0) base = map(fd, len);
    const header *h = (const header *)base;
    /* not the segment rank 0 made (one of another host's): unusable */
    if (base && (h->magic != MAGIC || h->token != msg.token || h->procs != p))
      munmap(base, len), base = NULL;
  }
  /* [0]: every process mapped it; [1]: none is crowded (the caller's word,
   * alike everywhere already) */
  int mine[2] = {base != NULL, !crowded}, all[2] = {0, 0};
  if (rc == MPI_SUCCESS)
    rc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, comm);
  if (me == 0 && msg.ok) shm_unlink(msg.name); /* mapped or given up */
  /* crowded and not forced: never used (peek), so not kept either */
  if (!all[1] && rf__mpi_algorithm_setting() != RF_MPI_SHM) all[0] = 0;
  rf__mpi_shm *s = NULL;
  if (rc == MPI_SUCCESS && all[0]) s = rf__calloc(1, sizeof *s);
  if (!s) {
    if (base) munmap(base, len);
    /* no memory for the record here: the others would use the segment
     * alone. Rare enough to fail the call (MPI_ERR_NO_MEM) in this process
     * and let the others time out, named. */
    return rc != MPI_SUCCESS ? rc : all[0] ? MPI_ERR_NO_MEM : MPI_SUCCESS;
  }
  s->base = base;
  s->len = len;
  s->slot = slot;
  s->flags = (flag *)(base + sizeof(header));
  s->data = base + head;
  s->procs = p;
  s->me = me;
  s->crowded = !all[1];
  *out = s;
  return MPI_SUCCESS;
}

int rf__mpi_shm_of(MPI_Comm comm, int64_t bytes, bool crowded,
                   rf__mpi_shm **out) {
  pthread_once(&keyval_once, make_keyval);
  *out = NULL;
  if (keyval == MPI_KEYVAL_INVALID) return MPI_ERR_KEYVAL;
  void *val = NULL;
  int found = 0;
  int rc = MPI_Comm_get_attr(comm, keyval, &val, &found);
  if (rc != MPI_SUCCESS) return rc;
  if (found) {
    *out = val == &unavailable ? NULL : val;
    return MPI_SUCCESS;
  }
  int p;
  MPI_Comm_size(comm, &p);
  rf__mpi_shm *s = NULL;
  if (p <= RF_MPI_SHM_MAX_TASKS) {
    rc = attach(comm, slot_for(bytes, p), crowded, &s);
    if (rc != MPI_SUCCESS) return rc;
  }
  rc = MPI_Comm_set_attr(comm, keyval, s ? (void *)s : (void *)&unavailable);
  if (rc != MPI_SUCCESS) {
    shm_free(s);
    return rc;
  }
  *out = s;
  return MPI_SUCCESS;
}

void rf__mpi_shm_refuse(bool on) { atomic_store(&refuse, on); }

rf__mpi_shm *rf__mpi_shm_peek(MPI_Comm comm) {
  pthread_once(&keyval_once, make_keyval);
  void *val = NULL;
  int found = 0;
  if (keyval == MPI_KEYVAL_INVALID ||
      MPI_Comm_get_attr(comm, keyval, &val, &found) != MPI_SUCCESS || !found ||
      val == &unavailable)
    return NULL;
  rf__mpi_shm *s = val;
  if (s->crowded && rf__mpi_algorithm_setting() != RF_MPI_SHM) return NULL;
  return s;
}

rf__mpi_shm *rf__mpi_shm_for_checks(MPI_Comm comm) {
  rf__mpi_shm *s = rf__mpi_shm_peek(comm);
  return s && !s->crowded ? s : NULL;
}

/* ---- flags ---- */

static bool reached(const flag *f, uint32_t seq) {
  return (int32_t)(atomic_load_explicit(&f->seq, memory_order_acquire) - seq) >=
         0;
}

static void set(flag *f, uint32_t seq) {
  atomic_store_explicit(&f->seq, seq, memory_order_release);
}

static flag *flag_of(rf__mpi_shm *s, int q, int phase) {
  return &s->flags[q * PHASES + phase];
}

static char *slot(rf__mpi_shm *s, int q, uint32_t seq) {
  return s->data + (2 * (size_t)q + (seq & 1)) * s->slot;
}

/* ---- the collectives, as exchanges that advance when tested ---- */

static int64_t max_of(const int64_t *v, int n) {
  int64_t m = 0;
  for (int i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* float32 and float64 sums, fused: each block of piece me summed over
 * every process in rank order in a small buffer, then written where it
 * goes (one or two places), instead of p - 1 in-place passes of
 * MPI_Reduce_local and copies: a quarter of the memory traffic with 4
 * processes. src[q]: process q's piece (this process's own from its
 * input, which then needs no copy into its slot). */
#define BLOCK 512
#define FUSED_SUM(T)                                                      \
  static void sum_##T(const void *const *src, int p, int64_t n, void *d1, \
                      void *d2) {                                         \
    T acc[BLOCK];                                                         \
    for (int64_t b = 0; b < n; b += BLOCK) {                              \
      int64_t m = n - b < BLOCK ? n - b : BLOCK;                          \
      const T *s0 = (const T *)src[0] + b;                                \
      for (int64_t i = 0; i < m; i++) acc[i] = s0[i];                     \
      for (int q = 1; q < p; q++) {                                       \
        const T *sq = (const T *)src[q] + b;                              \
        for (int64_t i = 0; i < m; i++) acc[i] += sq[i];                  \
      }                                                                   \
      if (d1) memcpy((T *)d1 + b, acc, (size_t)m * sizeof(T));            \
      if (d2) memcpy((T *)d2 + b, acc, (size_t)m * sizeof(T));            \
    }                                                                     \
  }
FUSED_SUM(float)
FUSED_SUM(double)

static rf__mpi_shm_fused fused_for(MPI_Datatype type, MPI_Op op) {
  if (op != MPI_SUM) return NULL;
  if (type == MPI_FLOAT) return sum_float;
  if (type == MPI_DOUBLE) return sum_double;
  return NULL;
}

static void start(rf__mpi_shm_x *x, rf__mpi_shm *s, int kind, int64_t longest,
                  int64_t piece) {
  x->s = s;
  x->active = true;
  x->kind = kind;
  x->piece = piece;
  x->rounds = (longest + piece - 1) / piece;
  x->first = s->reserved + 1;
  s->reserved += (uint32_t)x->rounds;
  x->k = 0;
  x->stage = 0;
  x->next = 0;
}

void rf__mpi_shm_start_reduce(rf__mpi_shm_x *x, rf__mpi_shm *s,
                              const void *send, void *out,
                              const int64_t *counts, const int64_t *displs,
                              MPI_Datatype type, MPI_Op op,
                              rf__mpi_shm_mode mode, int root) {
  int p = s->procs, esize;
  MPI_Type_size(type, &esize);
  /* A piece: an equal share of the slot, whole cache lines (a slot holds
   * at least p lines: 4 KiB and RF_MPI_SHM_MAX_TASKS). */
  int64_t piece = (int64_t)(s->slot / (size_t)p) / LINE * LINE / esize;
  start(x, s, mode, max_of(counts, p), piece > 0 ? piece : 1);
  x->in = send;
  x->out = out;
  x->root = root;
  x->type = type;
  x->op = op;
  x->esize = esize;
  x->fused = fused_for(type, op);
  memcpy(x->counts, counts, (size_t)p * sizeof *counts);
  memcpy(x->displs, displs, (size_t)p * sizeof *displs);
}

void rf__mpi_shm_start_all_gather(rf__mpi_shm_x *x, rf__mpi_shm *s, void *buf,
                                  const int64_t *counts,
                                  const int64_t *displs) {
  int p = s->procs;
  start(x, s, X_GATHER, max_of(counts, p), (int64_t)s->slot);
  x->in = x->out = buf;
  x->esize = 1;
  memcpy(x->counts, counts, (size_t)p * sizeof *counts);
  memcpy(x->displs, displs, (size_t)p * sizeof *displs);
}

/* A broadcast's pieces: a quarter slot when the vector takes 2 to 8 whole
 * slots of at least 256 KiB, so the others copy one piece out while the
 * root copies the next in (with whole slots a round overlaps only its
 * neighbour); else whole slots. On the 16-core host (session 33, slots of
 * 512 KiB, MPI_Bcast's time / ringflow's), quarter slots against whole:
 * 2 processes 1 MiB 1.31-1.37 against 1.26-1.30, 4 MiB 1.02-1.03 against
 * 0.96-0.97; 4 processes 1 MiB 1.60-1.65 against 1.15-1.44; but 256 KiB
 * (one slot) 0.91-0.93 against 1.00-1.05 and 16 MiB (32 slots) 1.44-1.46
 * against 1.52-1.55 with 4 processes: there the rounds' flags cost more
 * than the overlap gains. */
static int64_t bcast_piece(const rf__mpi_shm *s, int64_t bytes) {
  size_t slot = s->slot;
  bool few = bytes > (int64_t)slot && bytes <= 8 * (int64_t)slot;
  return few && slot >= ((size_t)256 << 10) ? (int64_t)(slot / 4)
                                            : (int64_t)slot;
}

void rf__mpi_shm_start_broadcast(rf__mpi_shm_x *x, rf__mpi_shm *s, void *buf,
                                 int64_t bytes, int root) {
  start(x, s, X_BCAST, bytes, bcast_piece(s, bytes));
  x->in = x->out = buf;
  x->esize = 1;
  x->root = root;
  x->counts[0] = bytes;
  x->displs[0] = 0;
}

void rf__mpi_shm_start_max(rf__mpi_shm_x *x, rf__mpi_shm *s, const int64_t *in,
                           int64_t *out, int n) {
  int p = s->procs;
  int64_t counts[RF_MPI_SHM_MAX_TASKS], displs[RF_MPI_SHM_MAX_TASKS];
  for (int q = 0, at = 0; q < p; q++) {
    counts[q] = n / p + (q < n % p);
    displs[q] = at;
    at += (int)counts[q];
  }
  rf__mpi_shm_start_reduce(x, s, in, out, counts, displs, MPI_INT64_T, MPI_MAX,
                           RF_MPI_SHM_ALL, 0);
}

/* Whether process q's flag reached seq. */
static bool ready(rf__mpi_shm_x *x, int q, int phase, uint32_t seq) {
  return reached(flag_of(x->s, q, phase), seq);
}

/* Stage 0 of a round: this process done with the round before (another
 * exchange's, maybe) and the slot free (every process done with the round
 * two back, which used the same one), this process's data in. */
static bool round_in(rf__mpi_shm_x *x) {
  rf__mpi_shm *s = x->s;
  int p = s->procs, me = s->me;
  uint32_t seq = x->first + (uint32_t)x->k;
  if (atomic_load_explicit(&s->seq, memory_order_acquire) != seq - 1)
    return false; /* an earlier exchange's round */
  if (seq > 2)
    for (; x->next < p; x->next++)
      if (x->next != me && !ready(x, x->next, DONE, seq - 2)) return false;
  x->next = 0;
  int64_t at = x->k * x->piece;
  char *mine = slot(s, me, seq);
  if (x->kind == X_GATHER) {
    int64_t n = min64(x->piece, x->counts[me] - at);
    if (n > 0) memcpy(mine, x->out + x->displs[me] + at, (size_t)n);
  } else if (x->kind == X_BCAST) {
    int64_t n = min64(x->piece, x->counts[0] - at);
    if (me == x->root && n > 0) memcpy(mine, x->in + at, (size_t)n);
  } else {
    size_t pb = (size_t)x->piece * (size_t)x->esize;
    for (int q = 0; q < p; q++) {
      int64_t n = min64(x->piece, x->counts[q] - at);
      if (n > 0 && (q != me || !x->fused))
        memcpy(mine + (size_t)q * pb,
               x->in + (size_t)(x->displs[q] + at) * (size_t)x->esize,
               (size_t)n * (size_t)x->esize);
    }
  }
  set(flag_of(s, me, ARRIVED), seq);
  return true;
}

/* Stage 1 of a reduction's round: piece me reduced over every process. */
static int round_reduce(rf__mpi_shm_x *x, bool *moved) {
  rf__mpi_shm *s = x->s;
  int p = s->procs, me = s->me;
  uint32_t seq = x->first + (uint32_t)x->k;
  *moved = false;
  for (; x->next < p; x->next++)
    if (x->next != me && !ready(x, x->next, ARRIVED, seq)) return MPI_SUCCESS;
  x->next = 0;
  size_t es = (size_t)x->esize, pb = (size_t)x->piece * es;
  int64_t at = x->k * x->piece, n = min64(x->piece, x->counts[me] - at);
  bool gets_all = x->kind == RF_MPI_SHM_ALL ||
                  (x->kind == RF_MPI_SHM_ROOT && me == x->root);
  /* whether the others read this process's reduced piece from its slot */
  bool publish = x->kind == RF_MPI_SHM_ALL ||
                 (x->kind == RF_MPI_SHM_ROOT && me != x->root);
  char *acc = slot(s, me, seq) + (size_t)me * pb;
  char *dst = x->kind == RF_MPI_SHM_SCATTER ? x->out + (size_t)at * es
              : gets_all ? x->out + (size_t)(x->displs[me] + at) * es
                         : NULL;
  if (n > 0 && x->fused) {
    const void *src[RF_MPI_SHM_MAX_TASKS];
    for (int q = 0; q < p; q++)
      src[q] = q == me ? x->in + (size_t)(x->displs[me] + at) * es
                       : slot(s, q, seq) + (size_t)me * pb;
    x->fused(src, p, n, publish ? acc : NULL, dst);
  } else if (n > 0) {
    for (int q = 0; q < p; q++) {
      if (q == me) continue;
      int rc = MPI_Reduce_local(slot(s, q, seq) + (size_t)me * pb, acc, (int)n,
                                x->type, x->op);
      if (rc != MPI_SUCCESS) return rc;
    }
    if (dst) memcpy(dst, acc, (size_t)n * es);
  }
  set(flag_of(s, me, REDUCED), seq);
  *moved = true;
  return MPI_SUCCESS;
}

/* Stage 2: the pieces this process wants copied out of the others'
 * slots (a reduction's reduced pieces, a gather's and a broadcast's
 * data), then done with the round. */
static bool round_out(rf__mpi_shm_x *x) {
  rf__mpi_shm *s = x->s;
  int p = s->procs, me = s->me;
  uint32_t seq = x->first + (uint32_t)x->k;
  int64_t at = x->k * x->piece;
  size_t es = (size_t)x->esize, pb = (size_t)x->piece * es;
  if (x->kind == X_BCAST) {
    int64_t n = min64(x->piece, x->counts[0] - at);
    if (me != x->root && n > 0) {
      if (!ready(x, x->root, ARRIVED, seq)) return false;
      memcpy(x->out + at, slot(s, x->root, seq), (size_t)n);
    }
  } else if (x->kind == X_GATHER || x->kind == RF_MPI_SHM_ALL ||
             (x->kind == RF_MPI_SHM_ROOT && me == x->root)) {
    bool gather = x->kind == X_GATHER;
    for (; x->next < p; x->next++) {
      int q = x->next;
      int64_t m = min64(x->piece, x->counts[q] - at);
      if (q == me || m <= 0) continue;
      if (!ready(x, q, gather ? ARRIVED : REDUCED, seq)) return false;
      memcpy(x->out + (size_t)(x->displs[q] + at) * es,
             slot(s, q, seq) + (gather ? 0 : (size_t)q * pb), (size_t)m * es);
    }
  }
  x->next = 0;
  if (x->kind == X_GATHER || x->kind == X_BCAST) /* unused: kept in step */
    set(flag_of(s, me, REDUCED), seq);
  set(flag_of(s, me, DONE), seq);
  atomic_store_explicit(&s->seq, seq, memory_order_release);
  return true;
}

int rf__mpi_shm_test(rf__mpi_shm_x *x, int *done) {
  *done = 0;
  while (x->k < x->rounds) {
    if (x->stage == 0) {
      if (!round_in(x)) return MPI_SUCCESS;
      x->stage = x->kind == X_GATHER || x->kind == X_BCAST ? 2 : 1;
    }
    if (x->stage == 1) {
      bool moved;
      int rc = round_reduce(x, &moved);
      if (rc != MPI_SUCCESS) return rc;
      if (!moved) return MPI_SUCCESS;
      x->stage = 2;
    }
    if (!round_out(x)) return MPI_SUCCESS;
    x->stage = 0;
    x->k++;
  }
  x->active = false;
  *done = 1;
  return MPI_SUCCESS;
}
