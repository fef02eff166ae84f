/* kernels/cpu/conv_dnnl.c - see conv_dnnl.h. Primitives are made once per
 * (kind, geometry, images a block) and kept for the process: making one
 * costs milliseconds (jit code generation), running one a step reuses it.
 * Each keeps its scratchpad out of oneDNN (user mode), so pool threads run
 * the same primitive at once on their own scratch. */
#include "kernels/cpu/conv_dnnl.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "device/device.h"

#ifndef RF_HAVE_DNNL

rf_status *rf__conv_dnnl_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                             const rf__conv_geom *g, const float *x,
                             const float *w, const float *dy, float *out,
                             bool *done) {
  (void)ctx, (void)kind, (void)g, (void)x, (void)w, (void)dy, (void)out;
  *done = false;
  return NULL;
}

#else

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

/* libgomp's (oneDNN's OpenMP); declared here so no OpenMP compiler flag or
 * omp.h is needed. */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

/* One primitive: the convolution, and the reorder between the op's plain
 * filter (HWIO or OHWI) and the layout oneDNN chose (NULL when they are the
 * same). */
typedef struct prim {
  rf__conv_dnnl_kind kind;
  rf__conv_geom g; /* g.n: images a block */
  dnnl_primitive_t conv, reorder;
  dnnl_memory_desc_t act_in, act_out, filt; /* filt: oneDNN's */
  dnnl_memory_desc_t plain_filt, scratch;
  size_t filt_bytes, scratch_bytes;
  bool failed; /* oneDNN has no implementation: im2col */
  struct prim *next;
} prim;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static prim *cache;
static dnnl_engine_t engine;
static int enabled = -1; /* -1: not read yet */

static bool same_geom(const rf__conv_geom *a, const rf__conv_geom *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

/* Plain NHWC activation (n, c, h, w logical) and HWIO / OHWI filter
 * descs. */
static bool md_tag(dnnl_memory_desc_t *md, int64_t a, int64_t b, int64_t c,
                   int64_t d, dnnl_format_tag_t tag) {
  dnnl_dims_t dims = {a, b, c, d};
  return dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, tag) ==
         dnnl_success;
}

/* The right padding that makes oneDNN's output size formula give oh. */
static int64_t pad_after(int64_t in, int64_t out, int64_t k, int64_t s,
                         int64_t d, int64_t before) {
  int64_t p = (out - 1) * s + (k - 1) * d + 1 - in - before;
  return p > 0 ? p : 0;
}

/* The implementation oneDNN lists first, unless it is one measured slower
 * on ringflow's blocks (one thread, NHWC) than a later one in the list; the
 * list is fixed for a build and CPU, so the choice is too. Forward with
 * fewer than 8 input channels (the CNN's first layer, 1 channel; 32 NHWC
 * images, one thread, oneDNN 2.6): brgconv, listed first, 0.43 ms against
 * jit:avx512_core's 0.34. NULL: the first. */
static const char *slower_impl(rf__conv_dnnl_kind kind,
                               const rf__conv_geom *g) {
  return kind == RF_CONV_DNNL_FORWARD && g->c < 8 ? "brgconv" : NULL;
}

/* dnnl_primitive_desc_create, skipping implementations whose name starts
 * with `avoid` (NULL: none) and the reference one; the first in oneDNN's
 * order when every implementation is skipped. */
static dnnl_status_t pd_create(dnnl_primitive_desc_t *pd,
                               const_dnnl_op_desc_t d,
                               const_dnnl_primitive_attr_t attr,
                               const_dnnl_primitive_desc_t hint,
                               const char *avoid) {
  if (!avoid) return dnnl_primitive_desc_create(pd, d, attr, engine, hint);
  dnnl_primitive_desc_iterator_t it;
  dnnl_status_t st =
      dnnl_primitive_desc_iterator_create(&it, d, attr, engine, hint);
  if (st != dnnl_success) return st;
  *pd = NULL;
  do {
    dnnl_primitive_desc_t c = dnnl_primitive_desc_iterator_fetch(it);
    const char *impl = NULL;
    if (!c) break;
    if (dnnl_primitive_desc_query(c, dnnl_query_impl_info_str, 0, &impl) ==
            dnnl_success &&
        impl && strncmp(impl, avoid, strlen(avoid)) != 0 &&
        strncmp(impl, "ref", 3) != 0) {
      *pd = c;
      break;
    }
    dnnl_primitive_desc_destroy(c);
  } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  if (*pd) return dnnl_success;
  return dnnl_primitive_desc_create(pd, d, attr, engine, hint);
}

