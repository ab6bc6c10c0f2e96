#pragma once
// What the `outbox` tool's subcommands do with a store, whichever it is (store_ops.cpp makes one
// from a store URL).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <outbox/outbox.hpp>

#include "common.hpp"

namespace outbox_tool {

/// A log-tailing store's replication slot, as the server sees it.
struct slot_view {
  std::string name;
  bool exists = false, active = false;
  std::int64_t lag_bytes = 0, retained_bytes = 0;
  std::string wal_status;
  std::chrono::milliseconds lag{0};
};

/// What the tool does with a store, whichever it is.
class store_ops {
 public:
  virtual ~store_ops() = default;
  /// The log-tailing store's slot (a usage error for the other stores).
  virtual slot_view slot() = 0;
  /// Drops the log-tailing store's slot (and its publication).
  virtual void drop_slot(bool publication) = 0;
  virtual int migrate() = 0;
  virtual outbox::backlog_stats stats() = 0;
  virtual std::vector<outbox::aggregate_type_stats> stats_by_type() = 0;
  virtual std::vector<outbox::dead_letter> dead_letters(std::size_t n) = 0;
  virtual bool requeue(const outbox::uuid& id) = 0;
  virtual std::size_t purge_published(outbox::time_point before, std::size_t n) = 0;
  virtual std::size_t purge_inbox(outbox::time_point before, std::size_t n) = 0;
  // Triage and replay (outbox::concepts::triage_store, replay_store): a usage error on a store
  // without them.
  virtual std::vector<outbox::dead_letter_group> dead_letter_groups(std::size_t n) = 0;
  virtual std::size_t requeue_group(const std::string& key, std::size_t n) = 0;
  virtual std::size_t discard(const outbox::dead_letter_filter& f, std::size_t n) = 0;
  virtual std::size_t purge_archive(outbox::time_point before, std::size_t n) = 0;
  virtual outbox::replay_estimate replay_count(const outbox::replay_filter& f) = 0;
  virtual std::size_t replay(const outbox::replay_filter& f, std::size_t n) = 0;
};

/// The store `u` names, on a session of its own opened on first use (so that bad arguments are
/// refused before any connection).
/// @throws usage_error for a scheme this build has no store for, or a bad parameter.
std::unique_ptr<store_ops> open_store(const store_url& u);

}  // namespace outbox_tool
