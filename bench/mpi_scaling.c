/* bench/mpi_scaling.c - what a step of collectives across N processes costs
 * each process, the first step and the steady state, for the scaling model
 * of docs/SCALING.md. Every task holds one CPU device; the step runs five
 * collectives over all of them (all-reduce, all-gather, reduce to task 0,
 * broadcast from task 0, reduce-scatter) on a (N, 16) float32 input
 * (64 N bytes), S steps. Per process it measures, with getrusage (CPU
 * seconds of the whole process, every thread) and rf_debug_control_messages
 * (control messages sent: READY, GO, ...): the session's creation, step 0
 * (the first step: agreed through task 0) and the mean of steps 1..S-1
 * (steady state), after a warm-up session run twice and freed (the
 * process's first-time costs). Task 0 prints its own row and the other tasks'
 * mean and largest; "recv@0" is the messages the other tasks sent (READY and
 * PING go to task 0, so that is what task 0 received from them), and
 * RF_MPI_AGREE_ONCE=0 measures the READY/GO path. Then raw MPI on
 * MPI_COMM_WORLD, the costs the model needs: one 40-byte MPI_Allreduce
 * (the steady state's check), an MPI_Comm_dup, and task 0 receiving one
 * 600-byte message from every other task then sending each one back (the
 * first step's star), fastest of 20 trials, slowest process; and task 0's
 * CPU (its thread's clock, which the load hardly changes) to receive one
 * 600-byte message from a full queue and to post one.
 *   mpirun --oversubscribe --bind-to none --mca btl self,vader -np 4 \
 *     build-nc/bench/bench_mpi_scaling 200 [each]   (S steps; each: a row
 *                                                   for every process)
 * bench/mpi_scaling.sh runs it for N = 2, 4, 8, 16 and both paths. */
#include <stdio.h>
#include <stdlib.h>

#ifdef RF_HAVE_MPI
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "comm/mpi/engine.h"
#include "ringflow/collectives.h"
#include "ringflow/debug.h"
#include "ringflow/graph.h"
#include "ringflow/ops.h"
#include "ringflow/session.h"
#include "ringflow/tensor.h"

#define COLS 16
#define NCOLL 5

static int T, N;

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static void die(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "task %d: %s: %s\n", T, what, rf_status_message(st));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* A point of measurement: wall, CPU, messages. */
typedef struct mark {
  double wall, cpu, msgs;
} mark;

static mark now(void) {
  return (mark){wall_s(), cpu_s(), (double)rf_debug_control_messages()};
}

static mark since(mark a) {
  mark b = now();
  return (mark){b.wall - a.wall, b.cpu - a.cpu, b.msgs - a.msgs};
}

/* Fastest of 20 trials of f, each timed by the slowest process (µs). */
static double trial(void (*f)(void)) {
  double best = 1e30;
  for (int k = 0; k < 20; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wall_s();
    f();
    double dt = wall_s() - t0, slowest;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (slowest < best) best = slowest;
  }
  return best * 1e6;
}

