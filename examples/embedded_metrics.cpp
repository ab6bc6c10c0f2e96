// adapters/prometheus/README.md "Embedding": a relay's and a consumer's metrics served by
// prometheus-cpp's own HTTP server (Exposer), compiled and run: the page's snippet is the
// regions of this file between the markers "README: begin" and "README: end"
// (scripts/check_docs.py). Both run over the in-memory store and transport; outside the
// markers, the checks that the registry counted what they did. Needs the Prometheus adapter and
// prometheus-cpp-pull.

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/text_serializer.h>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

// README: begin
// clang-format off
#include <outbox/outbox.hpp>
#include <outbox/prometheus/prometheus.hpp>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

// clang-format on
// README: end

using namespace std::chrono_literals;
using namespace outbox::testing;

int main(int argc, char** argv) try {
  const std::string address = argc > 1 ? argv[1] : "127.0.0.1:0";
  memory_database db;
  memory_session app(db), relay_sql(db), monitor_sql(db), consumer_sql(db);
  memory_store app_store(app), store(relay_sql), monitor(monitor_sql), consumer_store(consumer_sql);
  const auto handler = [](memory_session& sql, const outbox::message& m) {
    sql.insert("shipments", m.aggregate_id, "pending");
  };
  memory_transport broker;
  {
    outbox::writer writer(app_store);
    memory_session::transaction tx(app);
    for (int i = 0; i < 5; ++i)
      writer.enqueue(app, {.aggregate_type = "order",
                           .aggregate_id = std::to_string(i),
                           .event_type = "order_placed",
                           .payload = R"({"total":1})"});
    tx.commit();
  }
  std::jthread relay_thread, consumer_thread;
  // README: begin
  // clang-format off
auto registry = std::make_shared<prometheus::Registry>();
prometheus::Exposer exposer(address);              // e.g. "0.0.0.0:9464"
exposer.RegisterCollectable(registry);             // GET /metrics

outbox::prometheus::relay_metrics metrics(*registry, {.labels = {{"relay", "orders"}}});
outbox::prometheus::backlog_metrics backlog(*registry, {.max_types = 50});
outbox::relay relay(store, broker, {.on_batch = metrics.on_batch()});
relay_thread = std::jthread([&](std::stop_token stop) { relay.run(stop); });

outbox::prometheus::consumer_metrics shipped(*registry, {.name = "shipping"});
outbox::consumer shipping(consumer_store, broker, handler,
                          {.name = "shipping", .on_delivery = shipped.on_delivery()});
consumer_thread = std::jthread([&](std::stop_token stop) { shipping.run(stop); });

// Every few seconds (a thread of the service's own): what the hooks do not see.
metrics.observe(relay.stats());                    // errors, reorders, unreadable rows
shipped.sample(shipping.stats());                  // last progress and delivery, held, errors
const auto now = std::chrono::system_clock::now(); // the backlog, on a session of its own
backlog.sample(monitor.stats(now), monitor.stats_by_aggregate_type(now));
  // clang-format on
  // README: end
  // The relay publishes the five events, the consumer applies them; then the registry says so.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (shipping.stats().applied < 5 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  relay_thread.request_stop();
  relay_thread.join();
  consumer_thread.request_stop();
  consumer_thread.join();
  metrics.observe(relay.stats());
  shipped.sample(shipping.stats());
  const auto later = std::chrono::system_clock::now();
  backlog.sample(monitor.stats(later), monitor.stats_by_aggregate_type(later));
  const std::string page = prometheus::TextSerializer().Serialize(registry->Collect());
  const bool ok =
      page.find("outbox_relay_published_total{relay=\"orders\"} 5\n") != std::string::npos &&
      page.find("outbox_backlog_pending 0\n") != std::string::npos &&
      page.find("outbox_consumer_applied_total{consumer=\"shipping\"} 5\n") != std::string::npos;
  std::cout << "embedded_metrics: served on port " << exposer.GetListeningPorts().at(0) << ", "
            << (ok ? "ok" : "FAILED") << "\n";
  if (!ok) std::cerr << page;
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "embedded_metrics: " << e.what() << "\n";
  return 1;
}
