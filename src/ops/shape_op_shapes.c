/* ops/shape_op_shapes.c - see shape_op_shapes.h. Unknown dims (-1) stay
 * unknown through every rule; known ones are checked. Nothing here
 * allocates except the error statuses. */
#include "ops/shape_op_shapes.h"

#include <stdbool.h>
#include <stdio.h>

#include "core/shape.h"
#include "core/status.h"
#include "ops/array_shapes.h"

#define UNK RF_UNKNOWN_DIM

/* A shape of known rank whose dims the caller fills. */
static rf_shape blank(int rank) {
  rf_shape s = rf_shape_scalar();
  s.rank = rank;
  return s;
}

static rf_status *finish(rf_shape s, rf_shape *out) {
  RF_CHECK(rf__shape_check(&s));
  *out = s;
  return NULL;
}

static rf_status *rank_mismatch(const char *what, int n, const rf_shape *in) {
  char buf[128];
  rf_shape_format(in, buf, sizeof buf);
  return rf__invalid("%s has %d entries but the input has shape %s", what, n,
                     buf);
}

rf_status *rf__transpose_shape(const rf_shape *in, const int64_t *perm, int n,
                               rf_shape *out) {
  char buf[160];
  rf__format_dims(perm, n, buf, sizeof buf);
  if (n > RF_MAX_RANK)
    return rf__invalid("perm %s has more than %d entries", buf, RF_MAX_RANK);
  if (in->rank >= 0 && in->rank != n) return rank_mismatch("perm", n, in);
  bool seen[RF_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
      return rf__invalid("perm %s is not a permutation of 0..%d", buf, n - 1);
    seen[perm[i]] = true;
  }
  rf_shape s = blank(n);
  for (int i = 0; i < n; i++)
    s.dims[i] = in->rank < 0 ? UNK : in->dims[perm[i]];
  return finish(s, out);
}

rf_status *rf__normalize_axis(int64_t *axis, int rank, const char *what) {
  if (rank < 0) return NULL;
  if (*axis < -rank || *axis >= rank)
    return rf__invalid(
        "%s %lld is out of range for rank %d (must be in "
        "[%d, %d))",
        what, (long long)*axis, rank, -rank, rank);
  if (*axis < 0) *axis += rank;
  return NULL;
}

rf_status *rf__concat_shape(const rf_shape *ins, int n, int64_t axis,
                            rf_shape *out) {
  int rank = -1;
  for (int i = 0; i < n; i++) {
    if (ins[i].rank < 0) continue;
    if (rank >= 0 && ins[i].rank != rank)
      return rf__invalid("input %d has rank %d but input 0.. have rank %d", i,
                         ins[i].rank, rank);
    rank = ins[i].rank;
  }
  if (rank < 0) {
    *out = rf_shape_unknown();
    return NULL;
  }
  if (rank == 0) return rf__invalid("cannot concatenate scalars");
  RF_CHECK(rf__normalize_axis(&axis, rank, "axis"));
  rf_shape s = blank(rank);
  for (int d = 0; d < rank; d++) s.dims[d] = d == axis ? 0 : UNK;
  for (int i = 0; i < n; i++) {
    if (ins[i].rank < 0) {
      s.dims[axis] = UNK;
      continue;
    }
    for (int d = 0; d < rank; d++) {
      int64_t v = ins[i].dims[d];
      if (d == axis) {
        if (v < 0 || s.dims[d] < 0) {
          s.dims[d] = UNK;
        } else if (__builtin_add_overflow(s.dims[d], v, &s.dims[d])) {
          return rf__invalid("the sizes along axis %lld add up past INT64_MAX",
                             (long long)axis);
        }
      } else if (v >= 0) {
        if (s.dims[d] >= 0 && s.dims[d] != v)
          return rf__invalid(
              "input %d has %lld in dimension %d, an earlier "
              "input %lld",
              i, (long long)v, d, (long long)s.dims[d]);
        s.dims[d] = v;
      }
    }
  }
  return finish(s, out);
}