static void check_allreduce(void) {
  int64_t in[5] = {T, -T, 1, -1, 0}, out[5];
  MPI_Allreduce(in, out, 5, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
}

static void comm_dup(void) {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_free(&c);
}

/* Task 0 gathers one message from each task (any order), then answers each. */
static void star(void) {
  static char buf[1024][600];
  if (T == 0) {
    for (int i = 1; i < N; i++)
      MPI_Recv(buf[0], 600, MPI_BYTE, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    MPI_Request r[1024];
    for (int i = 1; i < N; i++)
      MPI_Isend(buf[i], 600, MPI_BYTE, i, 8, MPI_COMM_WORLD, &r[i - 1]);
    MPI_Waitall(N - 1, r, MPI_STATUSES_IGNORE);
  } else {
    MPI_Send(buf[0], 600, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    MPI_Recv(buf[0], 600, MPI_BYTE, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Task 0's CPU for one 600-byte message from a queue that is already full
 * (MPI_Improbe + MPI_Mrecv, as the engine receives), and for posting one
 * (MPI_Isend): per message, µs of this thread's CPU, not waiting. */
static void per_message(double *recv_us, double *send_us) {
  enum { M = 64 };
  static char buf[600];
  static MPI_Request r[M * 1024];
  int n = 0;
  if (T != 0)
    for (int k = 0; k < M; k++)
      MPI_Isend(buf, 600, MPI_BYTE, 0, 9, MPI_COMM_WORLD, &r[n++]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (T == 0) {
    struct timespec pause = {0, 50000000}; /* let every message land */
    nanosleep(&pause, NULL);
    double c0 = thread_cpu_s();
    for (int k = 0; k < M * (N - 1); k++) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      while (!flag)
        MPI_Improbe(MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &flag, &msg, &st);
      MPI_Mrecv(buf, 600, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    }
    *recv_us = (thread_cpu_s() - c0) * 1e6 / (M * (N - 1));
    c0 = thread_cpu_s();
    for (int t = 1; t < N; t++)
      for (int k = 0; k < M; k++)
        MPI_Isend(buf, 600, MPI_BYTE, t, 10, MPI_COMM_WORLD, &r[n++]);
    *send_us = (thread_cpu_s() - c0) * 1e6 / (M * (N - 1));
  } else {
    for (int k = 0; k < M; k++)
      MPI_Irecv(buf, 600, MPI_BYTE, 0, 10, MPI_COMM_WORLD, &r[n++]);
  }
  MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
}

static rf_graph *build(rf_output *x, rf_output *fetch, int *nfetch) {
  rf_graph *g = rf_graph_new();
  rf_output in[1024], ar[1024], ag[1024], rs[1024];
  char dev[48];
  for (int t = 0; t < N; t++) {
    snprintf(dev, sizeof dev, "/task:%d/cpu:0", t);
    die(rf_graph_push_device(g, dev), "device");
    in[t] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, N, COLS));
    if (t == T) *x = in[t];
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", in, N, RF_REDUCE_SUM, ar);
  rf_all_gather_n(g, "ag", in, N, ag);
  rf_reduce_scatter_n(g, "rs", in, N, RF_REDUCE_SUM, rs);
  die(rf_graph_push_device(g, "/task:0/cpu:0"), "device");
  rf_output red = rf_reduce(g, "rd", in, N, RF_REDUCE_SUM);
  rf_output bc = rf_broadcast(g, "bc", in[0]);
  rf_graph_pop_device(g);
  int n = 0;
  fetch[n++] = ar[T];
  fetch[n++] = ag[T];
  fetch[n++] = rs[T];
  for (int t = 0; t < N; t++) { /* every task receives the broadcast */
    snprintf(dev, sizeof dev, "/task:%d/cpu:0", t);
    die(rf_graph_push_device(g, dev), "device");
    rf_output y = rf_identity(g, NULL, bc);
    rf_graph_pop_device(g);
    if (t == T) fetch[n++] = y;
  }
  fetch[n++] = red; /* elsewhere than task 0 a target: this task's part */
  *nfetch = n;
  die(rf_graph_status(g), "graph");
  return g;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &N);
  MPI_Comm_rank(MPI_COMM_WORLD, &T);
  if (N > 1024 || N < 2) {
    if (T == 0) fprintf(stderr, "run it under mpirun -np 2..1024\n");
    MPI_Finalize();
    return 2;
  }
  int steps = argc > 1 ? atoi(argv[1]) : 200;
  bool each = argc > 2 && strcmp(argv[2], "each") == 0;
  if (steps < 2) steps = 2;

  rf_output x, fetch[8];
  int nfetch;
  rf_graph *g = build(&x, fetch, &nfetch);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.collective_timeout_ms = 60000;
  rf_shape sh = rf_shape_of(2, N, COLS);
  rf_tensor *a;
  die(rf_tensor_new(RF_FLOAT32, &sh, NULL, &a), "tensor");
  float *p = rf_tensor_mutable_data(a);
  for (int i = 0; i < N * COLS; i++) p[i] = (float)(T + i % 7);
  rf_feed feed = {x, a};
  /* fetch the reduce only where it lands; elsewhere run it as a target */
  int nf = T == 0 ? nfetch : nfetch - 1;
  rf_node *target = fetch[nfetch - 1].node;
  int ntargets = T == 0 ? 0 : 1;
  /* A session run twice and freed first: the process's own first-time
   * costs (threads, MPI's shared-memory peers, allocations) stay out of the
   * measured session's creation and first step. */
  rf_session *w = NULL;
  rf_tensor *out[8];
  die(rf_session_new(g, &o, &w), "session");
  for (int k = 0; k < 2; k++) {
    die(rf_session_run(w, &feed, 1, fetch, nf, &target, ntargets, out), "run");
    for (int f = 0; f < nf; f++) rf_tensor_release(out[f]);
  }
  rf_session_free(w);
  MPI_Barrier(MPI_COMM_WORLD);
  mark m0 = now();
  rf_session *s = NULL;
  die(rf_session_new(g, &o, &s), "session");
  mark create = since(m0);

  mark first = {0}, steady = {0};
  for (int k = 0; k < steps; k++) {
    mark m = now();
    die(rf_session_run(s, &feed, 1, fetch, nf, &target, ntargets, out), "run");
    mark d = since(m);
    if (k == 0) {
      first = d;
    } else {
      steady.wall += d.wall / (steps - 1);
      steady.cpu += d.cpu / (steps - 1);
      steady.msgs += d.msgs / (steps - 1);
    }
    for (int f = 0; f < nf; f++) rf_tensor_release(out[f]);
  }
  double mine[9] = {create.wall, create.cpu, create.msgs,
                    first.wall,  first.cpu,  first.msgs,
                    steady.wall, steady.cpu, steady.msgs};
  double *all = T == 0 ? malloc(sizeof mine * (size_t)N) : NULL;
  MPI_Gather(mine, 9, MPI_DOUBLE, all, 9, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  rf_session_free(s);
  rf_tensor_release(a);
  rf_graph_free(g);

  double t_check = trial(check_allreduce), t_dup = trial(comm_dup),
         t_star = trial(star), c_recv = 0, c_send = 0;
  per_message(&c_recv, &c_send);
  if (T == 0) {
    const char *env = getenv("RF_MPI_AGREE_ONCE");
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
      if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
        load[0] = -1;
      fclose(f);
    }
    /* RF_MPI_ALGORITHM forced (blocking, ring) joins the path's name: the
     * collectives with blocking data run their own thread and communicator
     * in the steady state (docs/SCALING.md). */
    const char *alg = getenv("RF_MPI_ALGORITHM");
    printf(
        "N=%d path=%s%s%s steps=%d collectives=%d bytes/device=%d "
        "load=%.2f READY-header=%zu\n",
        N, env && strcmp(env, "0") == 0 ? "ready-go" : "agree-once",
        alg && *alg ? "+" : "", alg && *alg ? alg : "", steps, NCOLL,
        N * COLS * 4, load[0], sizeof(rf__mpi_msg));
    const char *phase[3] = {"create", "first", "steady"};
    for (int ph = 0; ph < 3; ph++) {
      double mean[3] = {0}, max[3] = {0}, sent_others = 0;
      for (int t = 1; t < N; t++)
        for (int c = 0; c < 3; c++) {
          double v = all[t * 9 + ph * 3 + c];
          mean[c] += v / (N - 1);
          if (v > max[c]) max[c] = v;
          if (c == 2) sent_others += v;
        }
      const double *z = &all[ph * 3];
      printf(
          "%-6s task0: wall %9.1f us cpu %9.1f us sent %7.2f recv@0 %7.2f"
          " | others mean: wall %9.1f cpu %9.1f sent %6.2f | max: cpu "
          "%9.1f sent %6.2f\n",
          phase[ph], z[0] * 1e6, z[1] * 1e6, z[2], sent_others, mean[0] * 1e6,
          mean[1] * 1e6, mean[2], max[1] * 1e6, max[2]);
    }
    for (int t = 0; each && t < N; t++) { /* every process's own row */
      const double *z = &all[t * 9];
      printf(
          "task %d: create cpu %.1f us sent %.0f | first cpu %.1f us sent "
          "%.0f | steady cpu %.1f us sent %.2f\n",
          t, z[1] * 1e6, z[2], z[4] * 1e6, z[5], z[7] * 1e6, z[8]);
    }
    printf(
        "raw    allreduce40B %.1f us  comm_dup %.1f us  star600B %.1f us  "
        "task0 cpu/msg: recv %.2f us send %.2f us\n",
        t_check, t_dup, t_star, c_recv, c_send);
    free(all);
  }
  MPI_Finalize();
  return 0;
}
#else
int main(void) {
  fprintf(stderr, "bench_mpi_scaling: built without MPI\n");
  return 0;
}
#endif
