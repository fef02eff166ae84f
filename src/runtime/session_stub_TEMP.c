/* TEMPORARY: delete when src/runtime/session.c lands. Stand-ins for the
 * session API so tests/testutil.c links on the graph branch; every run is
 * UNIMPLEMENTED. */
#include "core/status.h"
#include "ringflow/session.h"

void rf_session_options_init(rf_session_options *opts) {
  if (!opts) return;
  opts->num_cpu_devices = 1;
  opts->num_threads = 0;
  opts->default_device = "cpu:0";
  opts->collective_timeout_ms = 300000;
}

rf_status *rf_session_new(const rf_graph *g, const rf_session_options *opts,
                          rf_session **out) {
  return rf__error(RF_UNIMPLEMENTED, "session stub (TEMPORARY)");
}

rf_status *rf_session_run(rf_session *s, const rf_feed *feeds, int nfeeds,
                          const rf_output *fetches, int nfetches,
                          rf_node *const *targets, int ntargets,
                          rf_tensor **outputs) {
  return rf__error(RF_UNIMPLEMENTED, "session stub (TEMPORARY)");
}

void rf_session_free(rf_session *s) { (void)s; }