rf_status *rf__split_shapes(const rf_shape *in, int64_t axis, int num,
                            const int64_t *sizes, int nsizes, rf_shape *outs) {
  if (nsizes > 0 && nsizes != num)
    return rf__invalid("size_splits has %d entries for num_split %d", nsizes,
                       num);
  if (in->rank == 0) return rf__invalid("cannot split a scalar");
  RF_CHECK(rf__normalize_axis(&axis, in->rank, "axis"));
  for (int i = 0; i < num; i++) outs[i] = *in;
  if (in->rank < 0) return NULL;
  int64_t total = in->dims[axis], known = 0;
  int rest = -1;
  for (int i = 0; i < nsizes; i++) {
    if (sizes[i] == -1 && rest < 0) {
      rest = i;
    } else if (sizes[i] < 0) {
      return rf__invalid(
          "size_splits entry %d is %lld: sizes must be >= 0, "
          "one may be -1",
          i, (long long)sizes[i]);
    } else if (__builtin_add_overflow(known, sizes[i], &known)) {
      return rf__invalid("size_splits add up past INT64_MAX");
    }
  }
  if (nsizes == 0) {
    if (total >= 0 && total % num != 0)
      return rf__invalid(
          "dimension %lld (%lld) does not split evenly into "
          "%d pieces",
          (long long)axis, (long long)total, num);
    for (int i = 0; i < num; i++)
      outs[i].dims[axis] = total < 0 ? UNK : total / num;
    return NULL;
  }
  if (total >= 0 && (rest < 0 ? known != total : known > total))
    return rf__invalid(
        "size_splits add up to %lld but dimension %lld is "
        "%lld",
        (long long)known, (long long)axis, (long long)total);
  for (int i = 0; i < num; i++)
    outs[i].dims[axis] = i != rest ? sizes[i] : total < 0 ? UNK : total - known;
  return NULL;
}

rf_status *rf__slice_shape(const rf_shape *in, const int64_t *begin, int nb,
                           const int64_t *size, int ns, rf_shape *out) {
  if (nb != ns || nb > RF_MAX_RANK)
    return rf__invalid(
        "begin has %d entries and size %d: both must have one "
        "per dimension",
        nb, ns);
  if (in->rank >= 0 && in->rank != nb) return rank_mismatch("begin", nb, in);
  rf_shape s = blank(nb);
  for (int i = 0; i < nb; i++) {
    int64_t d = in->rank < 0 ? UNK : in->dims[i];
    if (begin[i] < 0 || size[i] < -1)
      return rf__invalid(
          "dimension %d: begin %lld must be >= 0 and size "
          "%lld >= -1",
          i, (long long)begin[i], (long long)size[i]);
    if (d >= 0 && (begin[i] > d || (size[i] >= 0 && size[i] > d - begin[i])))
      return rf__invalid(
          "dimension %d: slice [%lld, %lld + %lld) is outside "
          "[0, %lld)",
          i, (long long)begin[i], (long long)begin[i], (long long)size[i],
          (long long)d);
    s.dims[i] = size[i] >= 0 ? size[i] : d < 0 ? UNK : d - begin[i];
  }
  return finish(s, out);
}

rf_status *rf__expand_dims_shape(const rf_shape *in, int64_t axis,
                                 rf_shape *out) {
  if (in->rank < 0) {
    *out = rf_shape_unknown();
    return NULL;
  }
  if (in->rank == RF_MAX_RANK)
    return rf__invalid("the input already has rank %d, the most allowed",
                       RF_MAX_RANK);
  /* a new axis: rank + 1 places, named by the input's rank (the message
   * said "for rank 3" of a rank-2 input) */
  if (axis < -(in->rank + 1) || axis > in->rank)
    return rf__invalid(
        "axis %lld is out of range for a new axis of a rank-%d input (must "
        "be in [%d, %d])",
        (long long)axis, in->rank, -(in->rank + 1), in->rank);
  if (axis < 0) axis += in->rank + 1;
  rf_shape s = blank(in->rank + 1);
  for (int i = 0, j = 0; i < s.rank; i++)
    s.dims[i] = i == axis ? 1 : in->dims[j++];
  return finish(s, out);
}

rf_status *rf__squeeze_shape(const rf_shape *in, const int64_t *dims, int n,
                             rf_shape *out) {
  if (in->rank < 0) {
    *out = rf_shape_unknown();
    return NULL;
  }
  bool drop[RF_MAX_RANK] = {false};
  for (int k = 0; k < n; k++) {
    int64_t a = dims[k];
    RF_CHECK(rf__normalize_axis(&a, in->rank, "squeeze_dims entry"));
    if (in->dims[a] >= 0 && in->dims[a] != 1)
      return rf__invalid("cannot squeeze dimension %lld of size %lld",
                         (long long)dims[k], (long long)in->dims[a]);
    drop[a] = true;
  }
  rf_shape s = blank(0);
  for (int i = 0; i < in->rank; i++) {
    if (n == 0 && in->dims[i] < 0) {
      *out = rf_shape_unknown(); /* whether it goes is known at run time */
      return NULL;
    }
    if (n == 0 ? in->dims[i] == 1 : drop[i]) continue;
    s.dims[s.rank++] = in->dims[i];
  }
  return finish(s, out);
}

