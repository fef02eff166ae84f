/* kernels/shape_prepare.c - see shape_prepare.h: output shapes and copy
 * plans of the shape ops from their run-time input shapes. Shape rules and
 * messages come from ops/shape_op_shapes.h, so build time and run time
 * refuse alike. */
#include "kernels/shape_prepare.h"

#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "ops/op_registry.h"
#include "ops/shape_op_shapes.h"
#include "ops/strided_slice_spec.h"

void rf__contiguous_strides(const rf_shape *s, int64_t *strides) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    strides[i] = st;
    st *= s->dims[i] ? s->dims[i] : 1; /* fits: shapes are checked */
  }
}

/* Drops dims of size 1, merges dims contiguous in both src and dst. */
static void simplify(rf__copy_plan *p) {
  int r = 0;
  p->count = 1;
  for (int i = 0; i < p->rank; i++) {
    p->count *= p->dims[i];
    if (p->dims[i] == 1) continue;
    if (r > 0 && p->src_strides[r - 1] == p->src_strides[i] * p->dims[i] &&
        p->dst_strides[r - 1] == p->dst_strides[i] * p->dims[i]) {
      p->dims[r - 1] *= p->dims[i];
      p->src_strides[r - 1] = p->src_strides[i];
      p->dst_strides[r - 1] = p->dst_strides[i];
      continue;
    }
    p->dims[r] = p->dims[i];
    p->src_strides[r] = p->src_strides[i];
    p->dst_strides[r] = p->dst_strides[i];
    r++;
  }
  p->rank = r;
}

/* A copy of `shape` (= src's window) from input `in` at src_off (element
 * offset, src strides of the input) to output `out` at dst_off. */
typedef struct side {
  int64_t strides[RF_MAX_RANK];
  int64_t offset;
} side;

static void add_plan(rf__shape_job *job, int in, const side *src, int out,
                     const side *dst, const rf_shape *shape) {
  rf__copy_plan *p = &job->plans[job->num_plans];
  memset(p, 0, sizeof *p);
  p->src_input = in;
  p->dst_output = out;
  p->rank = shape->rank;
  p->src_offset = src->offset;
  p->dst_offset = dst->offset;
  for (int i = 0; i < shape->rank; i++) {
    p->dims[i] = shape->dims[i];
    p->src_strides[i] = src->strides[i];
    p->dst_strides[i] = dst->strides[i];
  }
  simplify(p);
  if (p->count > 0) job->num_plans++;
}

/* Strides of a whole tensor, with the element offset of `begin` (or 0). */
static side whole(const rf_shape *s, const int64_t *begin) {
  side d = {{0}, 0};
  rf__contiguous_strides(s, d.strides);
  for (int i = 0; begin && i < s->rank; i++)
    d.offset += begin[i] * d.strides[i];
  return d;
}

static rf_status *alloc_job(rf__shape_job *job, int nout, int nplans) {
  memset(job, 0, sizeof *job);
  job->view_of = -1;
  job->num_outputs = nout;
  job->out_shapes = rf__calloc((size_t)nout, sizeof *job->out_shapes);
  job->plans = rf__calloc((size_t)nplans + 1, sizeof *job->plans);
  if (job->out_shapes && job->plans) return NULL;
  rf__shape_job_free(job);
  return rf__oom();
}

void rf__shape_job_free(rf__shape_job *job) {
  rf__free(job->out_shapes);
  rf__free(job->plans);
  job->out_shapes = NULL;
  job->plans = NULL;
}

static rf_status *list(const rf__kernel_ctx *ctx, const char *attr,
                       const int64_t **v, int *n) {
  return rf__attrs_get_int_list(&ctx->node->attrs, attr, v, n);
}

static const rf_shape *in_shape(const rf__kernel_ctx *ctx, int k) {
  return &ctx->inputs[k]->shape;
}

