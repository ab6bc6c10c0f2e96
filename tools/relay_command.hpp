#pragma once
// `outbox relay`: a relay as a service, from a store URL and a transport URL.

#include <cstddef>
#include <string>

namespace outbox_tool {

struct relay_command_options {
  std::string store, transport;
  unsigned threads = 1;
  std::size_t batch_size = 500;
  std::string publish_timeout = "10s", lease = "30s";
  std::string claim_policy = "default";  ///< default, locking, leasing
  std::string retention = "keep";        ///< keep, delete
  int max_attempts = 10;
  bool no_pipeline = false;
  bool stamp_predecessors = false;
  std::string metrics_address = "127.0.0.1:9464";  ///< host:port, or "off"
  std::string unhealthy_after = "60s";
  std::string max_backoff = "5s";  ///< The longest pause while the database or broker is away.
  std::string backlog_interval = "5s";
  /// /metrics: the aggregate types with the largest backlog that get series of their own; the
  /// rest are summed in `aggregate_type="_other"`.
  std::size_t metrics_max_types = 100;
  /// Log-tailing stores: /healthz fails when the slot keeps more WAL than this (a size such as
  /// 1GB), or its wal_status is unreserved or lost. Empty: /healthz does not look at the slot.
  std::string max_slot_kept;
  /// Log-tailing stores: /healthz fails while a table-mode event written longer ago than this
  /// (an age such as 60s) is still unpublished (an outbox row in state 3). "off": never.
  std::string max_streamed_age = "off";
  /// The storm guard (relay_options::storm_guard): dead letters of one route let through per
  /// window (0: off), the window, the first pause and the longest.
  std::size_t storm_max_dead = 100;
  std::string storm_window = "60s", storm_pause = "30s", storm_max_pause = "10m";
};

/// Runs relays until SIGTERM or SIGINT; returns the exit code (0 after a graceful stop, 1 when a
/// relay stopped on an error retrying cannot help, or start-up failed).
/// @throws usage_error for bad options (before anything is opened).
int cmd_relay(const relay_command_options& o);

}  // namespace outbox_tool
