/* runtime/families.h - the composition root's list: every table the library
 * fills at start-up, in order. Adding a kernel family adds one line here and
 * its declaration in kernels/kernel_families.h (a static library would drop
 * self-registering objects, so the list is explicit). Op families are
 * registered by the ops layer itself (ops/op_families.h), first. */
#ifndef RF_RUNTIME_FAMILIES_H
#define RF_RUNTIME_FAMILIES_H

#include "ringflow/status.h"

#ifdef RF_HAVE_CUDA
/* GPU kernels of _Arg, _Retval, _Send, _Recv and _Token
 * (runtime/gpu/runtime_kernels.c). */
rf_status *rf__register_gpu_runtime_kernels(void);
#endif

/* Registers every op, kernel and pass and configures BLAS, once
 * (thread-safe; later calls return the first result as a new status the
 * caller frees). rf_session_new calls it; so do the tools and tests that use
 * the kernel or pass tables without a session. */
rf_status *rf__registry_init(void);

#endif
