#pragma once
/// @file
/// `consumer<Store, Receiver>`: applies each delivered event exactly once per consumer name.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
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
  /// Required: the deduplication scope, one inbox per name. Two services that share a database
  /// need two names, or each skips the other's events as duplicates; so there is no default.
  std::string name{};
  std::chrono::milliseconds poll_timeout{100};                ///< How long one `poll_once` waits.
  dead_letter_route dead_letters = dead_letter_route::store;  ///< See dead_letter_route.
  /// Called by `run` with every error it backs off from (for logs and metrics), on the
  /// consumer's thread; must not throw.
  std::function<void(const error&)> on_error{};
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
      throw error(errc::misconfigured, "core", {},
                  "consumer_options.name is required: it is the deduplication scope (services "
                  "that share a database need different names)");
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
  ///
  /// Failures are told apart by class. A `transient` or `in_doubt` one (the database busy or
  /// away, a deadlock or serialization failure in the handler's own statements, classified by
  /// the store's `classify` when it has one) is not the event's fault: it spends no attempt,
  /// and the delivery is nacked after a delay that grows with each consecutive such failure.
  /// Anything else the handler throws spends one of the retry policy's attempts; the last one
  /// dead-letters the delivery.
  /// @throws outbox::error when acknowledging fails after the commit (the delivery will come
  ///         again and the inbox absorbs it), when a failed delivery can be neither
  ///         dead-lettered nor nacked, and `misconfigured` from the store (nacked first).
  outcome process(const delivery& d) {
    std::string failure;
    errc kind = errc::permanent;
    bool fresh = false;
    bool committed = false;
    try {
      auto tx = store_->begin();
      fresh = store_->record_delivery(options_.name, d.msg.id, clock_.now());
      if (fresh) handler_(store_->session(), d.msg);
      tx.commit();
      committed = true;
    } catch (const error& e) {
      kind = e.kind();
      failure = e.what();
    } catch (const std::exception& e) {
      kind = classify(e);
      failure = e.what();
    } catch (...) {
      failure = "non-standard exception from the handler";
    }
    if (committed) {
      // Committed: count it now; a failing ack below only means a redelivery the inbox absorbs.
      attempts_.erase(d.msg.id);
      transient_streak_ = 0;
      (fresh ? applied_ : duplicates_).fetch_add(1, std::memory_order_relaxed);
      receiver_->ack(d);
      return fresh ? outcome::applied : outcome::duplicate;
    }
    if (kind == errc::misconfigured) {
      receiver_->nack(d, true);
      throw error(errc::misconfigured, "core", {}, "consumer: " + sanitize_text(failure));
    }
    if (kind == errc::transient || kind == errc::in_doubt) {
      // Not the event's fault: no attempt spent, but never a tight loop either.
      return requeue(d, ++transient_streak_);
    }
    transient_streak_ = 0;
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
      } catch (const error&) {
        receiver_->nack(d, true);  // keep it; a later attempt dead-letters it
        throw;
      } catch (const std::exception& e) {
        receiver_->nack(d, true);
        throw error(errc::permanent, "core", {},
                    std::string("consumer: dead-lettering failed: ") + sanitize_text(e.what()));
      }
      attempts_.erase(d.msg.id);
      receiver_->ack(d);
      dead_.fetch_add(1, std::memory_order_relaxed);
      return outcome::dead_lettered;
    }
    return requeue(d, attempt);
  }

  /// Polls until `stop` is requested.
  ///
  /// Errors: every `outbox::error` except `misconfigured` (the broker or the database away, an
  /// ack that failed after the commit, a dead letter that could not be written yet) is reported
  /// to `consumer_options::on_error`, counted in `stats().errors`, and backed off from (the
  /// retry policy's delay, growing with each consecutive failure); the delivery comes again.
  /// Waits are cut short by `stop`.
  /// @throws outbox::error `misconfigured` (retrying cannot help: stop the service and say so).
  ///         Exceptions that are not `outbox::error` are not caught.
  void run(std::stop_token stop) {
    stop_ = stop;
    int failures = 0;
    while (!stop.stop_requested()) {
      try {
        poll_once();
        failures = 0;
      } catch (const error& e) {
        if (e.kind() == errc::misconfigured) throw;
        errors_.fetch_add(1, std::memory_order_relaxed);
        if (options_.on_error) options_.on_error(e);
        pause(retry_.delay(++failures, rng_));
      }
    }
  }

  [[nodiscard]] consumer_stats stats() const noexcept {
    return {applied_.load(), duplicates_.load(), retried_.load(), dead_.load(), errors_.load()};
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
    pause(retry_.delay(attempt, rng_));
    receiver_->nack(d, true);
    retried_.fetch_add(1, std::memory_order_relaxed);
    return outcome::retrying;
  }

  /// The class of a foreign exception (the handler's own statement failed): the store's
  /// verdict by native code where it has one, else a handler failure.
  errc classify(const std::exception& e) const {
    if constexpr (concepts::classifying_store<Store>) {
      if (auto c = store_->classify(e)) return *c;
    }
    return errc::permanent;
  }

  /// Sleeps `d`, cut short when the stop token `run` was given is requested.
  void pause(std::chrono::milliseconds d) {
    std::unique_lock lock(pause_mutex_);
    pause_cv_.wait_for(lock, stop_, d, [] { return false; });
  }

  static constexpr std::size_t max_tracked = 100'000;
  std::unordered_map<uuid, int> attempts_;  // failed attempts per event id, since start
  int transient_streak_ = 0;                // consecutive failures that spent no attempt
  std::stop_token stop_;                    // run's, so that waits end on a stop request
  std::mutex pause_mutex_;
  std::condition_variable_any pause_cv_;
  std::atomic<std::uint64_t> applied_{0}, duplicates_{0}, retried_{0}, dead_{0}, errors_{0};
};

}  // namespace outbox
