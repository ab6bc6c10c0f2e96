// `outbox relay`'s /metrics page.

#include "metrics_page.hpp"

#include <chrono>
#include <mutex>
#include <string>

#include "../metrics.hpp"

namespace outbox_tool::relay_service {

std::string render_metrics(const relay_view& v, shared_metrics& m) {
  const auto& s = v.totals;
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
  prom_metric(out, "outbox_relay_threads_running", "gauge", "Relay threads running.", v.running);
  prom_metric(out, "outbox_relay_threads_failing", "gauge", "Relay threads in a run of errors.",
              v.failing);
  prom_metric(out, "outbox_relay_threads_stalled", "gauge",
              "Relay threads with no step and no error for --unhealthy-after.", v.stalled);
  prom_metric(out, "outbox_relay_last_batch_timestamp_seconds", "gauge",
              "When the last batch was settled (Unix time; 0: none yet).", m.last_batch_at.load());
  prom_metric(out, "outbox_relay_metrics_renders_total", "counter",
              "Renders of this page (at most one a second: a scrape within 1 s of the last "
              "render gets the same page).",
              static_cast<double>(v.renders));
  m.batch_duration.render(out, "outbox_relay_batch_duration_seconds",
                          "A batch's claim, publish and settle.");
  m.publish_duration.render(out, "outbox_relay_publish_duration_seconds",
                            "A batch's publish: from its first send to its last confirm.");
  m.event_latency.render(out, "outbox_relay_event_latency_seconds",
                         "An event's creation (its transaction) to its confirm.");
  std::lock_guard lock(m.backlog_mutex);
  prom_metric(out, "outbox_backlog_sample_errors_total", "counter",
              "Backlog samples that failed (the database away).",
              static_cast<double>(m.backlog_errors));
  if (m.backlog) {
    const auto& b = *m.backlog;
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
    if (v.tails_the_log) {
      prom_metric(out, "outbox_log_lag_bytes", "gauge",
                  "WAL after the replication slot's confirmed position.",
                  static_cast<double>(b.log_lag_bytes));
      prom_metric(out, "outbox_log_lag_seconds", "gauge",
                  "How far behind the slot's confirmed position is (the server's flush lag).",
                  std::chrono::duration<double>(b.log_lag).count());
      prom_metric(out, "outbox_log_slot_wal_at_risk", "gauge",
                  "1 when the slot's wal_status is unreserved or lost (WAL it needs is, or is "
                  "about to be, removed).",
                  v.slot_at_risk ? 1.0 : 0.0);
      prom_metric(out, "outbox_backlog_streamed_unpublished", "gauge",
                  "Table-mode events (outbox rows in state 3) written more than 10 s ago and "
                  "not published yet.",
                  static_cast<double>(b.streamed_unpublished));
      prom_metric(out, "outbox_backlog_oldest_streamed_age_seconds", "gauge",
                  "Age of the oldest table-mode event not published yet (0: none).",
                  std::chrono::duration<double>(b.oldest_streamed_age).count());
      prom_metric(out, "outbox_log_stranded_total", "counter",
                  "Table-mode events the replication stream passed over (a publication without "
                  "the outbox table), moved to the outbox table and published from there.",
                  v.stranded);
    }
    prom_metric(out, "outbox_backlog_sample_timestamp_seconds", "gauge",
                "When the backlog gauges were sampled (Unix time).", m.backlog_at);
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
    const auto labelled = cap_types(by_label(m.by_type), v.max_types);
    for (const auto& g : per_type) {
      if (labelled.empty()) break;
      out += std::string("# HELP ") + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n";
      for (const auto& t : labelled)
        out += std::string(g.name) + "{aggregate_type=\"" + t.aggregate_type + "\"} " +
               prom_number(g.value(t.stats)) + "\n";
    }
  }
  return out;
}

}  // namespace outbox_tool::relay_service
