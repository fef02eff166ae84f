/* graph/name_index.c - see name_index.h. Linear probing with backward-shift
 * deletion (no tombstones), so a lookup stops at the first empty slot and
 * removals do not slow later lookups. Growth rehashes from the stored hashes:
 * names are never read again. */
#include "graph/name_index.h"

#include <string.h>

#include "core/mem.h"
#include "graph/graph.h"

#define MIN_SLOTS 16u

/* FNV-1a, then a murmur3 finaliser: names often differ only in their last
 * characters ("MatMul_17", "MatMul_18"), and the finaliser spreads that over
 * every bit the mask keeps. */
uint32_t rf__name_hash(const char *s, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return (uint32_t)h;
}

static void clear_slots(rf__name_slot *s, size_t n) {
  for (size_t i = 0; i < n; i++) s[i] = (rf__name_slot){0, -1};
}

static void put(rf__name_slot *slots, uint32_t mask, rf__name_slot e) {
  uint32_t i = e.hash & mask;
  while (slots[i].id >= 0) i = (i + 1) & mask;
  slots[i] = e;
}

/* Makes room for one more entry at a load of at most one half. */
static int reserve(rf__name_index *x) {
  size_t cap = x->slots ? (size_t)x->mask + 1 : 0;
  if ((size_t)(x->count + 1) * 2 <= cap) return 0;
  size_t ncap = cap ? cap * 2 : MIN_SLOTS;
  if (ncap > ((size_t)1 << 31)) return -1;
  rf__name_slot *s = rf__malloc(sizeof *s * ncap);
  if (!s) return -1;
  clear_slots(s, ncap);
  for (size_t i = 0; i < cap; i++)
    if (x->slots[i].id >= 0) put(s, (uint32_t)(ncap - 1), x->slots[i]);
  rf__free(x->slots);
  x->slots = s;
  x->mask = (uint32_t)(ncap - 1);
  return 0;
}

int rf__name_index_find(const rf__name_index *x, rf_node *const *nodes,
                        const char *s, size_t len) {
  if (!x->slots) return -1;
  uint32_t h = rf__name_hash(s, len);
  for (uint32_t i = h & x->mask; x->slots[i].id >= 0; i = (i + 1) & x->mask) {
    if (x->slots[i].hash != h) continue;
    const char *name = nodes[x->slots[i].id]->name;
    if (strncmp(name, s, len) == 0 && name[len] == '\0') return x->slots[i].id;
  }
  return -1;
}

int rf__name_index_add(rf__name_index *x, const char *name, int id) {
  if (reserve(x)) return -1;
  put(x->slots, x->mask,
      (rf__name_slot){rf__name_hash(name, strlen(name)), id});
  x->count++;
  return 0;
}

void rf__name_index_remove(rf__name_index *x, const char *name, int id) {
  if (!x->slots) return;
  uint32_t m = x->mask, i = rf__name_hash(name, strlen(name)) & m;
  while (x->slots[i].id >= 0 && x->slots[i].id != id) i = (i + 1) & m;
  if (x->slots[i].id < 0) return; /* not there */
  /* Backward shift: pull later entries of the run into the hole when their
   * home slot does not lie after the hole. */
  for (uint32_t j = (i + 1) & m; x->slots[j].id >= 0; j = (j + 1) & m) {
    uint32_t home = x->slots[j].hash & m;
    if (((j - home) & m) >= ((j - i) & m)) {
      x->slots[i] = x->slots[j];
      i = j;
    }
  }
  x->slots[i] = (rf__name_slot){0, -1};
  x->count--;
}

int rf__name_index_copy(rf__name_index *dst, const rf__name_index *src) {
  rf__name_index c = {NULL, 0, src->count};
  if (src->slots) {
    size_t n = (size_t)src->mask + 1;
    c.slots = rf__malloc(sizeof *c.slots * n);
    if (!c.slots) return -1;
    memcpy(c.slots, src->slots, sizeof *c.slots * n);
    c.mask = src->mask;
  }
  *dst = c;
  return 0;
}

void rf__name_index_free(rf__name_index *x) {
  rf__free(x->slots);
  *x = (rf__name_index){NULL, 0, 0};
}

void rf__name_index_displacement(const rf__name_index *x, uint32_t *max,
                                 uint64_t *sum) {
  *max = 0;
  *sum = 0;
  for (size_t i = 0; x->slots && i <= x->mask; i++) {
    if (x->slots[i].id < 0) continue;
    uint32_t d = ((uint32_t)i - (x->slots[i].hash & x->mask)) & x->mask;
    if (d > *max) *max = d;
    *sum += d;
  }
}
