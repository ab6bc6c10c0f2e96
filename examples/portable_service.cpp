// One service, any store: the store is one type alias. The build compiles this file once per
// store (examples/meson.build sets OUTBOX_EXAMPLE_STORE and its header), and each build must
// print the same result. Nothing below names a database: migration, session set-up, options,
// the writer, the relay and the consumer all come from `Store`.
//
//   portable_service_sqlite 'db=/tmp/orders.db'
//   portable_service_postgresql 'host=127.0.0.1 dbname=orders user=app'
//
// It resets its own tables first (it is a demo), places three orders with their events in one
// transaction each (a JSON payload, an Avro-like binary one, and a rolled-back order), relays
// them through the in-memory broker, consumes them twice (the second time as redeliveries the
// inbox must absorb), and checks what arrived.

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/testing/memory_transport.hpp>
#include OUTBOX_EXAMPLE_STORE_HEADER

using Store = OUTBOX_EXAMPLE_STORE;  // the only line that differs between builds

namespace {

int fail(const std::string& why) {
  std::cerr << "portable_service: " << why << "\n";
  return 1;
}

long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

}  // namespace

int main(int argc, char** argv) try {
  const char* connect = argc > 1 ? argv[1] : std::getenv("OUTBOX_EXAMPLE_CONNECT");
  if (connect == nullptr || *connect == '\0') return fail("usage: portable_service CONNECT");

  soci::session app(Store::soci_backend, connect);
  Store::configure(app);
  Store::migrate(app);
  // The demo's own tables, and a clean slate (portable SQL only).
  app << "CREATE TABLE IF NOT EXISTS demo_orders (id VARCHAR(64) PRIMARY KEY, total INTEGER)";
  app << "CREATE TABLE IF NOT EXISTS demo_shipments (event_id VARCHAR(64) PRIMARY KEY, "
         "order_id VARCHAR(64) NOT NULL)";
  for (const char* table : {"demo_shipments", "demo_orders", "outbox_inbox", "outbox"})
    app << std::string("DELETE FROM ") + table;

  // --- the service: each order and its event in one transaction ------------------------------
  outbox::writer<Store> writer;  // needs no store object: opens nothing, sets nothing
  const std::string avro("\x02\x06\x6f\x2d\x32\x00\xff", 7);
  const auto place = [&](const std::string& id, outbox::event e, bool commit) {
    soci::transaction tx(app);
    app << "INSERT INTO demo_orders (id, total) VALUES (:id, 42)", soci::use(id);
    writer.enqueue(app, e);
    if (commit) tx.commit();  // otherwise rolled back: neither the order nor its event exists
  };
  place("o-1", {"order", "o-1", "order_placed", R"({ "total" : 42,  "currency":"EUR" })", {}},
        true);
  outbox::event binary{"order", "o-2", "order_placed", avro, {{"schema", "order.v3"}}};
  binary.content_type = "application/avro";
  place("o-2", binary, true);
  place("o-3", {"order", "o-3", "order_placed", R"({"total":1})", {}}, false);

  // --- the relay, on its own session -------------------------------------------------------------
  outbox::testing::memory_transport broker({.record = true});
  soci::session relay_sql(Store::soci_backend, connect);
  Store relay_store(relay_sql, {.retention = outbox::retention::keep});
  outbox::relay relay(relay_store, broker, {.batch_size = 10});
  std::size_t relayed = 0;
  while (const auto n = relay.run_once()) relayed += n;

  // --- the consumer, on its own session ----------------------------------------------------------
  soci::session consumer_sql(Store::soci_backend, connect);
  Store consumer_store(consumer_sql);
  std::vector<outbox::message> received;
  outbox::consumer shipping(
      consumer_store, broker,
      [&](soci::session& s, const outbox::message& m) {
        const std::string event_id = m.id.to_string();
        s << "INSERT INTO demo_shipments (event_id, order_id) VALUES (:e, :o)", soci::use(event_id),
            soci::use(m.aggregate_id);
        received.push_back(m);
      },
      {.name = "shipping"});
  while (shipping.poll_once() != decltype(shipping)::outcome::idle) {
  }
  // The broker delivers everything again (at-least-once): the inbox absorbs it.
  for (const auto& m : broker.wire()) broker.redeliver(m.id);
  while (shipping.poll_once() != decltype(shipping)::outcome::idle) {
  }

  // --- the result, the same on every store -----------------------------------------------------
  const auto shipments = scalar(app, "SELECT count(*) FROM demo_shipments");
  const auto orders = scalar(app, "SELECT count(*) FROM demo_orders");
  if (relayed != 2) return fail("relayed " + std::to_string(relayed) + ", expected 2");
  if (orders != 2 || shipments != 2) return fail("orders/shipments are not 2/2");
  if (received.size() != 2) return fail("the handler ran " + std::to_string(received.size()));
  if (received[0].payload != R"({ "total" : 42,  "currency":"EUR" })")
    return fail("the JSON payload changed on the way: " + received[0].payload);
  if (received[1].payload != avro || received[1].content_type != "application/avro" ||
      received[1].headers.at("schema") != "order.v3")
    return fail("the binary payload, its content type or its header changed on the way");
  std::cout << "relayed=" << relayed << " shipped=" << shipments
            << " duplicates_skipped=" << shipping.stats().duplicates_skipped
            << " payloads=exact content_types=" << received[0].content_type << ","
            << received[1].content_type << "\n";
  return shipping.stats().duplicates_skipped == 2
             ? 0
             : fail("the inbox did not skip both redeliveries");
} catch (const std::exception& e) {
  return fail(e.what());
}