/* Fills p's primitives; false when oneDNN has none for it. Runs with this
 * thread's OpenMP threads at 1 so the kernels are generated for one. */
static bool prim_make(prim *p) {
  const rf__conv_geom *g = &p->g;
  dnnl_memory_desc_t src, dst, wany, wplain;
  if (!md_tag(&src, g->n, g->c, g->h, g->w, dnnl_nhwc) ||
      !md_tag(&dst, g->n, g->oc, g->oh, g->ow, dnnl_nhwc) ||
      !md_tag(&wany, g->oc, g->c, g->kh, g->kw, dnnl_format_tag_any) ||
      !md_tag(&wplain, g->oc, g->c, g->kh, g->kw,
              g->ohwi ? dnnl_ohwi : dnnl_hwio))
    return false;
  dnnl_dims_t st = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1};
  dnnl_dims_t pl = {g->pt, g->pl};
  dnnl_dims_t pr = {pad_after(g->h, g->oh, g->kh, g->sh, g->dh, g->pt),
                    pad_after(g->w, g->ow, g->kw, g->sw, g->dw, g->pl)};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL, rpd = NULL;
  bool ok = false;
  dnnl_convolution_desc_t fd, cd;
  const char *avoid = slower_impl(p->kind, g);
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return false;
  if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))
    goto out;
  /* backward primitives take the forward one as their hint */
  if (dnnl_dilated_convolution_forward_desc_init(
          &fd, dnnl_forward_training, dnnl_convolution_direct, &src, &wany,
          NULL, &dst, st, dil, pl, pr) ||
      pd_create(&fpd, &fd, attr, NULL,
                p->kind == RF_CONV_DNNL_FORWARD ? avoid : NULL))
    goto out;
  if (p->kind == RF_CONV_DNNL_FORWARD) {
    pd = fpd;
    fpd = NULL;
  } else if (p->kind == RF_CONV_DNNL_INPUT_GRAD) {
    if (dnnl_dilated_convolution_backward_data_desc_init(
            &cd, dnnl_convolution_direct, &src, &wany, &dst, st, dil, pl, pr) ||
        pd_create(&pd, &cd, attr, fpd, avoid))
      goto out;
  } else {
    if (dnnl_dilated_convolution_backward_weights_desc_init(
            &cd, dnnl_convolution_direct, &src, &wany, NULL, &dst, st, dil, pl,
            pr) ||
        pd_create(&pd, &cd, attr, fpd, avoid))
      goto out;
  }
  dnnl_query_t wq = p->kind == RF_CONV_DNNL_FILTER_GRAD
                        ? dnnl_query_diff_weights_md
                        : dnnl_query_weights_md;
  p->filt = *dnnl_primitive_desc_query_md(pd, wq, 0);
  p->plain_filt = wplain;
  p->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p->filt_bytes = dnnl_memory_desc_get_size(&p->filt);
  p->scratch_bytes = dnnl_memory_desc_get_size(&p->scratch);
  /* the activations must have stayed NHWC: an implementation that wants
   * another layout would need reorders of whole tensors */
  dnnl_query_t in_q = p->kind == RF_CONV_DNNL_INPUT_GRAD
                          ? dnnl_query_diff_dst_md
                          : dnnl_query_src_md;
  dnnl_query_t out_q = p->kind == RF_CONV_DNNL_FORWARD ? dnnl_query_dst_md
                       : p->kind == RF_CONV_DNNL_INPUT_GRAD
                           ? dnnl_query_diff_src_md
                           : dnnl_query_diff_dst_md;
  p->act_in = *dnnl_primitive_desc_query_md(pd, in_q, 0);
  p->act_out = *dnnl_primitive_desc_query_md(pd, out_q, 0);
  if (!dnnl_memory_desc_equal(
          &p->act_in, p->kind == RF_CONV_DNNL_INPUT_GRAD ? &dst : &src) ||
      !dnnl_memory_desc_equal(&p->act_out,
                              p->kind == RF_CONV_DNNL_FORWARD      ? &dst
                              : p->kind == RF_CONV_DNNL_INPUT_GRAD ? &src
                                                                   : &dst))
    goto out;
  if (dnnl_primitive_create(&p->conv, pd)) goto out;
  if (!dnnl_memory_desc_equal(&p->filt, &wplain)) {
    const dnnl_memory_desc_t *from =
        p->kind == RF_CONV_DNNL_FILTER_GRAD ? &p->filt : &wplain;
    const dnnl_memory_desc_t *to =
        p->kind == RF_CONV_DNNL_FILTER_GRAD ? &wplain : &p->filt;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine,
                                           NULL) ||
        dnnl_primitive_create(&p->reorder, rpd)) {
      dnnl_primitive_destroy(p->conv);
      p->conv = NULL;
      goto out;
    }
  }
  ok = true;
