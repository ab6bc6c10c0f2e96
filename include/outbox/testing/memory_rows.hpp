#pragma once
/// @file
/// The rows of the in-memory database (`memory_database`): outbox rows, archived dead letters,
/// inbox records and a consumer's dead deliveries, as the SQL tables keep them.

#include <cstdint>
#include <optional>
#include <string>

#include <outbox/message.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::testing {

/// One outbox row as the memory database keeps it: the columns of the SQL outbox tables.
/// Public so that a test can write a row "as another program would" (`insert_raw`) and look at
/// what the store did (`memory_database::outbox`).
struct memory_row {
  /// Where a row stands: pending (claimable, held by a lease or waiting for a retry),
  /// published (kept under `retention::keep`) or dead-lettered.
  enum class state_type : std::uint8_t { pending, published, dead };

  std::int64_t sequence = 0;       ///< Assigned at commit (store order is commit order).
  uuid id{};                       ///< The event id; unique in the database.
  std::string aggregate_type{};    ///< As appended (unchecked when written by `insert_raw`).
  std::string aggregate_id{};      ///< As appended (unchecked when written by `insert_raw`).
  std::string event_type{};        ///< As appended (unchecked when written by `insert_raw`).
  std::string payload{};           ///< Kept byte for byte.
  std::string headers_json{"{}"};  ///< As stored; read back (and checked) on the claim.
  std::string content_type{json_content_type};  ///< The media type of `payload`, as appended.
  std::int64_t attempts = 0;  ///< Counted at claim; 64 bits, like the SQLite column.
  time_point created_at{};    ///< When the writer enqueued it (`outgoing::created_at`).
  time_point available_at{};  ///< Claimable from then (lease expiry, retry_at); epoch = now.
  state_type state = state_type::pending;  ///< Pending, published or dead.
  std::string lease_owner{};  ///< The owner of the claim that took it; cleared with `lease_token`.
  /// The fencing token of the claim that took it; cleared when that claim settles or releases
  /// it (an expired lease keeps it), and by a requeue.
  std::optional<std::int64_t> lease_token{};
  std::string last_error{};  ///< The reason of the last failed attempt (a retry or a dead letter).
  std::optional<time_point> published_at{};  ///< When it was published (`retention::keep`).
  std::optional<time_point> dead_at{};       ///< When it was dead-lettered; cleared by a requeue.
  std::string dead_cause{};                  ///< The cause key of a dead letter (`cause_key`).
  std::int64_t replays = 0;                  ///< Requeues and replays of the row.
  std::optional<time_point> replayed_at{};   ///< The last of them.
};

/// A discarded dead letter in the archive (`memory_store::discard`).
struct memory_archived_row {
  memory_row row{};          ///< The row as it was when discarded.
  time_point archived_at{};  ///< When it was discarded.
};

/// One inbox record: (consumer, event id) was processed at `processed_at`.
struct memory_inbox_record {
  std::string consumer{};     ///< The consumer name (`consumer_options::name`).
  uuid id{};                  ///< The event id.
  time_point processed_at{};  ///< The `now` given to `record_delivery` or `dead_letter_delivery`.
};

/// A delivery a consumer dead-lettered (`memory_store::dead_letter_delivery`).
struct memory_inbox_dead_record {
  std::string consumer{};  ///< The consumer name (`consumer_options::name`).
  message msg{};           ///< Exactly as delivered (any bytes).
  std::string error{};     ///< Why it was dead-lettered (`outbox::sql::storable_text`).
  time_point failed_at{};  ///< The `now` given to `dead_letter_delivery`.
};

}  // namespace outbox::testing
