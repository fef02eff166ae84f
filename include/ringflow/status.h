/* ringflow/status.h - the one error type every fallible call returns.
 *
 * A call returns NULL on success, or a status the caller owns and releases with
 * rf_status_free. Codes follow TensorFlow's canonical set. */
#ifndef RINGFLOW_STATUS_H
#define RINGFLOW_STATUS_H

#include "ringflow/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_CODE_LIST(X)                            \
  X(RF_OK, "OK")                                   \
  X(RF_CANCELLED, "CANCELLED")                     \
  X(RF_UNKNOWN, "UNKNOWN")                         \
  X(RF_INVALID_ARGUMENT, "INVALID_ARGUMENT")       \
  X(RF_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED")     \
  X(RF_NOT_FOUND, "NOT_FOUND")                     \
  X(RF_ALREADY_EXISTS, "ALREADY_EXISTS")           \
  X(RF_PERMISSION_DENIED, "PERMISSION_DENIED")     \
  X(RF_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED")   \
  X(RF_FAILED_PRECONDITION, "FAILED_PRECONDITION") \
  X(RF_ABORTED, "ABORTED")                         \
  X(RF_OUT_OF_RANGE, "OUT_OF_RANGE")               \
  X(RF_UNIMPLEMENTED, "UNIMPLEMENTED")             \
  X(RF_INTERNAL, "INTERNAL")                       \
  X(RF_UNAVAILABLE, "UNAVAILABLE")                 \
  X(RF_DATA_LOSS, "DATA_LOSS")

typedef enum rf_code {
#define RF_X(code, name) code,
  RF_CODE_LIST(RF_X)
#undef RF_X
      RF_CODE_COUNT
} rf_code;

/* An error: a code and a message naming the node, op and device involved. */
typedef struct rf_status rf_status;

/* Messages quote what users named (nodes, ops, devices, collectives, attrs,
 * files). A quoted string longer than RF_STATUS_QUOTE_MAX bytes is cut to its
 * first RF_STATUS_QUOTE_MAX bytes (never inside a UTF-8 character) followed
 * by "... (N bytes)", N its whole length, so a message stays short whatever
 * the names: a node named by 100 MB of 'a' appears as
 * "node 'aaa...a... (104857600 bytes)'". */
#define RF_STATUS_QUOTE_MAX 200

/* The status's code; RF_OK for NULL. */
RF_API rf_code rf_status_code(const rf_status *status);

/* The message; "" for NULL. Owned by the status. */
RF_API const char *rf_status_message(const rf_status *status);

/* The code's name, e.g. "INVALID_ARGUMENT"; "UNKNOWN_CODE" when out of range.
 */
RF_API const char *rf_code_name(rf_code code);

/* Releases a status; NULL is ignored. */
RF_API void rf_status_free(rf_status *status);

/* Makes a status with a printf-style message (for user kernels and callbacks).
 * Each %s argument is capped as above (RF_STATUS_QUOTE_MAX). C99's
 * conversions are taken (flags, width, precision, * and the length
 * modifiers), not POSIX's positional ones: "%1$s" is copied into the
 * message as written and its argument is not read. Returns NULL
 * when code is RF_OK; fmt "" or NULL gives an empty message; a code outside
 * rf_code is kept as given
 * (rf_code_name: "UNKNOWN_CODE"). If memory runs out, returns a shared static
 * RESOURCE_EXHAUSTED status that rf_status_free ignores. */
RF_API rf_status *rf_status_new(rf_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
