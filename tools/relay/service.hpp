#pragma once
// `outbox relay`'s service: the relays of one store and one transport, their start-up, the
// supervising loop, the backlog sampler, and /metrics and /healthz (relay_command.cpp makes it
// from the URLs).

#include <soci/soci.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "../http_server.hpp"
#include "../relay_command.hpp"
#include "../transport_maker.hpp"
#include "checks.hpp"
#include "logger.hpp"
#include "metrics_page.hpp"
#include "signals.hpp"
#include "state.hpp"

namespace outbox_tool::relay_service {

using namespace std::chrono_literals;

/// The relays of one store type and one transport type.
template <class StoreMaker, class Transport>
class service {
  using Store = typename StoreMaker::store_type;
  using relay_type = outbox::relay<Store, Transport>;

 public:
  service(const relay_command_options& o, const store_url& store_u, const store_url& transport_u,
          StoreMaker store_maker, transport_maker<Transport> maker)
      : o_(o),
        store_u_(store_u),
        transport_u_(transport_u),
        store_maker_(std::move(store_maker)),
        maker_(std::move(maker)),
        secrets_(secrets()),
        log_(secrets_),
        max_slot_kept_(o.max_slot_kept.empty() ? 0
                                               : parse_limit(o.max_slot_kept, "--max-slot-kept")),
        max_streamed_age_(o.max_streamed_age == "off"
                              ? 0ms
                              : parse_age(o.max_streamed_age, "--max-streamed-age")) {}

