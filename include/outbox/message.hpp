#pragma once
/// @file
/// The message model: what an application enqueues (`event`), what the relay carries
/// (`message`), and the records that pass between the components and the store policies.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/trace.hpp>
#include <outbox/uuid.hpp>

namespace outbox {

/// Wall-clock time: stored timestamps outlive the process, so they are `system_clock` points.
using time_point = std::chrono::system_clock::time_point;

/// String headers (name -> value), both valid UTF-8, carried to the broker beside the payload.
using header_map = std::map<std::string, std::string, std::less<>>;

/// The content type of a payload unless an event says otherwise. A payload of a JSON content
/// type (`application/json`, or any `+json` suffix) is validated as JSON text; any other is
/// opaque bytes (Avro, Protobuf, ...), carried exactly.
inline constexpr std::string_view json_content_type = "application/json";

/// The header a relay with `relay_options::stamp_predecessors` puts on a message sent in the same
/// publish call as the message before it in its aggregate: that message's id (UUID text). A
/// consumer holds back a delivery so stamped until that predecessor was applied
/// (`consumer_options::predecessor_wait`). Reserved: an event may not carry it.
inline constexpr std::string_view predecessor_header = "outbox-predecessor";

/// An event to enqueue, as the application describes it.
struct event {
  std::string aggregate_type{};  ///< e.g. "order"; routes and groups events.
  std::string aggregate_id{};    ///< e.g. "42"; order is preserved per (aggregate_type, id).
  std::string event_type{};      ///< e.g. "order_placed".
  std::string payload{};         ///< Bytes; JSON text (validated) under a JSON content type.
  header_map headers{};          ///< Optional string headers.
  std::string content_type{json_content_type};  ///< A media type, e.g. "application/avro".
  /// The caller's W3C trace context (validated; see `writer_options::trace_provider` for a
  /// context taken from the caller's tracer). Stored and carried as the headers
  /// `traceparent_header` and `tracestate_header`: set it here or as those headers, not both.
  trace_context trace{};
  /// Scheduled delivery: the relay publishes the event no sooner than this (a reminder, a
  /// timeout). Empty, or a time not after the `enqueue` call: at once. Further ahead than
  /// `writer_options::schedule_horizon` is refused (`invalid_input`). The event waits in the
  /// outbox table; a later event of its aggregate waits behind it (docs/guarantees.md).
  std::optional<time_point> deliver_at{};
};

/// A stored event, as the relay publishes it and the consumer receives it.
struct message {
  uuid id{};                     ///< UUIDv7, assigned by the writer, the deduplication key.
  std::string aggregate_type{};  ///< As the event gave it (`event::aggregate_type`).
  std::string aggregate_id{};    ///< As the event gave it; order is kept per aggregate.
  std::string event_type{};      ///< As the event gave it (`event::event_type`).
  std::string payload{};         ///< Exactly the bytes the writer was given.
  /// The headers of the event; a relay with `relay_options::stamp_predecessors` may add
  /// `predecessor_header` to the copy it publishes.
  header_map headers{};
  std::string content_type{json_content_type};  ///< As the writer was given it.
  int attempts = 0;                             ///< Publish attempts, counting the current one.
  time_point created_at{};                      ///< When the writer enqueued it.
  std::int64_t sequence = 0;  ///< The store's insertion position (not meaningful across stores).

