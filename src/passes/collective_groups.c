/* passes/collective_groups.c - collectives seen as groups of participant nodes
 * sharing a shared_name: pruning keeps whole groups, and compile checks each
 * group before anything runs, so a participant missing from the graph is a
 * compile error naming the group rather than a timeout at run time. */
#include <stdio.h>
#include <string.h>

#include "core/format.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "ops/op_registry.h"
#include "passes/lower_collectives.h"

static const char *const participant_ops[] = {
    "AllReduce",   "AllGather",      "ReduceScatter",  "_ReduceSend",
    "_ReduceRecv", "_BroadcastSend", "_BroadcastRecv",
};

bool rf__is_collective_participant(const rf_node *n) {
  for (size_t i = 0; i < sizeof participant_ops / sizeof *participant_ops; i++)
    if (strcmp(n->op->name, participant_ops[i]) == 0) return true;
  return false;
}

typedef struct group {
  const char *shared_name; /* borrowed from a node's attrs */
  int *ids;
  int n, cap;
  UT_hash_handle hh;
} group;

static void groups_free(group **table) {
  group *g, *tmp;
  HASH_ITER(hh, *table, g, tmp) {
    HASH_DEL(*table, g);
    rf__free(g->ids);
    rf__free(g);
  }
}

/* Groups participants by shared_name (linear in the graph). */
static rf_status *build_groups(const rf_graph *graph, group **table) {
  *table = NULL;
  for (int id = 0; id < graph->num_ids; id++) {
    const rf_node *n = graph->nodes[id];
    if (!n || !rf__is_collective_participant(n)) continue;
    const char *name;
    rf_status *st = rf__attrs_get_string(&n->attrs, "shared_name", &name);
    if (st) {
      groups_free(table);
      return st;
    }
    group *g = NULL;
    HASH_FIND_STR(*table, name, g);
    if (!g) {
      int rf__hash_oom = 0;
      g = rf__calloc(1, sizeof *g);
      if (g) {
        g->shared_name = name;
        HASH_ADD_KEYPTR(hh, *table, g->shared_name, strlen(name), g);
      }
      if (!g || rf__hash_oom) {
        rf__free(g);
        groups_free(table);
        return rf__oom();
      }
    }
    if (rf__grow(&g->ids, &g->cap, g->n + 1, sizeof *g->ids)) {
      groups_free(table);
      return rf__oom();
    }
    g->ids[g->n++] = id;
  }
  return NULL;
}

struct rf__collective_groups {
  group *table;
};

rf_status *rf__collective_groups_new(const rf_graph *graph,
                                     rf__collective_groups **out) {
  *out = rf__calloc(1, sizeof **out);
  RF_CHECK_ALLOC(*out);
  rf_status *st = build_groups(graph, &(*out)->table);
  if (st) {
    rf__free(*out);
    *out = NULL;
  }
  return st;
}

int rf__collective_group_size(const rf__collective_groups *t,
                              const char *shared_name) {
  group *g = NULL;
  HASH_FIND_STR(t->table, shared_name, g);
  return g ? g->n : 0;
}

void rf__collective_groups_free(rf__collective_groups *t) {
  if (!t) return;
  groups_free(&t->table);
  rf__free(t);
}

rf_status *rf__collective_mark_peers(const rf_graph *graph, char *keep,
                                     bool *added) {
  *added = false;
  group *table, *g, *tmp;
  RF_CHECK(build_groups(graph, &table));
  HASH_ITER(hh, table, g, tmp) {
    bool any = false;
    for (int i = 0; i < g->n; i++) any |= keep[g->ids[i]] != 0;
    if (!any) continue;
    for (int i = 0; i < g->n; i++) {
      if (keep[g->ids[i]]) continue;
      keep[g->ids[i]] = 2;
      *added = true;
    }
  }
  groups_free(&table);
  return NULL;
}

/* The collective a participant op takes part in: the lowered halves of one
 * Reduce (or Broadcast) are one collective. */
static const char *collective_of(const rf_node *n) {
  const char *op = n->op->name;
  if (strncmp(op, "_Reduce", 7) == 0) return "Reduce";
  if (strncmp(op, "_Broadcast", 10) == 0) return "Broadcast";
  return op;
}

/* "cpu:1" for n's assigned device into buf, "<unplaced>" before placement. */
static const char *device_of(const rf_node *n, const rf__device_name *devices,
                             int num_devices, char *buf) {
  if (n->assigned_device < 0 || n->assigned_device >= num_devices)
    return "<unplaced>";
  rf__device_name_format(&devices[n->assigned_device], buf, RF_DEVICE_NAME_MAX);
  return buf;
}

/* The disagreement on field between a and b, naming both values, nodes (with
 * their ops) and devices, as the collective manager does at run time. */