out:
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_attr_destroy(attr);
  return ok;
}

/* The cached primitive for (kind, g with n images); NULL for no memory. */
static prim *prim_get(rf__conv_dnnl_kind kind, const rf__conv_geom *g,
                      int64_t n) {
  rf__conv_geom key = *g;
  key.n = n;
  pthread_mutex_lock(&cache_mu);
  prim *p = cache;
  while (p && !(p->kind == kind && same_geom(&p->g, &key))) p = p->next;
  /* plain calloc: the cache lives as long as the process, outside the
   * library's allocation accounting (rf_debug_live_allocations) */
  if (!p && (p = calloc(1, sizeof *p))) {
    p->kind = kind;
    p->g = key;
    p->failed = !prim_make(p);
    p->next = cache;
    cache = p;
  }
  pthread_mutex_unlock(&cache_mu);
  return p;
}

static bool run_prim(dnnl_primitive_t prim_, dnnl_stream_t s, int nargs,
                     const dnnl_exec_arg_t *args) {
  return dnnl_primitive_execute(prim_, s, nargs, args) == dnnl_success &&
         dnnl_stream_wait(s) == dnnl_success;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, const void *data) {
  dnnl_memory_t m = NULL;
  if (dnnl_memory_create(&m, md, engine, (void *)data) != dnnl_success)
    return NULL;
  return m;
}

/* Bytes of a known pattern after each block's scratchpad, checked after the
 * block ran: oneDNN writing past the size it asked for (as in the case
 * below, issue #6035) becomes an INTERNAL error naming it instead of a
 * corrupted heap. */
#define CANARY 256
#define CANARY_BYTE 0xA5

static bool canary_intact(const unsigned char *c) {
  for (int i = 0; i < CANARY; i++)
    if (c[i] != CANARY_BYTE) return false;
  return true;
}

typedef struct job {
  rf__conv_dnnl_kind kind;
  const rf__conv_geom *g;
  prim *full, *last; /* blocks of `per` images; the last block's */
  int64_t per, n_blocks;
  const float *x, *dy;
  const void *filt; /* forward, input grad: the filter in p->filt */
  float *out;
  char *scratch;  /* one a block, max_scratch + CANARY each */
  float *partial; /* filter grad: oneDNN-layout dW a block, then plain */
  size_t max_scratch;
  bool failed;
  bool overrun; /* oneDNN wrote into a canary */
} job;

