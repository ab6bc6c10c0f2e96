// A relay to RabbitMQ: committed events in SQLite are published to an AMQP exchange with
// publisher confirms, and marked published only once the broker confirmed each one. The relay
// runs on its own thread and connection, logs what it backs off from, and is stopped with a
// stop token. A queue bound to the exchange stands in for the services that consume it.
//
//   relay_to_rabbitmq amqp://outbox:outbox@127.0.0.1:5672/ [db=relay_example.db]

#include <chrono>
#include <iostream>
#include <stop_token>
#include <string>
#include <thread>

#include <soci/soci.h>

#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>

using Store = outbox::sqlite::store;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: relay_to_rabbitmq AMQP_URL [SQLITE_CONNECT]\n";
    return 2;
  }
  const std::string url = argv[1];
  const std::string connect = argc > 2 ? argv[2] : "db=relay_example.db";
  const std::string exchange = "outbox-example-orders";

  // The application side: three events, committed.
  soci::session app(Store::soci_backend, connect);
  Store::configure(app);
  Store::migrate(app);
  app << "DELETE FROM outbox";
  outbox::writer<Store> writer;
  {
    soci::transaction tx(app);
    for (const char* id : {"o-1", "o-2", "o-3"})
      writer.enqueue(app, {.aggregate_type = "order",
                           .aggregate_id = id,
                           .event_type = "order_placed",
                           .payload = R"({"total":42})"});
    tx.commit();
  }

  // Where the events go: a durable queue bound to the exchange (declared by the receiver), so
  // that the broker routes them; an unroutable event is a failure the relay retries.
  outbox::amqp::receiver shipping_queue({.connection = {.url = url},
                                         .queue = "outbox-example-shipping",
                                         .exchange = exchange,
                                         .binding_key = "order.#"});
  shipping_queue.connect();

  // The relay: its own connection to the database, a publisher with confirms. Routing key
  // <aggregate_type>.<event_type>, e.g. order.order_placed.
  soci::session relay_sql(Store::soci_backend, connect);
  Store relay_store(relay_sql);
  outbox::amqp::publisher publisher({.connection = {.url = url}, .exchange = exchange});
  outbox::relay relay(
      relay_store, publisher,
      {.batch_size = 500, .publish_timeout = 10s, .on_error = [](const outbox::error& e) {
         std::cerr << "relay backs off: " << e.what() << "\n";  // a log line
       }});
  std::jthread relaying([&](std::stop_token st) {
    try {
      relay.run(st);  // survives broker and database outages; returns when stopped
    } catch (const outbox::error& e) {
      std::cerr << "relay stopped: " << e.what() << "\n";  // misconfigured: fix and restart
    }
  });

  // Wait (bounded) for the three confirms, then stop the relay.
  for (int i = 0; i < 300 && relay.stats().published < 3; ++i) std::this_thread::sleep_for(20ms);
  relaying.request_stop();
  relaying.join();

  // What the broker has: the three events, in order.
  int received = 0;
  while (auto d = shipping_queue.receive(2s)) {
    std::cout << "queue got " << d->msg.event_type << " of " << d->msg.aggregate_id << " ("
              << d->msg.id.to_string() << ")\n";
    shipping_queue.ack(*d);
    ++received;
  }
  const auto stats = relay_store.stats(outbox::system_clock{}.now());
  std::cout << "published=" << relay.stats().published << " received=" << received
            << " pending=" << stats.pending << "\n";
  return relay.stats().published == 3 && received == 3 && stats.pending == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "relay_to_rabbitmq: " << e.what() << "\n";
  return 1;
}
