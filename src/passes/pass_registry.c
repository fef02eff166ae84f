/* passes/pass_registry.c - the pass table: a fixed array kept sorted by
 * (phase, priority, name), filled at start-up and read without locks after.
 * A fixed table means registration never allocates. */
#include "passes/pass_registry.h"

#include <string.h>

#include "core/log.h"

#define MAX_PASSES 64
#define PASS_NAME_MAX 64

typedef struct pass {
  rf__pass_phase phase;
  int priority;
  char name[PASS_NAME_MAX];
  rf__pass_fn fn;
} pass;

static pass passes[MAX_PASSES];
static int num_passes;

static int pass_cmp(const pass *a, const pass *b) {
  if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
  if (a->priority != b->priority) return a->priority < b->priority ? -1 : 1;
  return strcmp(a->name, b->name);
}

rf_status *rf__pass_register(rf__pass_phase phase, int priority,
                             const char *name, rf__pass_fn fn) {
  if ((int)phase < 0 || phase >= RF_PASS_PHASE_COUNT)
    return rf__invalid("pass registration: bad phase %d", (int)phase);
  if (!name || !*name || strlen(name) >= PASS_NAME_MAX || !fn)
    return rf__invalid(
        "pass registration: a pass needs a name (under %d "
        "characters) and a function",
        PASS_NAME_MAX);
  for (int i = 0; i < num_passes; i++)
    if (strcmp(passes[i].name, name) == 0)
      return rf__error(RF_ALREADY_EXISTS, "pass '%s' is already registered",
                       name);
  if (num_passes == MAX_PASSES)
    return rf__error(RF_RESOURCE_EXHAUSTED,
                     "pass '%s': the table holds %d "
                     "passes at most",
                     name, MAX_PASSES);
  pass p = {phase, priority, "", fn};
  strcpy(p.name, name);
  int i = num_passes;
  while (i > 0 && pass_cmp(&passes[i - 1], &p) > 0) {
    passes[i] = passes[i - 1];
    i--;
  }
  passes[i] = p;
  num_passes++;
  return NULL;
}

rf_status *rf__passes_run(rf__pass_phase phase, rf__pass_ctx *ctx) {
  for (int i = 0; i < num_passes; i++) {
    if (passes[i].phase != phase) continue;
    RF__LOG(RF_LOG_DEBUG, "compile %ld: pass '%s'", ctx->compile,
            passes[i].name);
    rf_status *st = passes[i].fn(ctx);
    if (st) return rf__status_prefix(st, "pass '%s'", passes[i].name);
  }
  return NULL;
}

int rf__passes_count(rf__pass_phase phase) {
  int n = 0;
  for (int i = 0; i < num_passes; i++) n += passes[i].phase == phase;
  return n;
}