/* Runs p on one block's images. */
static bool block_run(job *j, prim *p, int64_t blk) {
  const rf__conv_geom *g = j->g;
  int64_t first = blk * j->per;
  size_t in_img = (size_t)(g->h * g->w * g->c);
  size_t out_img = (size_t)(g->oh * g->ow * g->oc);
  dnnl_stream_t s = NULL;
  if (dnnl_stream_create(&s, engine, dnnl_stream_default_flags)) return false;
  const float *a_in = j->kind == RF_CONV_DNNL_INPUT_GRAD
                          ? j->dy + (size_t)first * out_img
                          : j->x + (size_t)first * in_img;
  void *a_out =
      j->kind == RF_CONV_DNNL_FORWARD ? j->out + (size_t)first * out_img
      : j->kind == RF_CONV_DNNL_INPUT_GRAD
          ? j->out + (size_t)first * in_img
          : (void *)(j->dy + (size_t)first * out_img); /* read: diff_dst */
  void *wbuf = j->kind == RF_CONV_DNNL_FILTER_GRAD
                   ? (char *)j->partial + (size_t)blk * j->full->filt_bytes
                   : (void *)j->filt;
  dnnl_memory_t mi = mem(&p->act_in, a_in), mo = mem(&p->act_out, a_out);
  dnnl_memory_t mw = mem(&p->filt, wbuf);
  char *scratch = j->scratch + (size_t)blk * (j->max_scratch + CANARY);
  dnnl_memory_t ms = mem(&p->scratch, scratch);
  bool ok = mi && mo && mw && ms;
  if (ok) {
    dnnl_exec_arg_t a[4];
    if (j->kind == RF_CONV_DNNL_FORWARD) {
      a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mi};
      a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
      a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mo};
    } else if (j->kind == RF_CONV_DNNL_INPUT_GRAD) {
      a[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mi};
      a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
      a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, mo};
    } else {
      a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mi};
      a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, mw};
      a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mo};
    }
    a[3] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
    unsigned char *canary = (unsigned char *)scratch + j->max_scratch;
    memset(canary, CANARY_BYTE, CANARY);
    ok = run_prim(p->conv, s, 4, a);
    if (!canary_intact(canary)) {
      __atomic_store_n(&j->overrun, true, __ATOMIC_RELAXED);
      ok = false;
    }
  }
  dnnl_memory_destroy(mi), dnnl_memory_destroy(mo);
  dnnl_memory_destroy(mw), dnnl_memory_destroy(ms);
  dnnl_stream_destroy(s);
  return ok;
}

static void blocks(void *arg, int64_t b0, int64_t b1) {
  job *j = arg;
  int was = omp_get_max_threads();
  omp_set_num_threads(1); /* the pool is the parallelism */
  for (int64_t b = b0; b < b1; b++) {
    prim *p = b == j->n_blocks - 1 ? j->last : j->full;
    if (!block_run(j, p, b))
      __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
  }
  omp_set_num_threads(was); /* the calling thread may be the user's */
}

/* Reorders between the plain filter (HWIO or OHWI) and p's layout (direction as
 * p->reorder was made); a plain copy when the layouts agree. */
static bool filt_reorder(prim *p, const void *from, void *to) {
  if (!p->reorder) {
    memcpy(to, from, p->filt_bytes);
    return true;
  }
  const dnnl_memory_desc_t *fmd =
      p->kind == RF_CONV_DNNL_FILTER_GRAD ? &p->filt : &p->plain_filt;
  const dnnl_memory_desc_t *tmd =
      p->kind == RF_CONV_DNNL_FILTER_GRAD ? &p->plain_filt : &p->filt;
  dnnl_stream_t s = NULL;
  if (dnnl_stream_create(&s, engine, dnnl_stream_default_flags)) return false;
  dnnl_memory_t mf = mem(fmd, from), mt = mem(tmd, to);
  bool ok = mf && mt;
  if (ok) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, mf}, {DNNL_ARG_TO, mt}};
    ok = run_prim(p->reorder, s, 2, a);
  }
  dnnl_memory_destroy(mf), dnnl_memory_destroy(mt);
  dnnl_stream_destroy(s);
  return ok;
}

static bool want_dnnl(void) {
  pthread_mutex_lock(&cache_mu);
  if (enabled < 0) {
    const char *e = getenv("RF_CPU_CONV");
    enabled = !(e && strcmp(e, "im2col") == 0) &&
              dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success;
  }
  pthread_mutex_unlock(&cache_mu);
  return enabled == 1;
}

/* Runs kind on g through oneDNN's primitives split over the pool (the
 * module's comment); *done false where oneDNN does not take it. */
