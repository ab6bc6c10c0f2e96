#pragma once
/// @file
/// `relay<Store, Transport>`: moves committed events from the store to the transport.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stop_token>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/relay/fates.hpp>
#include <outbox/relay/options.hpp>
#include <outbox/relay/order.hpp>
#include <outbox/relay/storm_guard.hpp>
#include <outbox/relay/worker.hpp>
#include <outbox/retry.hpp>
#include <outbox/schedule.hpp>
#include <outbox/uuid.hpp>

namespace outbox {

/// Claims batches from `Store`, publishes them through `Transport`, and settles each message by
/// its confirm: published, retried with backoff, or dead-lettered.
///
/// Guarantees: a message is marked published only after its confirm; messages of one aggregate
/// are put on the wire in store order, and a message is not sent while an earlier message of its
/// aggregate in the same batch has failed (it is released and follows after the retry). On a
/// transport that keeps publish order (`concepts::order_keeping_transport`) a batch goes out in
/// one call, its aggregates' runs pipelined: the transport confirms a message only after the
/// earlier ones of the call, so a failure fails the rest of its run too. Elsewhere the batch goes
/// in waves, the k-th message of an aggregate after the (k-1)-th was confirmed.
///
/// @tparam Store a `concepts::claiming_store`.
/// @tparam Transport a `concepts::transport`.
/// @tparam Retry a `concepts::retry_policy`, decides backoff and dead-lettering.
/// @tparam Clock a `concepts::clock`, the time given to the store.
template <concepts::claiming_store Store, concepts::transport Transport,
          concepts::retry_policy Retry = exponential_backoff, concepts::clock Clock = system_clock>
class relay {
 public:
  /// @throws outbox::error `misconfigured` when the options contradict each other, or a locking
  ///         claim could outlast the store's idle-in-transaction limit (`longest_claim_hold`).
  relay(Store& store, Transport& transport, relay_options options = {}, Retry retry = {},
        Clock clock = {})
      : relay(&store, nullptr, transport, std::move(options), std::move(retry), std::move(clock)) {}

  /// A relay that pipelines on two stores (two sessions to the same outbox, configured alike):
  /// batches alternate between them, so a store whose claim holds a transaction until its
  /// settle (locking) claims the next batch on the other session while one is in flight.
  /// `store` is the one `wake()` and the idle sleep use.
  /// @throws outbox::error `misconfigured` when the options contradict each other, or
  ///         `store` and `second_store` are the same object.
  relay(Store& store, Store& second_store, Transport& transport, relay_options options = {},
        Retry retry = {}, Clock clock = {})
      : relay(&store, &second_store, transport, std::move(options), std::move(retry),
              std::move(clock)) {
    bool same = &store == &second_store;
    if constexpr (requires { &store.session() == &second_store.session(); })
      same = same || &store.session() == &second_store.session();
    if (same)
      throw error(errc::misconfigured, "core", {},
                  "a two-store relay needs two stores on two sessions (connections), got one "
                  "twice");
  }

  relay(const relay&) = delete;
  relay& operator=(const relay&) = delete;

 private:
  relay(Store* store, Store* second_store, Transport& transport, relay_options options, Retry retry,
        Clock clock)
      : stores_{store, second_store},
        store_count_(second_store == nullptr ? 1 : 2),
        transport_(&transport),
        options_(std::move(options)),
        retry_(std::move(retry)),
        clock_(std::move(clock)),
        rng_(std::random_device{}()),
        storm_(transport, options_.storm_guard) {
    if (options_.batch_size == 0 || options_.batch_size > relay_options::max_batch_size)
      throw error(errc::misconfigured, "core", {},
                  "relay_options.batch_size must be between 1 and " +
                      std::to_string(relay_options::max_batch_size) + ", got " +
                      std::to_string(options_.batch_size));
    if (options_.lease <= options_.publish_timeout)
      throw error(errc::misconfigured, "core", {},
                  "relay_options.lease must exceed publish_timeout, or a slow confirm would let "
                  "another relay republish a batch still in flight");
    if (options_.idle_poll_min.count() <= 0 || options_.idle_poll_max < options_.idle_poll_min)
      throw error(errc::misconfigured, "core", {}, "relay_options idle poll bounds are invalid");
    if (options_.error_backoff_max.count() <= 0)
      throw error(errc::misconfigured, "core", {},
                  "relay_options.error_backoff_max must be positive");
    if (options_.owner.empty()) options_.owner = "relay-" + make_uuid_v7().to_string();
    check_claim_hold();
  }

