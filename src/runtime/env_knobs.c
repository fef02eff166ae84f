/* runtime/env_knobs.c - see env_knobs.h. */
#include "runtime/env_knobs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One switch: its accepted words (NULL-terminated), or a count range. */
typedef struct {
  const char *var;
  const char *words[4];
  long min, max; /* for counts: words[0] is NULL */
  const char *expected;
} knob;

static const knob knobs[] = {
    {"RF_BLAS_THREADS", {NULL}, 1, 1024, "a thread count from 1 to 1024"},
    {"RF_CPU_CONV", {"im2col", "onednn", NULL}, 0, 0, "im2col or onednn"},
    {"RF_CUBLASLT_EPILOGUES", {"0", "1", NULL}, 0, 0, "0 or 1"},
    {"RF_CUBLASLT_SPLITK", {"0", "1", NULL}, 0, 0, "0 or 1"},
    {"RF_CUDNN_LAYOUT",
     {"auto", "nhwc", "nchw", NULL},
     0,
     0,
     "auto, nhwc or nchw"},
    {"RF_FLUSH_DENORMALS", {"0", "1", NULL}, 0, 0, "0 or 1"},
    {"RF_FOLD_CONSTANTS", {"0", "1", NULL}, 0, 0, "0 or 1"},
    {"RF_FUSE_XENT_GRAD", {"0", "1", NULL}, 0, 0, "0 or 1"},
    {"RF_SINGLE_COLLECTIVES",
     {"keep", "identity", NULL},
     0,
     0,
     "keep or identity"},
};

static bool accepted(const knob *k, const char *v) {
  if (!k->words[0]) {
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    return v[0] >= '0' && v[0] <= '9' && *end == 0 && errno == 0 &&
           n >= k->min && n <= k->max;
  }
  for (int i = 0; k->words[i]; i++)
    if (strcmp(v, k->words[i]) == 0) return true;
  return false;
}

rf_status *rf__env_knobs_check(void) {
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
    const char *v = getenv(knobs[i].var);
    if (v && *v && !accepted(&knobs[i], v))
      return rf__invalid("environment variable %s='%s': expected %s (or unset)",
                         knobs[i].var, v, knobs[i].expected);
  }
  return NULL;
}
