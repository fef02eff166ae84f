/* ringflow/graph_io.h - graphs as files: JSON to save and load, DOT to look at.
 *
 * The JSON format (docs/GRAPH_FORMAT.md) lists nodes in topological order;
 * loading rebuilds every node through the node builder, so a malformed or
 * hostile file gets the same checks as code (unknown ops, bad attrs, arity,
 * dtypes, shapes, cycles) and an error naming what is wrong - never a crash.
 *
 *   char *json;
 *   rf_status *st = rf_graph_to_json(g, &json);
 *   rf_graph *copy;
 *   st = rf_graph_from_json(json, strlen(json), &copy);
 *   rf_string_free(json);
 */
#ifndef RINGFLOW_GRAPH_IO_H
#define RINGFLOW_GRAPH_IO_H

#include "ringflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *out receives a NUL-terminated string; free it with rf_string_free. */
RF_API rf_status *rf_graph_to_json(const rf_graph *g, char **out);
/* Parses len bytes of JSON into a new graph. On error *out is untouched and
 * the message says where (node name or JSON line/column). */
RF_API rf_status *rf_graph_from_json(const char *json, size_t len,
                                     rf_graph **out);
/* Writes g's JSON text and a newline to `path`, replacing the file atomically
 * as rf_checkpoint_save does (ringflow/checkpoint.h): a new file with a
 * random name in path's directory (O_EXCL|O_NOFOLLOW, mode 0600), the text,
 * fsync, mode 0644, rename over path, fsync of the directory. A reader (or
 * a crash) sees the old file or the new one, never a part; a symlink at
 * path is replaced, never followed. On error the temporary file is removed,
 * path is unchanged, and the code says why (a file's error names the path):
 * INVALID_ARGUMENT (NULL arguments, empty path, path names a directory, a
 * device, a FIFO or a socket, a component too long; a string attr that is not
 * UTF-8, from rf_graph_to_json), NOT_FOUND (a directory of path is missing),
 * PERMISSION_DENIED (the directory is not writable, read-only file system),
 * RESOURCE_EXHAUSTED (disk full, file too large, out of memory), DATA_LOSS
 * (an I/O error), UNKNOWN (another errno). Not thread-safe against another
 * save to the same path. */
RF_API rf_status *rf_graph_save(const rf_graph *g, const char *path);
/* A failed open takes its code from errno (NOT_FOUND: no such file or
 * directory; PERMISSION_DENIED: EACCES, EPERM, EROFS; RESOURCE_EXHAUSTED:
 * ENOSPC, EDQUOT, EFBIG; UNKNOWN otherwise); a failed read is DATA_LOSS (a path
 * that names a directory too: "reading PATH failed: Is a directory"); a file
 * larger than 2 GiB is INVALID_ARGUMENT; the contents' errors are those of
 * rf_graph_from_json (NOT_FOUND for an unknown op, ALREADY_EXISTS for a
 * node name used twice, INVALID_ARGUMENT otherwise), prefixed with the path. */
RF_API rf_status *rf_graph_load(const char *path, rf_graph **out);

/* Graphviz DOT: one cluster per device, collectives highlighted, control
 * edges dashed. *out is freed with rf_string_free. */
RF_API rf_status *rf_graph_to_dot(const rf_graph *g, char **out);

RF_API void rf_string_free(char *s);

#ifdef __cplusplus
}
#endif
#endif
