// `outbox relay`: relays from a store URL to a transport URL until SIGTERM or SIGINT, with
// Prometheus metrics and a health check over HTTP. See relay_command.hpp and
// docs/operations.md.

#include "relay_command.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>

#include "common.hpp"
#include "http_server.hpp"
#include "metrics.hpp"
#include "stores.hpp"
#include "transports.hpp"

namespace outbox_tool {

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// One line per state change on stderr, with a UTC timestamp; secrets never printed.
class logger {
 public:
  explicit logger(std::vector<std::string> secrets) : secrets_(std::move(secrets)) {}
  void operator()(const std::string& line) const {
    // One line per entry: a server's multi-line message (PostgreSQL's DETAIL and HINT) joined.
    std::string one = redact(line, secrets_);
    while (!one.empty() && (one.back() == '\n' || one.back() == ' ')) one.pop_back();
    for (auto& c : one)
      if (c == '\n' || c == '\r') c = ' ';
    const std::string text =
        iso8601(std::chrono::system_clock::now()) + " outbox relay: " + one + "\n";
    std::lock_guard lock(mutex_);
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  std::vector<std::string> secrets_;
  mutable std::mutex mutex_;
};

/// "transient (postgresql 08006): what happened".
std::string describe(const outbox::error& e) {
  return std::string(class_name(e.kind())) + " (" + e.adapter() +
         (e.native_code().empty() ? "" : " " + e.native_code()) + "): " + e.what();
}

std::string describe(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const outbox::error& e) {
    return describe(e);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

double unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

/// What every relay thread feeds and the metrics server reads.
struct shared_metrics {
  histogram batch_duration{latency_bounds()};
  histogram publish_duration{latency_bounds()};
  histogram event_latency{latency_bounds()};
  std::atomic<double> last_batch_at{0};  ///< Unix seconds of the last settled batch; 0: none.

  std::mutex backlog_mutex;
  std::optional<outbox::backlog_stats> backlog;  ///< The last sample; none until one succeeded.
  std::vector<outbox::aggregate_type_stats> by_type;  ///< Of the same sample.
  double backlog_at = 0;                              ///< Unix seconds of that sample.
  std::uint64_t backlog_errors = 0;
};

/// A relay thread's state, as the main loop, the health check and the metrics see it.
struct slot_state {
  unsigned index = 0;
  std::atomic<bool> failing{false};            ///< In a run of errors (logged when it began).
  std::atomic<bool> done{false};               ///< `run` returned.
  std::atomic<std::int64_t> failing_since{0};  ///< steady_clock ms when the run began.
  /// `relay_stats::steps` when the last error was reported: the run ends with a step after
  /// the one that erred (an error a step reports and goes on from is not a recovery).
  std::atomic<std::uint64_t> steps_at_error{0};
  // The supervisor's own: steps + errors when they last moved, and whether the relay is
  // stalled (neither moved for --unhealthy-after).
  std::uint64_t progress = 0;
  std::int64_t progress_at = 0;  ///< steady_clock ms
  std::atomic<bool> stalled{false};
  std::mutex mutex;
  std::string last_error;  ///< Of the current run of errors.
  std::string fatal;       ///< Why `run` ended, when it ended on an error.
};

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now().time_since_epoch())
      .count();
}

/// host:port of --metrics-address; "off" = none.
std::optional<std::pair<std::string, unsigned short>> parse_address(const std::string& text) {
  if (text == "off") return std::nullopt;
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw usage_error(
        "--metrics-address takes host:port (127.0.0.1:9464, or port 0 for any) or "
        "off, got '" +
        text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  // An address, not a name: the server binds it as is (refused here, before any connection).
  in6_addr any{};
  if (inet_pton(AF_INET, host.c_str(), &any) != 1 && inet_pton(AF_INET6, host.c_str(), &any) != 1)
    throw usage_error(
        "--metrics-address takes an IP address (127.0.0.1, [::1], 0.0.0.0) or "
        "localhost, got '" +
        host + "'");
  const std::string p = text.substr(colon + 1);
  try {
    std::size_t used = 0;
    const int port = std::stoi(p, &used);
    if (used == p.size() && port >= 0 && port <= 65535)
      return std::pair{host, static_cast<unsigned short>(port)};
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): refused below
  }
  throw usage_error("bad port in --metrics-address: '" + p + "'");
}

/// What is wrong with a log-tailing relay's table-mode rows, for `--max-streamed-age`: the
/// oldest event not published yet was written more than `max` ago. Empty when nothing is.
template <class Streamed>
std::string streamed_alarm(const Streamed& rows, std::chrono::milliseconds max) {
  if (rows.oldest_age <= max) return {};
  return "table-mode events unpublished: the oldest was written " + seconds_text(rows.oldest_age) +
         " ago, more than --max-streamed-age " + seconds_text(max) + " (" +
         std::to_string(rows.unpublished) +
         " older than 10 s): the relay is that far behind, or no relay streams, or its stream "
         "passed them over (a publication without the outbox table; the relay moves such rows "
         "to the table once its position is past them)";
}

/// SIGTERM and SIGINT: blocked in every thread, taken by sigtimedwait.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

/// The store options of the relay's sessions, from the flags (`listen` is set per session).
outbox::store_options relay_store_options(const relay_command_options& o) {
  outbox::store_options so;
  if (o.claim_policy == "locking")
    so.policy = outbox::claim_policy::locking;
  else if (o.claim_policy == "leasing")
    so.policy = outbox::claim_policy::leasing;
  if (o.retention == "delete") so.retention = outbox::retention::delete_on_publish;
  return so;
}

/// Whether each relay thread gets two store sessions, so that its relay pipelines (a lease
/// long enough for a batch claimed ahead: see relay::pipelines).
template <class Store, class Transport>
bool two_stores_per_relay(const relay_command_options& o, const outbox::relay_options& ro) {
  if constexpr (requires { Store::tails_the_log; }) return false;  // one stream a slot
  return !o.no_pipeline && ro.lease >= 2 * ro.publish_timeout +
                                           outbox::relay<Store, Transport>::pipeline_lease_margin;
}

/// A locking claim that may be held longer than the store's idle-in-transaction timeout is
/// ended by the server mid-publish and its batch published again: refused before anything is
/// opened, as the relay itself would refuse it (relay::longest_claim_hold).
template <class Store, class Transport>
void check_claim_hold(const relay_command_options& o) {
  if constexpr (outbox::concepts::idle_limited_claims_store<Store>) {
    const auto limit = Store::claim_idle_limit(relay_store_options(o));
    if (!limit) return;  // leasing: no transaction is held
    const outbox::relay_options ro{
        .lease = parse_age(o.lease, "--lease"),
        .publish_timeout = parse_age(o.publish_timeout, "--publish-timeout")};
    const bool pipelined = two_stores_per_relay<Store, Transport>(o, ro);
    const auto hold = outbox::relay<Store, Transport>::longest_claim_hold(ro, pipelined);
    if (hold <= *limit) return;
    throw usage_error(
        "--publish-timeout " + o.publish_timeout + ": a locking claim (" +
        (o.claim_policy == "locking" ? "--claim-policy locking" : "this store's default policy") +
        ") may then hold its transaction " + std::to_string(hold.count()) + " ms" +
        (pipelined ? " (2 x --publish-timeout + 5 s, pipelined)"
                   : " (--publish-timeout and a tenth, at most 1 s)") +
        ", longer than the store's idle-in-transaction timeout, " + std::to_string(limit->count()) +
        " ms" +
        ", after which the server ends it mid-publish and the batch is published again; use a "
        "shorter --publish-timeout" +
        (pipelined ? ", --no-pipeline" : "") + " or --claim-policy leasing");
  }
}

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