  int run() {
    const outbox::store_options so = relay_store_options(o_);
    outbox::relay_options ro{
        .batch_size = o_.batch_size,
        .lease = parse_age(o_.lease, "--lease"),
        .publish_timeout = parse_age(o_.publish_timeout, "--publish-timeout"),
        .error_backoff_max = parse_age(o_.max_backoff, "--max-backoff"),
        .pipeline = !o_.no_pipeline,
        .stamp_predecessors = o_.stamp_predecessors,
        .storm_guard = {.max_dead = o_.storm_max_dead,
                        .window = parse_age(o_.storm_window, "--storm-window"),
                        .pause = parse_age(o_.storm_pause, "--storm-pause"),
                        .max_pause = parse_age(o_.storm_max_pause, "--storm-max-pause")},
    };
    const outbox::exponential_backoff retry{.max_attempts = o_.max_attempts};
    const auto unhealthy_after = parse_age(o_.unhealthy_after, "--unhealthy-after");
    const auto backlog_interval = parse_age(o_.backlog_interval, "--backlog-interval");
    const auto address = parse_address(o_.metrics_address);

    log_("starting " + std::to_string(o_.threads) + " relay thread(s): store " + store_u_.redacted +
         ", transport " + transport_u_.redacted);
    // The HTTP server first: an address that cannot be served ends the tool before any
    // connection, and /healthz says "starting" (503) while the connections are made.
    std::optional<http_server> http;
    if (address) {
      const std::string host = address->first.find(':') != std::string::npos
                                   ? "[" + address->first + "]"
                                   : address->first;
      try {
        http.emplace(
            address->first, address->second,
            [this, unhealthy_after](std::string_view path) -> http_response {
              if (path != "/metrics" && path != "/healthz")
                return {404, "text/plain; charset=utf-8", "/metrics or /healthz\n"};
              if (!running_.load(std::memory_order_acquire))
                return {503, "text/plain; charset=utf-8", "starting\n"};
              if (path == "/metrics")
                return {200, "text/plain; version=0.0.4; charset=utf-8", {}, metrics_page()};
              return health(unhealthy_after);
            });
      } catch (const std::system_error& e) {
        throw std::runtime_error("cannot serve /metrics on " + host + ":" +
                                 std::to_string(address->second) + ": " + e.what());
      }
      log_("metrics on http://" + host + ":" + std::to_string(http->port()) +
           "/metrics, health on /healthz");
    }

    // Until the relays run, SIGTERM or SIGINT ends the tool at once, exit 0.
    std::jthread startup_watch = watch_startup(log_);
    // Rows the relay found passed over by its stream (a publication that lacked the outbox
    // table for a while): logged, once per find; they go out from the table.
    if constexpr (requires { Store::tails_the_log; })
      store_maker_.set_on_stranded([this](const outbox::error& e) {
        std::string what = e.what();  // "postgresql: ...: misconfigured": a warning here
        if (const std::string kind = ": " + e.code().message(); what.ends_with(kind))
          what.resize(what.size() - kind.size());
        log_("warning: " + what);
      });
    // Start-up: every connection opened, every check made, before the first batch; anything
    // wrong here (a password, a schema, a broker that refuses) ends the tool with exit 1.
    monitor_sql_ = open_session();
    monitor_ = store_maker_.make(*monitor_sql_, with_listen(so, false));
    sample_backlog();
    // Two sessions per thread only when the relay will pipeline.
    const bool two_stores = two_stores_per_relay<Store, Transport>(o_, ro);
    for (unsigned i = 0; i < o_.threads; ++i) {
      auto t = std::make_unique<thread_parts>();
      t->state.index = i;
      t->sql[0] = open_session();
      t->store[0] = store_maker_.make(*t->sql[0], with_listen(so, true));
      if (two_stores) {
        t->sql[1] = open_session();
        t->store[1] = store_maker_.make(*t->sql[1], with_listen(so, false));
      }
      t->transport.emplace(maker_.make());
      maker_.check(*t->transport);
      auto opts = ro;
      thread_parts* self = t.get();
      opts.on_error = [this, self](const outbox::error& e) { on_error(*self, e); };
      opts.on_batch = [this](const outbox::batch_report& r) { on_batch(r); };
      opts.storm_guard.on_change = [this, self](const outbox::route_change& c) {
        log_(describe_route_change(self->state.index, c));
      };
      t->relay =
          two_stores
              ? std::make_unique<relay_type>(*t->store[0], *t->store[1], *t->transport, opts, retry)
              : std::make_unique<relay_type>(*t->store[0], *t->transport, opts, retry);
      parts_.push_back(std::move(t));
    }
    running_.store(true, std::memory_order_release);  // parts_ is complete: served from here
    log_(std::string("batch ") + std::to_string(o_.batch_size) + ", " +
         (parts_.front()->relay->pipelines() ? "pipelined" : "one batch at a time") +
         (o_.stamp_predecessors ? ", predecessor stamps" : "") + "; running");

    // The relays, and the backlog sampler; the supervisor takes the signals from here on.
    startup_watch.request_stop();
    startup_watch.join();
    std::vector<std::thread> threads;
    for (auto& t : parts_) {
      thread_parts* p = t.get();
      threads.emplace_back([this, p] { relay_thread(*p); });
    }
    std::stop_source sampler_stop;
    std::atomic<bool> sampler_done{false};
    std::thread sampler([this, backlog_interval, stop = sampler_stop.get_token(), &sampler_done] {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      while (!cv.wait_for(lock, stop, backlog_interval, [] { return false; }) &&
             !stop.stop_requested())
        sample_backlog();
      sampler_done = true;
    });

    const int code = supervise(unhealthy_after);
    sampler_stop.request_stop();
    for (auto& t : threads) t.join();  // they are done: supervise returned
    const auto s = totals();
    log_("stopped: published " + std::to_string(s.published) + ", retried " +
         std::to_string(s.retried) + ", dead-lettered " + std::to_string(s.dead_lettered) +
         ", released " + std::to_string(s.released) + ", fenced " + std::to_string(s.fenced) +
         ", errors " + std::to_string(s.errors));
    // The sampler may be stuck in a query on a connection that no longer answers (a frozen
    // database). It holds nothing to settle: after a short wait, the tool leaves without it
    // rather than hang in its join.
    for (int i = 0; i < 100 && !sampler_done; ++i) std::this_thread::sleep_for(20ms);
    if (!sampler_done) {
      log_(
          "the backlog sampler's query does not return (its database does not answer): exiting "
          "without it");
      std::fflush(stderr);
      std::_Exit(code);
    }
    sampler.join();
    return code;
  }

 private:
  struct thread_parts {
    slot_state state;
    std::unique_ptr<soci::session> sql[2];
    std::unique_ptr<Store> store[2];
    std::optional<Transport> transport;
    std::unique_ptr<relay_type> relay;
  };

  std::vector<std::string> secrets() const {
    auto s = store_u_.secrets;
    s.insert(s.end(), transport_u_.secrets.begin(), transport_u_.secrets.end());
    return s;
  }