  /// The event's trace context: its `traceparent` and `tracestate` headers (empty when it has
  /// none; as received, so check it before trusting a message from another producer).
  [[nodiscard]] trace_context trace() const {
    trace_context t;
    if (const auto p = headers.find(traceparent_header); p != headers.end())
      t.traceparent = p->second;
    if (const auto s = headers.find(tracestate_header); s != headers.end())
      t.tracestate = s->second;
    return t;
  }
};

namespace detail {
/// One aggregate's key, (type, id) in one string: for sets and maps of aggregates.
[[nodiscard]] inline std::string aggregate_key(std::string_view type, std::string_view id) {
  std::string k;
  k.reserve(type.size() + id.size() + 1);
  k.append(type).push_back('\0');
  k.append(id);
  return k;
}
/// `m`'s aggregate key.
[[nodiscard]] inline std::string aggregate_key(const message& m) {
  return aggregate_key(m.aggregate_type, m.aggregate_id);
}
}  // namespace detail

/// An attempt count read back from a store, made safe for `int` arithmetic: a row written by
/// another program may hold anything (a negative count reads as 0, a huge one as `INT_MAX`, which
/// every retry policy treats as exhausted).
[[nodiscard]] constexpr int clamp_attempts(std::int64_t stored) noexcept {
  return static_cast<int>(std::clamp<std::int64_t>(stored, 0, std::numeric_limits<int>::max()));
}

/// One row the writer hands to an appending store: a validated event, its id and its headers
/// already rendered as a JSON object.
struct outgoing {
  uuid id{};                      ///< The UUIDv7 of the event, assigned by the writer.
  const event* source = nullptr;  ///< Non-owning; valid for the duration of `append`.
  std::string headers_json{};     ///< "{}" when there are none.
  time_point created_at{};        ///< The time of the `enqueue` call, by the writer clock.
  /// Not claimable before this (`event::deliver_at` when after `created_at`); the epoch (the
  /// default) when the event is due at once. A store rounds it up to its own time unit.
  time_point available_at{};

  /// True when the row must wait for `available_at` (a scheduled event).
  [[nodiscard]] bool scheduled() const noexcept { return available_at != time_point{}; }
};

/// How long a name a store keeps whole (`concepts::consumer_name_limited_store`): at most `max`
/// bytes, or `max` UTF-8 characters when `characters`.
struct name_limit {
  std::size_t max = 0;      ///< The longest name kept whole, in the unit `characters` says.
  bool characters = false;  ///< True: `max` counts UTF-8 characters; false: bytes.
};

/// What the relay asks of a claiming store.
struct claim_request {
  std::string_view owner{};           ///< Who holds the lease (for operators and the fence).
  std::size_t limit = 0;              ///< At most this many messages.
  time_point now{};                   ///< The relay clock's idea of now.
  std::chrono::milliseconds lease{};  ///< How long the claim holds before others may take over.
  /// At most this many of the oldest claimable rows are looked at (0: no bound); a store may
  /// ignore it. The relay bounds the claims it makes ahead while a batch is in flight (see
  /// `relay::run`): the claim after the settle is unbounded, so a long run of rows held back
  /// behind the batch in flight (one hot aggregate) is not walked once more per batch.
  std::size_t scan_limit = 0;
};

/// A claimed batch. `token` is the fencing token: only the claim that stamped it can settle.
struct claimed_batch {
  /// The fencing token of the claim; a settle applies only to rows still held under it.
  std::int64_t token = 0;
  time_point lease_until{};         ///< When the lease ends: `claim_request::now` plus its `lease`.
  std::vector<message> messages{};  ///< In store order (sequence), oldest first.
  /// Rows the claim could not read (e.g. headers written by another program that are not a JSON
  /// object of strings): the store dead-lettered them with the reason instead of returning
  /// them, so one bad row never stops the rest of the batch. Counted by the relay as dead.
  std::size_t unreadable = 0;

  /// True when the claim returned no message (`unreadable` rows are not counted).
  [[nodiscard]] bool empty() const noexcept { return messages.empty(); }
  /// How many messages the claim returned (`unreadable` rows are not counted).
  [[nodiscard]] std::size_t size() const noexcept { return messages.size(); }

  /// Puts `messages` in store order (by sequence), for a store whose claim returns its rows in
  /// no particular order (an UPDATE ... RETURNING); the relay relies on that order.
  void sort_by_sequence() {
    std::sort(messages.begin(), messages.end(),
              [](const message& a, const message& b) { return a.sequence < b.sequence; });
  }

