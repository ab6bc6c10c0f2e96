#pragma once
/// @file
/// What a relay is told (`relay_options`) and what it reports (`relay_stats`, `batch_report`).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/relay/storm_guard.hpp>

namespace outbox {

/// What one settled batch came to (`relay_options::on_batch`).
struct batch_report {
  std::size_t unreadable = 0;  ///< Rows the claim could not read (dead-lettered by the store).
  settle_result settled{};     ///< What the settle did with `messages`.
  /// How long the claim took. A pipelined relay runs a batch's claim while the batch before it
  /// is in flight: `claim`, `publish` and `settle` add up to the batch's own work, not its time
  /// from claim to settle.
  std::chrono::nanoseconds claim{0}, publish{0}, settle{0};
  /// @var publish
  /// How long the publish took, from the first send to the last confirm or the deadline.
  /// @var settle
  /// How long the settle took.
  std::span<const message> messages{};  ///< The batch (in publish order).
  std::span<const settlement> fates{};  ///< What became of each of `messages` (same order).
};

/// One publish call of a relay (`relay_options::on_publish`): where a tracer ends the producer
/// span it began in `relay_options::on_publish_start`.
struct publish_report {
  std::span<const message> messages{};        ///< As sent (stamps included), in call order.
  std::span<const publish_result> results{};  ///< One per message; empty when the call threw.
  std::exception_ptr failure{};               ///< What the call threw, if it did.
  std::chrono::nanoseconds took{0};           ///< From the call to its return.
};

/// Options of a relay. Fill with designated initialisers: `relay_options{.batch_size = 1000}`.
struct relay_options {
  /// The largest `batch_size` accepted: a batch is held in memory and published as one unit.
  static constexpr std::size_t max_batch_size = 100'000;

