#pragma once
/// @file
/// A consumer's metrics in a prometheus-cpp registry: the `outbox_consumer_*` families, fed by
/// `consumer_options::on_delivery` and by `consumer::stats()`.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <outbox/consumer/options.hpp>
#include <outbox/message.hpp>
#include <outbox/prometheus/labels.hpp>
#include <outbox/prometheus/relay_metrics.hpp>

namespace outbox::prometheus {

/// Bucket bounds from 5 ms to 1 h (seconds), for an event's end-to-end time (its creation to
/// the commit of its effect), which includes the relay's and the broker's time and any wait
/// for a retry.
inline std::vector<double> end_to_end_bounds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600};
}

/// Options of `consumer_metrics`.
struct consumer_metrics_options {
  /// The label `consumer` on every series: `consumer_options::name`. Required.
  std::string name{};
  ::prometheus::Labels labels{};  ///< More labels on every series of this instance.
  /// The histograms' `aggregate_type` label: the first `max_types` types seen get their own,
  /// every later one `_other` (an aggregate type is application data: the series stay
  /// bounded).
  std::size_t max_types = 20;
  std::vector<double> handler_buckets = latency_bounds();        ///< In seconds.
  std::vector<double> end_to_end_buckets = end_to_end_bounds();  ///< In seconds.
};

/// A consumer's counters, histograms and gauges, registered in a prometheus-cpp registry,
/// every series labelled `consumer` (its name):
/// - counters `outbox_consumer_{applied,duplicates,retried,dead_lettered,deferred}_total`, fed
///   by `on_delivery`; `outbox_consumer_{out_of_order,errors}_total` (only in the stats) by
///   `sample`;
/// - histograms `outbox_consumer_handler_duration_seconds` (a handler that ran) and
///   `outbox_consumer_end_to_end_seconds` (an applied event's `created_at` to the commit of
///   its effect), labelled `aggregate_type` too (bounded: `max_types`), fed by `on_delivery`;
/// - gauges `outbox_consumer_last_progress_timestamp_seconds` (the last applied, duplicate or
///   dead-lettered delivery; 0: none yet), `outbox_consumer_last_delivery_timestamp_seconds`
///   (the last delivery received; 0: none yet), by the consumer's clock, and
///   `outbox_consumer_held` (deliveries held back for their predecessor), fed by `sample`.
///
/// Each counter has one source, so neither order nor timing of the two counts twice. A
/// stalled consumer: deliveries keep arriving and none finishes, `last_delivery -
/// last_progress > 300`. Call `sample(consumer.stats())` from time to time (before each
/// scrape, or every few seconds: the times are as old as the last sample). The registry must
/// outlive this object, which must outlive the consumer that calls its `on_delivery`.
/// Thread-safe.
class consumer_metrics {
 public:
  /// Registers the families (shared with other instances on `registry`) and this instance's
  /// series.
  /// @throws std::invalid_argument when `options.name` is empty.
  explicit consumer_metrics(::prometheus::Registry& registry, consumer_metrics_options options = {})
      : options_(checked(std::move(options))),
        registry_(registry),
        types_(options_.max_types),
        applied_(counter("outbox_consumer_applied_total",
                         "Deliveries whose handler ran and committed.")),
        duplicates_(counter("outbox_consumer_duplicates_total",
                            "Deliveries already in the inbox: acknowledged without the handler.")),
        retried_(counter("outbox_consumer_retried_total",
                         "Deliveries whose handler or store failed: given back for redelivery.")),
        dead_lettered_(counter("outbox_consumer_dead_lettered_total",
                               "Deliveries dead-lettered (failed for good, or out of attempts).")),
        deferred_(counter("outbox_consumer_deferred_total",
                          "Deliveries held back until their predecessor was applied.")),
        out_of_order_(counter("outbox_consumer_out_of_order_total",
                              "Deliveries applied although their predecessor was not (the wait "
                              "ran out, or no room was left to hold them).")),
        errors_(counter("outbox_consumer_errors_total",
                        "Errors the consumer backed off from (database or broker away).")),
        last_progress_(gauge("outbox_consumer_last_progress_timestamp_seconds",
                             "When a delivery was last applied, found a duplicate or "
                             "dead-lettered (Unix time; 0: none yet).")),
        last_delivery_(gauge("outbox_consumer_last_delivery_timestamp_seconds",
                             "When a delivery was last received (Unix time; 0: none yet).")),
        held_(gauge("outbox_consumer_held", "Deliveries held back for their predecessor, now.")),
        handler_family_(::prometheus::BuildHistogram()
                            .Name("outbox_consumer_handler_duration_seconds")
                            .Help("A delivery's handler, when it ran.")
                            .Register(registry)),
        end_to_end_family_(::prometheus::BuildHistogram()
                               .Name("outbox_consumer_end_to_end_seconds")
                               .Help("An applied event's creation (its transaction) to the "
                                     "commit of its effect.")
                               .Register(registry)) {}

