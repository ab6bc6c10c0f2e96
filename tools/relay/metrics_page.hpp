#pragma once
// `outbox relay`'s /metrics page (Prometheus text format, prometheus-cpp's TextSerializer),
// rendered from what the relays and the backlog sampler report.

#include <cstddef>
#include <cstdint>
#include <string>

#include <outbox/outbox.hpp>

#include "state.hpp"

namespace outbox_tool::relay_service {

/// What the page shows beside the shared metrics.
struct relay_view {
  outbox::relay_stats totals;                    ///< Summed over the relay threads.
  double running = 0, failing = 0, stalled = 0;  ///< Relay threads in each state.
  std::uint64_t renders = 0;                     ///< Pages rendered, this one included.
  std::size_t max_types = 0;                     ///< --metrics-max-types
  /// A log-tailing store: the slot's and table mode's gauges too.
  bool tails_the_log = false;
  bool slot_at_risk = false;  ///< The slot's wal_status is unreserved or lost.
  double stranded = 0;        ///< Table-mode events the stream passed over.
};

/// Renders the page (`m.backlog_mutex` taken here): brings `m.registry` up to `v` and the last
/// backlog sample, then serializes it. One caller at a time (the page's own lock).
std::string render_metrics(const relay_view& v, shared_metrics& m);

}  // namespace outbox_tool::relay_service