  /// A locking claim the server ended mid-publish (idle too long) cannot be settled: its batch
  /// is claimed and published again, so the store's idle limit must outlast the longest hold.
  void check_claim_hold() const {
    if constexpr (concepts::idle_limited_claims_store<Store>) {
      const bool pipelined = pipelines();
      const auto hold = longest_claim_hold(options_, pipelined);
      for (std::size_t i = 0; i < store_count_; ++i) {
        const auto limit = Store::claim_idle_limit(stores_[i]->options());
        if (!limit || *limit >= hold) continue;
        throw error(
            errc::misconfigured, "core", {},
            "relay_options.publish_timeout is " + std::to_string(options_.publish_timeout.count()) +
                " ms: a locking claim may then hold its transaction " +
                std::to_string(hold.count()) + " ms (" +
                (pipelined ? "2 x publish_timeout + " +
                                 std::to_string(pipeline_lease_margin.count()) + " ms, pipelined"
                           : std::string("publish_timeout and a tenth, at most 1 s")) +
                "), longer than store_options.idle_in_transaction_timeout, " +
                std::to_string(limit->count()) +
                " ms, after which the server ends it mid-publish and the batch is published "
                "again; shorten publish_timeout, raise idle_in_transaction_timeout" +
                (pipelined ? ", turn pipeline off" : "") + " or claim by leasing");
      }
    }
  }

 public:
  /// Processes one batch: claim, publish, settle.
  /// @returns how many messages were claimed (0 = nothing to do).
  /// @throws outbox::error from the store or the transport; a claimed batch is released (or
  ///         left to its lease) first.
  std::size_t run_once(std::stop_token stop = {}) {
    released_only_ = false;
    const auto claim_start = std::chrono::steady_clock::now();
    claimed_batch batch = claim_from(*stores_[0]);
    if (batch.empty()) return batch.unreadable;
    const auto claim_time = std::chrono::steady_clock::now() - claim_start;
    const outcome o = publish_batch(batch, stop);
    settle_batch(*stores_[0], batch, o, claim_time);
    if (o.failure) std::rethrow_exception(o.failure);
    return batch.size() + batch.unreadable;
  }

  /// Runs until `stop` is requested: never sleeps after a batch that claimed anything (it looks
  /// again at once: what was committed meanwhile goes next), sleeps adaptively (from
  /// `idle_poll_min` doubling to `idle_poll_max`) after an empty claim. `wake()` cuts a sleep
  /// short.
  ///
  /// Errors: every `outbox::error` except `misconfigured` is reported to
  /// `relay_options::on_error`, counted in `stats().errors`, and backed off from (the relay's
  /// retry policy, growing with each consecutive failure up to
  /// `relay_options::error_backoff_max`; a claimed batch was settled or left to its lease
  /// first), then `run` carries on: a database or broker away for minutes, a
  /// statement refused by a server in a bad state. Nothing is lost by carrying on: a row is
  /// marked published only on its confirm.
  /// @throws outbox::error `misconfigured` (wrong options, credentials, schema, certificates:
  ///         retrying cannot help, so the service should stop and say so). Exceptions that are
  ///         not `outbox::error` (e.g. `std::bad_alloc`) are not caught either.
  void run(std::stop_token stop) {
    if (!pipelines()) {
      run_loop(
          stop, [&] { return run_once(stop); }, [] {});
      return;
    }
    detail::pipeline_worker worker;
    // However `run` ends: the worker's job done, the batch in flight settled and the batch
    // claimed ahead released (what cannot be is left to its lease).
    struct drain_on_exit {
      relay* self;
      detail::pipeline_worker* worker;
      ~drain_on_exit() {
        (void)worker->wait();
        try {
          self->drain_pipeline();
        } catch (...) {  // NOLINT(bugprone-empty-catch): left to the leases
        }
      }
    } guard{this, &worker};
    run_loop(
        stop, [&] { return pipeline_step(stop, worker); }, [&] { drain_pipeline(); });
  }

