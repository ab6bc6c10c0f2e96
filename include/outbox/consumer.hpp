#pragma once
/// @file
/// `consumer<Store, Receiver>`: applies each delivered event exactly once per consumer name.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
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
#include <outbox/consumer/options.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/validate.hpp>

namespace outbox {

/// For each delivery: begin a transaction, record (name, event id) in the inbox; if it was new,
/// run the handler on the same transaction; commit; then ack. A handler that throws rolls the
/// transaction back and the delivery is retried (nack with requeue, after a backoff), then
/// dead-lettered (in the store, or by the transport: see dead_letter_route). Effect: exactly once
/// per consumer name under at-least-once delivery, as long as the inbox keeps records longer than
/// the longest redelivery path.
///
/// A delivery stamped with its predecessor in its aggregate (`outbox::predecessor_header`) whose
/// predecessor is not in the inbox yet is held back, unacknowledged, and applied right after the
/// predecessor (see `consumer_options::predecessor_wait`): order holds at the consumer even when
/// the broker took a run's messages out of order.
///
/// @tparam Store a `concepts::inbox_store`.
/// @tparam Receiver a `concepts::receiver`.
template <concepts::inbox_store Store, concepts::receiver Receiver,
          concepts::retry_policy Retry = exponential_backoff, concepts::clock Clock = system_clock>
class consumer {
 public:
  /// The connection type of the store, on which the handler writes (`Store::session_type`).
  using session_type = typename Store::session_type;
  /// The business effect; runs inside the inbox transaction, writes on the given session.
  using handler_type = std::function<void(session_type&, const message&)>;

  /// What happened to one delivery (see `delivery_outcome`).
  using outcome = delivery_outcome;

  /// Reads deliveries from `receiver` and applies them with `handler` in transactions of
  /// `store`; `store` and `receiver` must outlive the consumer.
  /// @throws outbox::error `misconfigured` for an empty handler, a name that
  ///         `consumer_options::name` refuses, or `dead_letter_route::transport` on a receiver
  ///         that has no dead-letter route.
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
    check_name_fits(options_.name);
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

  /// Waits up to `poll_timeout` for one delivery and processes it (with the deliveries held
  /// back for it, when it is their predecessor). A held delivery whose wait ran out is
  /// processed first, instead of waiting.
  outcome poll_once() {
    auto timeout = options_.poll_timeout;
    if (!held_.empty()) {
      const auto now = std::chrono::steady_clock::now();
      if (held_.front().due <= now) return process_oldest_held();
      timeout =
          std::min(timeout, std::chrono::ceil<std::chrono::milliseconds>(held_.front().due - now));
    }
    auto d = receiver_->receive(timeout);
    if (!d) return outcome::idle;
    return process(*d);
  }

  /// Processes one delivery (ack, or nack after a backoff, or dead-letter, or holds it back for
  /// its predecessor; see `consumer_options::predecessor_wait`), then the ones held back for it.
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
    last_delivery_.store(since_epoch(clock_.now()), std::memory_order_relaxed);
    const outcome o = process_one(d, stamp::check_and_hold);
    if (o == outcome::deferred) {
      // Room for the predecessor to arrive: apply the oldest held ones beyond it.
      while (held_.size() > hold_capacity()) process_oldest_held();
    } else {
      release_held_behind(d.msg.id, o);
    }
    held_count_.store(held_.size(), std::memory_order_relaxed);
    return o;
  }

  /// Deliveries held back for their predecessor now.
  [[nodiscard]] std::size_t held() const noexcept { return held_.size(); }