  /// For a store's `settle`: refuses fates that are not one per message (`misconfigured`).
  void require_one_fate_each(std::size_t fates, const char* adapter) const {
    if (fates != messages.size())
      throw error(errc::misconfigured, adapter, {}, "settle: one fate per message is required");
  }
};

/// The fate of one claimed message, index-aligned with `claimed_batch::messages` in `settle`.
struct settlement {
  /// What to do with the row of the message.
  enum class kind : std::uint8_t {
    published,  ///< The transport confirmed it.
    retry,      ///< Failed; claimable again at `retry_at`.
    dead,       ///< Failed for good; kept as a dead letter with `error`.
    /// Not attempted (stopping, an earlier event of its aggregate failed, its route paused):
    /// pending again, its attempt given back, `last_error` kept. Claimable at once, or, with
    /// `retry_at` set (after the epoch), deferred: claimable at `retry_at`, and its aggregate's
    /// later rows wait behind it as behind a retry; a deferred row with no last error gets
    /// `deferral_error()` as one (see `retry_at`). Counted in `settle_result::released`.
    release,
  };
  kind what = kind::release;  ///< The fate; a default settlement releases the message.
  /// For `retry`: when the row is claimable again. For `release`: the epoch (the default)
  /// releases at once; a later time defers the row until then without spending an attempt.
  /// The row keeps its last error, or, with none (never attempted, nor failed before), gets
  /// `deferral_error()`: that marks it as deferred for the stats, which count it in
  /// `backlog_stats::pending` and `waiting_retry` (not `scheduled`, the writer's events).
  time_point retry_at{};
  /// For `retry` and `dead`: the reason, kept as the last error of the row. For a deferral: the
  /// last error it gives a row that has none (empty: `deferred_error`).
  std::string error{};
  /// For `dead`: the cause key the row keeps (`cause_key`); empty: the store makes one of
  /// `error` with the class "unknown".
  std::string cause{};

