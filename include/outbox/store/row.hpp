#pragma once
/// @file
/// What every store shares about its rows: the row states, the columns a claim and a
/// dead-letter listing return (in one order, on every dialect) and their mapping to `message`.

#include <cstdint>
#include <string>
#include <string_view>

#include <outbox/message.hpp>
#include <outbox/validate.hpp>

namespace outbox::store {

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
enum class fate_code : int { retry = 2, dead = 3, release = 4 };

/// The columns of a claimed or dead-lettered row, in the order every claim and dead-letter
/// statement selects them (sql/<dialect>/claim_*.sql, dead_letters.sql).
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
  return d;
}

/// An error text as a store keeps it: valid UTF-8 without NUL, at most 2 KiB. Every text a store
/// writes that came from elsewhere (a broker's error, a reason) goes through here.
[[nodiscard]] inline std::string storable_text(std::string_view s) { return sanitize_text(s); }

/// A consumer's dead letter keeps the headers a peer sent as JSON text, storable, cut to 1 MiB.
[[nodiscard]] inline std::string storable_headers(const header_map& headers) {
  return sanitize_text(headers_to_json(headers), std::size_t{1} << 20);
}

}  // namespace outbox::store
