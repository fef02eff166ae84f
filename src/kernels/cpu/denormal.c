/* kernels/cpu/denormal.c - see denormal.h. */
#include "kernels/cpu/denormal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define RF_MXCSR_FLUSH 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool enabled;

static void read_environment(void) {
  const char *v = getenv("RF_FLUSH_DENORMALS");
  enabled = !(v && strcmp(v, "0") == 0);
}

rf__denormal_scope rf__denormal_flush_begin(void) {
  rf__denormal_scope s = {0, false};
#ifdef RF_MXCSR_FLUSH
  pthread_once(&once, read_environment);
  if (!enabled) return s;
  s.saved = _mm_getcsr();
  if ((s.saved & RF_MXCSR_FLUSH) != RF_MXCSR_FLUSH) {
    _mm_setcsr(s.saved | RF_MXCSR_FLUSH);
    s.changed = true;
  }
#endif
  return s;
}

void rf__denormal_flush_end(rf__denormal_scope s) {
#ifdef RF_MXCSR_FLUSH
  if (s.changed) _mm_setcsr(s.saved);
#else
  (void)s;
#endif
}
