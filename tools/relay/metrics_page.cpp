// `outbox relay`'s /metrics page: the relays' metrics and the backlog gauges of the
// Prometheus adapter (adapters/prometheus/), and the tool's own families, in one prometheus-cpp
// registry. Names, types and HELP texts as before the adapter (tests/tools/metrics_names.txt).

#include "metrics_page.hpp"

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

namespace outbox_tool::relay_service {

/// The tool's own families (relay threads, renders, the sampler, a log-tailing store's slot),
/// and the adapter's backlog gauges, made on the first render that has what they need.
struct page_families {
  explicit page_families(::prometheus::Registry& r)
      : running(gauge(r, "outbox_relay_threads_running", "Relay threads running.")),
        failing(gauge(r, "outbox_relay_threads_failing", "Relay threads in a run of errors.")),
        stalled(gauge(r, "outbox_relay_threads_stalled",
                      "Relay threads with no step and no error for --unhealthy-after.")),
        renders(counter(r, "outbox_relay_metrics_renders_total",
                        "Renders of this page (at most one a second: a scrape within 1 s of the "
                        "last render gets the same page).")),
        sample_errors(counter(r, "outbox_backlog_sample_errors_total",
                              "Backlog samples that failed (the database away).")) {}

  static ::prometheus::Gauge& gauge(::prometheus::Registry& r, const char* name, const char* help) {
    return ::prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  }
  static ::prometheus::Counter& counter(::prometheus::Registry& r, const char* name,
                                        const char* help) {
    return ::prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
  }

  ::prometheus::Gauge& running;
  ::prometheus::Gauge& failing;
  ::prometheus::Gauge& stalled;
  ::prometheus::Counter& renders;
  ::prometheus::Counter& sample_errors;
  std::optional<outbox::prometheus::backlog_metrics> backlog;  ///< From the first sample on.
  ::prometheus::Gauge* slot_at_risk = nullptr;                 ///< A log-tailing store's.
  ::prometheus::Counter* stranded = nullptr;                   ///< A log-tailing store's.
};

using outbox::prometheus::count_to;

std::string render_metrics(const relay_view& v, shared_metrics& m) {
  if (!m.page) m.page = std::make_shared<page_families>(m.registry);
  page_families* f = m.page.get();
  m.relay.observe(v.totals);
  f->running.Set(v.running);
  f->failing.Set(v.failing);
  f->stalled.Set(v.stalled);
  count_to(f->renders, static_cast<double>(v.renders));
  {
    std::lock_guard lock(m.backlog_mutex);
    count_to(f->sample_errors, static_cast<double>(m.backlog_errors));
    if (m.backlog) {
      if (!f->backlog)
        f->backlog.emplace(m.registry,
                           outbox::prometheus::backlog_metrics_options{
                               .max_types = v.max_types, .log_tailing = v.tails_the_log});
      // aggregate_type: label values, the --metrics-max-types largest, then "_other"
      f->backlog->sample(
          *m.backlog, m.by_type,
          outbox::time_point(std::chrono::duration_cast<outbox::time_point::duration>(
              std::chrono::duration<double>(m.backlog_at))));
      if (v.tails_the_log) {
        if (f->slot_at_risk == nullptr) {
          f->slot_at_risk = &page_families::gauge(
              m.registry, "outbox_log_slot_wal_at_risk",
              "1 when the slot's wal_status is unreserved or lost (WAL it needs is, or is about "
              "to be, removed).");
          f->stranded = &page_families::counter(
              m.registry, "outbox_log_stranded_total",
              "Table-mode events the replication stream passed over (a publication without the "
              "outbox table), moved to the outbox table and published from there.");
        }
        f->slot_at_risk->Set(v.slot_at_risk ? 1.0 : 0.0);
        count_to(*f->stranded, v.stranded);
      }
    }
  }
  return ::prometheus::TextSerializer().Serialize(m.registry.Collect());
}

}  // namespace outbox_tool::relay_service