  static outbox::store_options with_listen(outbox::store_options so, bool listen) {
    so.listen = listen;
    return so;
  }

  /// A session for a store (the store's constructor configures it: store_options'
  /// configure_session).
  std::unique_ptr<soci::session> open_session() {
    auto sql = std::make_unique<soci::session>();
    store_maker_.connect(*sql);  // a failure classified by the store (outbox::error)
    return sql;
  }

  void relay_thread(thread_parts& p) {
    try {
      p.relay->run(stop_.get_token());
    } catch (...) {
      const std::string why = describe(std::current_exception());
      {
        std::lock_guard lock(p.state.mutex);
        p.state.fatal = why;
      }
      log_("relay " + std::to_string(p.state.index) + " stopped: " + why);
    }
    p.state.done = true;
  }

  void on_error(thread_parts& p, const outbox::error& e) {
    slot_state& st = p.state;
    st.steps_at_error = p.relay->stats().steps;
    const std::string why = describe(e);
    {
      std::lock_guard lock(st.mutex);
      st.last_error = why;
    }
    if (!st.failing.exchange(true)) {
      st.failing_since = steady_ms();
      log_("relay " + std::to_string(st.index) + " failing, retrying with backoff: " + why);
    }
  }

  void on_batch(const outbox::batch_report& r) { metrics_.relay.record(r); }

  /// The log line of a storm guard's change (the words: route_change_text, checks.hpp).
  std::string describe_route_change(unsigned index, const outbox::route_change& c) const {
    return "relay " + std::to_string(index) + ": " + route_change_text(c, secrets_);
  }

  void sample_backlog() {
    try {
      // One statement where the store can: the totals are the sums of the types', so the
      // gauges agree with each other.
      std::vector<outbox::aggregate_type_stats> by_type;
      outbox::backlog_stats s;
      if constexpr (outbox::concepts::aggregate_stats_store<Store>) {
        by_type = monitor_->stats_by_aggregate_type(std::chrono::system_clock::now());
        for (const auto& t : by_type) s += t.stats;
      } else {
        s = monitor_->stats(std::chrono::system_clock::now());
      }
      if constexpr (requires { Store::tails_the_log; }) {
        // One look at the slot: its lag, and whether it is about to lose WAL it needs
        // (max_slot_wal_keep_size) or lost it (said once per change, and a gauge).
        const auto slot = store_maker_.slot(*monitor_sql_);
        s.log_lag_bytes = slot.lag_bytes;
        s.log_lag = slot.lag;
        const bool at_risk = slot.wal_status == "unreserved" || slot.wal_status == "lost";
        if (!o_.max_slot_kept.empty()) {
          // --max-slot-kept: /healthz fails while the slot keeps too much or is at risk.
          std::string alarm =
              slot_alarm(store_maker_.slot_name(), slot.wal_status, slot.retained_bytes,
                         slot.lag_bytes, max_slot_kept_, slot.active);
          std::lock_guard lock(metrics_.backlog_mutex);
          if (alarm.empty() != slot_alarm_.empty())
            log_(alarm.empty()
                     ? "slot " + store_maker_.slot_name() + ": within --max-slot-kept again"
                     : "/healthz fails: " + alarm);
          slot_alarm_ = std::move(alarm);
        }
        if (at_risk != slot_at_risk_.exchange(at_risk))
          log_(at_risk ? slot_alarm(store_maker_.slot_name(), slot.wal_status, 0, 0, 0, slot.active)
                       : "slot " + store_maker_.slot_name() + ": wal_status " + slot.wal_status +
                             ": its WAL is kept again");
        // Table mode's rows not published yet (the relay's stats() has them; the per-type sums
        // above come from the table).
        const auto rows = Store::streamed(*monitor_sql_, std::chrono::system_clock::now());
        s.streamed_unpublished = rows.unpublished;
        s.oldest_streamed_age = rows.oldest_age;
        if (max_streamed_age_ > 0ms) {
          // --max-streamed-age: /healthz fails while such a row is older than that.
          std::string alarm = streamed_alarm(rows, max_streamed_age_);
          std::lock_guard lock(metrics_.backlog_mutex);
          if (alarm.empty() != streamed_alarm_.empty())
            log_(alarm.empty() ? "table-mode events: none older than --max-streamed-age again"
                               : "/healthz fails: " + alarm);
          streamed_alarm_ = std::move(alarm);
        }
      }
      std::lock_guard lock(metrics_.backlog_mutex);
      metrics_.backlog = s;
      metrics_.by_type = std::move(by_type);
      metrics_.backlog_at = unix_seconds(std::chrono::system_clock::now());
      if (backlog_failing_) log_("backlog readable again");
      backlog_failing_ = false;
    } catch (const std::exception& e) {
      if (!parts_.empty() || backlog_failing_) {  // at start-up, the caller reports it
        std::lock_guard lock(metrics_.backlog_mutex);
        ++metrics_.backlog_errors;
        if (!backlog_failing_) log_(std::string("cannot read the backlog: ") + e.what());
        backlog_failing_ = true;
        return;
      }
      throw;
    }
  }

