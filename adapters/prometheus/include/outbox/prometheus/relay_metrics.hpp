#pragma once
/// @file
/// A relay's metrics in a prometheus-cpp registry: the `outbox_relay_*` families of
/// `outbox relay`'s /metrics, fed by `relay_options::on_batch` and by `relay::stats()`.

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <outbox/message.hpp>
#include <outbox/relay/options.hpp>

namespace outbox::prometheus {

/// Bucket bounds from 1 ms to 60 s (seconds), for batch and publish durations and an event's
/// commit-to-confirm latency.
inline std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

/// Raises `c` to `total`, a cumulative count kept elsewhere (a prometheus-cpp counter only
/// grows); a lower total counts nothing. Not atomic: one caller at a time per counter.
inline void count_to(::prometheus::Counter& c, double total) {
  if (const double d = total - c.Value(); d > 0) c.Increment(d);
}

namespace detail {

/// Unix seconds of `t`.
inline double unix_seconds(outbox::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace detail

/// Options of `relay_metrics`.
struct relay_metrics_options {
  /// Labels on every series of this instance: `{{"relay", "orders"}}` tells apart the relays
  /// that share a registry (each with its own `relay_metrics`). The families are shared.
  ::prometheus::Labels labels{};
  std::vector<double> buckets = latency_bounds();  ///< Of the three histograms, in seconds.
};

/// A relay's counters, histograms and last-batch time, registered in a prometheus-cpp
/// registry under the names of `outbox relay`'s /metrics (adapters/prometheus/README.md):
/// - counters `outbox_relay_{published,retried,dead_lettered,fenced,released,batches}_total`,
///   fed by `on_batch` and `observe`; `outbox_relay_{reordered,errors}_total` by `observe`;
/// - histograms `outbox_relay_batch_duration_seconds`, `outbox_relay_publish_duration_seconds`
///   and `outbox_relay_event_latency_seconds` (an event's `created_at` to its settle), and the
///   gauge `outbox_relay_last_batch_timestamp_seconds` (0: none yet), fed by `on_batch`;
/// - the gauge `outbox_relay_routes_paused` (routes the storm guard holds paused,
///   `relay_stats::routes_paused`), set by `observe`.
///
/// `on_batch` counts each settled batch as the relay is about to count it in `relay_stats`;
/// what never reaches it (errors, reorders, the dead letters of unreadable rows) is in the
/// stats only: call `observe(relay.stats())` from time to time (before each scrape, or every
/// few seconds) and the counters are raised to the relay's own (never past them: a batch
/// `on_batch` counted is in the stats only after it). With several relays on one instance,
/// observe their sum. The registry must outlive this object, which must outlive the relay
/// that calls its `on_batch`. Thread-safe.
class relay_metrics {
 public:
  /// Registers the families (shared with other instances on `registry`) and this instance's
  /// series, labelled `options.labels`.
  explicit relay_metrics(::prometheus::Registry& registry, relay_metrics_options options = {})
      : published_(counter(registry, "outbox_relay_published_total",
                           "Events published (confirmed by the broker) and settled.", options)),
        retried_(counter(registry, "outbox_relay_retried_total",
                         "Events that failed and wait for a retry.", options)),
        dead_lettered_(counter(
            registry, "outbox_relay_dead_lettered_total",
            "Events dead-lettered (failed for good, out of attempts, or unreadable).", options)),
        fenced_(counter(registry, "outbox_relay_fenced_total",
                        "Events confirmed after their lease was lost (another relay owns them).",
                        options)),
        released_(counter(registry, "outbox_relay_released_total",
                          "Events claimed and given back unsent (stopping, or behind a failure).",
                          options)),
        reordered_(counter(registry, "outbox_relay_reordered_total",
                           "Events confirmed ahead of an earlier failed event of their aggregate.",
                           options)),
        batches_(counter(registry, "outbox_relay_batches_total", "Batches settled.", options)),
        errors_(counter(registry, "outbox_relay_errors_total",
                        "Errors the relays backed off from (database or broker away).", options)),
        last_batch_(::prometheus::BuildGauge()
                        .Name("outbox_relay_last_batch_timestamp_seconds")
                        .Help("When the last batch was settled (Unix time; 0: none yet).")
                        .Register(registry)
                        .Add(options.labels)),
        routes_paused_(::prometheus::BuildGauge()
                           .Name("outbox_relay_routes_paused")
                           .Help("Routes (a topic, an exchange and routing key) the storm guard "
                                 "holds paused: their events wait, pending.")
                           .Register(registry)
                           .Add(options.labels)),
        batch_duration_(histogram(registry, "outbox_relay_batch_duration_seconds",
                                  "A batch's claim, publish and settle.", options)),
        publish_duration_(histogram(registry, "outbox_relay_publish_duration_seconds",
                                    "A batch's publish: from its first send to its last confirm.",
                                    options)),
        event_latency_(histogram(registry, "outbox_relay_event_latency_seconds",
                                 "An event's creation (its transaction) to its confirm.",
                                 options)) {}

  relay_metrics(const relay_metrics&) = delete;
  relay_metrics& operator=(const relay_metrics&) = delete;

  /// A callable for `relay_options::on_batch`: `record` on this instance.
  [[nodiscard]] std::function<void(const batch_report&)> on_batch() {
    return [this](const batch_report& r) { record(r); };
  }

  /// Counts one settled batch (its settle's counts) and feeds the histograms and the last-batch
  /// time: its duration (claim, publish and settle), its publish, and each published event's
  /// latency from its `created_at` to now (the system clock, as the writer's).
  void record(const batch_report& r) {
    const auto now = std::chrono::system_clock::now();
    batches_.Increment();
    published_.Increment(static_cast<double>(r.settled.published));
    retried_.Increment(static_cast<double>(r.settled.retried));
    dead_lettered_.Increment(static_cast<double>(r.settled.dead));
    released_.Increment(static_cast<double>(r.settled.released));
    fenced_.Increment(static_cast<double>(r.settled.fenced));
    batch_duration_.Observe(std::chrono::duration<double>(r.claim + r.publish + r.settle).count());
    publish_duration_.Observe(std::chrono::duration<double>(r.publish).count());
    for (std::size_t i = 0; i < r.messages.size() && i < r.fates.size(); ++i)
      if (r.fates[i].what == settlement::kind::published)
        event_latency_.Observe(
            std::chrono::duration<double>(now - r.messages[i].created_at).count());
    last_batch_.Set(detail::unix_seconds(now));
  }

  /// Raises the counters to the cumulative `stats` (of one relay, or the sum of the relays this
  /// instance covers). A count lower than the last one observed adds nothing.
  void observe(const relay_stats& stats) {
    std::lock_guard lock(mutex_);
    count_to(published_, static_cast<double>(stats.published));
    count_to(retried_, static_cast<double>(stats.retried));
    count_to(dead_lettered_, static_cast<double>(stats.dead_lettered));
    count_to(fenced_, static_cast<double>(stats.fenced));
    count_to(released_, static_cast<double>(stats.released));
    count_to(reordered_, static_cast<double>(stats.reordered));
    count_to(batches_, static_cast<double>(stats.batches));
    count_to(errors_, static_cast<double>(stats.errors));
    routes_paused_.Set(static_cast<double>(stats.routes_paused));
  }

 private:
  static ::prometheus::Counter& counter(::prometheus::Registry& r, const std::string& name,
                                        const std::string& help, const relay_metrics_options& o) {
    return ::prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(o.labels);
  }
  static ::prometheus::Histogram& histogram(::prometheus::Registry& r, const std::string& name,
                                            const std::string& help,
                                            const relay_metrics_options& o) {
    return ::prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(o.labels,
                                                                                o.buckets);
  }

  std::mutex mutex_;  ///< `observe`'s: a raise is a read and an add.
  ::prometheus::Counter& published_;
  ::prometheus::Counter& retried_;
  ::prometheus::Counter& dead_lettered_;
  ::prometheus::Counter& fenced_;
  ::prometheus::Counter& released_;
  ::prometheus::Counter& reordered_;
  ::prometheus::Counter& batches_;
  ::prometheus::Counter& errors_;
  ::prometheus::Gauge& last_batch_;
  ::prometheus::Gauge& routes_paused_;  ///< Set by `observe` (a gauge: not raised, set).
  ::prometheus::Histogram& batch_duration_;
  ::prometheus::Histogram& publish_duration_;
  ::prometheus::Histogram& event_latency_;
};

}  // namespace outbox::prometheus
