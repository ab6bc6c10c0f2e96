#pragma once
/// @file
/// `consumer<Store, Receiver>`: applies each delivered event exactly once per consumer name.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/validate.hpp>

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

/// Options of a consumer.
struct consumer_options {
  std::string name = "default";                 ///< Deduplication scope: one inbox per name.
  std::chrono::milliseconds poll_timeout{100};  ///< How long one `poll_once` waits.
  dead_letter_route dead_letters = dead_letter_route::store;  ///< See dead_letter_route.
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
};

/// For each delivery: begin a transaction, record (name, event id) in the inbox; if it was new,
/// run the handler on the same transaction; commit; then ack. A handler that throws rolls the
/// transaction back and the delivery is retried (nack with requeue, after a backoff), then
/// dead-lettered (in the store, or by the transport: see dead_letter_route). Effect: exactly once
/// per consumer name under at-least-once delivery, as long as the inbox keeps records longer than
/// the longest redelivery path.
///
/// @tparam Store a `concepts::inbox_store`.
/// @tparam Receiver a `concepts::receiver`.
template <concepts::inbox_store Store, concepts::receiver Receiver,
          concepts::retry_policy Retry = exponential_backoff, concepts::clock Clock = system_clock>
class consumer {
 public:
  using session_type = typename Store::session_type;
  /// The business effect; runs inside the inbox transaction, writes on the given session.
  using handler_type = std::function<void(session_type&, const message&)>;

  /// What happened to one delivery.
  enum class outcome { idle, applied, duplicate, retrying, dead_lettered };

  consumer(Store& store, Receiver& receiver, handler_type handler, consumer_options options = {},
           Retry retry = consumer_retry, Clock clock = {})
      : store_(&store),
        receiver_(&receiver),
        handler_(std::move(handler)),
        options_(std::move(options)),
        retry_(std::move(retry)),
        clock_(std::move(clock)),
        rng_(std::random_device{}()) {
    if (!handler_) throw error(errc::misconfigured, "core", {}, "consumer needs a handler");
    if (options_.name.empty())
      throw error(errc::misconfigured, "core", {}, "consumer_options.name must not be empty");
    if constexpr (requires(const Receiver& r) {
                    { r.has_dead_letter_route() } -> std::convertible_to<bool>;
                  }) {
      if (options_.dead_letters == dead_letter_route::transport &&
          !receiver_->has_dead_letter_route())
        throw error(errc::misconfigured, "core", {},
                    "consumer_options.dead_letters is transport but the receiver has no "
                    "dead-letter route (it would drop failed deliveries)");
    }
  }

  /// Waits up to `poll_timeout` for one delivery and processes it.
  outcome poll_once() {
    auto d = receiver_->receive(options_.poll_timeout);
    if (!d) return outcome::idle;
    return process(*d);
  }

  /// Processes one delivery (ack, or nack after a backoff, or dead-letter).
  /// @throws outbox::error when acknowledging fails after the commit (the delivery will come
  ///         again and the inbox absorbs it), or when a failed delivery can be neither
  ///         dead-lettered nor nacked.
  outcome process(const delivery& d) {
    std::string failure;
    bool fresh = false;
    bool committed = false;
    try {
      auto tx = store_->begin();
      fresh = store_->record_delivery(options_.name, d.msg.id, clock_.now());
      if (fresh) handler_(store_->session(), d.msg);
      tx.commit();
      committed = true;
    } catch (const error& e) {
      // The database was busy or unreachable: not the handler's fault, so no attempt is spent.
      if (e.kind() == errc::transient) return requeue(d, 1);
      failure = e.what();
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "non-standard exception from the handler";
    }
    if (committed) {
      // Committed: count it now; a failing ack below only means a redelivery the inbox absorbs.
      attempts_.erase(d.msg.id);
      (fresh ? applied_ : duplicates_).fetch_add(1, std::memory_order_relaxed);
      receiver_->ack(d);
      return fresh ? outcome::applied : outcome::duplicate;
    }
    if (attempts_.size() >= max_tracked) attempts_.clear();  // bounded; worst case: more retries
    const int attempt = ++attempts_[d.msg.id];
    if (retry_.exhausted(attempt)) {
      if (options_.dead_letters == dead_letter_route::transport) {
        receiver_->nack(d, false);
        attempts_.erase(d.msg.id);
        dead_.fetch_add(1, std::memory_order_relaxed);
        return outcome::dead_lettered;
      }
      try {
        store_->dead_letter_delivery(options_.name, d.msg, sanitize_text(failure), clock_.now());
      } catch (...) {
        receiver_->nack(d, true);  // keep it; a later attempt dead-letters it
        throw;
      }
      attempts_.erase(d.msg.id);
      receiver_->ack(d);
      dead_.fetch_add(1, std::memory_order_relaxed);
      return outcome::dead_lettered;
    }
    return requeue(d, attempt);
  }

  /// Polls until `stop` is requested. Transient errors (e.g. the database is busy past its
  /// timeout while acknowledging) are absorbed: the delivery comes again.
  /// @throws outbox::error for anything but a transient error.
  void run(std::stop_token stop) {
    int failures = 0;
    while (!stop.stop_requested()) {
      try {
        poll_once();
        failures = 0;
      } catch (const error& e) {
        if (e.kind() != errc::transient) throw;
        // Back off while the broker or the database is away instead of spinning.
        std::this_thread::sleep_for(retry_.delay(++failures, rng_));
      }
    }
  }

  [[nodiscard]] consumer_stats stats() const noexcept {
    return {applied_.load(), duplicates_.load(), retried_.load(), dead_.load()};
  }
  [[nodiscard]] const consumer_options& options() const noexcept { return options_; }

 private:
  Store* store_;
  Receiver* receiver_;
  handler_type handler_;
  consumer_options options_;
  Retry retry_;
  Clock clock_;
  std::mt19937_64 rng_;
  outcome requeue(const delivery& d, int attempt) {
    std::this_thread::sleep_for(retry_.delay(attempt, rng_));
    receiver_->nack(d, true);
    retried_.fetch_add(1, std::memory_order_relaxed);
    return outcome::retrying;
  }

  static constexpr std::size_t max_tracked = 100'000;
  std::unordered_map<uuid, int> attempts_;  // failed attempts per event id, since start
  std::atomic<std::uint64_t> applied_{0}, duplicates_{0}, retried_{0}, dead_{0};
};

}  // namespace outbox
