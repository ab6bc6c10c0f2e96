#pragma once
/// @file
/// What every store shares about its rows: the row states, the columns a claim, a dead-letter
/// listing and a backlog count return (in one order, on every dialect) and their mapping to
/// `message` and `backlog_stats`.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/validate.hpp>

namespace outbox::sql {

/// The `state` column of the outbox (the SQL files write these values as literals, 0/1/2, with
/// this enum named in their header comment; the schemas CHECK them).
enum class row_state : int {
  pending = 0,    ///< Waiting to be published (claimable once `available_at` has come).
  published = 1,  ///< Confirmed by the broker (kept under `retention::keep`).
  dead = 2,       ///< Dead-lettered, with `last_error`.
};

/// `claim_request::scan_limit` as the claim statements bind it (0: none), within a bigint.
inline std::int64_t scan_limit(const claim_request& req) noexcept {
  constexpr auto most = static_cast<std::size_t>(INT64_MAX);
  return static_cast<std::int64_t>(req.scan_limit < most ? req.scan_limit : most);
}

/// The codes of the fates a settle statement receives as an array (`settle_*.sql`).
/// `defer`: a release with `settlement::retry_at` set (claimable then, its attempt given back).
enum class fate_code : int { retry = 2, dead = 3, release = 4, defer = 5 };

/// The columns of a claimed or dead-lettered row, in the order every claim and dead-letter
/// statement selects them (`sql/<dialect>/claim_*.sql`, `dead_letters.sql`).
enum column : int {
  seq = 0,
  event_id,
  aggregate_type,
  aggregate_id,
  event_type,
  payload,
  headers,
  attempts,
  created_at,
  content_type,
  /// The first column after the message: the locking claim's "passed the per-aggregate check"
  /// flag, or a dead-letter listing's `last_error` then `dead_at`.
  after_message,
};

/// A dialect's view of one result row: what `read_message` needs of it.
/// - `int64(c)`: the integer in column `c`;
/// - `text(c)`: its text (a view valid while the row is);
/// - `bytes(c)`: the payload's bytes, exactly as stored;
/// - `time(c)`: the timestamp in column `c` (clamped, `outbox/time.hpp`).
template <class R>
concept row_view = requires(const R& r, int c) {
  { r.int64(c) } -> std::same_as<std::int64_t>;
  { r.text(c) } -> std::convertible_to<std::string_view>;
  { r.bytes(c) } -> std::convertible_to<std::string>;
  { r.time(c) } -> std::same_as<time_point>;
};

/// The message in `row`. Never throws on content: what cannot be read (a row another program
/// wrote) is left empty and the returned reason says what it was; an empty reason means the
/// message can be published.
template <row_view Row>
[[nodiscard]] message read_message(const Row& row, std::string& why) {
  message m;
  m.sequence = row.int64(column::seq);
  m.id = uuid::parse(std::string_view(row.text(column::event_id))).value_or(uuid{});
  m.aggregate_type = row.text(column::aggregate_type);
  m.aggregate_id = row.text(column::aggregate_id);
  m.event_type = row.text(column::event_type);
  m.payload = row.bytes(column::payload);
  m.content_type = row.text(column::content_type);
  m.attempts = clamp_attempts(row.int64(column::attempts));
  m.created_at = row.time(column::created_at);
  why = read_stored_headers(m, row.text(column::headers));
  return m;
}

/// A dead-letter listing's row: the message (as far as it can be read; the claim kept the
/// reason), then `last_error` and `dead_at`.
template <row_view Row>
[[nodiscard]] dead_letter read_dead_letter(const Row& row) {
  dead_letter d;
  std::string why;
  d.msg = read_message(row, why);
  d.last_error = row.text(column::after_message);
  d.dead_at = row.time(column::after_message + 1);
  d.cause = row.text(column::after_message + 2);
  d.replays = row.int64(column::after_message + 3);
  d.replayed_at = row.time(column::after_message + 4);
  return d;
}

/// The columns of a backlog count, in this order on every dialect: stats.sql's, and
/// stats_by_type.sql's after its aggregate type. The meanings are `backlog_stats`'.
enum class stats_column : int {
  pending = 0,        ///< Pending (state 0), not under a live lease, not scheduled.
  waiting_retry,      ///< Of those: no lease token, attempted, `available_at` after now.
  in_flight,          ///< Pending under a live lease.
  dead,               ///< Dead-lettered (state 2).
  oldest_created_at,  ///< The oldest pending row's creation time (any value when there is none).
  scheduled,          ///< Pending, no lease token, never attempted, `available_at` after now.
};

/// A row of a backlog count: `int64(c)`, the integer in column `c`.
template <class R>
concept backlog_row = requires(const R& r, int c) {
  { r.int64(c) } -> std::same_as<std::int64_t>;
};

/// A backlog count's columns (`stats_column`, from column `first` on), as `backlog_stats`.
/// @tparam Period the dialect's time unit (`std::milli`, `std::micro`): of `now` and of the
///         creation time.
template <class Period, backlog_row Row>
[[nodiscard]] backlog_stats read_backlog(const Row& row, int first, std::int64_t now) {
  const auto at = [&](stats_column c) { return row.int64(first + static_cast<int>(c)); };
  backlog_stats s;
  s.pending = at(stats_column::pending);
  s.waiting_retry = at(stats_column::waiting_retry);
  s.in_flight = at(stats_column::in_flight);
  s.dead = at(stats_column::dead);
  s.scheduled = at(stats_column::scheduled);
  if (s.pending + s.in_flight > 0) {
    const std::chrono::duration<std::int64_t, Period> age(
        elapsed(now, at(stats_column::oldest_created_at)));
    s.oldest_pending_age = std::chrono::duration_cast<std::chrono::milliseconds>(age);
  }
  return s;
}

/// An error text as a store keeps it: valid UTF-8 without NUL, at most 2 KiB. Every text a store
/// writes that came from elsewhere (a broker's error, a reason) goes through here.
[[nodiscard]] inline std::string storable_text(std::string_view s) { return sanitize_text(s); }

/// A consumer's dead letter keeps the headers a peer sent as JSON text, storable, cut to 1 MiB.
[[nodiscard]] inline std::string storable_headers(const header_map& headers) {
  return sanitize_text(headers_to_json(headers), std::size_t{1} << 20);
}

}  // namespace outbox::sql
