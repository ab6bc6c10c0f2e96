#pragma once
// What `outbox relay`'s threads share: the metrics they feed, and each relay thread's state as
// the supervising loop, the health check and the metrics see it.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <outbox/outbox.hpp>

#include "../metrics.hpp"

namespace outbox_tool::relay_service {

/// What every relay thread feeds and the metrics server reads.
struct shared_metrics {
  histogram batch_duration{latency_bounds()};
  histogram publish_duration{latency_bounds()};
  histogram event_latency{latency_bounds()};
  std::atomic<double> last_batch_at{0};  ///< Unix seconds of the last settled batch; 0: none.

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