    // Until the relays run, SIGTERM or SIGINT ends the tool at once, exit 0 (nothing is claimed
    // yet): a server that accepts the connection and never answers must not hold it.
    std::jthread startup_watch([this](std::stop_token stop) {
      const sigset_t set = stop_signals();
      while (!stop.stop_requested()) {
        const timespec tick{0, 100'000'000};
        const int sig = sigtimedwait(&set, nullptr, &tick);
        if (sig <= 0) continue;
        log_(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") +
             " while starting: exiting; nothing was claimed");
        std::fflush(stderr);
        std::_Exit(exit_ok);
      }
    });
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

  void on_batch(const outbox::batch_report& r) {
    const auto now = std::chrono::system_clock::now();
    metrics_.batch_duration.observe(
        std::chrono::duration<double>(r.claim + r.publish + r.settle).count());
    metrics_.publish_duration.observe(std::chrono::duration<double>(r.publish).count());
    for (std::size_t i = 0; i < r.messages.size() && i < r.fates.size(); ++i)
      if (r.fates[i].what == outbox::settlement::kind::published)
        metrics_.event_latency.observe(
            std::chrono::duration<double>(now - r.messages[i].created_at).count());
    metrics_.last_batch_at = unix_seconds(now);
  }

  void sample_backlog() {
    try {
      // One statement where the store can: the totals are the sums of the types', so the
      // gauges agree with each other.
      std::vector<outbox::aggregate_type_stats> by_type;
      outbox::backlog_stats s;
      if constexpr (outbox::concepts::aggregate_stats_store<Store>) {
        by_type = monitor_->stats_by_aggregate_type(std::chrono::system_clock::now());
        for (const auto& t : by_type) {
          s.pending += t.stats.pending;
          s.waiting_retry += t.stats.waiting_retry;
          s.in_flight += t.stats.in_flight;
          s.dead += t.stats.dead;
          s.oldest_pending_age = std::max(s.oldest_pending_age, t.stats.oldest_pending_age);
        }
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
    return {200, "text/plain; charset=utf-8", "ok\n"};
  }

  /// The /metrics page, rendered at most once a second and shared by the answers in between: a
  /// flood of scrapes costs a write each, not a render on the HTTP server's one thread.
  std::shared_ptr<const std::string> metrics_page() {
    std::lock_guard lock(page_mutex_);
    const auto now = steady::now();
    if (!page_ || now - page_at_ >= 1s) {
      ++renders_;
      page_ = std::make_shared<const std::string>(metrics());
      page_at_ = now;
    }
    return page_;
  }

  /// Renders the page (under page_mutex_).
  std::string metrics() {
    const auto s = totals();
    std::string out;
    prom_metric(out, "outbox_relay_published_total", "counter",
                "Events published (confirmed by the broker) and settled.",
                static_cast<double>(s.published));
    prom_metric(out, "outbox_relay_retried_total", "counter",
                "Events that failed and wait for a retry.", static_cast<double>(s.retried));
    prom_metric(out, "outbox_relay_dead_lettered_total", "counter",
                "Events dead-lettered (failed for good, out of attempts, or unreadable).",
                static_cast<double>(s.dead_lettered));
    prom_metric(out, "outbox_relay_fenced_total", "counter",
                "Events confirmed after their lease was lost (another relay owns them).",
                static_cast<double>(s.fenced));
    prom_metric(out, "outbox_relay_released_total", "counter",
                "Events claimed and given back unsent (stopping, or behind a failure).",
                static_cast<double>(s.released));
    prom_metric(out, "outbox_relay_reordered_total", "counter",
                "Events confirmed ahead of an earlier failed event of their aggregate.",
                static_cast<double>(s.reordered));
    prom_metric(out, "outbox_relay_batches_total", "counter", "Batches settled.",
                static_cast<double>(s.batches));
    prom_metric(out, "outbox_relay_errors_total", "counter",
                "Errors the relays backed off from (database or broker away).",
                static_cast<double>(s.errors));
    double running = 0, failing = 0, stalled = 0;
    for (const auto& t : parts_) {
      running += t->state.done ? 0 : 1;
      failing += t->state.failing ? 1 : 0;
      stalled += t->state.stalled ? 1 : 0;
    }
    prom_metric(out, "outbox_relay_threads_running", "gauge", "Relay threads running.", running);
    prom_metric(out, "outbox_relay_threads_failing", "gauge", "Relay threads in a run of errors.",
                failing);
    prom_metric(out, "outbox_relay_threads_stalled", "gauge",
                "Relay threads with no step and no error for --unhealthy-after.", stalled);
    prom_metric(out, "outbox_relay_last_batch_timestamp_seconds", "gauge",
                "When the last batch was settled (Unix time; 0: none yet).",
                metrics_.last_batch_at.load());
    prom_metric(out, "outbox_relay_metrics_renders_total", "counter",
                "Renders of this page (at most one a second: a scrape within 1 s of the last "
                "render gets the same page).",
                static_cast<double>(renders_));
    metrics_.batch_duration.render(out, "outbox_relay_batch_duration_seconds",
                                   "A batch's claim, publish and settle.");
    metrics_.publish_duration.render(out, "outbox_relay_publish_duration_seconds",
                                     "A batch's publish: from its first send to its last confirm.");
    metrics_.event_latency.render(out, "outbox_relay_event_latency_seconds",
                                  "An event's creation (its transaction) to its confirm.");
    std::lock_guard lock(metrics_.backlog_mutex);
    prom_metric(out, "outbox_backlog_sample_errors_total", "counter",
                "Backlog samples that failed (the database away).",
                static_cast<double>(metrics_.backlog_errors));
    if (metrics_.backlog) {
      const auto& b = *metrics_.backlog;
      prom_metric(out, "outbox_backlog_pending", "gauge",
                  "Events waiting to be published (those waiting for a retry included).",
                  static_cast<double>(b.pending));
      prom_metric(out, "outbox_backlog_in_flight", "gauge", "Events claimed under a live lease.",
                  static_cast<double>(b.in_flight));
      prom_metric(out, "outbox_backlog_dead_lettered", "gauge", "Dead letters in the store.",
                  static_cast<double>(b.dead));
      prom_metric(out, "outbox_backlog_oldest_pending_age_seconds", "gauge",
                  "Age of the oldest pending event (0: none).",
                  std::chrono::duration<double>(b.oldest_pending_age).count());
      prom_metric(out, "outbox_backlog_waiting_retry", "gauge",
                  "Pending events that failed and wait for their retry time.",
                  static_cast<double>(b.waiting_retry));
      if constexpr (requires { Store::tails_the_log; }) {
        prom_metric(out, "outbox_log_lag_bytes", "gauge",
                    "WAL after the replication slot's confirmed position.",
                    static_cast<double>(b.log_lag_bytes));
        prom_metric(out, "outbox_log_lag_seconds", "gauge",
                    "How far behind the slot's confirmed position is (the server's flush lag).",
                    std::chrono::duration<double>(b.log_lag).count());
        prom_metric(out, "outbox_log_slot_wal_at_risk", "gauge",
                    "1 when the slot's wal_status is unreserved or lost (WAL it needs is, or is "
                    "about to be, removed).",
                    slot_at_risk_.load() ? 1.0 : 0.0);
        prom_metric(out, "outbox_backlog_streamed_unpublished", "gauge",
                    "Table-mode events (outbox rows in state 3) written more than 10 s ago and "
                    "not published yet.",
                    static_cast<double>(b.streamed_unpublished));
        prom_metric(out, "outbox_backlog_oldest_streamed_age_seconds", "gauge",
                    "Age of the oldest table-mode event not published yet (0: none).",
                    std::chrono::duration<double>(b.oldest_streamed_age).count());
        double stranded = 0;
        for (const auto& t : parts_) stranded += static_cast<double>(t->store[0]->stranded_rows());
        prom_metric(out, "outbox_log_stranded_total", "counter",
                    "Table-mode events the replication stream passed over (a publication without "
                    "the outbox table), moved to the outbox table and published from there.",
                    stranded);
      }
      prom_metric(out, "outbox_backlog_sample_timestamp_seconds", "gauge",
                  "When the backlog gauges were sampled (Unix time).", metrics_.backlog_at);
      // The same per aggregate type (types with pending, in-flight or dead events).
      const struct {
        const char* name;
        const char* help;
        double (*value)(const outbox::backlog_stats&);
      } per_type[] = {
          {"outbox_backlog_type_pending", "Pending events of an aggregate type.",
           [](const outbox::backlog_stats& x) { return static_cast<double>(x.pending); }},
          {"outbox_backlog_type_waiting_retry", "Events of an aggregate type waiting for a retry.",
           [](const outbox::backlog_stats& x) { return static_cast<double>(x.waiting_retry); }},
          {"outbox_backlog_type_in_flight", "Events of an aggregate type under a live lease.",
           [](const outbox::backlog_stats& x) { return static_cast<double>(x.in_flight); }},
          {"outbox_backlog_type_dead_lettered", "Dead letters of an aggregate type.",
           [](const outbox::backlog_stats& x) { return static_cast<double>(x.dead); }},
          {"outbox_backlog_type_oldest_pending_age_seconds",
           "Age of the oldest pending event of an aggregate type (0: none).",
           [](const outbox::backlog_stats& x) {
             return std::chrono::duration<double>(x.oldest_pending_age).count();
           }},
      };
      // aggregate_type: label values, the --metrics-max-types largest, then "_other"
      const auto labelled = cap_types(by_label(metrics_.by_type), o_.metrics_max_types);
      for (const auto& m : per_type) {
        if (labelled.empty()) break;
        out += std::string("# HELP ") + m.name + " " + m.help + "\n# TYPE " + m.name + " gauge\n";
        for (const auto& t : labelled)
          out += std::string(m.name) + "{aggregate_type=\"" + t.aggregate_type + "\"} " +
                 prom_number(m.value(t.stats)) + "\n";
      }
    }
    return out;
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

}  // namespace

int cmd_relay(const relay_command_options& o) {
  // Everything that can be refused without a connection is, first (exit 2).
  const store_url su = parse_store_url(o.store);
  const store_url tu = parse_transport_url(o.transport);
  if (o.threads < 1 || o.threads > 64) throw usage_error("--threads takes 1 to 64");
  if (o.claim_policy != "default" && o.claim_policy != "locking" && o.claim_policy != "leasing")
    throw usage_error("--claim-policy takes default, locking or leasing");
  if (o.retention != "keep" && o.retention != "delete")
    throw usage_error("--retention takes keep or delete");
  const auto publish_timeout = parse_age(o.publish_timeout, "--publish-timeout");
  if (publish_timeout < 100ms)
    throw usage_error("--publish-timeout takes at least 100ms (a broker's confirm round trip)");
  if (parse_age(o.lease, "--lease") <= publish_timeout)
    throw usage_error(
        "--lease must be longer than --publish-timeout, or a slow confirm would let "
        "another relay publish a batch still in flight");
  const auto max_backoff = parse_age(o.max_backoff, "--max-backoff");
  if (max_backoff < 100ms || max_backoff > 10min)
    throw usage_error("--max-backoff takes 100ms to 10m");
  // A step may take a publish timeout, a pause a --max-backoff, an idle sleep up to 1 s (the
  // relay's idle_poll_max): none of that is being stuck.
  if (parse_age(o.unhealthy_after, "--unhealthy-after") < publish_timeout + max_backoff + 2s)
    throw usage_error(
        "--unhealthy-after must be at least --publish-timeout + --max-backoff + 2s, or a relay "
        "waiting for a slow broker, or idle, would be called stuck");
  if (parse_age(o.backlog_interval, "--backlog-interval") < 100ms)
    throw usage_error("--backlog-interval takes at least 100ms");
  if (o.max_streamed_age != "off" && parse_age(o.max_streamed_age, "--max-streamed-age") < 10s)
    throw usage_error("--max-streamed-age takes at least 10s (or off)");
  if (!o.max_slot_kept.empty()) {
    (void)parse_limit(o.max_slot_kept, "--max-slot-kept");
    if (o.store.rfind("postgresql+tail:", 0) != 0)
      throw usage_error("--max-slot-kept is for a log-tailing store (a postgresql+tail:// URL)");
  }
  (void)parse_address(o.metrics_address);

  // SIGTERM and SIGINT are taken by the supervising loop only: blocked here, before any thread
  // (ours, the HTTP server's, a client library's) starts, so every thread inherits the mask.
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A log reader that goes away (a pipe to a shipper that restarts) must not kill the relay in
  // the middle of a batch: a write to it fails instead (and the line is lost).
  std::signal(SIGPIPE, SIG_IGN);

  return with_store_maker<int>(su, [&]<class StoreMaker>(StoreMaker store_maker) {
    using Store = typename StoreMaker::store_type;
    return with_transport_maker<int>(tu, [&]<class Transport>(transport_maker<Transport> maker) {
      if (!maker.shareable && o.threads > 1)
        throw usage_error("a transport that binds its endpoint (" + tu.scheme +
                          ") takes one relay thread (--threads 1)");
      if constexpr (requires { Store::tails_the_log; })
        if (o.threads > 1)
          throw usage_error("a log-tailing store (" + su.scheme +
                            ") takes one relay thread (--threads 1): a slot streams to one "
                            "connection");
      check_claim_hold<Store, Transport>(o);
      service<StoreMaker, Transport> s(o, su, tu, std::move(store_maker), std::move(maker));
      return s.run();
    });
  });
}

}  // namespace outbox_tool
