/* ringflow/log.h - an opt-in log sink. ringflow never prints: it hands its log
 * messages to a callback the program installs, and without one (the default)
 * it formats nothing and costs one relaxed atomic load per message site.
 *
 * What is logged (each message starts with the part that wrote it, or with
 * the node, bucket or collective it is about: "node 'x' (Op) ..."; compile
 * numbers count the process's compiles, as in graph dump names):
 *   debug  compile: each compile's request, each phase run (nodes before and
 *          after), each pass; place: each node's device and the rule that
 *          chose it (requested, its variable, its first input or "its
 *          input K (the first with a device)", the default device, its
 *          consumers: a Const; moved to host memory); lower: each node
 *          a Reduce or Broadcast became (participants, with their
 *          devices); collective: each collective's participants at compile
 *          time, and each group formed at run time (name, step, collective,
 *          dtype, devices); dump: each graph dump file written
 *   info   session: its devices; place: per compile, how many nodes each
 *          rule placed; compile: nodes per device after partition, each
 *          fusion (MatMul or Conv2D epilogues, grouped updates, the
 *          cross-entropy with its gradient) and each bucket of all-reduces;
 *          a node folded into a constant at compile time; a collective of
 *          one participant run as Identity; a bucket's inputs copied in; a
 *          kernel's choice worth knowing (a node's note); gpu, gpu graphs:
 *          virtual devices on a GPU, steps not captured; nccl:
 *          communicators made (which GPUs, or ranks across processes)
 *   warn   a collective timed out (collective manager, NCCL's watchdog, an
 *          MPI job; the error its participants fail with), a job's
 *          processes did not all make a session in time, MPI left
 *          unfinalised at exit after a process of the job may have died
 *   error  run: a step failed (the error rf_session_run also returns);
 *          session: rf_session_free dropped an unreported error of a
 *          pipelined step
 *
 *   static void to_stderr(rf_log_level level, const char *msg, void *user) {
 *     fprintf(stderr, "ringflow %s: %s\n", rf_log_level_name(level), msg);
 *   }
 *   rf_set_log_callback(RF_LOG_INFO, to_stderr, NULL);  (NULL fn: off)
 *
 * The messages are for people: their wording may change between versions.
 * The `ringflow` command installs such a sink when RF_LOG=debug|info|warn|
 * error is set; the library itself never reads RF_LOG. Graph dumps:
 * rf_session_options.dump_graph_dir and RF_DUMP_GRAPH_DIR (session.h). */
#ifndef RINGFLOW_LOG_H
#define RINGFLOW_LOG_H

#include "ringflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rf_log_level {
  RF_LOG_DEBUG = 0,
  RF_LOG_INFO = 1,
  RF_LOG_WARN = 2,
  RF_LOG_ERROR = 3
} rf_log_level;

/* Receives one message: a complete line, without a trailing newline, at
 * most 4095 bytes (a longer one is cut and ends with "..."); names of
 * nodes and collectives in it are cut to at most 200 bytes (except inside
 * an error's message, quoted whole at warn and error). Neither cut splits
 * a UTF-8 character: a character a cut goes through is left out whole.
 * `message` is valid only during the call: copy it to keep it.
 *
 * It may be called from any thread of the library (the caller's, the
 * session's pool workers, the collective watchdog, the MPI communication
 * thread, NCCL's watchdog), from several at once: it must be thread-safe.
 * It must return promptly (it runs on threads the sessions need to make
 * progress) and must not call rf_set_log_callback (that deadlocks) nor any
 * other ringflow function but the name lookups rf_log_level_name,
 * rf_code_name and rf_dtype_name (as the example above does). */
typedef void (*rf_log_fn)(rf_log_level level, const char *message, void *user);

/* Makes fn receive every message of `level` and above, process-wide, with
 * `user` (not owned), replacing the previous callback; fn NULL turns logging
 * off. Safe to call from any thread, also while sessions run. When it
 * returns, the previous callback is not running and will not be called
 * again, so its user data may be freed. INVALID_ARGUMENT for a level
 * outside RF_LOG_DEBUG..RF_LOG_ERROR (nothing changes then). */
RF_API rf_status *rf_set_log_callback(rf_log_level level, rf_log_fn fn,
                                      void *user);

/* "debug", "info", "warn" or "error"; "unknown" for any other value. */
RF_API const char *rf_log_level_name(rf_log_level level);

#ifdef __cplusplus
}
#endif
#endif
