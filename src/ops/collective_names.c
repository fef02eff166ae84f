/* ops/collective_names.c - names for the collectives of gradients (see
 * collective_names.h). A name ends in its k (digits) or in "#<what>" (no
 * digits at the end), so (X, k, what) can be read back from it: two never
 * give one name. */
#include "ops/collective_names.h"

#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "ops/op_registry.h"

#define GRAD_TAG "#grad"

char *rf__grad_shared_name(const char *shared, int64_t k, const char *what) {
  size_t len =
      strlen(shared) + strlen(GRAD_TAG) + 24 + (what ? strlen(what) : 0);
  char *s = rf__malloc(len);
  if (!s) return NULL;
  if (what)
    snprintf(s, len, "%s" GRAD_TAG "%lld#%s", shared, (long long)k, what);
  else
    snprintf(s, len, "%s" GRAD_TAG "%lld", shared, (long long)k);
  return s;
}

/* The largest k of a "#grad<k>" in s (0: none). k past INT64_MAX / 10 (a
 * hand-written file) counts as that: the next number is still fresh. */
static int64_t largest_in(const char *s) {
  int64_t best = 0;
  for (const char *p = strstr(s, GRAD_TAG); p; p = strstr(p + 1, GRAD_TAG)) {
    int64_t k = 0;
    for (const char *d = p + strlen(GRAD_TAG); *d >= '0' && *d <= '9'; d++)
      k = k < INT64_MAX / 10 - 9 ? k * 10 + (*d - '0') : INT64_MAX / 10;
    if (k > best) best = k;
  }
  return best;
}

int64_t rf__grad_next_construction(const rf_graph *g) {
  int64_t best = 0;
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    const rf__attr_value *v =
        n ? rf__attrs_find(&n->attrs, "shared_name") : NULL;
    if (!v || v->type != RF_ATTR_STRING ||
        !strchr(v->u.s, RF_RESERVED_NAME_CHAR))
      continue;
    int64_t k = largest_in(v->u.s);
    if (k > best) best = k;
  }
  return best + 1;
}