  std::size_t batch_size = 500;             ///< Messages claimed per batch.
  std::chrono::milliseconds lease{30'000};  ///< How long a claim holds (leasing stores).

  /// How long the publish of a batch may take (never past its lease): confirms not in by then are
  /// failures. A locking claim holds its transaction about this long (twice, pipelined): the
  /// store's `idle_in_transaction_timeout` must be at least `relay::longest_claim_hold`, or the
  /// relay is refused.
  std::chrono::milliseconds publish_timeout{10'000};
  std::chrono::milliseconds idle_poll_min{5};      ///< First sleep after an empty batch.
  std::chrono::milliseconds idle_poll_max{1'000};  ///< Idle sleeps double up to this.
  /// The longest pause of `run` between attempts while the database or the broker is away
  /// (its pauses follow the retry policy's delays, capped here): the relay is back at work at
  /// most this long after they return. Not the events' retry delays (the retry policy's own).
  std::chrono::milliseconds error_backoff_max{5'000};
  std::string owner{};  ///< Lease owner; default "relay-<uuid>".

  /// `run` claims the next batch, and settles the previous one, on a second thread while a
  /// batch awaits its confirms, so the transport is not left idle during the database's steps.
  /// Takes effect with a store whose session can hold several claims
  /// (`concepts::overlapping_claims_store`: leasing), or with two stores (the two-store
  /// constructor: any policy), and a `lease` of at least 2 x `publish_timeout` + 5 s (a batch
  /// claimed ahead waits for the one in flight); otherwise `run` goes one batch at a time
  /// (`relay::pipelines()` tells). `run_once` never pipelines. Order is kept: a claim never
  /// takes a message whose predecessor in its aggregate is in a batch in flight
  /// (docs/running.md, "Pipelining").
  bool pipeline = true;
  /// Sends each batch in one publish call on a transport that does not keep publish order
  /// (AMQP, Kafka, ZeroMQ), so a hot aggregate's run is pipelined (one confirm round trip for
  /// the batch, instead of one wave, and one round trip, per message of the run). Each message
  /// sent behind an earlier one of its aggregate in the same call carries that one's id in the
  /// header `outbox::predecessor_header`. A transport that fails a message and takes a later
  /// one of its run (a broker that nacks one message and accepts the next) puts the later one
  /// on the wire first (`relay_stats::reordered`); the failed one follows after its retry, and
  /// the consumer restores the order: it holds a stamped delivery back until its predecessor
  /// was applied (`consumer_options::predecessor_wait`). For deployments where every event of an
  /// aggregate reaches the same consumers (not routed apart by event type: a delivery whose
  /// predecessor never comes waits out `predecessor_wait`) and receivers may hold more
  /// deliveries than `batch_size` (AMQP `prefetch`). No effect on a transport that keeps publish
  /// order (it needs no stamps). docs/guarantees.md, "Order per aggregate".
  bool stamp_predecessors = false;
  /// Called by `run` with every error it backs off from (for logs and metrics), on the relay's
  /// thread; must not throw. Empty: errors are only counted (`relay_stats::errors`).
  std::function<void(const error&)> on_error{};
  /// Called after each batch is settled (`run` and `run_once`), for metrics: what the batch came
  /// to and how long its steps took. On the thread that settled it (the relay's, or a pipelined
  /// relay's worker); must not throw, and should be quick (it delays the next batch). Not
  /// called for a batch whose settle failed (that is an error, see `on_error`).
  std::function<void(const batch_report&)> on_batch{};
  /// Called right before each publish call to the transport, with the messages it sends (each
  /// with its trace context, `message::trace`): where a tracer starts a producer span (linked
  /// to the messages' contexts). Then `on_publish` follows, however the call ends. On the
  /// relay's thread; must not throw, and should be quick.
  std::function<void(std::span<const message>)> on_publish_start{};
  /// Called after each publish call (see `on_publish_start`), with what the transport said.
  std::function<void(const publish_report&)> on_publish{};
  /// Pauses a route (a topic, an exchange and routing key) that dead-letters more than
  /// `max_dead` messages for a permanent error within `window`: its events stay pending and
  /// the route is tried again after a growing pause (docs/running.md, "Storm guard"). On by
  /// default (100 in 60 s; 30 s doubling to 10 min); `.storm_guard = {.max_dead = 0}` turns it
  /// off.
  storm_guard_options storm_guard{};
};

/// Counters of one relay (a snapshot; the relay updates them as it goes).
struct relay_stats {
  std::uint64_t batches = 0;        ///< Batches settled (an empty claim is not a batch).
  std::uint64_t published = 0;      ///< Messages settled as published.
  std::uint64_t retried = 0;        ///< Messages settled to wait for a retry.
  std::uint64_t dead_lettered = 0;  ///< Messages dead-lettered, unreadable rows included.
  std::uint64_t released = 0;       ///< Released or deferred: pending, attempt given back.
  std::uint64_t fenced = 0;         ///< Fates (any kind) that touched no row: claim lost.
  std::uint64_t errors = 0;         ///< Errors the run loop backed off from (see `relay::run`).
  /// Messages confirmed although an earlier message of their aggregate in the same call had
  /// failed (and follows after its retry): a transport that breaks its `keeps_publish_order`
  /// promise, or, with `stamp_predecessors`, one that does not make it (the consumer puts them
  /// back in order); 0 otherwise.
  std::uint64_t reordered = 0;
  /// Errors in a row since `run`'s last step that went through (0 when it did): a database or
  /// broker that has been away for a while, for health checks.
  std::uint64_t consecutive_errors = 0;
  /// Steps of `run` that went through (a claim, empty or not, and what followed): with
  /// `errors`, a measure of progress. Neither moving for long means the relay is stuck (a
  /// database or broker that holds a connection open and never answers), for health checks.
  std::uint64_t steps = 0;
  /// Routes the storm guard holds paused or is probing (`relay_options::storm_guard`).
  std::uint64_t routes_paused = 0;
};

namespace detail {
/// The publish deadline of a batch under `options`, `lease_left` before its lease ends:
/// `publish_timeout` from now, but never past the lease minus a margin (the claim may have
/// waited for a lock), so no other relay can take over a batch in flight.
inline std::chrono::steady_clock::time_point publish_deadline(
    const relay_options& options, std::chrono::system_clock::duration lease_left) {
  const auto margin =
      std::min<std::chrono::milliseconds>(std::chrono::seconds(1), options.lease / 10);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(lease_left) - margin;
  return std::chrono::steady_clock::now() +
         std::max(std::chrono::milliseconds(0), std::min(options.publish_timeout, left));
}
}  // namespace detail

}  // namespace outbox
