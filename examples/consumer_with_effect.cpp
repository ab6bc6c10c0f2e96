// A consumer with its effect: deliveries from a RabbitMQ queue are applied to SQLite exactly
// once. The handler's effect (a shipment row) and the inbox record of the event id commit in one
// transaction, so a redelivered event (the broker's at-least-once) is skipped, and a handler
// that throws rolls both back and is retried, then dead-lettered. A publisher stands in for the
// relay of the service that owns the events (examples/relay_to_rabbitmq.cpp).
//
//   consumer_with_effect amqp://outbox:outbox@127.0.0.1:5672/ [db=consumer_example.db]

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <soci/soci.h>

#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>

using Store = outbox::sqlite::store;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: consumer_with_effect AMQP_URL [SQLITE_CONNECT]\n";
    return 2;
  }
  const std::string url = argv[1];
  const std::string connect = argc > 2 ? argv[2] : "db=consumer_example.db";
  const std::string exchange = "outbox-example-payments";

  // The consumer's own database: its effect table beside the inbox.
  soci::session sql(Store::soci_backend, connect);
  Store::configure(sql);
  Store::migrate(sql);
  sql << "CREATE TABLE IF NOT EXISTS shipments (event_id TEXT PRIMARY KEY, order_id TEXT)";
  sql << "DELETE FROM shipments";
  sql << "DELETE FROM outbox_inbox";

  outbox::amqp::receiver queue({.connection = {.url = url},
                                .queue = "outbox-example-shipping-inbox",
                                .exchange = exchange,
                                .prefetch = 1});  // strict per-aggregate order
  queue.connect();

  // Upstream (another service's relay): two events, the first delivered twice.
  std::vector<outbox::message> upstream(2);
  for (std::size_t i = 0; i < upstream.size(); ++i) {
    upstream[i].id = outbox::make_uuid_v7();
    upstream[i].aggregate_type = "order";
    upstream[i].aggregate_id = "o-" + std::to_string(i + 1);
    upstream[i].event_type = "order_paid";
    upstream[i].payload = R"({"amount":700})";
    upstream[i].attempts = 1;
  }
  upstream.push_back(upstream.front());  // at-least-once: a duplicate
  outbox::amqp::publisher upstream_relay({.connection = {.url = url}, .exchange = exchange});
  for (const auto& r : upstream_relay.publish(upstream, std::chrono::steady_clock::now() + 10s))
    if (!r.confirmed) throw std::runtime_error("the broker did not confirm: " + r.error);

  // The consumer: the handler writes the effect on the session it is given, inside the
  // transaction that also records the event id in the inbox.
  Store store(sql);
  outbox::consumer shipping(store, queue,
                            [](soci::session& tx, const outbox::message& m) {
                              const std::string event_id = m.id.to_string();
                              tx << "INSERT INTO shipments (event_id, order_id) VALUES (:e, :o)",
                                  soci::use(event_id), soci::use(m.aggregate_id);
                            },
                            {.name = "shipping", .poll_timeout = 500ms});
  while (shipping.poll_once() != decltype(shipping)::outcome::idle) {
  }

  long long shipments = 0;
  sql << "SELECT count(*) FROM shipments", soci::into(shipments);
  const auto s = shipping.stats();
  std::cout << "applied=" << s.applied << " duplicates_skipped=" << s.duplicates_skipped
            << " shipments=" << shipments << "\n";
  return s.applied == 2 && s.duplicates_skipped == 1 && shipments == 2 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "consumer_with_effect: " << e.what() << "\n";
  return 1;
}