  consumer_metrics(const consumer_metrics&) = delete;
  consumer_metrics& operator=(const consumer_metrics&) = delete;

  /// A callable for `consumer_options::on_delivery`: `record` on this instance.
  [[nodiscard]] std::function<void(const delivery_report&)> on_delivery() {
    return [this](const delivery_report& r) { record(r); };
  }

  /// Counts one processed delivery by its outcome, and observes its handler's time (when the
  /// handler ran) and its end-to-end time (when applied).
  void record(const delivery_report& r) {
    using outcome = delivery_outcome;
    switch (r.outcome) {
      case outcome::applied:
        applied_.Increment();
        break;
      case outcome::duplicate:
        duplicates_.Increment();
        break;
      case outcome::retrying:
        retried_.Increment();
        break;
      case outcome::dead_lettered:
        dead_lettered_.Increment();
        break;
      case outcome::deferred:
        deferred_.Increment();
        break;
      case outcome::idle:
        break;
    }
    const bool handled = r.handler.count() > 0;
    if (handled || r.end_to_end) {
      auto& h = histograms_of(r.msg.aggregate_type);
      if (handled) h.first->Observe(std::chrono::duration<double>(r.handler).count());
      if (r.end_to_end) h.second->Observe(std::chrono::duration<double>(*r.end_to_end).count());
    }
  }

  /// Raises `out_of_order` and `errors` to the consumer's counts (cumulative), and sets the
  /// gauges from `stats`.
  void sample(const consumer_stats& stats) {
    std::lock_guard lock(mutex_);
    count_to(out_of_order_, static_cast<double>(stats.out_of_order));
    count_to(errors_, static_cast<double>(stats.errors));
    const auto at = [](time_point t) { return t == time_point{} ? 0.0 : detail::unix_seconds(t); };
    last_progress_.Set(at(stats.last_progress));
    last_delivery_.Set(at(stats.last_delivery));
    held_.Set(static_cast<double>(stats.held));
  }

 private:
  static consumer_metrics_options checked(consumer_metrics_options o) {
    if (o.name.empty())
      throw std::invalid_argument("outbox::prometheus::consumer_metrics: name is empty");
    o.labels["consumer"] = label_value(o.name);
    return o;
  }

  ::prometheus::Counter& counter(const std::string& name, const std::string& help) {
    return ::prometheus::BuildCounter().Name(name).Help(help).Register(registry_).Add(
        options_.labels);
  }
  ::prometheus::Gauge& gauge(const std::string& name, const std::string& help) {
    return ::prometheus::BuildGauge().Name(name).Help(help).Register(registry_).Add(
        options_.labels);
  }

  /// The two histograms of `aggregate_type`'s label, made on first use.
  std::pair<::prometheus::Histogram*, ::prometheus::Histogram*>& histograms_of(
      const std::string& aggregate_type) {
    std::string label = types_(aggregate_type);
    std::lock_guard lock(mutex_);
    auto& h = histograms_[label];
    if (h.first == nullptr) {
      auto labels = options_.labels;
      labels["aggregate_type"] = std::move(label);
      h.first = &handler_family_.Add(labels, options_.handler_buckets);
      h.second = &end_to_end_family_.Add(labels, options_.end_to_end_buckets);
    }
    return h;
  }

  consumer_metrics_options options_;
  ::prometheus::Registry& registry_;
  bounded_labels types_;
  std::mutex mutex_;  ///< `sample`'s counts, `histograms_`.
  ::prometheus::Counter& applied_;
  ::prometheus::Counter& duplicates_;
  ::prometheus::Counter& retried_;
  ::prometheus::Counter& dead_lettered_;
  ::prometheus::Counter& deferred_;
  ::prometheus::Counter& out_of_order_;
  ::prometheus::Counter& errors_;
  ::prometheus::Gauge& last_progress_;
  ::prometheus::Gauge& last_delivery_;
  ::prometheus::Gauge& held_;
  ::prometheus::Family<::prometheus::Histogram>& handler_family_;
  ::prometheus::Family<::prometheus::Histogram>& end_to_end_family_;
  /// By label: the handler's and the end-to-end histogram (pointers stay valid in the map).
  std::map<std::string, std::pair<::prometheus::Histogram*, ::prometheus::Histogram*>> histograms_;
};

}  // namespace outbox::prometheus
