#pragma once
/// @file
/// An outbox's backlog in a prometheus-cpp registry: the `outbox_backlog_*` gauges (and a
/// log-tailing store's `outbox_log_*`) of `outbox relay`'s /metrics, from a store's `stats()`
/// and `stats_by_aggregate_type()`.

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <outbox/message.hpp>
#include <outbox/prometheus/labels.hpp>
#include <outbox/prometheus/relay_metrics.hpp>

namespace outbox::prometheus {

/// Options of `backlog_metrics`.
struct backlog_metrics_options {
  ::prometheus::Labels labels{};  ///< Labels on every series of this instance.
  /// The aggregate types with the largest backlog that get series of their own
  /// (`outbox_backlog_type_*{aggregate_type=...}`); the rest are summed in `_other`.
  std::size_t max_types = 100;
  /// A log-tailing store (`postgresql::tailing_store`): its `outbox_log_lag_*` and table-mode
  /// gauges too.
  bool log_tailing = false;
};

/// The backlog gauges, set by `sample`. No series before the first sample (a scrape then shows
/// no backlog rather than a false 0). The registry must outlive this object. Thread-safe.
class backlog_metrics {
 public:
  /// Registers the families (shared with other instances on `registry`).
  explicit backlog_metrics(::prometheus::Registry& registry, backlog_metrics_options options = {})
      : options_(std::move(options)),
        pending_(gauge(registry, "outbox_backlog_pending",
                       "Events waiting to be published (those waiting for a retry included, "
                       "scheduled ones not due yet not).")),
        in_flight_(
            gauge(registry, "outbox_backlog_in_flight", "Events claimed under a live lease.")),
        dead_(gauge(registry, "outbox_backlog_dead_lettered", "Dead letters in the store.")),
        oldest_(gauge(registry, "outbox_backlog_oldest_pending_age_seconds",
                      "Age of the oldest pending event (0: none).")),
        waiting_retry_(gauge(registry, "outbox_backlog_waiting_retry",
                             "Pending events that failed and wait for their retry time.")),
        scheduled_(gauge(registry, "outbox_backlog_scheduled",
                         "Scheduled events not due yet (deliver_at ahead; not in the backlog).")),
        sampled_at_(gauge(registry, "outbox_backlog_sample_timestamp_seconds",
                          "When the backlog gauges were sampled (Unix time).")),
        type_pending_(
            gauge(registry, "outbox_backlog_type_pending", "Pending events of an aggregate type.")),
        type_waiting_retry_(gauge(registry, "outbox_backlog_type_waiting_retry",
                                  "Events of an aggregate type waiting for a retry.")),
        type_in_flight_(gauge(registry, "outbox_backlog_type_in_flight",
                              "Events of an aggregate type under a live lease.")),
        type_dead_(gauge(registry, "outbox_backlog_type_dead_lettered",
                         "Dead letters of an aggregate type.")),
        type_oldest_(gauge(registry, "outbox_backlog_type_oldest_pending_age_seconds",
                           "Age of the oldest pending event of an aggregate type (0: none).")) {
    if (!options_.log_tailing) return;
    log_lag_bytes_ = &gauge(registry, "outbox_log_lag_bytes",
                            "WAL after the replication slot's confirmed position.");
    log_lag_ = &gauge(registry, "outbox_log_lag_seconds",
                      "How far behind the slot's confirmed position is (the server's flush lag).");
    streamed_ = &gauge(registry, "outbox_backlog_streamed_unpublished",
                       "Table-mode events (outbox rows in state 3) written more than 10 s ago and "
                       "not published yet.");
    oldest_streamed_ = &gauge(registry, "outbox_backlog_oldest_streamed_age_seconds",
                              "Age of the oldest table-mode event not published yet (0: none).");
  }

  backlog_metrics(const backlog_metrics&) = delete;
  backlog_metrics& operator=(const backlog_metrics&) = delete;

  /// Sets the gauges to a sample taken `at`: the totals `s` and, per aggregate type, `by_type`
  /// (labels made valid UTF-8, the `max_types` largest, then `_other`; the series of types no
  /// longer there are removed).
  void sample(const outbox::backlog_stats& s,
              const std::vector<outbox::aggregate_type_stats>& by_type = {},
              outbox::time_point at = std::chrono::system_clock::now()) {
    const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
    std::lock_guard lock(mutex_);
    set(pending_, {}, static_cast<double>(s.pending));
    set(in_flight_, {}, static_cast<double>(s.in_flight));
    set(dead_, {}, static_cast<double>(s.dead));
    set(oldest_, {}, seconds(s.oldest_pending_age));
    set(waiting_retry_, {}, static_cast<double>(s.waiting_retry));
    set(scheduled_, {}, static_cast<double>(s.scheduled));
    if (options_.log_tailing) {
      set(*log_lag_bytes_, {}, static_cast<double>(s.log_lag_bytes));
      set(*log_lag_, {}, seconds(s.log_lag));
      set(*streamed_, {}, static_cast<double>(s.streamed_unpublished));
      set(*oldest_streamed_, {}, seconds(s.oldest_streamed_age));
    }
    set(sampled_at_, {}, detail::unix_seconds(at));
    const auto labelled = cap_types(by_label(by_type), options_.max_types);
    std::set<std::string> now;
    for (const auto& t : labelled) {
      now.insert(t.aggregate_type);
      set(type_pending_, t.aggregate_type, static_cast<double>(t.stats.pending));
      set(type_waiting_retry_, t.aggregate_type, static_cast<double>(t.stats.waiting_retry));
      set(type_in_flight_, t.aggregate_type, static_cast<double>(t.stats.in_flight));
      set(type_dead_, t.aggregate_type, static_cast<double>(t.stats.dead));
      set(type_oldest_, t.aggregate_type, seconds(t.stats.oldest_pending_age));
    }
    for (auto* f :
         {&type_pending_, &type_waiting_retry_, &type_in_flight_, &type_dead_, &type_oldest_}) {
      for (auto it = types_.begin(); it != types_.end();) {
        if (it->first.first == f && now.count(it->first.second) == 0) {
          f->Remove(it->second);
          it = types_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

 private:
  using family = ::prometheus::Family<::prometheus::Gauge>;

  static family& gauge(::prometheus::Registry& r, const std::string& name,
                       const std::string& help) {
    return ::prometheus::BuildGauge().Name(name).Help(help).Register(r);
  }

  /// Sets the series of `f` for `type` ("" for the totals), added on first use.
  void set(family& f, const std::string& type, double value) {
    auto& g = types_[{&f, type}];
    if (g == nullptr) {
      auto labels = options_.labels;
      if (&f == &type_pending_ || &f == &type_waiting_retry_ || &f == &type_in_flight_ ||
          &f == &type_dead_ || &f == &type_oldest_)
        labels["aggregate_type"] = type;
      g = &f.Add(labels);
    }
    g->Set(value);
  }

  backlog_metrics_options options_;
  std::mutex mutex_;
  family& pending_;
  family& in_flight_;
  family& dead_;
  family& oldest_;
  family& waiting_retry_;
  family& scheduled_;
  family& sampled_at_;
  family& type_pending_;
  family& type_waiting_retry_;
  family& type_in_flight_;
  family& type_dead_;
  family& type_oldest_;
  family* log_lag_bytes_ = nullptr;
  family* log_lag_ = nullptr;
  family* streamed_ = nullptr;
  family* oldest_streamed_ = nullptr;
  std::map<std::pair<family*, std::string>, ::prometheus::Gauge*> types_;  ///< Every series.
};

}  // namespace outbox::prometheus