static rf_status *disagree(const group *g, const char *field, const char *va,
                           const rf_node *a, const char *vb, const rf_node *b,
                           const rf__device_name *devices, int num_devices) {
  char da[RF_DEVICE_NAME_MAX], db[RF_DEVICE_NAME_MAX];
  return rf__invalid(
      "collective '%s': participants disagree on %s: %s on %s (node '%s', %s) "
      "but %s on %s (node '%s', %s)",
      g->shared_name, field, va, device_of(a, devices, num_devices, da),
      a->name, a->op->name, vb, device_of(b, devices, num_devices, db), b->name,
      b->op->name);
}

/* Participants of one group must agree on what they run: the collective,
 * num_devices, T and reduction (shapes may be unknown until run time, where
 * the collective manager checks them). */
static rf_status *check_agreement(const group *g, const rf_node *a,
                                  const rf_node *b,
                                  const rf__device_name *devices,
                                  int num_devices) {
  static const char *const attrs[] = {"num_devices", "T", "reduction"};
  if (strcmp(collective_of(a), collective_of(b)) != 0)
    return disagree(g, "the collective", a->op->name, a, b->op->name, b,
                    devices, num_devices);
  for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++) {
    const rf__attr_value *va = rf__attrs_find(&a->attrs, attrs[i]);
    const rf__attr_value *vb = rf__attrs_find(&b->attrs, attrs[i]);
    if ((!va && !vb) || (va && vb && rf__attr_value_equal(va, vb))) continue;
    char sa[64] = "none", sb[64] = "none";
    if (va) rf__attr_value_format(va, sa, sizeof sa);
    if (vb) rf__attr_value_format(vb, sb, sizeof sb);
    return disagree(g, attrs[i], sa, a, sb, b, devices, num_devices);
  }
  return NULL;
}

/* At most this many participants are listed in a message; the rest are
 * counted. */
#define LIST_MAX 64

/* msg + tail in a new buffer (msg is freed); NULL when memory runs out or
 * msg is NULL. */
static char *append(char *msg, const char *tail) {
  if (!msg || !tail) {
    rf__free(msg);
    return NULL;
  }
  size_t a = strlen(msg), b = strlen(tail);
  char *next = rf__malloc(a + b + 1);
  if (next) {
    memcpy(next, msg, a);
    memcpy(next + a, tail, b + 1);
  }
  rf__free(msg);
  return next;
}

/* The error "<head>: 'p0' on cpu:0, 'p1' on cpu:1, ...": every participant
 * (up to LIST_MAX) with its device, each name capped on its own
 * (core/format.h) and the list appended whole: a %s would cap the list as
 * if it were one name. Takes head (from rf__format; NULL: out of memory). */
static rf_status *group_error(rf_code code, const rf_graph *graph,
                              const group *g, const rf__device_name *devices,
                              int num_devices, char *head) {
  char *msg = append(head, ": ");
  for (int i = 0; msg && i < g->n && i < LIST_MAX; i++) {
    const rf_node *n = graph->nodes[g->ids[i]];
    char dev[RF_DEVICE_NAME_MAX];
    char *item = rf__format("%s'%s' on %s", i ? ", " : "", n->name,
                            device_of(n, devices, num_devices, dev));
    msg = append(msg, item);
    rf__free(item);
  }
  if (g->n > LIST_MAX) {
    char more[48];
    snprintf(more, sizeof more, " and %d more", g->n - LIST_MAX);
    msg = append(msg, more);
  }
  if (!msg) return rf__oom();
  rf_status *st = rf__status_text(code, msg);
  rf__free(msg);
  return st;
}

/* What is wrong with where the participants are: two share a device
 * (INVALID_ARGUMENT) or they differ in device type (UNIMPLEMENTED); NULL
 * when neither. */
static const char *placement_fault(const rf_graph *graph, const group *g,
                                   const rf__device_name *devices,
                                   rf_code *code) {
  for (int i = 0; i < g->n; i++)
    for (int j = 0; j < i; j++) {
      int a = graph->nodes[g->ids[i]]->assigned_device;
      int b = graph->nodes[g->ids[j]]->assigned_device;
      *code = a == b ? RF_INVALID_ARGUMENT : RF_UNIMPLEMENTED;
      if (a == b) return "has two participants on one device";
      if (devices[a].type != devices[b].type)
        return "mixes device types (no collective backend supports that)";
    }
  return NULL;
}

static rf_status *check_group(const rf_graph *graph, const group *g,
                              const rf__device_name *devices, int num_devices) {
  const rf_node *first = graph->nodes[g->ids[0]];
  for (int i = 1; i < g->n; i++)
    RF_CHECK(check_agreement(g, first, graph->nodes[g->ids[i]], devices,
                             num_devices));
  int64_t want;
  RF_CHECK(rf__attrs_get_int(&first->attrs, "num_devices", &want));
  if (g->n != want)
    return group_error(
        RF_INVALID_ARGUMENT, graph, g, devices, num_devices,
        rf__format("collective '%s' (%s) expects %lld participants but the "
                   "graph has %d",
                   g->shared_name, collective_of(first), (long long)want,
                   g->n));
  for (int i = 0; i < g->n; i++) {
    const rf_node *a = graph->nodes[g->ids[i]];
    if (a->assigned_device < 0 || a->assigned_device >= num_devices)
      return rf__internal("collective '%s': participant '%s' is not placed",
                          g->shared_name, a->name);
  }
  rf_code code;
  const char *fault = placement_fault(graph, g, devices, &code);
  if (!fault) return NULL;
  return group_error(code, graph, g, devices, num_devices,
                     rf__format("collective '%s' (%s) %s", g->shared_name,
                                collective_of(first), fault));
}

