#pragma once
// The `outbox` tool's subcommands but `relay` (relay_command.hpp): each takes the store and the
// parsed options and returns the exit code; bad options are a usage_error.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "../store_ops.hpp"

namespace outbox_tool {

struct options {
  std::string store;
  bool json = false;
  std::size_t limit = 100;
  std::size_t batch = 1000;
  std::size_t scan = 100'000;
  std::string id;
  std::vector<std::string> ids;
  bool all = false;
  std::string event_type;
  std::string watch;
  std::string since;
  std::string published_before, inbox_before;
  bool force = false;
  bool publication = false;
  std::string max_kept;              ///< slot status: alarm above this much WAL kept (empty: none)
  std::optional<std::string> group;  ///< requeue --group, dead-letters discard --group
  std::string archive_before;        ///< purge --archive-before
  std::string until, aggregate_type, aggregate_id;  ///< replay's filters (and --since)
  bool dry_run = false;                             ///< replay --dry-run
};

int cmd_migrate(store_ops& s, const options& o);               // migrate.cpp
int cmd_stats(store_ops& s, const options& o);                 // stats.cpp
int cmd_dead_letters_list(store_ops& s, const options& o);     // dead_letters.cpp
int cmd_dead_letters_show(store_ops& s, const options& o);     // dead_letters.cpp
int cmd_requeue(store_ops& s, const options& o);               // requeue.cpp
int cmd_purge(store_ops& s, const options& o);                 // purge.cpp
int cmd_dead_letters_groups(store_ops& s, const options& o);   // triage.cpp
int cmd_dead_letters_discard(store_ops& s, const options& o);  // triage.cpp
int cmd_requeue_group(store_ops& s, const options& o);         // triage.cpp
int cmd_replay(store_ops& s, const options& o);                // replay.cpp
int cmd_slot_status(store_ops& s, const options& o);           // slot.cpp
int cmd_slot_drop(store_ops& s, const options& o);             // slot.cpp

}  // namespace outbox_tool
