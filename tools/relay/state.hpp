#pragma once
// What `outbox relay`'s threads share: the metrics they feed, and each relay thread's state as
// the supervising loop, the health check and the metrics see it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/registry.h>
#include <outbox/outbox.hpp>
#include <outbox/prometheus/prometheus.hpp>

namespace outbox_tool::relay_service {

struct page_families;  // metrics_page.cpp's

/// What every relay thread feeds and the metrics server reads: a prometheus-cpp registry
/// (/metrics serializes it) with the relays' metrics, which their `on_batch` feeds and the
/// page's render raises to their stats (metrics_page.cpp), and the last backlog sample, which
/// the render copies into the registry's backlog gauges.
struct shared_metrics {
  ::prometheus::Registry registry;
  outbox::prometheus::relay_metrics relay{registry};
  std::shared_ptr<page_families> page;  ///< metrics_page.cpp's, from the first render.

  std::mutex backlog_mutex;
  std::optional<outbox::backlog_stats> backlog;  ///< The last sample; none until one succeeded.
  std::vector<outbox::aggregate_type_stats> by_type;  ///< Of the same sample.
  double backlog_at = 0;                              ///< Unix seconds of that sample.
  std::uint64_t backlog_errors = 0;
};

/// A relay thread's state, as the main loop, the health check and the metrics see it.
struct slot_state {
  unsigned index = 0;
  std::atomic<bool> failing{false};            ///< In a run of errors (logged when it began).
  std::atomic<bool> done{false};               ///< `run` returned.
  std::atomic<std::int64_t> failing_since{0};  ///< steady_clock ms when the run began.
  /// `relay_stats::steps` when the last error was reported: the run ends with a step after
  /// the one that erred (an error a step reports and goes on from is not a recovery).
  std::atomic<std::uint64_t> steps_at_error{0};
  // The supervisor's own: steps + errors when they last moved, and whether the relay is
  // stalled (neither moved for --unhealthy-after).
  std::uint64_t progress = 0;
  std::int64_t progress_at = 0;  ///< steady_clock ms
  std::atomic<bool> stalled{false};
  std::mutex mutex;
  std::string last_error;  ///< Of the current run of errors.
  std::string fatal;       ///< Why `run` ended, when it ended on an error.
};

}  // namespace outbox_tool::relay_service
