/* kernels/cpu/denormal.h - a scope in which the calling thread treats
 * denormal floats as zero (x86 MXCSR: FTZ for results, DAZ for inputs), for
 * kernels whose values decay geometrically toward zero. Adam's moments of
 * weights that never get a gradient (the always-black border pixels of
 * Fashion-MNIST) decay into the denormal range within a few hundred steps,
 * and arithmetic on denormals is ~12x slower on these CPUs: the default
 * `ringflow train` took 16.7 s instead of 9.5 s. TensorFlow runs all its
 * CPU kernels this way (port::ScopedFlushDenormal); ringflow limits it to the
 * optimizer updates, so that Cast and every other kernel keep IEEE
 * denormals. Deterministic: every device flushes the same values.
 * RF_FLUSH_DENORMALS=0 in the environment keeps IEEE denormals there too.
 * Elsewhere than x86 the scope does nothing. */
#ifndef RF_KERNELS_CPU_DENORMAL_H
#define RF_KERNELS_CPU_DENORMAL_H

#include <stdbool.h>

typedef struct rf__denormal_scope {
  unsigned saved; /* the control register before */
  bool changed;
} rf__denormal_scope;

/* Sets the calling thread's mode (unless disabled); returns what to restore. */
rf__denormal_scope rf__denormal_flush_begin(void);
/* Restores the mode that begin found. */
void rf__denormal_flush_end(rf__denormal_scope scope);

#endif