  /// Waits for SIGTERM or SIGINT (blocked in every thread; taken here) or for a relay to stop on
  /// its own; logs the relays' recoveries. Returns the exit code.
  int supervise(std::chrono::milliseconds unhealthy_after) {
    const sigset_t set = stop_signals();
    bool stopping = false, signalled = false;
    steady::time_point first_signal{};
    int code = exit_ok;
    for (;;) {
      const timespec tick{0, 100'000'000};
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig > 0) {
        const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        // A second signal forces the exit, but not one that came with the first (a wrapper
        // such as timeout(1) that passes a signal on while the group gets it too).
        if (signalled && steady::now() - first_signal < 1s) continue;
        if (signalled) {
          log_(std::string(name) +
               " again: exiting now; batches in flight are left to their leases");
          std::fflush(stderr);
          std::_Exit(exit_error);
        }
        log_(std::string(name) + ": stopping; the batches in flight are settled or released");
        first_signal = steady::now();
        stopping = signalled = true;
        stop_.request_stop();
      }
      bool all_done = true;
      for (auto& t : parts_) {
        auto& st = t->state;
        const auto rs = t->relay->stats();
        if (st.failing && rs.consecutive_errors == 0 && rs.steps > st.steps_at_error + 1 &&
            st.failing.exchange(false))
          log_("relay " + std::to_string(st.index) + " recovered");
        // Progress: a step or an error. Neither for --unhealthy-after: stuck (a server that
        // holds the connection and never answers; no timeout of ours or the server's fires).
        const auto now = steady_ms();
        if (rs.steps + rs.errors != st.progress || st.progress_at == 0) {
          st.progress = rs.steps + rs.errors;
          st.progress_at = now;
          if (st.stalled.exchange(false))
            log_("relay " + std::to_string(st.index) + " moving again");
        } else if (!st.done && !stopping && now - st.progress_at > unhealthy_after.count() &&
                   !st.stalled.exchange(true)) {
          log_("relay " + std::to_string(st.index) + " stalled: no step for " +
               seconds_text(std::chrono::milliseconds(now - st.progress_at)) +
               " (its database or broker does not answer)");
        }
        if (!st.done) {
          all_done = false;
          continue;
        }
        std::lock_guard lock(st.mutex);
        if (!st.fatal.empty() && code == exit_ok) {
          code = exit_error;
          if (!stopping) log_("stopping the other relays");
          stopping = true;
          stop_.request_stop();
        }
      }
      stopping_ = stopping;
      if (all_done) return code;
    }
  }

  outbox::relay_stats totals() const {
    outbox::relay_stats sum;
    for (const auto& t : parts_) {
      const auto s = t->relay->stats();
      sum.batches += s.batches;
      sum.published += s.published;
      sum.retried += s.retried;
      sum.dead_lettered += s.dead_lettered;
      sum.released += s.released;
      sum.fenced += s.fenced;
      sum.errors += s.errors;
      sum.reordered += s.reordered;
      sum.routes_paused += s.routes_paused;
    }
    return sum;
  }