static rf_status *run_split(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                            const rf__conv_geom *g, const float *x,
                            const float *w, const float *dy, float *out,
                            bool *done) {
  *done = false;
  if (!want_dnnl() || g->n <= 0) return NULL;
  /* oneDNN's input gradient vectorises over the input's channels: with one
   * channel (the CNN's first layer) its jit:avx512_core took 2.7x im2col's
   * CPU time (bench_conv_cpu_vs_onednn, 11.3 against 4.2 ms at batch 64),
   * and the fastest it lists, x64:gemm:jit, 1.84 against im2col's 1.64 ms
   * (batch 64, 2 pool threads; session 12) */
  if (kind == RF_CONV_DNNL_INPUT_GRAD && g->c < 8) return NULL;
  /* oneDNN's 1x1 filter gradient with a stride (its reduce-to-unit-stride
   * copy of the input) writes past the scratchpad it asks for when the
   * input has fewer channels than its block, 8 (jit:avx2) or 16 (avx512),
   * and is NHWC: oneDNN issue #6035, open upstream and present in Debian's
   * 2.6. Measured here (session 15, AVX2): 16 to 88 bytes past, for every
   * such geometry with an even input size in a sweep of 4032 geometries,
   * and never for another geometry or kind; it corrupted the heap in
   * test_fuse_conv_epilogues. Those take im2col. */
  if (kind == RF_CONV_DNNL_FILTER_GRAD && g->kh == 1 && g->kw == 1 &&
      (g->sh > 1 || g->sw > 1) && g->c < 16)
    return NULL;
  int64_t threads = ctx->device && ctx->device->pool
                        ? rf__threadpool_size(ctx->device->pool)
                        : 1;
  job j = {.kind = kind, .g = g, .x = x, .dy = dy, .out = out};
  j.n_blocks = g->n < threads ? g->n : threads;
  if (j.n_blocks < 1) j.n_blocks = 1;
  j.per = (g->n + j.n_blocks - 1) / j.n_blocks;
  j.n_blocks = (g->n + j.per - 1) / j.per;
  int was = omp_get_max_threads();
  omp_set_num_threads(1); /* primitives are generated for one thread */
  j.full = prim_get(kind, g, j.per);
  j.last = prim_get(kind, g, g->n - (j.n_blocks - 1) * j.per);
  omp_set_num_threads(was);
  if (!j.full || !j.last)
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for the convolution's oneDNN primitive");
  /* one filter buffer serves every block: their layouts must agree */
  if (j.full->failed || j.last->failed ||
      !dnnl_memory_desc_equal(&j.full->filt, &j.last->filt))
    return NULL;
  j.max_scratch = j.full->scratch_bytes > j.last->scratch_bytes
                      ? j.full->scratch_bytes
                      : j.last->scratch_bytes;
  size_t fb = j.full->filt_bytes;
  bool grad = kind == RF_CONV_DNNL_FILTER_GRAD;
  /* filter grad: one oneDNN-layout dW a block, then one plain one a block */
  size_t part =
      grad ? (fb + (size_t)(g->kh * g->kw * g->c * g->oc) * sizeof(float)) *
                 (size_t)j.n_blocks
           : fb;
  j.scratch = rf__malloc((j.max_scratch + CANARY) * (size_t)j.n_blocks);
  void *wbuf = rf__malloc(part ? part : 1);
  if (!j.scratch || !wbuf) {
    rf__free(j.scratch), rf__free(wbuf);
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for the convolution's oneDNN scratch");
  }
  bool ok = true;
  if (grad)
    j.partial = wbuf;
  else {
    ok = filt_reorder(j.full, w, wbuf);
    j.filt = wbuf;
  }
  if (ok) {
    int64_t cost = j.per * g->oh * g->ow * g->kh * g->kw * g->c * g->oc;
    rf__kernel_parallel_for(ctx, j.n_blocks, cost > 0 ? cost : 1, blocks, &j);
    ok = !j.failed;
  }
  if (ok && grad) {
    /* each block's dW to the plain layout, summed in block order */
    int64_t m = g->kh * g->kw * g->c * g->oc;
    float *plain = (float *)((char *)wbuf + fb * (size_t)j.n_blocks);
    for (int64_t b = 0; ok && b < j.n_blocks; b++) {
      float *dst = b == 0 ? out : plain;
      ok = filt_reorder(j.full, (char *)wbuf + (size_t)b * fb, dst);
      if (ok && b > 0)
        for (int64_t i = 0; i < m; i++) out[i] += plain[i];
    }
  }
  rf__free(j.scratch), rf__free(wbuf);
  if (j.overrun)
    return rf__kernel_error(
        ctx, RF_INTERNAL,
        "oneDNN wrote past the scratchpad it asked for (%s, %lldx%lld "
        "filter, stride %lldx%lld, %lld input channels): a oneDNN defect; "
        "RF_CPU_CONV=im2col avoids oneDNN",
        kind == RF_CONV_DNNL_FORWARD      ? "forward"
        : kind == RF_CONV_DNNL_INPUT_GRAD ? "input gradient"
                                          : "filter gradient",
        (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw,
        (long long)g->c);
  if (!ok)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "oneDNN failed to run the convolution");
  *done = true;
  return NULL;
}

