#pragma once
/// @file
/// What dead-letter triage and replay exchange with a store (`concepts::triage_store`,
/// `concepts::replay_store`): a group of dead letters of one cause, the filters of a discard
/// and of a replay, and what a replay would send.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/uuid.hpp>

namespace outbox {

/// The dead letters of one cause key (`cause_key`), as `dead_letter_groups` lists them.
struct dead_letter_group {
  std::string cause{};                   ///< The key ('': dead before the store kept one).
  std::int64_t count = 0;                ///< How many dead letters have it.
  time_point first_dead_at{};            ///< The earliest `dead_at` of the group.
  time_point last_dead_at{};             ///< The latest.
  std::vector<std::string> event_types;  ///< The event types in the group, sorted.
  uuid sample{};                         ///< The oldest dead letter of the group.
};

/// Which dead letters a discard takes: those matching every field that is set.
struct dead_letter_filter {
  std::optional<std::string> cause{};       ///< This cause key.
  std::optional<std::string> event_type{};  ///< This event type.
  std::optional<time_point> dead_since{};   ///< Dead-lettered at or after this.
  std::optional<uuid> id{};                 ///< This event.
};

/// Which published events a replay sends again: created in [since, until), and matching every
/// other field that is set.
struct replay_filter {
  time_point since{};                           ///< Created at or after.
  time_point until{};                           ///< Created before.
  std::optional<std::string> event_type{};      ///< This event type.
  std::optional<std::string> aggregate_type{};  ///< This aggregate type.
  std::optional<std::string> aggregate_id{};    ///< This aggregate id.
};

/// What a replay would send (`replay_count`).
struct replay_estimate {
  std::int64_t matching = 0;  ///< Published events the filter takes.
  /// Whether the store keeps any published event at all: none means the relay deletes on
  /// publish (retention `delete_on_publish`), or everything was purged; nothing can be replayed.
  bool any_kept = false;
};

namespace sql {

/// The event types of a group as the stores' dead_groups.sql aggregate them (one per line),
/// sorted.
[[nodiscard]] inline std::vector<std::string> split_event_types(std::string_view lines) {
  std::vector<std::string> out;
  while (!lines.empty()) {
    const auto nl = lines.find('\n');
    out.emplace_back(lines.substr(0, nl));
    lines = nl == std::string_view::npos ? std::string_view{} : lines.substr(nl + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sql

}  // namespace outbox
