/* kernels/cpu/sgemm_small.c - C = op(A) B with one short side, in AVX-512
 * tiles of 8 rows x 32 columns of C held in registers over the whole sum.
 *
 * Why not BLAS: OpenBLAS packs both operands on every call. With 16 rows (a
 * device's shard of a small batch) packing the 784 x 512 weights costs as
 * much as the product, and for the weight gradient (k = 16) it zeroes C
 * (beta = 0) before it adds into it, tripling the traffic over a C of 1.6
 * MB. Here the large operand is read in place once and C is written once.
 * Measured (CPU time of one call, best of 15, against OpenBLAS 0.3.21 on
 * one thread; the shapes of 4 devices at batch 64): A^T B with k = 16,
 * 784x512 and 512x256: 1.49x and 1.41x; A B with 16 rows, 16x784 * 784x512
 * and 16x512 * 512x256: 1.16x and 1.51x. With B prefetched (PREFETCH_ROWS),
 * A B stays ahead up to 64 rows (wall time, best of 20, B cached / cycling
 * over 8: 32x784 * 784x512 177 / 212 against 236 / 292 us, 64 rows 350 /
 * 415 against 368 / 442 us, 64x512 * 512x256 108 / 123 against 118 / 144
 * us), so it takes those; A^T B at k = 32 gained 5-7% and at 64 lost, and
 * `ringflow train` measured the same with it from k = 32, so it keeps k <=
 * 16. A C narrower than one tile (n < 32) goes to BLAS too (0.5-0.9x).
 * Needs AVX-512F; elsewhere MatMul keeps BLAS. */
#include "kernels/cpu/sgemm_small.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_TILES 1
#endif

#define TILE_ROWS 8
#define TILE_COLS 32 /* two vectors of 16 floats */
/* Rows of B ahead that a tile over a long sum prefetches: the strip's rows
 * are ldb apart (2 KiB for 512 columns), too far apart for the hardware
 * prefetchers, which follow accesses within a page. Measured (16 x 784 times
 * 784 x 512, one thread, best of 30, three runs): 105-126 -> 84-93 us with B
 * in the caches, 160-164 -> 118-122 us cycling over 8 Bs; 16 rows ahead
 * gave the same. */
#define PREFETCH_ROWS 8

#ifdef HAVE_AVX512_TILES

#define AVX512 __attribute__((target("avx512f")))

/* Rows r0.. of C's tile (R rows, columns j0..j0 + 32 masked by m0, m1):
 * c(r, j) = sum_p a(r, p) b(p, j) with a(r, p) = a[r * sar + p * sap] and
 * b(p, j) = b[p * ldb + j]. R is a constant where this is inlined, so the
 * accumulators live in registers. */
static inline __attribute__((always_inline)) AVX512 void tile(
    int R, bool prefetch, int64_t k, const float *a, int64_t sar, int64_t sap,
    const float *b, int64_t ldb, float *c, int64_t ldc, __mmask16 m0,
    __mmask16 m1) {
  __m512 acc[TILE_ROWS][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p++) {
    const float *bp = b + p * ldb;
    if (prefetch && p + PREFETCH_ROWS < k) {
      _mm_prefetch((const char *)(bp + PREFETCH_ROWS * ldb), _MM_HINT_T0);
      _mm_prefetch((const char *)(bp + PREFETCH_ROWS * ldb + 16), _MM_HINT_T0);
    }
    __m512 b0 = _mm512_maskz_loadu_ps(m0, bp);
    __m512 b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
    const float *ap = a + p * sap;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      __m512 x = _mm512_set1_ps(ap[r * sar]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

static AVX512 void tile_rows(int R, bool prefetch, int64_t k, const float *a,
                             int64_t sar, int64_t sap, const float *b,
                             int64_t ldb, float *c, int64_t ldc, __mmask16 m0,
                             __mmask16 m1) {
  /* one inlined tile per row count, each with its registers */
  if (R == 8)
    tile(8, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 7)
    tile(7, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 6)
    tile(6, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 5)
    tile(5, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 4)
    tile(4, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 3)
    tile(3, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 2)
    tile(2, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
  else if (R == 1)
    tile(1, prefetch, k, a, sar, sap, b, ldb, c, ldc, m0, m1);
}

/* Masks of the (up to) 32 columns from j0 of n. */
static void col_masks(int64_t j0, int64_t n, __mmask16 *m0, __mmask16 *m1) {
  int64_t w = n - j0 < TILE_COLS ? n - j0 : TILE_COLS;
  *m0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
  *m1 = (__mmask16)(w <= 16 ? 0 : w >= 32 ? 0xFFFF : (1u << (w - 16)) - 1);
}

static AVX512 void sgemm_tiles(const rf__matmul_dims *d, const float *a,
                               const float *b, float *c, int64_t ldc) {
  /* a(r, p) is op(A)'s element: A[r][p], or A[p][r] when transposed */
  int64_t sar = d->ta ? 1 : d->lda, sap = d->ta ? d->lda : 1;
  __mmask16 m0, m1;
  if (!d->ta) {
    /* Few rows: for each column strip (k x 32 of B, kept in cache), every
     * row group; B is read from memory once. */
    for (int64_t j0 = 0; j0 < d->n; j0 += TILE_COLS) {
      col_masks(j0, d->n, &m0, &m1);
      for (int64_t r0 = 0; r0 < d->m; r0 += TILE_ROWS) {
        int R = (int)(d->m - r0 < TILE_ROWS ? d->m - r0 : TILE_ROWS);
        tile_rows(R, true, d->k, a + r0 * sar, sar, sap, b + j0, d->ldb,
                  c + r0 * ldc + j0, ldc, m0, m1);
      }
    }
    return;
  }
  /* Short sums: B (k x n) stays in cache; C is written row group by row
   * group, once. */
  for (int64_t r0 = 0; r0 < d->m; r0 += TILE_ROWS) {
    int R = (int)(d->m - r0 < TILE_ROWS ? d->m - r0 : TILE_ROWS);
    for (int64_t j0 = 0; j0 < d->n; j0 += TILE_COLS) {
      col_masks(j0, d->n, &m0, &m1);
      tile_rows(R, false, d->k, a + r0 * sar, sar, sap, b + j0, d->ldb,
                c + r0 * ldc + j0, ldc, m0, m1);
    }
  }
}

bool rf__sgemm_small_fits(const rf__matmul_dims *d) {
  /* narrow C wastes most of each 32-column tile: BLAS does better */
  if (d->tb || d->n < TILE_COLS) return false;
  if (d->ta ? d->k > RF_SGEMM_SMALL_K : d->m > RF_SGEMM_SMALL_M) return false;
  return __builtin_cpu_supports("avx512f");
}

void rf__sgemm_small(const rf__matmul_dims *d, const float *a, const float *b,
                     float *c, int64_t ldc) {
  sgemm_tiles(d, a, b, c, ldc);
}

#else /* no AVX-512 tiles on this compiler / architecture: BLAS does it all */

bool rf__sgemm_small_fits(const rf__matmul_dims *d) {
  (void)d;
  return false;
}

void rf__sgemm_small(const rf__matmul_dims *d, const float *a, const float *b,
                     float *c, int64_t ldc) {
  (void)d, (void)a, (void)b, (void)c, (void)ldc;
}

#endif
