// Orders to Kafka and back: the application commits orders with their events in SQLite; a relay
// publishes them with an idempotent producer to `outbox.event.order` (Debezium's layout: key =
// order id, `id` header = event id) and marks each published on its delivery report; a shipping
// consumer in the consumer group "shipping" applies each event once, in the same transaction as
// its inbox record, and its offsets are committed after that transaction.
//
//   relay_to_kafka [BOOTSTRAP_SERVERS] [db=relay_to_kafka.db]
//
// Without bootstrap servers (or with an empty argument) it starts librdkafka's mock cluster in
// this process, so it runs anywhere; with them, it uses your cluster (the topic
// outbox.event.order must exist there, or be auto-created).

#include <chrono>
#include <iostream>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include <soci/soci.h>

#include <outbox/kafka/kafka.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>

using Store = outbox::sqlite::store;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  std::string bootstrap = argc > 1 ? argv[1] : "";
  const std::string connect = argc > 2 ? argv[2] : "db=relay_to_kafka.db";
  std::optional<outbox::kafka::mock_cluster> mock;
  if (bootstrap.empty()) {
    mock.emplace(3);
    mock->create_topic("outbox.event.order", 4);
    bootstrap = mock->bootstrap_servers();
  }

  // The application: orders and their events, one transaction each.
  soci::session app(Store::soci_backend, connect);
  Store::configure(app);
  Store::migrate(app);
  app << "DROP TABLE IF EXISTS shipments";
  app << "CREATE TABLE shipments (order_id TEXT NOT NULL)";
  app << "DELETE FROM outbox";
  app << "DELETE FROM outbox_inbox";
  outbox::writer<Store> writer;
  constexpr int orders = 100;
  for (int i = 0; i < orders; ++i) {
    soci::transaction tx(app);
    writer.enqueue(app, {.aggregate_type = "order",
                         .aggregate_id = "o-" + std::to_string(i % 10),
                         .event_type = "order_placed",
                         .payload = R"({"n":)" + std::to_string(i) + "}"});
    tx.commit();
  }

  // The relay: its own session, an idempotent producer; delivery reports are the confirms.
  soci::session relay_sql(Store::soci_backend, connect);
  Store relay_store(relay_sql);
  outbox::kafka::publisher kafka({.bootstrap_servers = bootstrap});
  outbox::relay relay(relay_store, kafka,
                      {.publish_timeout = 10s, .on_error = [](const outbox::error& e) {
                         std::cerr << "relay: backing off: " << e.what() << "\n";
                       }});

  // The shipping service: a member of the consumer group "shipping"; the inbox and the effect
  // commit together, then the offset is committed.
  soci::session consumer_sql(Store::soci_backend, connect);
  Store consumer_store(consumer_sql);
  outbox::kafka::receiver shipping_rcv({.bootstrap_servers = bootstrap,
                                        .group_id = "shipping",
                                        .topics = {"outbox.event.order"},
                                        .config = {{"fetch.wait.max.ms", "10"}}});
  outbox::consumer shipping(consumer_store, shipping_rcv,
                            [](soci::session& sql, const outbox::message& m) {
                              sql << "INSERT INTO shipments (order_id) VALUES (:o)",
                                  soci::use(m.aggregate_id);
                            },
                            {.name = "shipping"});

  std::jthread relay_thread([&](std::stop_token st) { relay.run(st); });
  std::jthread shipping_thread([&](std::stop_token st) { shipping.run(st); });
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (shipping.stats().applied < orders && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  relay_thread.request_stop();
  shipping_thread.request_stop();
  relay.wake();
  relay_thread.join();
  shipping_thread.join();

  int shipped = 0;
  app << "SELECT count(*) FROM shipments", soci::into(shipped);
  const auto backlog = relay_store.stats(std::chrono::system_clock::now());
  std::cout << "orders=" << orders << " published=" << relay.stats().published
            << " pending=" << backlog.pending << " shipped=" << shipped
            << " duplicates_skipped=" << shipping.stats().duplicates_skipped
            << " kafka_confirmed=" << kafka.stats().confirmed << "\n";
  return shipped == orders && backlog.pending == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "relay_to_kafka: " << e.what() << "\n";
  return 1;
}