static rf_status *transpose_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  const int64_t *perm;
  int n;
  RF_CHECK(list(ctx, "perm", &perm, &n));
  rf_shape out;
  RF_CHECK(rf__transpose_shape(in_shape(ctx, 0), perm, n, &out));
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = out;
  side in = whole(in_shape(ctx, 0), NULL), src = {{0}, 0};
  for (int i = 0; i < n; i++) src.strides[i] = in.strides[perm[i]];
  side dst = whole(&out, NULL);
  add_plan(job, 0, &src, 0, &dst, &out);
  return NULL;
}

/* Output k of a split along axis: the input's slab from `offset` on. */
static void add_slab(rf__shape_job *job, const rf_shape *big, int64_t axis,
                     int64_t offset, int in, int out, const rf_shape *piece,
                     bool big_is_src) {
  int64_t begin[RF_MAX_RANK] = {0};
  begin[axis] = offset;
  side b = whole(big, begin), p = whole(piece, NULL);
  if (big_is_src)
    add_plan(job, in, &b, out, &p, piece);
  else
    add_plan(job, in, &p, out, &b, piece);
}

static rf_status *concat_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  int n = ctx->num_inputs;
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "axis", &axis));
  rf_shape *ins = rf__malloc(sizeof *ins * (size_t)n), out;
  RF_CHECK_ALLOC(ins);
  for (int i = 0; i < n; i++) ins[i] = *in_shape(ctx, i);
  rf_status *st = rf__concat_shape(ins, n, axis, &out);
  rf__free(ins);
  RF_CHECK(st);
  RF_CHECK(rf__normalize_axis(&axis, out.rank, "axis"));
  RF_CHECK(alloc_job(job, 1, n));
  job->out_shapes[0] = out;
  int64_t offset = 0;
  for (int i = 0; i < n; i++) {
    add_slab(job, &out, axis, offset, i, 0, in_shape(ctx, i), false);
    offset += in_shape(ctx, i)->dims[axis];
  }
  return NULL;
}

/* Split and _SplitLike: sizes from the attr or from the like inputs. */
static rf_status *split_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  int n = ctx->num_outputs;
  int64_t axis;
  const int64_t *sizes = NULL;
  int nsizes = 0;
  const rf_shape *v = in_shape(ctx, 0);
  RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "axis", &axis));
  RF_CHECK(rf__normalize_axis(&axis, v->rank == 0 ? 1 : v->rank, "axis"));
  RF_CHECK(alloc_job(job, n, n));
  int64_t *like = NULL;
  rf_status *st = NULL;
  if (ctx->num_inputs > 1) { /* _SplitLike */
    like = rf__malloc(sizeof *like * (size_t)n);
    if (!like) st = rf__oom();
    for (int i = 0; !st && i < n; i++) {
      const rf_shape *l = in_shape(ctx, 1 + i);
      if (l->rank != v->rank)
        st = rf__invalid("like input %d has rank %d, value rank %d", i, l->rank,
                         v->rank);
      else
        like[i] = l->dims[axis];
    }
    sizes = like, nsizes = n;
  } else {
    st = list(ctx, "size_splits", &sizes, &nsizes);
  }
  if (!st) st = rf__split_shapes(v, axis, n, sizes, nsizes, job->out_shapes);
  rf__free(like);
  if (st) {
    rf__shape_job_free(job);
    return st;
  }
  int64_t offset = 0;
  for (int i = 0; i < n; i++) {
    add_slab(job, v, axis, offset, 0, i, &job->out_shapes[i], true);
    offset += job->out_shapes[i].dims[axis];
  }
  return NULL;
}

static rf_status *slice_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  const int64_t *begin, *size;
  int nb, ns;
  rf_shape out;
  RF_CHECK(list(ctx, "begin", &begin, &nb));
  RF_CHECK(list(ctx, "size", &size, &ns));
  RF_CHECK(rf__slice_shape(in_shape(ctx, 0), begin, nb, size, ns, &out));
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = out;
  side src = whole(in_shape(ctx, 0), begin), dst = whole(&out, NULL);
  add_plan(job, 0, &src, 0, &dst, &out);
  return NULL;
}