  /// The last error a deferral gives a row with none when its `error` is empty.
  static constexpr std::string_view deferred_error =
      "deferred: not attempted, claimable again at its retry time";
  /// For a deferral (a `release` with `retry_at` set): the last error it gives a row that has
  /// none, `error` or else `deferred_error`.
  [[nodiscard]] std::string_view deferral_error() const noexcept {
    return error.empty() ? deferred_error : std::string_view(error);
  }
};

/// What `settle` did. `fenced` counts rows that were no longer held under the batch's token
/// (the lease expired and another relay took them): those rows were left untouched.
struct settle_result {
  std::size_t published = 0;  ///< Rows marked published (or deleted, `delete_on_publish`).
  std::size_t retried = 0;    ///< Rows left to wait for their retry time.
  std::size_t dead = 0;       ///< Rows dead-lettered.
  std::size_t released = 0;   ///< Rows returned to pending, their attempt given back.
  std::size_t fenced = 0;     ///< Fates not applied: the row was no longer under the token.
};

/// A dead-lettered event with its last error, as listed for operators.
struct dead_letter {
  message msg{};             ///< The event as stored, with its attempt count.
  std::string last_error{};  ///< The reason it was dead-lettered (empty if none was stored).
  time_point dead_at{};      ///< When it was dead-lettered (by the clock of the settling relay).
  std::string
      cause{};  ///< Its cause key (`cause_key`; empty for one dead before the schema kept it).
  std::int64_t replays = 0;  ///< How often an operator requeued or replayed it.
  time_point replayed_at{};  ///< When it was last requeued or replayed (epoch: never).
};

/// Backlog signals for monitoring.
struct backlog_stats {
  /// Waiting to be published (including those awaiting a retry or deferred), scheduled
  /// events not yet due excepted (`scheduled`).
  std::int64_t pending = 0;
  std::int64_t in_flight = 0;                       ///< Claimed under a lease that has not expired.
  std::int64_t dead = 0;                            ///< Dead-lettered.
  std::chrono::milliseconds oldest_pending_age{0};  ///< 0 when nothing is pending.
  /// Of `pending`, those waiting for a retry or a deferral: held by no claim (no lease token,
  /// live or expired), attempted at least once or carrying a last error, and claimable only
  /// after `now` (`available_at`, the retry time). Only the settle of a failed attempt or a
  /// deferral (a `release` with `settlement::retry_at`, which gives a row with no last error
  /// `settlement::deferral_error()`) leaves a row so (a claim stamps a lease token; a release
  /// and a requeue make the row claimable at once); so these rows failed at least once, or
  /// were held back (a paused route), and are not due yet; the other `pending -
  /// waiting_retry` are due (claimable, unless an earlier row of their aggregate holds them
  /// back). The same test on every store; under a *locking* claim policy a claimed row counts
  /// in `pending` (not `in_flight`), never here.
  std::int64_t waiting_retry = 0;
  /// Scheduled events not due yet (`event::deliver_at` after `now`): held by no claim, never
  /// attempted, no last error (as the writer appended them: nothing touched them since), and
  /// claimable only after `now`. Not in `pending`, `waiting_retry` or `oldest_pending_age`:
  /// they are not late. Once due they count in `pending`, their age from their `enqueue`.
  std::int64_t scheduled = 0;
  /// Log-tailing stores only (0 elsewhere): WAL bytes between the slot's confirmed position
  /// and the server's current one (events committed and not yet confirmed by the broker, and
  /// any other WAL written since).
  std::int64_t log_lag_bytes = 0;
  /// Log-tailing stores only: how far behind in time the slot's confirmed position is, as the
  /// server measures it for the connection streaming from it (0 when caught up, or when no
  /// relay streams).
  std::chrono::milliseconds log_lag{0};
  /// Log-tailing stores only (0 elsewhere): table-mode events (outbox rows the relay reads from
  /// the log, not counted in `pending`) written more than 10 s ago
  /// (`postgresql::tailing_store::streamed_grace`) and not published yet: a relay that is
  /// behind or stopped, or rows its stream passed without showing them (see the PostgreSQL
  /// adapter's README, "the publication").
  std::int64_t streamed_unpublished = 0;
  /// Log-tailing stores only: the age of the oldest table-mode event not published yet,
  /// whatever its age (0 when none).
  std::chrono::milliseconds oldest_streamed_age{0};

  /// Adds the counts of another part of the outbox (`pending`, `in_flight`, `dead`,
  /// `waiting_retry`, `scheduled`) and keeps the larger `oldest_pending_age`: the totals of
  /// several aggregate types. The log-tailing fields describe the whole store and stay as they are.
  backlog_stats& operator+=(const backlog_stats& part) noexcept {
    pending += part.pending;
    in_flight += part.in_flight;
    dead += part.dead;
    waiting_retry += part.waiting_retry;
    scheduled += part.scheduled;
    oldest_pending_age = std::max(oldest_pending_age, part.oldest_pending_age);
    return *this;
  }
};

/// The backlog of one aggregate type (`concepts::aggregate_stats_store`).
struct aggregate_type_stats {
  std::string aggregate_type{};  ///< The aggregate type the entry counts.
  backlog_stats stats{};         ///< Only the rows of `aggregate_type`.
};

/// One transport confirm or failure, matched to its message by id (confirms may arrive in any
/// order; a message with no result by the deadline counts as a transient timeout).
struct publish_result {
  uuid id{};                           ///< The id of the message this result is for.
  bool confirmed = false;              ///< True when the transport confirmed the message.
  errc error_class = errc::transient;  ///< Meaningful when not confirmed.
  std::string error{};                 ///< Human-readable reason when not confirmed.
};

/// A message received by a consumer's receiver, with the handle needed to ack or nack it.
struct delivery {
  message msg{};             ///< The message as the receiver decoded it.
  std::uint64_t tag = 0;     ///< Receiver-specific delivery handle.
  bool redelivered = false;  ///< The transport knows it delivered this before.
};

}  // namespace outbox