/* Input channels from which the input gradient runs as a forward convolution
 * (below): the forward's outputs, a vector of 16 a step. With 8 (28x28x8 5x5 to
 * 16, batch 32) it measured 5% slower than the jit input gradient; with 16, 32
 * (5x5) and 64 (3x3) even to 20% faster. */
#define FLIP_MIN_CHANNELS 16

/* The input gradient of a stride-1 convolution is a forward convolution of
 * dy with the filter flipped in both window axes and its channel axes
 * swapped, padded by the window's reach less the forward's padding. With
 * NHWC tensors oneDNN 2.6 runs that forward with its brgemm kernel, and
 * the input gradient with an older jit one that measured slower (issue 17:
 * bench_conv_cpu_vs_onednn, 14x14x32 5x5 to 64 channels). Fills gf; false
 * where the geometry has no such twin (strides, a padding past the
 * window's reach). */
static bool flipped_geom(const rf__conv_geom *g, rf__conv_geom *gf) {
  int64_t reach_h = (g->kh - 1) * g->dh, reach_w = (g->kw - 1) * g->dw;
  int64_t pb = pad_after(g->h, g->oh, g->kh, g->sh, g->dh, g->pt);
  int64_t pr = pad_after(g->w, g->ow, g->kw, g->sw, g->dw, g->pl);
  if (g->sh != 1 || g->sw != 1 || g->pt > reach_h || g->pl > reach_w ||
      pb > reach_h || pr > reach_w)
    return false;
  *gf = (rf__conv_geom){.n = g->n,
                        .h = g->oh,
                        .w = g->ow,
                        .c = g->oc,
                        .kh = g->kh,
                        .kw = g->kw,
                        .oc = g->c,
                        .oh = g->h,
                        .ow = g->w,
                        .sh = 1,
                        .sw = 1,
                        .dh = g->dh,
                        .dw = g->dw,
                        .pt = reach_h - g->pt,
                        .pl = reach_w - g->pl,
                        .ohwi = 0};
  return true;
}

/* w (HWIO or OHWI as g->ohwi) flipped and transposed into wf, HWIO for gf:
 * wf[i][j][o][c] = w[kh-1-i][kw-1-j][c][o]. */
static void flip_filter(const rf__conv_geom *g, const float *w, float *wf) {
  int64_t kh = g->kh, kw = g->kw, c = g->c, oc = g->oc;
  for (int64_t i = 0; i < kh; i++)
    for (int64_t j = 0; j < kw; j++) {
      float *dst = wf + (i * kw + j) * oc * c;
      int64_t fi = kh - 1 - i, fj = kw - 1 - j;
      if (g->ohwi) /* w[o][fi][fj][ci] */
        for (int64_t o = 0; o < oc; o++)
          for (int64_t ci = 0; ci < c; ci++)
            dst[o * c + ci] = w[((o * kh + fi) * kw + fj) * c + ci];
      else /* w[fi][fj][ci][o] */
        for (int64_t ci = 0; ci < c; ci++) {
          const float *src = w + (fi * kw + fj) * c * oc + ci * oc;
          for (int64_t o = 0; o < oc; o++) dst[o * c + ci] = src[o];
        }
    }
}

rf_status *rf__conv_dnnl_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                             const rf__conv_geom *g, const float *x,
                             const float *w, const float *dy, float *out,
                             bool *done) {
  rf__conv_geom gf;
  *done = false;
  if (kind != RF_CONV_DNNL_INPUT_GRAD || g->c < FLIP_MIN_CHANNELS ||
      g->n <= 0 || !want_dnnl() || !flipped_geom(g, &gf))
    return run_split(ctx, kind, g, x, w, dy, out, done);
  size_t m = (size_t)(g->kh * g->kw * g->c * g->oc);
  float *wf = rf__malloc((m ? m : 1) * sizeof(float));
  if (!wf)
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for the convolution's flipped filter");
  flip_filter(g, w, wf);
  rf_status *st =
      run_split(ctx, RF_CONV_DNNL_FORWARD, &gf, dy, wf, NULL, out, done);
  rf__free(wf);
  if (!st && !*done) /* no forward primitive for the twin */
    return run_split(ctx, kind, g, x, w, dy, out, done);
  return st;
}

#endif