/* _PadTo (x into zeros shaped like `like`) and _SliceTo (like's window of
 * x): one window copy at begin. */
static rf_status *window_plan(rf__kernel_ctx *ctx, rf__shape_job *job,
                              bool pad) {
  const int64_t *begin;
  int n;
  RF_CHECK(list(ctx, "begin", &begin, &n));
  const rf_shape *x = in_shape(ctx, 0), *like = in_shape(ctx, 1);
  RF_CHECK(pad ? rf__window_check(like, x, begin, n)
               : rf__window_check(x, like, begin, n));
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = *like;
  if (pad) {
    job->fill = true; /* zero bits are 0 in every dtype */
    side src = whole(x, NULL), dst = whole(like, begin);
    add_plan(job, 0, &src, 0, &dst, x);
  } else {
    side src = whole(x, begin), dst = whole(like, NULL);
    add_plan(job, 0, &src, 0, &dst, like);
  }
  return NULL;
}

static rf_status *reshape_view(rf__kernel_ctx *ctx, rf__shape_job *job,
                               bool expand) {
  rf_shape out;
  if (expand) {
    int64_t axis;
    RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "axis", &axis));
    RF_CHECK(rf__expand_dims_shape(in_shape(ctx, 0), axis, &out));
  } else {
    const int64_t *dims;
    int n;
    RF_CHECK(list(ctx, "squeeze_dims", &dims, &n));
    RF_CHECK(rf__squeeze_shape(in_shape(ctx, 0), dims, n, &out));
  }
  RF_CHECK(alloc_job(job, 1, 0));
  job->out_shapes[0] = out;
  job->view_of = 0;
  return NULL;
}

/* The fill element: value converted to the dtype's own encoding. */
static rf_status *fill_bits(rf_dtype dt, double value, uint64_t *bits) {
  rf_tensor *t;
  RF_CHECK(rf_tensor_new_scalar(dt, value, &t));
  *bits = 0;
  memcpy(bits, rf_tensor_data(t), rf_dtype_size(dt));
  rf_tensor_release(t);
  return NULL;
}

static rf_status *pad_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  const int64_t *p;
  int n;
  double value;
  rf_shape out;
  RF_CHECK(list(ctx, "paddings", &p, &n));
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "constant_values", &value));
  RF_CHECK(rf__pad_shape(in_shape(ctx, 0), p, n, &out));
  uint64_t bits;
  RF_CHECK(fill_bits(ctx->inputs[0]->dtype, value, &bits));
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = out;
  job->fill = true;
  job->fill_bits = bits;
  int64_t begin[RF_MAX_RANK];
  for (int i = 0; i < n / 2; i++) begin[i] = p[2 * i];
  side src = whole(in_shape(ctx, 0), NULL), dst = whole(&out, begin);
  add_plan(job, 0, &src, 0, &dst, in_shape(ctx, 0));
  return NULL;
}

/* Tile as one copy over (m0, d0, m1, d1, ...): src stride 0 along m_k. */
static rf_status *tile_plan(rf__kernel_ctx *ctx, rf__shape_job *job) {
  const int64_t *m;
  int n;
  rf_shape out;
  const rf_shape *x = in_shape(ctx, 0);
  RF_CHECK(list(ctx, "multiples", &m, &n));
  RF_CHECK(rf__tile_shape(x, m, n, &out));
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = out;
  side in = whole(x, NULL), o = whole(&out, NULL);
  rf__copy_plan *p = &job->plans[0];
  memset(p, 0, sizeof *p);
  p->rank = 2 * n;
  for (int k = 0; k < n; k++) {
    p->dims[2 * k] = m[k];
    p->dims[2 * k + 1] = x->dims[k];
    p->src_strides[2 * k] = 0;
    p->src_strides[2 * k + 1] = in.strides[k];
    p->dst_strides[2 * k] = x->dims[k] * o.strides[k];
    p->dst_strides[2 * k + 1] = o.strides[k];
  }
  simplify(p);
  job->num_plans = p->count > 0;
  return NULL;
}