  /// Gives every delivery held back to the receiver again (`nack` with requeue): `run` does it
  /// when it ends; a caller of `poll_once` that stops calls it. Deliveries the receiver
  /// prefetched meanwhile stay with it and would come first to the next reader: close or
  /// reconnect the receiver before another consumer reads from it.
  /// @throws outbox::error when a nack fails (the rest stay held).
  void release_held() {
    while (!held_.empty()) {
      receiver_->nack(held_.front().d, true);
      held_.pop_front();
      held_count_.store(held_.size(), std::memory_order_relaxed);
    }
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
    // Held deliveries go back to the receiver however `run` ends (a failed nack: the broker
    // redelivers what was not acknowledged when the connection goes).
    struct give_back {
      consumer* self;
      ~give_back() {
        try {
          self->release_held();
        } catch (...) {
          self->held_.clear();
          self->held_count_.store(0, std::memory_order_relaxed);
        }
      }
    } guard{this};
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

  /// A snapshot of the counters; callable from any thread while the consumer runs.
  [[nodiscard]] consumer_stats stats() const noexcept {
    return {applied_.load(),
            duplicates_.load(),
            retried_.load(),
            dead_.load(),
            errors_.load(),
            deferred_.load(),
            out_of_order_.load(),
            time_point(time_point::duration(last_progress_.load())),
            time_point(time_point::duration(last_delivery_.load())),
            held_count_.load()};
  }
  /// The options the consumer was built with.
  [[nodiscard]] const consumer_options& options() const noexcept { return options_; }

 private:
  Store* store_;
  Receiver* receiver_;
  handler_type handler_;
  consumer_options options_;
  Retry retry_;
  Clock clock_;
  std::mt19937_64 rng_;

  /// What `process_one` does with a predecessor stamp: look it up and hold the delivery back
  /// when the predecessor is missing; look it up and apply anyway (counted out of order); or
  /// trust it (the predecessor was just processed here).
  enum class stamp { check_and_hold, check, trust };

  struct held_delivery {
    delivery d;
    uuid predecessor;
    std::chrono::steady_clock::time_point due;
    bool ready = false;  ///< its predecessor finished here: it may go
    std::string key;     ///< its aggregate's (`aggregate_key`)
  };

  /// The latest event of `m`'s aggregate older than `m` (by id) that is held here, or was
  /// released from here and is being retried (`blocked_`), if any.
  [[nodiscard]] std::optional<uuid> earlier_held(const message& m) const {
    if (held_.empty() && blocked_.empty()) return std::nullopt;
    const auto key = detail::aggregate_key(m);
    std::optional<uuid> latest;
    const auto consider = [&](const uuid& id) {
      if (id < m.id && (!latest || *latest < id)) latest = id;
    };
    if (const auto b = blocked_.find(key);
        b != blocked_.end() && b->second.until > std::chrono::steady_clock::now())
      consider(b->second.id);
    for (const auto& h : held_)
      if (h.key == key) consider(h.d.msg.id);
    return latest;
  }

  static bool finished(outcome o) noexcept {
    return o == outcome::applied || o == outcome::duplicate || o == outcome::dead_lettered;
  }

  /// How many may be held: fewer than the receiver hands out unacknowledged.
  [[nodiscard]] std::size_t hold_capacity() const {
    std::size_t cap = options_.max_deferred;
    if constexpr (requires(const Receiver& r) {
                    { r.max_held() } -> std::convertible_to<std::size_t>;
                  }) {
      const std::size_t window = receiver_->max_held();
      if (window > 0) cap = std::min(cap, window - 1);
    }
    return cap;
  }

  /// The stamped predecessor of `m`, when this consumer honours stamps.
  [[nodiscard]] std::optional<uuid> stamped_predecessor(const message& m) const {
    if constexpr (concepts::inbox_lookup_store<Store>) {
      if (options_.predecessor_wait.count() <= 0) return std::nullopt;
      const auto it = m.headers.find(predecessor_header);
      if (it != m.headers.end()) return uuid::parse(it->second);
    }
    return std::nullopt;
  }

  /// Holds `d` back for `predecessor`. A delivery of a message already held (the broker
  /// redelivered it after a reconnect, and the held one's tag died with the old connection; or
  /// the relay sent it again) takes the held one's place, keeping its wait, and the held one is
  /// acknowledged (the new one stands for it), so copies neither pile up nor crowd out the room
  /// left for the predecessor.
  void hold(const delivery& d, const uuid& predecessor) {
    const auto same = std::find_if(held_.begin(), held_.end(),
                                   [&](const held_delivery& h) { return h.d.msg.id == d.msg.id; });
    if (same == held_.end()) {
      held_.push_back({d, predecessor, std::chrono::steady_clock::now() + options_.predecessor_wait,
                       false, detail::aggregate_key(d.msg)});
      return;
    }
    const delivery old = std::exchange(same->d, d);
    try {
      receiver_->ack(old);
    } catch (const error&) {
      // The connection is gone (the next receive says so) or the ack was lost: either way the
      // old delivery comes again, or is the stale copy of the one held now. Nothing to undo.
    }
  }

  /// The oldest held delivery's wait ran out: it goes now (counted out of order unless its
  /// predecessor came meanwhile), or rather the first of its chain, when its own predecessor is
  /// held too; then what was held behind it.
  outcome process_oldest_held() {
    auto it = held_.begin();
    for (std::size_t steps = 0; steps < held_.size(); ++steps) {  // bounded: stamps may cycle
      const uuid& p = it->predecessor;
      const auto up = std::find_if(held_.begin(), held_.end(),
                                   [&](const held_delivery& h) { return h.d.msg.id == p; });
      if (up == held_.end()) break;
      it = up;
    }
    held_delivery h = std::move(*it);
    held_.erase(it);
    const outcome o = process_one(h.d, stamp::check);
    release_held_behind(h.d.msg.id, o);
    held_count_.store(held_.size(), std::memory_order_relaxed);
    return o;
  }

  /// After `id` was processed with `o`. Once it finished (applied, a duplicate, or
  /// dead-lettered), the deliveries held for it are ready; then the ready ones go, the oldest
  /// event first (the smallest id: UUIDv7 ids grow in enqueue order), each making its own
  /// followers ready. Two held deliveries may name one predecessor (the relay stamps a retried
  /// message's successor in the next batch with it, and its successors of the first batch too),
  /// so the order is the ids', not the stamps'. One that does not finish (its handler failed:
  /// it is retried) holds back the ready ones of its aggregate until it finishes.
  void release_held_behind(const uuid& id, outcome o) {
    if (!finished(o)) return;
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(blocked_,
                  [&](const auto& b) { return b.second.id == id || b.second.until <= now; });
    if (held_.empty()) return;
    const auto mark_ready = [&](const uuid& p) {
      for (auto& h : held_)
        if (h.predecessor == p) h.ready = true;
    };
    mark_ready(id);
    for (;;) {
      auto next = held_.end();
      for (auto it = held_.begin(); it != held_.end(); ++it) {
        if (!it->ready || (next != held_.end() && next->d.msg.id < it->d.msg.id)) continue;
        if (!blocked_.empty() && blocked_.contains(it->key)) continue;  // waits for its blocker
        next = it;
      }
      if (next == held_.end()) return;
      held_delivery h = std::move(*next);
      held_.erase(next);
      if (const outcome r = process_one(h.d, stamp::trust); finished(r))
        mark_ready(h.d.msg.id);
      else if (blocked_.size() < options_.max_deferred)  // at worst, a ready one goes early
        blocked_.insert_or_assign(h.key, blocker{h.d.msg.id, now + options_.predecessor_wait});
    }
  }

  /// A name the inbox cannot keep whole failed every delivery (and its dead-lettering, so the
  /// delivery came back forever), or was cut (or compared short) so that two names shared one
  /// inbox.
  static void check_name_fits(const std::string& name) {
    if (name.find('\0') != std::string::npos || !is_valid_utf8(name))
      throw error(errc::misconfigured, "core", {},
                  "consumer_options.name must be UTF-8 text without NUL bytes (the inbox keeps "
                  "it as text)");
    // MySQL's inbox compares names without their trailing spaces (a PAD SPACE collation):
    // "a " would share the inbox of "a". Refused on every store, so a name works on all.
    if (name.ends_with(' '))
      throw error(errc::misconfigured, "core", {},
                  "consumer_options.name \"" + sanitize_text(name, 128) +
                      (name.size() > 128 ? "...\" (" + std::to_string(name.size()) + " bytes)"
                                         : std::string("\"")) +
                      " ends in a space: MySQL compares names without their trailing spaces, "
                      "so it would share the inbox of the name without them (refused on every "
                      "store, so that a name works on all)");
    if constexpr (concepts::consumer_name_limited_store<Store>) {
      const name_limit limit = Store::consumer_name_limit;
      std::size_t length = name.size();
      if (limit.characters)  // valid UTF-8: count the bytes that start a character
        length = static_cast<std::size_t>(std::count_if(name.begin(), name.end(), [](char c) {
          return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        }));
      const char* unit = limit.characters ? " characters" : " bytes";
      if (length > limit.max)
        throw error(errc::misconfigured, "core", {},
                    "consumer_options.name is " + std::to_string(length) + unit +
                        "; this store's inbox keeps names of at most " + std::to_string(limit.max) +
                        unit +
                        " (a longer one would fail every delivery, or be cut so that two names "
                        "share one inbox)");
    }
  }

  outcome process_one(const delivery& d, stamp check) {
    if (options_.on_delivery_start) options_.on_delivery_start(d.msg);
    const auto started = std::chrono::steady_clock::now();
    std::chrono::nanoseconds handler_time{0};
    std::optional<std::chrono::nanoseconds> end_to_end;
    std::string failure;
    // One report per call, before the ack or nack that ends it (see on_delivery); the counters
    // of consumer_stats count the reports, so the two always agree.
    const auto report = [&](outcome o) {
      count(o);
      if (finished(o)) last_progress_.store(since_epoch(clock_.now()), std::memory_order_relaxed);
      if (!options_.on_delivery) return;
      options_.on_delivery(delivery_report{d.msg, o, std::chrono::steady_clock::now() - started,
                                           handler_time, end_to_end, failure});
    };
    errc kind = errc::permanent;
    bool fresh = false;
    bool committed = false;
    try {
      auto tx = store_->begin();
      fresh = store_->record_delivery(options_.name, d.msg.id, clock_.now());
      if (fresh && check != stamp::trust) {
        std::optional<uuid> wait_for;
        if constexpr (concepts::inbox_lookup_store<Store>) {
          const auto p = stamped_predecessor(d.msg);
          if (p && !store_->recorded(options_.name, *p)) wait_for = p;
          // An earlier event of its aggregate is held here, or was released and is retried:
          // it goes behind that one (whatever its own stamp says, or without one).
          if (check == stamp::check_and_hold && options_.predecessor_wait.count() > 0) {
            if (const auto b = earlier_held(d.msg); b && (!wait_for || *wait_for < *b))
              wait_for = b;
          }
        }
        if (wait_for) {
          if (check == stamp::check_and_hold && hold_capacity() > 0) {
            // Rolled back (tx): the delivery is recorded when it is applied.
            report(outcome::deferred);
            hold(d, *wait_for);
            return outcome::deferred;
          }
          out_of_order_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (fresh) {
        const auto handler_start = std::chrono::steady_clock::now();
        try {
          handler_(store_->session(), d.msg);
        } catch (...) {
          handler_time = std::chrono::steady_clock::now() - handler_start;
          throw;
        }
        handler_time = std::chrono::steady_clock::now() - handler_start;
      }
      tx.commit();
      committed = true;
      if (fresh)
        end_to_end = std::max(
            std::chrono::nanoseconds{0},
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.now() - d.msg.created_at));
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
      report(fresh ? outcome::applied : outcome::duplicate);
      receiver_->ack(d);
      return fresh ? outcome::applied : outcome::duplicate;
    }
    failure = sanitize_text(failure);
    if (kind == errc::misconfigured) {
      report(outcome::retrying);
      receiver_->nack(d, true);
      throw error(errc::misconfigured, "core", {}, "consumer: " + failure);
    }
    if (kind == errc::transient || kind == errc::in_doubt) {
      // Not the event's fault: no attempt spent, but never a tight loop either.
      block_behind(d);
      report(outcome::retrying);
      return requeue(d, ++transient_streak_);
    }
    transient_streak_ = 0;
    if (attempts_.size() >= max_tracked) attempts_.clear();  // bounded; worst case: more retries
    const int attempt = ++attempts_[d.msg.id];
    if (retry_.exhausted(attempt)) {
      if (options_.dead_letters == dead_letter_route::transport) {
        try {
          receiver_->nack(d, false);
        } catch (const std::exception& e) {  // not dead-lettered: the delivery comes again
          failure = "dead-lettering failed: " + sanitize_text(e.what());
          report(outcome::retrying);
          throw;
        }
        attempts_.erase(d.msg.id);
        report(outcome::dead_lettered);
        return outcome::dead_lettered;
      }
      try {
        store_->dead_letter_delivery(options_.name, d.msg, failure, clock_.now());
      } catch (const error& e) {
        failure = "dead-lettering failed: " + sanitize_text(e.what());
        report(outcome::retrying);
        receiver_->nack(d, true);  // keep it; a later attempt dead-letters it
        throw;
      } catch (const std::exception& e) {
        failure = "dead-lettering failed: " + sanitize_text(e.what());
        report(outcome::retrying);
        receiver_->nack(d, true);
        throw error(errc::permanent, "core", {}, "consumer: " + failure);
      }
      attempts_.erase(d.msg.id);
      report(outcome::dead_lettered);
      receiver_->ack(d);
      return outcome::dead_lettered;
    }
    block_behind(d);
    report(outcome::retrying);
    return requeue(d, attempt);
  }

  /// A delivery that failed and goes back for a retry holds back the later events of its
  /// aggregate that arrive meanwhile (`earlier_held`), so none overtakes it from the receiver's
  /// prefetch: always when stamped (its relay stamps: one consumer per queue), else by
  /// `consumer_options::hold_behind_retry`. Each failure here restarts the wait: the delivery
  /// is still retried here, so what is held behind it waits on, however long the outage.
  void block_behind(const delivery& d) {
    if constexpr (concepts::inbox_lookup_store<Store>) {
      if (options_.predecessor_wait.count() <= 0 ||
          (!options_.hold_behind_retry && !d.msg.headers.contains(predecessor_header)))
        return;
      const auto now = std::chrono::steady_clock::now();
      const blocker b{d.msg.id, now + options_.predecessor_wait};
      // Bounded (an outage fails every aggregate's delivery): at worst, a later one goes early.
      if (blocked_.size() >= options_.max_deferred) {
        std::erase_if(blocked_, [&](const auto& e) { return e.second.until <= now; });
        if (blocked_.size() >= options_.max_deferred &&
            !blocked_.contains(detail::aggregate_key(d.msg)))
          return;
      }
      const std::string key = detail::aggregate_key(d.msg);
      auto [it, fresh] = blocked_.try_emplace(key, b);
      if (!fresh && (d.msg.id <= it->second.id || it->second.until <= now)) it->second = b;
      if (it->second.id != d.msg.id || held_.empty()) return;
      // Its aggregate's held ones wait as long again: moved to the back, which keeps held_
      // ordered by `due` (each was held at most predecessor_wait ago).
      const auto behind = std::stable_partition(
          held_.begin(), held_.end(),
          [&](const held_delivery& h) { return h.key != key || h.d.msg.id < d.msg.id; });
      for (auto h = behind; h != held_.end(); ++h) h->due = std::max(h->due, b.until);
    }
  }

  outcome requeue(const delivery& d, int attempt) {
    pause(retry_.delay(attempt, rng_));
    receiver_->nack(d, true);
    return outcome::retrying;
  }

  /// Counts one reported outcome in its counter of consumer_stats (by delivery_outcome's order).
  void count(outcome o) noexcept {
    static_assert(static_cast<int>(outcome::deferred) == 5, "counters[] follows the enum");
    std::atomic<std::uint64_t>* const counters[] = {nullptr,   &applied_, &duplicates_,
                                                    &retried_, &dead_,    &deferred_};
    if (auto* c = counters[static_cast<std::size_t>(o)]) c->fetch_add(1, std::memory_order_relaxed);
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
  std::deque<held_delivery> held_;  // held back for their predecessor, soonest `due` first
  // Aggregates whose released delivery failed and is retried: their ready ones wait for it
  // (until it finishes here, or for `predecessor_wait`: it may have gone to another consumer).
  struct blocker {
    uuid id;
    std::chrono::steady_clock::time_point until;
  };
  std::unordered_map<std::string, blocker> blocked_;
  std::atomic<std::uint64_t> applied_{0}, duplicates_{0}, retried_{0}, dead_{0}, errors_{0},
      deferred_{0}, out_of_order_{0}, held_count_{0};
  // consumer_stats' times, as time_point::rep since the epoch (0: not yet)
  std::atomic<time_point::rep> last_progress_{0}, last_delivery_{0};

  static time_point::rep since_epoch(time_point t) noexcept { return t.time_since_epoch().count(); }
};

}  // namespace outbox