  /// The lease a pipelining relay needs beyond twice its publish timeout (see `pipelines`).
  static constexpr std::chrono::milliseconds pipeline_lease_margin{5'000};

  /// Whether `run` pipelines: `relay_options::pipeline`, a store that can (see there), and a
  /// lease of at least 2 x `publish_timeout` + 5 s (the defaults, 30 s and 10 s, are).
  [[nodiscard]] bool pipelines() const {
    // A batch claimed ahead waits up to publish_timeout for the one in flight, then has its own
    // publish, then its settle waits behind the next claim: without this much lease its
    // confirms would be cut short (charged as failures) or its settle fenced.
    if (!options_.pipeline || options_.lease < 2 * options_.publish_timeout + pipeline_lease_margin)
      return false;
    if (store_count_ == 2) return true;
    if constexpr (concepts::overlapping_claims_store<Store>)
      return stores_[0]->claims_overlap();
    else
      return false;
  }

  /// The longest a locking claim may hold its transaction idle, from the claim to its settle,
  /// under `options` (`pipelined`: see `pipelines`): one batch at a time, the publish timeout
  /// and a tenth of it (at most 1 s) for the steps around the publish; pipelined, the batch
  /// claimed ahead also waits for the one in flight, and its settle may wait behind the next
  /// claim: 2 x `publish_timeout` + `pipeline_lease_margin`. The relay refuses a store whose
  /// claim the server ends sooner (`concepts::idle_limited_claims_store`).
  [[nodiscard]] static constexpr std::chrono::milliseconds longest_claim_hold(
      const relay_options& options, bool pipelined) noexcept {
    if (pipelined) return 2 * options.publish_timeout + pipeline_lease_margin;
    return options.publish_timeout + std::min<std::chrono::milliseconds>(
                                         std::chrono::seconds(1), options.publish_timeout / 10);
  }

  /// Wakes a sleeping `run` (e.g. after a local commit, or on a database notification). Not
  /// the pause after an error: that ends when the retry policy says (or on a stop request).
  void wake() {
    {
      std::lock_guard lock(wake_mutex_);
      woken_ = true;
    }
    wake_cv_.notify_all();
    if constexpr (concepts::waking_store<Store>) stores_[0]->interrupt();
  }

  /// A snapshot of the counters; callable from any thread while the relay runs.
  [[nodiscard]] relay_stats stats() const noexcept {
    return {batches_.load(), published_.load(),    retried_.load(),
            dead_.load(),    released_.load(),     fenced_.load(),
            errors_.load(),  reordered_.load(),    consecutive_errors_.load(),
            steps_.load(),   storm_.paused_count()};
  }
  /// The options the relay runs with (`owner` filled in when it was given empty).
  [[nodiscard]] const relay_options& options() const noexcept { return options_; }
  /// The storm guard (`relay_options::storm_guard`): which routes are paused; any thread.
  [[nodiscard]] const storm_guard<Transport>& routes() const noexcept { return storm_; }

 private:
  /// What publishing a batch came to: a fate per message, and the transport's exception when
  /// it failed as a whole (the batch is settled before it is rethrown).
  struct outcome {
    std::vector<settlement> fates;
    std::exception_ptr failure;
    std::chrono::nanoseconds publish_time{0};
  };

  /// A claimed batch, the store holding it, and (once published) its outcome.
  struct held_batch {
    claimed_batch batch;
    std::size_t store = 0;
    outcome result{};
    std::chrono::nanoseconds claim_time{0};
  };

  /// The loop of `run`: `step` processes a batch and returns how many rows it claimed;
  /// `before_sleep` lets go of what the step holds before the relay sleeps.
  template <class Step, class BeforeSleep>
  void run_loop(std::stop_token& stop, Step step, BeforeSleep before_sleep) {
    auto idle = options_.idle_poll_min;
    int failures = 0;
    while (!stop.stop_requested()) {
      std::size_t n = 0;
      bool again = false;
      try {
        n = step();
        // A full batch, or a partial one: look again at once. Rows committed while a batch was
        // in flight may have sent no wake-up (PostgreSQL's trigger stays silent while older
        // rows are pending, and rows in flight are), so sleeping now left them waiting for the
        // idle poll (commit to confirm at 500 events/s with a 1.5 ms confirm: p50 5.6 ms).
        // An empty claim ends the look; then the relay sleeps until woken or polled.
        again = n > 0 && !std::exchange(released_only_, false);
        if (!again) before_sleep();
        failures = 0;
        consecutive_errors_.store(0, std::memory_order_relaxed);
        steps_.fetch_add(1, std::memory_order_relaxed);
      } catch (const error& e) {
        if (e.kind() == errc::misconfigured) throw;
        consecutive_errors_.store(static_cast<std::uint64_t>(++failures),
                                  std::memory_order_relaxed);
        count_error(e);
        back_off(stop, std::min(std::max(retry_.delay(failures, rng_), options_.idle_poll_min),
                                options_.error_backoff_max));
        continue;
      }
      if (again) {
        idle = options_.idle_poll_min;
        continue;
      }
      sleep_for(stop, detail::idle_sleep(*stores_[0], clock_, idle));  // or until a row is due
      if (n == 0) idle = std::min(idle * 2, options_.idle_poll_max);
    }
  }

  /// `scan_limit`: see claim_request.
  claimed_batch claim_from(Store& store, std::size_t scan_limit = 0) {
    claimed_batch batch = store.claim(claim_request{options_.owner, options_.batch_size,
                                                    clock_.now(), options_.lease, scan_limit});
    dead_.fetch_add(batch.unreadable, std::memory_order_relaxed);
    return batch;
  }

  /// How far the claim made ahead looks (claim_request::scan_limit), with `in_flight` messages
  /// in the batch being published: a window of claimable rows (plus the batch in flight, which
  /// a locking store still counts), so behind a hot aggregate the claim does not walk its whole
  /// backlog once per batch. It starts at one batch and doubles, up to `max_ahead_window`,
  /// while the claims ahead come back short; a claim ahead that finds nothing sends the next
  /// claim after the settle, unbounded, so no row is left behind.
  std::size_t ahead_scan_limit(std::size_t in_flight) const noexcept {
    return ahead_window_ * options_.batch_size + in_flight;
  }
  void note_ahead_claim(std::size_t claimed) noexcept {
    if (claimed == 0)
      ahead_window_ = 1;
    else if (claimed < options_.batch_size)
      ahead_window_ = std::min(ahead_window_ * 2, max_ahead_window);
  }
  static constexpr std::size_t max_ahead_window = 16;

  /// One batch of a pipelined `run`: publishes the batch claimed ahead (or claims one), while
  /// the worker settles the batch published before it and then claims the next one (on the
  /// other store when there are two). Between steps one batch may be published and unsettled
  /// and one claimed ahead; `drain_pipeline` lets go of both.
  std::size_t pipeline_step(std::stop_token& stop, detail::pipeline_worker& worker) {
    released_only_ = false;
    if (!ahead_) {
      settle_unsettled();
      const auto claim_start = std::chrono::steady_clock::now();
      claimed_batch b = claim_from(*stores_[next_store_]);
      if (b.empty()) return b.unreadable;
      ahead_.emplace(held_batch{
          std::move(b), next_store_, {}, std::chrono::steady_clock::now() - claim_start});
    }
    held_batch current = std::move(*ahead_);
    ahead_.reset();
    const std::size_t other = (current.store + 1) % store_count_;
    const std::size_t in_flight = current.batch.size();
    worker.submit([this, other, in_flight, &stop] {
      // Settled before the claim, so the claim can take what the settle frees: the messages
      // after those just published, and the released ones. (Order does not depend on it: a
      // message in flight holds its aggregate back as a message waiting for a retry does.)
      settle_unsettled();
      if (stop.stop_requested()) return;
      const auto claim_start = std::chrono::steady_clock::now();
      claimed_batch b = claim_from(*stores_[other], ahead_scan_limit(in_flight));
      note_ahead_claim(b.size() + b.unreadable);
      if (!b.empty())
        ahead_.emplace(
            held_batch{std::move(b), other, {}, std::chrono::steady_clock::now() - claim_start});
    });
    try {
      current.result = publish_batch(current.batch, stop);
    } catch (...) {  // not the transport's (it is caught there): e.g. std::bad_alloc
      (void)worker.wait();
      current.result = outcome{std::vector<settlement>(current.batch.size()), nullptr};
      unsettled_.emplace(std::move(current));  // released by `run`'s drain on the way out
      throw;
    }
    const std::exception_ptr job_failure = worker.wait();
    // Both failed: a misconfigured transport stops `run`, whatever the database said.
    std::exception_ptr failure = job_failure;
    if (!failure || detail::is_misconfigured(current.result.failure))
      failure = current.result.failure;
    // The other one, when both failed, is reported here (`run` reports the one rethrown).
    report(failure == job_failure ? current.result.failure : job_failure);
    const std::size_t n = current.batch.size() + current.batch.unreadable;
    unsettled_.emplace(std::move(current));
    next_store_ = other;
    if (failure) {
      try {
        drain_pipeline();
      } catch (...) {  // left to the leases; reported, the first error is rethrown
        report(std::current_exception());
      }
      std::rethrow_exception(failure);
    }
    return n;
  }

  /// An error `run` goes on from: counted in `stats().errors` and passed to `on_error`.
  void count_error(const error& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (options_.on_error) options_.on_error(e);
  }

  /// `count_error` for an error `run` will not rethrow (an `outbox::error`; else nothing).
  void report(const std::exception_ptr& p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const error& e) {
      count_error(e);
    } catch (...) {  // NOLINT(bugprone-empty-catch): not ours to report
    }
  }

