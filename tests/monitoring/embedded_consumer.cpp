// A consumer service with embedded metrics, for tests/monitoring/prometheus_scrape_test.sh: it
// consumes the Kafka topic outbox.event.order (an in-memory inbox: the effect is a row in it)
// and serves the prometheus adapter's consumer metrics with prometheus-cpp's Exposer, sampling
// consumer_stats every 200 ms, until SIGTERM; then prints how many it applied and exits 0.
//   embedded_consumer BOOTSTRAP HOST:PORT

#include <signal.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <outbox/kafka/kafka.hpp>
#include <outbox/outbox.hpp>
#include <outbox/prometheus/prometheus.hpp>
#include <outbox/testing/memory_store.hpp>

namespace {
volatile std::sig_atomic_t stopping = 0;
void on_term(int) { stopping = 1; }
}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::cerr << "usage: embedded_consumer BOOTSTRAP HOST:PORT\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  outbox::testing::memory_database db;
  outbox::testing::memory_session sql(db);
  outbox::testing::memory_store inbox(sql);
  outbox::kafka::receiver receiver({.bootstrap_servers = argv[1],
                                    .group_id = "embedded-consumer",
                                    .topics = {"outbox.event.order"},
                                    .config = {{"session.timeout.ms", "6000"},
                                               {"heartbeat.interval.ms", "500"},
                                               {"fetch.wait.max.ms", "10"}}});
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Exposer exposer(argv[2]);
  exposer.RegisterCollectable(registry);
  outbox::prometheus::consumer_metrics metrics(*registry, {.name = "shipping"});
  outbox::consumer shipping(inbox, receiver,
                            [](outbox::testing::memory_session& s, const outbox::message& m) {
                              s.insert("shipments", m.id.to_string(), m.aggregate_id);
                            },
                            {.name = "shipping", .on_delivery = metrics.on_delivery()});
  std::jthread consumer_thread([&](std::stop_token stop) { shipping.run(stop); });
  while (stopping == 0) {
    metrics.sample(shipping.stats());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  consumer_thread.request_stop();
  consumer_thread.join();
  std::cout << "applied " << shipping.stats().applied << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "embedded_consumer: " << e.what() << "\n";
  return 1;
}
