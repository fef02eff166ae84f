/* grad/peers.c - collective groups for the gradient builder: one hash pass
 * over the graph gives each grouped node the index of its group; the groups'
 * member ids are stored contiguously. */
#include "grad/peers.h"

#include <string.h>

#include "ops/op_registry.h"

typedef struct group {
  const char *name; /* borrowed from a node's attrs */
  int index;
  UT_hash_handle hh;
} group;

struct rf__peers {
  int *group_of; /* [num_ids]: group index or -1 */
  int *start;    /* [num_groups + 1] into members */
  int *members;  /* ids, grouped */
  int num_ids;
};

void rf__peers_free(rf__peers *p) {
  if (!p) return;
  rf__free(p->group_of);
  rf__free(p->start);
  rf__free(p->members);
  rf__free(p);
}

static const char *shared_name(const rf_node *n) {
  if (!n || !(n->op->flags & RF_OP_GROUPED)) return NULL;
  const char *s = NULL;
  rf_status *st = rf__attrs_get_string(&n->attrs, "shared_name", &s);
  rf_status_free(st);
  return st ? NULL : s;
}

static void table_free(group **t) {
  group *g, *tmp;
  HASH_ITER(hh, *t, g, tmp) {
    HASH_DEL(*t, g);
    rf__free(g);
  }
}

rf_status *rf__peers_build(const rf_graph *graph, int num_ids,
                           rf__peers **out) {
  rf__peers *p = rf__calloc(1, sizeof *p);
  RF_CHECK_ALLOC(p);
  p->num_ids = num_ids;
  p->group_of = rf__malloc(sizeof(int) * (size_t)(num_ids ? num_ids : 1));
  group *table = NULL;
  int groups = 0;
  rf_status *st = p->group_of ? NULL : rf__oom();
  for (int id = 0; id < num_ids && !st; id++) {
    p->group_of[id] = -1;
    const char *name = shared_name(graph->nodes[id]);
    if (!name) continue;
    group *g = NULL;
    HASH_FIND_STR(table, name, g);
    if (!g) {
      int rf__hash_oom = 0;
      g = rf__calloc(1, sizeof *g);
      if (g) {
        g->name = name;
        g->index = groups++;
        HASH_ADD_KEYPTR(hh, table, g->name, strlen(name), g);
      }
      if (!g || rf__hash_oom) {
        rf__free(g);
        st = rf__oom();
        break;
      }
    }
    p->group_of[id] = g->index;
  }
  table_free(&table);
  if (!st) {
    p->start = rf__calloc((size_t)groups + 1, sizeof(int));
    p->members = rf__malloc(sizeof(int) * (size_t)(num_ids ? num_ids : 1));
    if (!p->start || !p->members) st = rf__oom();
  }
  if (!st) { /* counting sort of ids by group */
    for (int id = 0; id < num_ids; id++)
      if (p->group_of[id] >= 0) p->start[p->group_of[id] + 1]++;
    for (int g = 0; g < groups; g++) p->start[g + 1] += p->start[g];
    int *fill = rf__malloc(sizeof(int) * (size_t)(groups ? groups : 1));
    if (!fill) st = rf__oom();
    for (int g = 0; !st && g < groups; g++) fill[g] = p->start[g];
    for (int id = 0; !st && id < num_ids; id++)
      if (p->group_of[id] >= 0) p->members[fill[p->group_of[id]]++] = id;
    rf__free(fill);
  }
  if (st) {
    rf__peers_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

const int *rf__peers_of(const rf__peers *p, int id, int *count) {
  *count = 0;
  if (!p || id < 0 || id >= p->num_ids || p->group_of[id] < 0) return NULL;
  int g = p->group_of[id];
  *count = p->start[g + 1] - p->start[g];
  return p->members + p->start[g];
}
