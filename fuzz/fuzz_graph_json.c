/* fuzz/fuzz_graph_json.c - libFuzzer harness for graph files (docs/FUZZING.md).
 *
 * Any input must give a graph or an error, never a crash, leak or undefined
 * behaviour (built with ASan and UBSan). A graph that loads must also keep
 * the round-trip promise: save, load and save again gives the same text; its
 * DOT export works; and lowering it (placement and collective passes on four
 * virtual CPU devices) gives a graph or an error, and a lowered graph round
 * trips too. A broken promise aborts, which libFuzzer reports as a crash. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/graph_io.h"
#include "ringflow/ringflow.h"

static void die(const char *what, const rf_status *st) {
  fprintf(stderr, "fuzz_graph_json: %s: %s\n", what,
          st ? rf_status_message(st) : "");
  abort();
}

/* g must save, load back and save to the same text. */
static void check_round_trip(const rf_graph *g, const char *what) {
  char *a = NULL, *b = NULL;
  rf_status *st = rf_graph_to_json(g, &a);
  /* Strings that are not UTF-8 cannot come from a JSON file. */
  if (st) die(what, st);
  rf_graph *g2 = NULL;
  st = rf_graph_from_json(a, strlen(a), &g2);
  if (st) {
    fprintf(stderr, "%s\n", a);
    die(what, st);
  }
  st = rf_graph_to_json(g2, &b);
  if (st) die(what, st);
  if (strcmp(a, b) != 0) {
    fprintf(stderr, "first:\n%s\nsecond:\n%s\n", a, b);
    die(what, NULL);
  }
  if (rf_graph_num_nodes(g) != rf_graph_num_nodes(g2)) die(what, NULL);
  rf_string_free(a);
  rf_string_free(b);
  rf_graph_free(g2);
}

/* Structure-aware mutation: half the time, one integer of the file (a dim,
 * num_devices, an index) becomes a value at a limit of int32, int64 or
 * uint64. Byte mutations alone rarely turn a dim into 2^62 and keep it, as
 * the all-gather overflow needed (2 x 2^62 rows): libFuzzer keeps only
 * inputs with new coverage, and an overflow adds none until it crashes. */
static const char *const limits[] = {
    "0",
    "1",
    "-1",
    "2",
    "3",
    "4",
    "-2",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "1099511627776",
    "2305843009213693952",
    "4611686018427387904",
    "4611686018427387905",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551616",
};

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed);

static bool digit(uint8_t c) { return c >= '0' && c <= '9'; }

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed) {
  uint64_t r = (uint64_t)seed * 6364136223846793005ULL + 1442695040888963407ULL;
  size_t count = 0;
  for (size_t i = 0; i < size; i++)
    if (digit(data[i]) && (i == 0 || !digit(data[i - 1]))) count++;
  if ((r >> 62) & 1 || count == 0)
    return LLVMFuzzerMutate(data, size, max_size);
  size_t k = (size_t)((r >> 20) % count), start = 0;
  for (size_t i = 0, seen = 0; i < size; i++)
    if (digit(data[i]) && (i == 0 || !digit(data[i - 1])) && seen++ == k) {
      start = i;
      break;
    }
  if (start > 0 && data[start - 1] == '-') start--;
  size_t end = start + 1;
  while (end < size && digit(data[end])) end++;
  const char *v = limits[(r >> 40) % (sizeof limits / sizeof *limits)];
  size_t vl = strlen(v), grown = size - (end - start) + vl;
  if (grown > max_size) return LLVMFuzzerMutate(data, size, max_size);
  memmove(data + start + vl, data + end, size - end);
  memcpy(data + start, v, vl);
  return grown;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rf_graph *g = NULL;
  rf_status *st = rf_graph_from_json((const char *)data, size, &g);
  if (st) {
    if (g) die("an error left a graph behind", st);
    if (rf_status_code(st) == 0 || !rf_status_message(st)[0])
      die("an error without a message", st);
    rf_status_free(st);
    return 0;
  }
  check_round_trip(g, "loaded graph");
  char *dot = NULL;
  st = rf_graph_to_dot(g, &dot);
  if (st) die("DOT export", st);
  rf_string_free(dot);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  o.num_threads = 1;
  rf_graph *lowered = NULL;
  st = rf_graph_lower(g, &o, &lowered);
  if (!st) check_round_trip(lowered, "lowered graph");
  rf_status_free(st);
  rf_graph_free(lowered);
  rf_graph_free(g);
  return 0;
}