/* StridedSlice (x to the slice) and _StridedSliceGrad (dy into zeros shaped
 * like x): one copy whose x side starts at the slice's first element and
 * steps by the strides (negative ones too) over the kept dims. */
static rf_status *strided_slice_plan(rf__kernel_ctx *ctx, rf__shape_job *job,
                                     bool grad) {
  rf__strided_slice_args a;
  int64_t start[RF_MAX_RANK], step[RF_MAX_RANK], count[RF_MAX_RANK];
  rf_shape sliced;
  const rf_shape *x = in_shape(ctx, grad ? 1 : 0);
  RF_CHECK(rf__strided_slice_args_get(&ctx->node->attrs, &a));
  RF_CHECK(rf__strided_slice_spec(&a, x, start, step, count, &sliced));
  if (grad && !rf_shape_equal(&sliced, in_shape(ctx, 0))) {
    char s1[128], s2[128];
    rf_shape_format(in_shape(ctx, 0), s1, sizeof s1);
    rf_shape_format(&sliced, s2, sizeof s2);
    return rf__invalid("dy has shape %s but the slice has shape %s", s1, s2);
  }
  RF_CHECK(alloc_job(job, 1, 1));
  job->out_shapes[0] = grad ? *x : sliced;
  job->fill = grad; /* zero bits are 0 in every dtype */
  side xs = whole(x, NULL), on_x = {{0}, 0}, dense = whole(&sliced, NULL);
  int k = 0;
  for (int i = 0; i < x->rank; i++) {
    on_x.offset += start[i] * xs.strides[i];
    if (i < a.n && (a.shrink_axis_mask >> i & 1)) continue;
    on_x.strides[k++] = step[i] * xs.strides[i];
  }
  if (rf_shape_num_elements(&sliced) == 0) return NULL; /* offsets unused */
  if (grad)
    add_plan(job, 0, &dense, 0, &on_x, &sliced);
  else
    add_plan(job, 0, &on_x, 0, &dense, &sliced);
  return NULL;
}

rf_status *rf__shape_job_prepare(rf__kernel_ctx *ctx, rf__shape_job *job) {
  const char *op = ctx->node->op->name;
  rf_status *st;
  if (!strcmp(op, "Transpose"))
    st = transpose_plan(ctx, job);
  else if (!strcmp(op, "Concat"))
    st = concat_plan(ctx, job);
  else if (!strcmp(op, "Split") || !strcmp(op, "_SplitLike"))
    st = split_plan(ctx, job);
  else if (!strcmp(op, "Slice"))
    st = slice_plan(ctx, job);
  else if (!strcmp(op, "_PadTo") || !strcmp(op, "_SliceTo"))
    st = window_plan(ctx, job, op[1] == 'P');
  else if (!strcmp(op, "ExpandDims") || !strcmp(op, "Squeeze"))
    st = reshape_view(ctx, job, op[0] == 'E');
  else if (!strcmp(op, "Pad"))
    st = pad_plan(ctx, job);
  else if (!strcmp(op, "Tile"))
    st = tile_plan(ctx, job);
  else if (!strcmp(op, "StridedSlice") || !strcmp(op, "_StridedSliceGrad"))
    st = strided_slice_plan(ctx, job, op[0] == '_');
  else
    st = rf__error(RF_INTERNAL, "no shape-op plan for op %s", op);
  return rf__kernel_error_at(ctx, st);
}

rf_status *rf__tile_grad_prepare(rf__kernel_ctx *ctx, rf_shape *shape,
                                 const int64_t **multiples, int *rank) {
  rf_status *st = list(ctx, "multiples", multiples, rank);
  if (!st)
    st = rf__tile_grad_shape(in_shape(ctx, 0), in_shape(ctx, 1), *multiples,
                             *rank, shape);
  return rf__kernel_error_at(ctx, st);
}