  void settle_unsettled() {
    if (!unsettled_) return;
    held_batch b = std::move(*unsettled_);
    unsettled_.reset();
    settle_batch(*stores_[b.store], b.batch, b.result, b.claim_time);
  }

  /// Settles the batch published and releases the batch claimed ahead (worker idle).
  void drain_pipeline() {
    std::exception_ptr first;
    try {
      settle_unsettled();
    } catch (...) {
      first = std::current_exception();
    }
    if (ahead_) {
      held_batch b = std::move(*ahead_);
      ahead_.reset();
      try {
        stores_[b.store]->release(b.batch);
        released_.fetch_add(b.batch.size(), std::memory_order_relaxed);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  /// Publishes a claimed batch: dead-letters the spent messages, sends the rest (in one call
  /// or in waves), and decides each message's fate. Touches only the transport.
  outcome publish_batch(claimed_batch& batch, std::stop_token& stop) {
    const std::size_t n = batch.size();
    const auto publish_start = std::chrono::steady_clock::now();
    outcome out{std::vector<settlement>(n), nullptr};
    std::vector<settlement>& fates = out.fates;
    // Spent messages (attempts that never settled) go to the end, dead (a dead letter does not
    // hold its aggregate back), then paused routes' (storm guard; their aggregates held back).
    std::unordered_set<std::string> failed_aggregates;
    const std::size_t sendable = storm_.set_aside(
        batch.messages, outbox::fates::set_aside_spent(batch.messages, fates, retry_), fates,
        clock_.now(), failed_aggregates);
    constexpr bool keeps_order = concepts::order_keeping_transport<Transport>;
    const bool one_call = keeps_order || options_.stamp_predecessors;
    if (!keeps_order && options_.stamp_predecessors)
      ordering::stamp_predecessors(std::span(batch.messages).first(sendable));
    const auto waves = [&] {
      if (!one_call) return ordering::arrange_waves(std::span(batch.messages).first(sendable));
      return sendable == 0 ? ordering::wave_ranges{} : ordering::wave_ranges{{0, sendable}};
    }();
    const auto until = detail::publish_deadline(options_, batch.lease_until - clock_.now());
    std::chrono::steady_clock::duration last_wave{0};

    for (std::size_t w = 0; w < waves.size() && !out.failure; ++w) {
      // Stopping, or out of time (the lease must not run out while a wave is in flight), or
      // less time left than the last wave took (a slow broker's confirms would come after the
      // deadline: charged, and sent twice): the rest is released, without counting an attempt.
      const auto wave_start = std::chrono::steady_clock::now();
      if (stop.stop_requested() || wave_start >= until || wave_start + last_wave > until) break;
      auto [begin, end] = waves[w];
      end = begin + ordering::defer_behind_failed(
                        std::span(batch.messages).subspan(begin, end - begin), failed_aggregates);
      if (begin == end) continue;
      const std::span<const message> wave(batch.messages.data() + begin, end - begin);
      std::vector<publish_result> results;
      if (options_.on_publish_start) options_.on_publish_start(wave);
      try {
        results = transport_->publish(wave, until);
      } catch (...) {
        out.failure = std::current_exception();
        if (options_.on_publish)
          options_.on_publish(
              publish_report{wave, {}, out.failure, std::chrono::steady_clock::now() - wave_start});
        break;
      }
      if (options_.on_publish)
        options_.on_publish(
            publish_report{wave, results, nullptr, std::chrono::steady_clock::now() - wave_start});
      last_wave = std::chrono::steady_clock::now() - wave_start;
      try {
        outbox::fates::decide(wave, results, std::span(fates).subspan(begin, wave.size()), retry_,
                              rng_, clock_.now(), waves.size() > 1 ? &failed_aggregates : nullptr);
        storm_.after_publish(wave, results, std::span(fates).subspan(begin, wave.size()),
                             clock_.now());
      } catch (...) {  // a misconfigured transport: stop here, do not dead-letter the backlog
        out.failure = std::current_exception();
        for (std::size_t i = begin; i < end; ++i)
          if (fates[i].what != settlement::kind::published) fates[i] = settlement{};
      }
    }

    if (one_call)
      reordered_.fetch_add(
          ordering::hold_back_after_failures(std::span(batch.messages).first(sendable),
                                             std::span(fates).first(sendable)),
          std::memory_order_relaxed);
    // Nothing but releases at once (the publish deadline had passed before the first wave: a
    // claim slower than its lease): `run` sleeps before the next claim, not at once. Deferred
    // ones (a paused route's) are decided: the next claim finds other rows.
    released_only_ = batch.unreadable == 0 && std::all_of(fates.begin(), fates.end(), [](auto& f) {
                       return f.what == settlement::kind::release && f.retry_at == time_point{};
                     });
    out.publish_time = std::chrono::steady_clock::now() - publish_start;
    return out;
  }

  void settle_batch(Store& store, const claimed_batch& batch, const outcome& o,
                    std::chrono::nanoseconds claim_time) {
    const auto settle_start = std::chrono::steady_clock::now();
    const settle_result r = settle_with_retries(store, batch, o.fates);
    if (options_.on_batch)
      options_.on_batch(batch_report{batch.unreadable, r, claim_time, o.publish_time,
                                     std::chrono::steady_clock::now() - settle_start,
                                     batch.messages, o.fates});
    batches_.fetch_add(1, std::memory_order_relaxed);
    published_.fetch_add(r.published, std::memory_order_relaxed);
    retried_.fetch_add(r.retried, std::memory_order_relaxed);
    dead_.fetch_add(r.dead, std::memory_order_relaxed);
    released_.fetch_add(r.released, std::memory_order_relaxed);
    fenced_.fetch_add(r.fenced, std::memory_order_relaxed);
  }

  /// Settling is idempotent under the fencing token, so a transient failure (e.g. the database
  /// busy) is retried a few times before the batch is left to its lease.
  settle_result settle_with_retries(Store& store, const claimed_batch& batch,
                                    std::span<const settlement> fates) {
    for (int attempt = 1;; ++attempt) {
      try {
        return store.settle(batch, fates, clock_.now());
      } catch (const error& e) {
        if (e.kind() != errc::transient || attempt == 3) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
      }
    }
  }

  /// Sleeps up to `d`: on the store's own wake-up channel when it has one (LISTEN/NOTIFY), else
  /// on a condition variable. `wake()` and a stop request cut it short.
  void sleep_for(std::stop_token& stop, std::chrono::milliseconds d) {
    if constexpr (concepts::waking_store<Store>) {
      {
        std::lock_guard lock(wake_mutex_);
        if (std::exchange(woken_, false)) return;
      }
      std::stop_callback on_stop(stop, [this] { stores_[0]->interrupt(); });
      if (!stop.stop_requested()) (void)stores_[0]->wait_for_work(d);
      std::lock_guard lock(wake_mutex_);
      woken_ = false;
    } else {
      std::unique_lock lock(wake_mutex_);
      wake_cv_.wait_for(lock, stop, d, [&] { return woken_; });
      woken_ = false;
    }
  }

  /// The pause after a failed step: all of `d`, unless a stop request cuts it short. Neither
  /// the store's wake-up channel nor `wake()` ends it: the work they announce is what the step
  /// could not do. A wake during the pause is kept for the sleep after the next step.
  void back_off(std::stop_token& stop, std::chrono::milliseconds d) {
    std::unique_lock lock(wake_mutex_);
    (void)wake_cv_.wait_for(lock, stop, d, [] { return false; });
  }

  /// The first is the one `run_once`, `wake` and the idle sleep use; the second (two-store
  /// relays only) takes every other batch of a pipelined `run`.
  std::array<Store*, 2> stores_;
  std::size_t store_count_;
  std::size_t ahead_window_ = 1;  // batches; see ahead_scan_limit (the worker's, one job at a time)
  Transport* transport_;
  relay_options options_;
  Retry retry_;
  Clock clock_;
  std::mt19937_64 rng_;
  storm_guard<Transport> storm_;

  std::mutex wake_mutex_;
  std::condition_variable_any wake_cv_;
  bool woken_ = false;

  bool released_only_ = false;  ///< The last batch published released all it claimed.
  // A pipelined `run`'s batches: claimed ahead (not yet published), and published (not yet
  // settled); the store the next claim without one ahead goes to.
  std::optional<held_batch> ahead_, unsettled_;
  std::size_t next_store_ = 0;
  std::atomic<std::uint64_t> batches_{0}, published_{0}, retried_{0}, dead_{0}, released_{0},
      fenced_{0}, errors_{0}, reordered_{0}, consecutive_errors_{0}, steps_{0};
};

}  // namespace outbox