rf_status *rf__pad_shape(const rf_shape *in, const int64_t *paddings, int n,
                         rf_shape *out) {
  if (n % 2 || n / 2 > RF_MAX_RANK)
    return rf__invalid(
        "paddings has %d entries: it must have two (before, "
        "after) per dimension",
        n);
  if (in->rank >= 0 && in->rank != n / 2)
    return rank_mismatch("paddings (halved)", n / 2, in);
  rf_shape s = blank(n / 2);
  for (int i = 0; i < n / 2; i++) {
    int64_t d = in->rank < 0 ? UNK : in->dims[i];
    if (paddings[2 * i] < 0 || paddings[2 * i + 1] < 0)
      return rf__invalid("paddings of dimension %d (%lld, %lld) must be >= 0",
                         i, (long long)paddings[2 * i],
                         (long long)paddings[2 * i + 1]);
    if (d >= 0 && (__builtin_add_overflow(d, paddings[2 * i], &d) ||
                   __builtin_add_overflow(d, paddings[2 * i + 1], &d)))
      return rf__invalid("padded dimension %d is past INT64_MAX", i);
    s.dims[i] = d;
  }
  return finish(s, out);
}

static rf_status *check_multiples(const rf_shape *in, const int64_t *m, int n,
                                  int64_t min) {
  if (n > RF_MAX_RANK || (in->rank >= 0 && in->rank != n))
    return rank_mismatch("multiples", n, in);
  for (int i = 0; i < n; i++)
    if (m[i] < min)
      return rf__invalid("multiples entry %d is %lld: it must be >= %lld", i,
                         (long long)m[i], (long long)min);
  return NULL;
}

rf_status *rf__tile_shape(const rf_shape *in, const int64_t *multiples, int n,
                          rf_shape *out) {
  RF_CHECK(check_multiples(in, multiples, n, 0));
  rf_shape s = blank(n);
  for (int i = 0; i < n; i++) {
    int64_t d = in->rank < 0 ? UNK : in->dims[i];
    if (d >= 0 && !rf__dim_mul(d, multiples[i], &d))
      return rf__invalid("tiled dimension %d is past INT64_MAX", i);
    s.dims[i] = d;
  }
  return finish(s, out);
}

rf_status *rf__tile_grad_shape(const rf_shape *dy, const rf_shape *like,
                               const int64_t *multiples, int n, rf_shape *out) {
  RF_CHECK(check_multiples(dy, multiples, n, 0));
  RF_CHECK(check_multiples(like, multiples, n, 0));
  rf_shape s = blank(n);
  for (int i = 0; i < n; i++) {
    int64_t d = dy->rank < 0 ? UNK : dy->dims[i];
    int64_t x = like->rank < 0 ? UNK : like->dims[i], tiled;
    if (d >= 0 && x >= 0 &&
        (!rf__dim_mul(x, multiples[i], &tiled) || tiled != d))
      return rf__invalid("dimension %d: dy has %lld, x %lld tiled %lld times",
                         i, (long long)d, (long long)x,
                         (long long)multiples[i]);
    /* x's dim, else what dy's gives when the multiple is not 0 */
    s.dims[i] = x >= 0                       ? x
                : d >= 0 && multiples[i] > 0 ? d / multiples[i]
                                             : UNK;
  }
  return finish(s, out);
}

rf_status *rf__window_check(const rf_shape *big, const rf_shape *like,
                            const int64_t *begin, int n) {
  if ((big->rank >= 0 && big->rank != n) ||
      (like->rank >= 0 && like->rank != n))
    return rf__invalid("begin has %d entries; both inputs must have rank %d", n,
                       n);
  for (int i = 0; i < n && big->rank >= 0 && like->rank >= 0; i++) {
    int64_t b = big->dims[i], w = like->dims[i];
    if (begin[i] < 0 ||
        (b >= 0 && w >= 0 && (begin[i] > b || w > b - begin[i])))
      return rf__invalid(
          "dimension %d: window [%lld, %lld + %lld) is "
          "outside [0, %lld)",
          i, (long long)begin[i], (long long)begin[i], (long long)w,
          (long long)b);
  }
  return NULL;
}