/* Sets attr _devices ("cpu:0,cpu:2") on every participant of a checked
 * group, so that a timeout at run time can name the devices that never came
 * (the kernel hands it to the collective manager), and _task_devices: the
 * participants on the node's own task. */
static bool device_before(const rf__device_name *a, const rf__device_name *b) {
  if (a->task != b->task) return a->task < b->task;
  if (a->type != b->type) return a->type < b->type;
  return a->index < b->index;
}

static rf_status *annotate_group(rf_graph *graph, const group *g,
                                 const rf__device_name *devices) {
  /* Device order (task, type, index): every process of a job, whose graphs
   * may hold the participants in another order, writes the same list. */
  for (int i = 1; i < g->n; i++)
    for (int k = i; k > 0; k--) {
      const rf__device_name *a =
          &devices[graph->nodes[g->ids[k]]->assigned_device];
      const rf__device_name *b =
          &devices[graph->nodes[g->ids[k - 1]]->assigned_device];
      if (!device_before(a, b)) break;
      int t = g->ids[k];
      g->ids[k] = g->ids[k - 1];
      g->ids[k - 1] = t;
    }
  size_t len = (size_t)g->n * RF_DEVICE_NAME_MAX + 1, used = 0;
  char *list = rf__malloc(len);
  RF_CHECK_ALLOC(list);
  list[0] = '\0';
  for (int i = 0; i < g->n; i++) {
    char dev[RF_DEVICE_NAME_MAX];
    rf__device_name_format(&devices[graph->nodes[g->ids[i]]->assigned_device],
                           dev, sizeof dev);
    used +=
        (size_t)snprintf(list + used, len - used, "%s%s", i ? "," : "", dev);
  }
  RF__LOG(RF_LOG_DEBUG, "collective: '%.200s' (%s): %d participants on %s",
          g->shared_name, collective_of(graph->nodes[g->ids[0]]), g->n, list);
  rf__attr_value v = rf__attr_string_ref(list);
  int root_at = 0; /* 1 + the root's position; 0: not rooted */
  for (int i = 0; i < g->n; i++) {
    const char *op = graph->nodes[g->ids[i]]->op->name;
    if (!strcmp(op, "_ReduceRecv") || !strcmp(op, "_BroadcastSend"))
      root_at = i + 1;
  }
  rf_status *st = NULL;
  for (int i = 0; i < g->n && !st; i++) {
    rf_node *n = graph->nodes[g->ids[i]];
    int task = devices[n->assigned_device].task, same = 0;
    for (int j = 0; j < g->n; j++)
      same += devices[graph->nodes[g->ids[j]]->assigned_device].task == task;
    rf__attr_value k = rf__attr_int(same), r = rf__attr_int(root_at);
    st = rf__attrs_set(&n->attrs, RF_COLLECTIVE_DEVICES_ATTR, &v);
    if (!st) st = rf__attrs_set(&n->attrs, RF_COLLECTIVE_TASK_DEVICES_ATTR, &k);
    if (!st && root_at)
      st = rf__attrs_set(&n->attrs, RF_COLLECTIVE_ROOT_ATTR, &r);
  }
  rf__free(list);
  return st;
}

bool rf__has_cross_task_collectives(const rf_graph *graph) {
  for (int id = 0; id < graph->num_ids; id++) {
    const rf_node *n = graph->nodes[id];
    int64_t same = 0, all = 0;
    if (!n || !rf__is_collective_participant(n) ||
        !rf__attrs_find(&n->attrs, RF_COLLECTIVE_TASK_DEVICES_ATTR))
      continue;
    rf_status *st =
        rf__attrs_get_int(&n->attrs, RF_COLLECTIVE_TASK_DEVICES_ATTR, &same);
    if (!st) st = rf__attrs_get_int(&n->attrs, "num_devices", &all);
    rf_status_free(st);
    if (!st && same < all) return true;
  }
  return false;
}

rf_status *rf__validate_collectives(rf_graph *graph,
                                    const rf__device_name *devices,
                                    int num_devices) {
  group *table, *g, *tmp;
  RF_CHECK(build_groups(graph, &table));
  rf_status *st = NULL;
  HASH_ITER(hh, table, g, tmp) {
    st = check_group(graph, g, devices, num_devices);
    if (!st) st = annotate_group(graph, g, devices);
    if (st) break;
  }
  groups_free(&table);
  return st;
}
