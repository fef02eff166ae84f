/* comm/mpi/operator_order.h - tells ThreadSanitizer what OpenMPI's request
 * completion already guarantees: ringflow's reduction operators (data.c),
 * which MPI calls from whichever thread progresses a nonblocking
 * collective, are done with the op's buffers before another thread's
 * MPI_Test reports the request complete. OpenMPI orders this with atomics
 * TSan cannot see (it is not instrumented), so an operator's read on the
 * engine thread and the executor thread's free after its MPI_Test read as
 * a race (test_mpi_buckets_np4, CI's TSan stage). Each operator ends with a
 * release on one atomic; an op's buffers are released or handed on only
 * after an acquire of it. Compiled away outside TSan builds. */
#ifndef RF_COMM_MPI_OPERATOR_ORDER_H
#define RF_COMM_MPI_OPERATOR_ORDER_H

#if defined(__SANITIZE_THREAD__)
#define RF_MPI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RF_MPI_TSAN 1
#endif
#endif

#ifdef RF_MPI_TSAN
#include <stdatomic.h>
extern atomic_uint rf__mpi_operator_epoch;
/* At the end of every reduction operator. */
static inline void rf__mpi_operator_ran(void) {
  atomic_fetch_add_explicit(&rf__mpi_operator_epoch, 1, memory_order_release);
}
/* Before an op's buffers are read, freed or reused after its completion. */
static inline void rf__mpi_operators_seen(void) {
  (void)atomic_load_explicit(&rf__mpi_operator_epoch, memory_order_acquire);
}
#else
static inline void rf__mpi_operator_ran(void) {}
static inline void rf__mpi_operators_seen(void) {}
#endif

#endif
