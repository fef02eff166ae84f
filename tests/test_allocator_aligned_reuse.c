/* tests/test_allocator_aligned_reuse.c - the default allocator hands a
 * cached block out again to a request with a stricter alignment than 64
 * bytes when the block is aligned so: a loop of such requests and frees
 * keeps one block, where each request used to take fresh memory and each
 * free grew the cache (1000 rounds of 100000 bytes at 4096: 115 MB cached,
 * none in use). */
#include <stdint.h>
#include <string.h>

#include "testutil.h"

/* 200 rounds of a request at 4096 bytes' alignment (a random size), each
 * freed before the next: every round gets the first round's block back,
 * with the alignment asked for, and the cache holds that one block. */
static void test_stricter_alignment_reuses_blocks(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  rf_allocator *a = rf_default_allocator();
  rf_default_allocator_trim();
  size_t cached0, used0, cached, used;
  rf_default_allocator_stats(&cached0, &used0);
  size_t size = 1000 + rf_test_rand(&rng) % 200000;
  void *first = NULL;
  for (int i = 0; i < 200; i++) {
    void *p = a->alloc(a->state, size, 4096);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 4096, 0);
    if (!first) first = p;
    assert_ptr_equal(p, first);
    memset(p, i & 0xff, size);
    a->free(a->state, p, size);
  }
  rf_default_allocator_stats(&cached, &used);
  assert_int_equal(used, used0);
  /* one block of the class: the size rounded up by at most 25% */
  assert_true(cached - cached0 <= size + size / 4);
  rf_default_allocator_trim();
}

/* A block aligned enough is found behind less aligned ones of its class
 * (freed after it, so ahead of it in the cache): the request takes a cached
 * block, no fresh one. */
static void test_aligned_block_found_in_the_class(void **state) {
  (void)state;
  rf_allocator *a = rf_default_allocator();
  rf_default_allocator_trim();
  void *aligned = a->alloc(a->state, 3000, 4096);
  assert_non_null(aligned);
  void *plain[8];
  for (int i = 0; i < 8; i++) {
    plain[i] = a->alloc(a->state, 3000, RF_TENSOR_ALIGNMENT);
    assert_non_null(plain[i]);
  }
  a->free(a->state, aligned, 3000);
  for (int i = 0; i < 8; i++) a->free(a->state, plain[i], 3000);
  size_t cached0, cached, used;
  rf_default_allocator_stats(&cached0, &used);
  void *again = a->alloc(a->state, 3000, 4096);
  assert_non_null(again);
  assert_int_equal((uintptr_t)again % 4096, 0);
  rf_default_allocator_stats(&cached, &used);
  assert_int_equal(cached, cached0 - 3072); /* 3000 bytes' class */
  a->free(a->state, again, 3000);
  rf_default_allocator_trim();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stricter_alignment_reuses_blocks),
      cmocka_unit_test(test_aligned_block_found_in_the_class),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