  http_response health(std::chrono::milliseconds unhealthy_after) {
    if (stopping_) return {503, "text/plain; charset=utf-8", "stopping\n"};
    {
      std::lock_guard lock(metrics_.backlog_mutex);
      if (!slot_alarm_.empty()) return {503, "text/plain; charset=utf-8", slot_alarm_ + "\n"};
      if (!streamed_alarm_.empty())
        return {503, "text/plain; charset=utf-8", streamed_alarm_ + "\n"};
    }
    for (auto& t : parts_) {
      auto& st = t->state;
      std::lock_guard lock(st.mutex);
      const std::string who = "relay " + std::to_string(st.index);
      if (st.done)
        return {503, "text/plain; charset=utf-8",
                who + " stopped: " + redact(st.fatal, secrets_) + "\n"};
      if (st.stalled)
        return {503, "text/plain; charset=utf-8",
                who + " stalled: no step for longer than " + seconds_text(unhealthy_after) +
                    " (its database or broker does not answer)\n"};
      const auto since = steady_ms() - st.failing_since.load();
      if (st.failing && since > unhealthy_after.count())
        return {503, "text/plain; charset=utf-8",
                who + " failing for " + std::to_string(since / 1000) +
                    " s: " + redact(st.last_error, secrets_) + "\n"};
    }
    // A paused route is reported, not failed: a restart would forget the pause (and let
    // --storm-max-dead more dead letters through); the gauge outbox_relay_routes_paused alerts.
    std::string paused;
    for (auto& t : parts_)
      for (const auto& r : t->relay->routes().paused())
        paused += "route " + r.route + " paused until " + iso8601(r.until) + ": " +
                  redact(r.last_error, secrets_) + "\n";
    return {200, "text/plain; charset=utf-8", "ok\n" + paused};
  }

  /// The /metrics page, rendered at most once a second and shared by the answers in between: a
  /// flood of scrapes costs a write each, not a render on the HTTP server's one thread.
  std::shared_ptr<const std::string> metrics_page() {
    std::lock_guard lock(page_mutex_);
    const auto now = steady::now();
    if (!page_ || now - page_at_ >= 1s) {
      ++renders_;
      page_ = std::make_shared<const std::string>(render_metrics(view(), metrics_));
      page_at_ = now;
    }
    return page_;
  }

  /// What /metrics shows beside metrics_ (under page_mutex_).
  relay_view view() const {
    relay_view v{.totals = totals(),
                 .renders = renders_,
                 .max_types = o_.metrics_max_types,
                 .slot_at_risk = slot_at_risk_.load()};
    for (const auto& t : parts_) {
      v.running += t->state.done ? 0 : 1;
      v.failing += t->state.failing ? 1 : 0;
      v.stalled += t->state.stalled ? 1 : 0;
    }
    if constexpr (requires { Store::tails_the_log; }) {
      v.tails_the_log = true;
      for (const auto& t : parts_) v.stranded += static_cast<double>(t->store[0]->stranded_rows());
    }
    return v;
  }

  const relay_command_options& o_;
  const store_url& store_u_;
  const store_url& transport_u_;
  StoreMaker store_maker_;
  transport_maker<Transport> maker_;
  std::vector<std::string> secrets_;  ///< Of both URLs: never printed, nor served.
  logger log_;
  shared_metrics metrics_;
  std::mutex page_mutex_;  ///< The HTTP server's thread's; guards the three below.
  std::shared_ptr<const std::string> page_;  ///< The last /metrics page rendered.
  steady::time_point page_at_{};             ///< When it was rendered.
  std::uint64_t renders_ = 0;                ///< Pages rendered.
  std::unique_ptr<soci::session> monitor_sql_;
  std::unique_ptr<Store> monitor_;
  bool backlog_failing_ = false;  // the sampler's (and start-up's) only
  std::vector<std::unique_ptr<thread_parts>> parts_;
  std::stop_source stop_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};       ///< Start-up done: parts_ complete (the HTTP handler's).
  std::atomic<bool> slot_at_risk_{false};  ///< Log-tailing stores: the slot's WAL at risk.
  std::int64_t max_slot_kept_ = 0;         ///< --max-slot-kept in bytes (0: none).
  std::string slot_alarm_;  ///< Why /healthz fails for the slot (under metrics_.backlog_mutex).
  std::chrono::milliseconds max_streamed_age_{0};  ///< --max-streamed-age (0: off).
  /// Why /healthz fails for table mode's rows (under metrics_.backlog_mutex).
  std::string streamed_alarm_;
};

}  // namespace outbox_tool::relay_service
