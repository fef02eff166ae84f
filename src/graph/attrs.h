/* graph/attrs.h - typed node attributes: a small array of (name, value) kept
 * sorted by name. Values own their memory (strings, lists; tensors retained).
 */
#ifndef RF_GRAPH_ATTRS_H
#define RF_GRAPH_ATTRS_H

#include <stdbool.h>
#include <stdint.h>

#include "ringflow/tensor.h"

/* X(enum, spec name) - the spec name is what op registrations write. */
#define RF_ATTR_TYPE_LIST(X)             \
  X(RF_ATTR_INT, "int")                  \
  X(RF_ATTR_FLOAT, "float")              \
  X(RF_ATTR_BOOL, "bool")                \
  X(RF_ATTR_STRING, "string")            \
  X(RF_ATTR_TYPE, "type")                \
  X(RF_ATTR_SHAPE, "shape")              \
  X(RF_ATTR_TENSOR, "tensor")            \
  X(RF_ATTR_INT_LIST, "list(int)")       \
  X(RF_ATTR_FLOAT_LIST, "list(float)")   \
  X(RF_ATTR_BOOL_LIST, "list(bool)")     \
  X(RF_ATTR_STRING_LIST, "list(string)") \
  X(RF_ATTR_TYPE_LIST, "list(type)")     \
  X(RF_ATTR_SHAPE_LIST, "list(shape)")   \
  X(RF_ATTR_TENSOR_LIST, "list(tensor)")

typedef enum rf__attr_type {
#define RF_X(e, s) e,
  RF_ATTR_TYPE_LIST(RF_X)
#undef RF_X
      RF_ATTR_TYPE_COUNT
} rf__attr_type;

const char *rf__attr_type_name(rf__attr_type t);

typedef struct rf__attr_value {
  rf__attr_type type;
  int n; /* list length */
  union {
    int64_t i;
    double f;
    bool b;
    char *s;
    rf_dtype type;
    rf_shape shape;
    rf_tensor *tensor;
    int64_t *ints;
    double *floats;
    bool *bools;
    char **strings;
    rf_dtype *types;
    rf_shape *shapes;
    rf_tensor **tensors;
  } u;
} rf__attr_value;

typedef struct rf__attr {
  char *name;
  rf__attr_value value;
} rf__attr;

typedef struct rf__attrs {
  rf__attr *items; /* sorted by name */
  int n, cap;
} rf__attrs;

/* Deep copy of v into *out. */
rf_status *rf__attr_value_copy(const rf__attr_value *v, rf__attr_value *out);
void rf__attr_value_clear(rf__attr_value *v);
bool rf__attr_value_equal(const rf__attr_value *a, const rf__attr_value *b);
/* Human-readable value for messages and DOT ("[1, 2]", "float32"). */
void rf__attr_value_format(const rf__attr_value *v, char *buf, size_t len);

/* Sets (copying v) or replaces attribute `name`. */
rf_status *rf__attrs_set(rf__attrs *a, const char *name,
                         const rf__attr_value *v);
const rf__attr_value *rf__attrs_find(const rf__attrs *a, const char *name);
rf_status *rf__attrs_copy(const rf__attrs *a, rf__attrs *out);
void rf__attrs_clear(rf__attrs *a);

/* Typed reads for kernels, shape and gradient functions. They return NULL on
 * success; NOT_FOUND / INVALID_ARGUMENT (wrong type) name the attribute. */
rf_status *rf__attrs_get_int(const rf__attrs *a, const char *name,
                             int64_t *out);
rf_status *rf__attrs_get_float(const rf__attrs *a, const char *name,
                               double *out);
rf_status *rf__attrs_get_bool(const rf__attrs *a, const char *name, bool *out);
rf_status *rf__attrs_get_string(const rf__attrs *a, const char *name,
                                const char **out);
rf_status *rf__attrs_get_type(const rf__attrs *a, const char *name,
                              rf_dtype *out);
rf_status *rf__attrs_get_shape(const rf__attrs *a, const char *name,
                               rf_shape *out);
rf_status *rf__attrs_get_tensor(const rf__attrs *a, const char *name,
                                rf_tensor **out); /* not retained */
rf_status *rf__attrs_get_int_list(const rf__attrs *a, const char *name,
                                  const int64_t **out, int *n);

/* Value constructors for callers building attrs by hand (no allocation except
 * for the list/string ones, which copy). */
rf__attr_value rf__attr_int(int64_t v);
rf__attr_value rf__attr_float(double v);
rf__attr_value rf__attr_bool(bool v);
rf__attr_value rf__attr_type_value(rf_dtype v);
rf__attr_value rf__attr_shape(rf_shape v);
/* These borrow their argument: pass to rf__attrs_set, which copies. */
rf__attr_value rf__attr_string_ref(const char *v);
rf__attr_value rf__attr_tensor_ref(rf_tensor *v);
rf__attr_value rf__attr_int_list_ref(const int64_t *v, int n);

#endif
