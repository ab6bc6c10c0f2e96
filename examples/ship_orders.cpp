// docs/getting-started.md, "Consume the events": the page's block is the regions of this file
// between "README: begin" and "README: end" (scripts/check_docs.py). A consumer named
// "shipping" applies order events from RabbitMQ to PostgreSQL exactly once: its shipment row
// and the event's inbox record commit together.
//
//   ship_orders "<libpq conninfo>" AMQP_URL [COUNT]   (COUNT: stop after that many applied)

// README: begin
// clang-format off
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include <soci/soci.h>

#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>

using Store = outbox::postgresql::store;

namespace {
volatile std::sig_atomic_t stopping = 0;
}

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::cerr << "usage: ship_orders CONNINFO AMQP_URL [COUNT]\n";
    return 2;
  }
  const unsigned long count = argc > 3 ? std::stoul(argv[3]) : 0;  // 0: until Ctrl-C
  std::signal(SIGINT, [](int) { stopping = 1; });
  std::signal(SIGTERM, [](int) { stopping = 1; });

  soci::session sql(Store::soci_backend, argv[1]);
  sql << "CREATE TABLE IF NOT EXISTS shipments (order_id TEXT PRIMARY KEY)";
  Store store(sql);

  // The queue "shipping", bound to the relay's exchange "orders" for every order event.
  outbox::amqp::receiver queue({.connection = {.url = argv[2]},
                                .queue = "shipping",
                                .exchange = "orders",
                                .binding_key = "order.#"});
  queue.connect();  // declares the queue and its binding now, before the relay publishes
  std::cout << "ship_orders: waiting for order events\n" << std::flush;

  outbox::consumer shipping(
      store, queue,
      [](soci::session& tx, const outbox::message& m) {  // in the inbox's transaction
        tx << "INSERT INTO shipments (order_id) VALUES (:id)", soci::use(m.aggregate_id);
        std::cout << "shipping order " << m.aggregate_id << "\n" << std::flush;
      },
      {.name = "shipping"});
  while (!stopping && (count == 0 || shipping.stats().applied < count)) {
    try {
      shipping.poll_once();
    } catch (const outbox::error& e) {  // the broker or the database away: wait, go on
      if (e.kind() == outbox::errc::misconfigured) throw;  // retrying cannot help
      std::cerr << "ship_orders: " << e.what() << " (retrying)\n";
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  std::cout << "applied " << shipping.stats().applied << ", duplicates skipped "
            << shipping.stats().duplicates_skipped << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "ship_orders: " << e.what() << "\n";
  return 1;
}
// clang-format on
// README: end
