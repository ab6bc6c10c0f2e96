#pragma once
/// @file
/// The consumer's options, its default retry policy and its counters.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>

namespace outbox {

/// Where a delivery goes once its handler failed `max_attempts` times.
enum class dead_letter_route {
  /// The inbox store's dead-letter table, with the failure text (`dead_letter_delivery`); then
  /// the delivery is acked.
  store,
  /// `nack(d, false)`: the transport's own dead-letter route (AMQP: the queue's dead-letter
  /// exchange, `receiver_options::dead_letter_exchange`). The failure text is not carried. A
  /// receiver that reports it has no such route (`has_dead_letter_route()` false) is refused at
  /// construction; on a receiver without that member, `nack(d, false)` means whatever that
  /// transport documents (the in-memory one drops the delivery).
  transport,
};

/// What happened to one delivery (`consumer::outcome` is this type).
enum class delivery_outcome {
  idle,           ///< `poll_once` received nothing.
  applied,        ///< New: the handler ran and its transaction committed.
  duplicate,      ///< Already in the inbox: acknowledged without the handler.
  retrying,       ///< Failed (the handler, the database, the inbox): given back for a retry.
  dead_lettered,  ///< Failed its last attempt: dead-lettered.
  /// Held back until its predecessor was applied (`consumer_options::predecessor_wait`);
  /// processed again later, with a report of its own.
  deferred,
};

/// What one processed delivery came to (`consumer_options::on_delivery`): where a tracer ends
/// the consumer span it began in `consumer_options::on_delivery_start`, and metrics count.
struct delivery_report {
  const message& msg;        ///< The delivery's message (`message::trace` gives its context).
  delivery_outcome outcome;  ///< Never `idle`.
  /// From `on_delivery_start` to the outcome: the inbox transaction, the handler, the commit.
  std::chrono::nanoseconds handling{0};
  std::chrono::nanoseconds handler{0};  ///< The handler alone (0 when it did not run).
  /// From the event's `created_at` (the writer's clock) to the commit of its effect (the
  /// consumer's clock; clocks apart by a negative amount read as 0); set when `applied`.
  std::optional<std::chrono::nanoseconds> end_to_end{};
  std::string_view failure{};  ///< Why, when `retrying` or `dead_lettered`.
};

/// Options of a consumer.
struct consumer_options {
  /// Required: the deduplication scope, one inbox per name. Two services that share a database
  /// need two names, or each skips the other's events as duplicates; so there is no default.
  /// UTF-8 text without NUL bytes, not ending in a space (MySQL's inbox ignores trailing
  /// spaces, so "a " would share the inbox of "a"; refused on every store), no longer than the
  /// store's inbox holds whole (`concepts::consumer_name_limited_store`: 255 characters on
  /// MySQL, 2,048 bytes on PostgreSQL); anything else is refused at construction.
  std::string name{};
  std::chrono::milliseconds poll_timeout{100};                ///< How long one `poll_once` waits.
  dead_letter_route dead_letters = dead_letter_route::store;  ///< See dead_letter_route.
  /// Called by `run` with every error it backs off from (for logs and metrics), on the
  /// consumer's thread; must not throw.
  std::function<void(const error&)> on_error{};
  /// How long a delivery stamped with a predecessor (`outbox::predecessor_header`, set by a
  /// relay with `relay_options::stamp_predecessors`) that this consumer has not applied yet is
  /// held back, unacknowledged, while later deliveries are processed. It is applied as soon as
  /// its predecessor was applied or dead-lettered here, and anyway once this has passed (the
  /// relay dead-lettered the predecessor, or it went to other consumers; counted in
  /// `consumer_stats::out_of_order`). Raise it above the relay's retry delays. 0: stamps are
  /// ignored. Needs a store that looks its inbox up (`concepts::inbox_lookup_store`: every
  /// store of this library; with another, stamps are ignored).
  std::chrono::milliseconds predecessor_wait{30'000};
  /// At most this many deliveries are held back at once, and always fewer than the receiver
  /// hands out unacknowledged (its `max_held()`: AMQP `prefetch`, ZeroMQ `credit`), so that the
  /// predecessor can still arrive; beyond that the oldest held is applied at once (counted in
  /// `consumer_stats::out_of_order`).
  std::size_t max_deferred = 10'000;
  /// While a delivery whose handler failed goes back for a retry, the later deliveries of its
  /// aggregate this consumer receives meanwhile are held back, unacknowledged, and applied
  /// after it (or once `predecessor_wait` passed without it failing here again: it may have
  /// gone to another consumer; each retry that fails here restarts the wait, so an outage of
  /// any length keeps the order), stamped or not: a broker that prefetches (AMQP `prefetch` >
  /// 1) does not apply a later event first. Keep `predecessor_wait` above the retry policy's
  /// longest delay.
  /// false: for consumers that need no per-aggregate order (several on one queue), which then
  /// apply them at once. Needs `predecessor_wait` > 0 and `concepts::inbox_lookup_store`.
  bool hold_behind_retry = true;
  /// Called before each delivery is processed (the inbox transaction not begun yet): where a
  /// tracer starts a consumer span, child of `message::trace`, and makes it current so that the
  /// handler's own spans nest under it. `on_delivery` follows for the same delivery, however it
  /// ends (before its ack or nack). On the consumer's thread; must not throw.
  std::function<void(const message&)> on_delivery_start{};
  /// Called once a delivery's outcome is known (see `delivery_report`), on the consumer's
  /// thread; must not throw, and should be quick.
  std::function<void(const delivery_report&)> on_delivery{};
};

/// The default retry policy of a consumer: short delays, five attempts.
inline constexpr exponential_backoff consumer_retry{
    .initial = std::chrono::milliseconds(10),
    .multiplier = 2.0,
    .max_delay = std::chrono::milliseconds(1'000),
    .jitter = 0.2,
    .max_attempts = 5,
};

/// Counters of one consumer.
struct consumer_stats {
  std::uint64_t applied = 0;             ///< Handler ran and committed.
  std::uint64_t duplicates_skipped = 0;  ///< Already in the inbox: acked without the handler.
  std::uint64_t retried = 0;             ///< Handler or store failed; nacked for redelivery.
  std::uint64_t dead_lettered = 0;       ///< Failed `max_attempts` times; dead-lettered.
  std::uint64_t errors = 0;              ///< Errors the run loop backed off from.
  /// Deliveries held back until their predecessor was applied (see below); a copy of one held
  /// that arrives again counts again. Each counter counts the `delivery_report`s of its outcome.
  std::uint64_t deferred = 0;

  /// Applied although their stamped predecessor was not applied here: the wait ran out, or no
  /// room was left to hold them (`consumer_options::predecessor_wait`, `max_deferred`).
  std::uint64_t out_of_order = 0;
  /// When a delivery last finished here (applied, a duplicate, or dead-lettered), by the
  /// consumer's clock; the epoch when none has yet. With `last_delivery`, for health checks:
  /// deliveries arriving while this stands still is a consumer that makes no progress.
  time_point last_progress{};
  time_point last_delivery{};  ///< When a delivery was last received; the epoch when never.
  std::uint64_t held = 0;      ///< Deliveries held back for their predecessor now.
};

}  // namespace outbox
